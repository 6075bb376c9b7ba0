"""``process_range``: what one Spark task does with one offset range, over the ports.

1. read the range's records, in offset order, and decode each (undecodable: a dead letter);
2. load: the partition's watermark, the touched sessions' rows, and the open sessions that
   may expire in the range (``index.load``);
3. fold the events into the sessions (fences skip what an earlier attempt applied);
4. if this driver still holds the lease: the pending mark (with the outbox, with an output
   topic), then the session rows, aggregate and fence in one put per row;
5. the dead letters;
6. the open-session index, then the watermark -- last, so neither runs ahead of the
   session rows (``index.save``);
7. the closed sessions' summaries, in one Kafka transaction with the outbox's marker.

Any failure raises: the batch fails and its offsets are not committed. Every step is
idempotent, so the replay of the range after a crash anywhere leaves the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from leakproof.crashpoints import crash_point
from leakproof.errors import CommitRefused, DecodeError
from leakproof.events import Event
from leakproof.model.compiled import CompiledModel
from leakproof.offsets import OffsetRange
from leakproof.outbox import Outbox, outbox_id
from leakproof.reports import TaskReport
from leakproof.sessions import (
    NO_WATERMARK,
    FoldResult,
    PartitionFolder,
    fence_key,
)
from leakproof.summaries import json_summary
from leakproof.task import index
from leakproof.task.ports import (
    DeadLetters,
    Decode,
    LeaseCheck,
    PartitionRows,
    Record,
    SessionRows,
    SummarySink,
)


@dataclass(frozen=True)
class Stores:
    """Where a range's results go; ``summaries`` only with an output topic."""

    sessions: SessionRows
    partitions: PartitionRows
    dead_letters: DeadLetters
    lease: LeaseCheck
    summaries: SummarySink | None = None


def process_range(rng: OffsetRange, records: Iterable[Record], decode: Decode, stores: Stores,
                  model: CompiledModel, *, batch_ms: int, epoch: int, close_after_ms: int
                  ) -> TaskReport:
    """Steps 1-7 of the module docstring for one range; returns its counts and timings.

    ``epoch`` is the driver's lease epoch: a task of a driver that another one has replaced
    (a zombie) refuses to write, so it cannot overwrite rows the new driver has advanced.
    """
    report = TaskReport(rng.partition, rng.from_offset, rng.until_offset)
    # 1. read and decode
    t0 = time.monotonic()
    events: list[tuple[int, Event]] = []
    dead: list[DecodeError] = []
    keep, topic, partition = events.append, rng.topic, rng.partition
    for rec in records:  # once per record: locals only
        try:
            keep((rec.offset, decode(rec.key, rec.value, topic=topic, partition=partition,
                                     offset=rec.offset, timestamp=rec.timestamp,
                                     headers=rec.headers)))
        except DecodeError as err:
            dead.append(err)
            report.dead_letter_kinds[err.kind] = report.dead_letter_kinds.get(err.kind, 0) + 1
    report.records = len(events) + len(dead)
    t1 = time.monotonic()
    report.read_s = t1 - t0
    # 2. load
    loaded = index.load(stores.partitions, stores.sessions, topic, partition, close_after_ms,
                        {e.session_id for _, e in events},
                        max((e.ts for _, e in events), default=NO_WATERMARK))
    report.expiring = len(loaded.found)
    # 3. fold
    folder = PartitionFolder(model, fence_key(topic, partition), close_after_ms,
                             loaded.state, loaded.rows)
    for offset, event in events:
        folder.feed(offset, event)
    result = folder.finish()
    t2 = time.monotonic()
    report.fold_s = t2 - t1
    # 4. the lease, the outbox, the session rows. (Thrift1 has no multi-column
    # check-and-mutate, so the lease check narrows the zombie window to the time between this
    # read and the writes; the fences keep a zombie's late writes from counting twice.)
    holder = stores.lease.epoch()
    if holder != epoch:
        raise CommitRefused(f"{rng}: the driver lease is at epoch {holder}, this driver's is "
                            f"{epoch}; not writing")
    outbox = None
    if stores.summaries is not None:
        outbox = owed(stores.summaries, loaded.stored.outbox, result,
                      outbox_id(batch_ms, rng.from_offset, rng.until_offset, epoch))
    # A row written before a stop moves its session on while its old index entry stays: the
    # replay reads the row, not the entry, so only the mark says to check that entry later.
    stores.partitions.begin_writes(topic, partition, result.partition.watermark, outbox)
    stores.sessions.write(result.touched.values(), close=result.closed_untouched)
    crash_point("task_after_sessions")
    # 5. dead letters
    stores.dead_letters.write(dead, batch_ms)
    # 6. the index, then the watermark
    index.save(stores.partitions, topic, partition, loaded, result)
    # 7. the summaries, read from the rows as they now stand, in one transaction
    if outbox is not None and stores.summaries is not None:
        rows = {sid: s for sid, s in result.touched.items() if s.closed}
        rows.update(stores.sessions.read(set(outbox.sessions) - rows.keys()))
        t_pub = time.monotonic()
        encode = stores.summaries.encode or json_summary(model)
        stores.summaries.publish([(sid.encode(), encode(sid, s)) for sid, s in rows.items()],
                                 outbox.id, rng.until_offset)
        crash_point("task_after_publish")
        stores.partitions.outbox_published(topic, partition, outbox.id)
        report.publish_s = time.monotonic() - t_pub
    report.write_s = time.monotonic() - t2
    report.applied, report.replayed, report.late = result.applied, result.replayed, result.late
    report.duplicates = result.duplicates
    report.sessions = len(result.touched)
    report.closed = len(result.closed_now)
    return report


def owed(sink: SummarySink, stored: Outbox, result: FoldResult, new_id: str) -> Outbox | None:
    """The outbox this range writes, or None: the sessions it closed or changed while
    closed, and those a pending outbox still owes (unless its marker says it went out)."""
    if stored.pending and sink.published(stored.id):
        stored = Outbox(stored.id, stored.sessions, published=stored.id)
    closed = [sid for sid, s in result.touched.items() if s.closed]
    return stored.next(new_id, [*closed, *result.closed_untouched])
