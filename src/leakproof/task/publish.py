"""Step 7 of a range (``task.process``): the closed-session summaries it owes (``owed``,
written in its pending mark before any row) and their publishing (``publish``), read from
the rows as they stand, in one Kafka transaction with the outbox's marker.

``output.emit`` decides what a range owes: the sessions it closed or changed while closed
(``close``), every session it changed (``update``), or those at most once per window
(``every_s``: ``Outbox.throttled``); sessions merged away or swept by the retention get a
tombstone in every mode.
"""

from __future__ import annotations

import time
from dataclasses import replace

from leakproof.core.offsets import OffsetRange
from leakproof.core.outbox import Outbox
from leakproof.core.sessions import FoldResult
from leakproof.core.summaries import headers, json_summary, json_update
from leakproof.model.compiled import CompiledModel
from leakproof.ports.task import PartitionRows, SessionRows, SummarySink
from leakproof.testing.crashpoints import crash_point


def owed(sink: SummarySink, stored: Outbox, result: FoldResult, new_id: str,
         ts: int = 0) -> Outbox | None:
    """The outbox this range writes, or None: the sessions it closed or changed while
    closed (with ``sink.updates``, every session it changed, open or not; with
    ``sink.every_ms`` the open ones only when the partition's window is open at ``ts``,
    else held: ``Outbox.throttled``), and those a pending outbox still owes (unless its
    marker says it went out).

    The window goes by the cell timestamp ``ts`` (the summaries' version), not the batch
    time: it grows across drivers whatever their clocks say, and the spacing it keeps is
    the one a consumer sees between versions."""
    if stored.pending and sink.published(stored.id):
        stored = replace(stored, published=stored.id)
    if sink.every_ms is not None:
        return stored.throttled(
            new_id, [*(sid for sid, s in result.touched.items() if s.closed),
                     *result.closed_untouched, *result.removed],
            [sid for sid, s in result.touched.items() if not s.closed], ts, sink.every_ms)
    if sink.updates:
        return stored.next(new_id, [*result.touched, *result.closed_untouched,
                                    *result.removed])
    closed = [sid for sid, s in result.touched.items() if s.closed]
    # a closed session merged away (split by the gap): its summary key gets a tombstone
    gone = [sid for sid, s in result.removed.items() if s.closed]
    return stored.next(new_id, [*closed, *result.closed_untouched, *gone])


def publish(sink: SummarySink, sessions: SessionRows, partitions: PartitionRows,
            model: CompiledModel, rng: OffsetRange, outbox: Outbox, result: FoldResult,
            ts: int) -> float:
    """Step 7 for one range: the summaries ``outbox`` owes, read from the rows as they now
    stand, in one transaction with its marker; returns the seconds it took.

    Every record's version is ``ts``, the cell timestamp of this step: above that of every
    step before it that published (``cell_clock``: it grows with batch and lease epoch,
    across drivers), and each key goes out once per transaction. So per key the versions a
    read_committed consumer sees strictly increase -- a row an earlier attempt wrote and
    did not get to publish goes out under this step's version, as it now stands. (Only two
    attempts of one range running at once, which publish at least once, may both send a
    key: at the same version.)"""
    t0 = time.monotonic()
    if not outbox.pending:  # with every_s, only its held list changed: nothing to send
        return 0.0
    updates, owes = sink.updates, set(outbox.sessions)  # (every_s: not the held ones)
    rows = {sid: s for sid, s in result.touched.items()
            if sid in owes and (updates or s.closed)}
    found = sessions.read(owes - rows.keys())
    # a session owed whose row is gone was merged into another: a tombstone for its key;
    # one open again (a replay folded it afresh, split by the gap) is owed when it closes,
    # or with updates goes out open
    gone = owes - rows.keys() - found.keys()
    rows.update((sid, s) for sid, s in found.items() if updates or s.closed)
    keys = sorted({*rows, *gone})
    if updates:
        live = sink.encode_update or json_update(model)
        values = [live(sid, rows[sid], ts) if sid in rows else None for sid in keys]
    else:
        encode = sink.encode or json_summary(model)
        values = [encode(sid, rows[sid]) if sid in rows else None for sid in keys]
    sink.publish([(sid.encode(), value) for sid, value in zip(keys, values, strict=True)],
                 outbox.id, rng.until_offset,
                 [headers(ts, sid not in rows or rows[sid].closed) for sid in keys])
    crash_point("task_after_publish")
    partitions.outbox_published(rng.topic, rng.partition, outbox.id, ts=ts)
    return time.monotonic() - t0
