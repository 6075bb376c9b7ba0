"""What one Spark task does with one offset range (runs in an executor's Python worker).

1. read the range from Kafka, in offset order, and decode each record;
2. read the partition's watermark, the open sessions that may expire in the range, and the
   rows of those and of every session the range touches;
3. fold the events into the sessions (fences skip what an earlier attempt applied);
4. write the session rows, aggregate and fence in one put per row;
5. write the dead letters;
6. write the partition's open-session index, then its watermark -- last, so neither runs
   ahead of the session rows;
7. publish the summaries of sessions closed by this range, if configured: their ids go to
   the partition's outbox before step 4, and out in one Kafka transaction after step 6.

Any failure raises: the batch fails and its offsets are not committed. Every step is
idempotent, so the replay of the range after a restart leaves the same rows.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from leakproof import codec, open_index
from leakproof.config import Config, InputConfig, OutputConfig
from leakproof.crashpoints import crash_point
from leakproof.errors import CommitRefused, DecodeError
from leakproof.events import WebEvent
from leakproof.hbase.connection import Connections, ride_out
from leakproof.hbase.dead_letters import DeadLetterStore
from leakproof.hbase.session_store import SessionStore, readable, to_cells
from leakproof.hbase.state_store import StateStore
from leakproof.kafka.closed_sink import ClosedSink
from leakproof.kafka.reader import consumer_cached, read_range
from leakproof.offsets import Gap, OffsetRange
from leakproof.outbox import Outbox, outbox_id
from leakproof.reports import TaskReport
from leakproof.sessions import FoldResult, OpenSessions, PartitionFolder, SessionState, fence_key

_connections: dict[Any, Connections] = {}
_decoders: dict[InputConfig, codec.Decoder] = {}


def _decoder(cfg: InputConfig) -> codec.Decoder:
    """One per Python worker and input config: schema parsing is not free."""
    decoder = _decoders.get(cfg)
    if decoder is None:
        decoder = _decoders[cfg] = codec.Decoder(cfg.writer_schemas, cfg.max_ahead_ms)
    return decoder


def run_range(cfg: Config, batch_ms: int, rng: OffsetRange, epoch: int) -> TaskReport:
    """Process one range end to end; see the module docstring for the steps.

    ``epoch`` is the driver's lease epoch: a task of a driver that another one has replaced
    (a zombie) refuses to write, so it cannot overwrite rows the new driver already advanced.
    """
    conns = _connections.setdefault(cfg.hbase, Connections(cfg.hbase))

    def attempt() -> TaskReport:
        # every step is idempotent, so a range interrupted by an HBase outage is redone whole
        report = TaskReport(rng.partition, rng.from_offset, rng.until_offset)
        with _no_cycle_collection():
            _run(cfg, batch_ms, rng, epoch, report, conns)
        return report

    return ride_out(cfg.hbase, f"writes of {rng}", attempt, conns.reset)


def warm_up(cfg: Config) -> float:
    """What a worker's first range would do before it reads a record: this module's imports
    (Kafka, Thrift, Avro: done by unpickling the call), the decoder, an HBase connection.
    Run at start by the driver, so the first batch finds its workers ready. Never raises: a
    connection that fails here is left to the first range, which rides out or reports it.
    Returns the seconds it took."""
    t0 = time.monotonic()
    _decoder(cfg.input)
    conns = _connections.setdefault(cfg.hbase, Connections(cfg.hbase))
    try:
        with conns.get():
            pass
    except Exception:  # noqa: BLE001 - the first range meets the same error and names it
        conns.reset()
    return time.monotonic() - t0


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off while a range runs.

    A range allocates a few hundred thousand objects (records, events, rows, cells, Thrift
    mutations) that reference counting frees; none forms a cycle. But every 700 allocations
    start a collection, and the older generations' passes walk every object alive: folding
    160 000 events took 1.87 s with the collector on, 0.78 s with it off, and ``make bench``'s
    Python workers went from 24.5 to 21.8 CPU s per M events. It runs, as usual, between
    ranges.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _run(cfg: Config, batch_ms: int, rng: OffsetRange, epoch: int, report: TaskReport,
         conns: Connections) -> None:
    # 1. read and decode
    t0 = time.monotonic()
    events: list[tuple[int, WebEvent]] = []
    dead: list[DecodeError] = []
    decoder = _decoder(cfg.input)
    gaps: list[Gap] = []
    report.consumer_cached = consumer_cached(cfg.kafka, rng.topic, rng.partition)
    decode, keep, topic, partition = decoder.decode, events.append, rng.topic, rng.partition
    for rec in read_range(cfg.kafka, rng, gaps):  # once per record: locals only
        try:
            keep((rec.offset, decode(rec.key, rec.value, topic=topic, partition=partition,
                                     offset=rec.offset, timestamp=rec.timestamp)))
        except DecodeError as err:
            dead.append(err)
            report.dead_letter_kinds[err.kind] = report.dead_letter_kinds.get(err.kind, 0) + 1
    report.records = len(events) + len(dead)
    t1 = time.monotonic()
    report.read_s = t1 - t0
    report.gaps = tuple(gaps)

    with conns.get() as conn:
        sessions_table = SessionStore(conn.table(cfg.hbase.sessions_table))
        state_store = StateStore(conn, cfg.hbase.state_table)
        # 2. read the watermark, the rows of touched sessions, and the open sessions that may
        # expire in this range: the index buckets its watermark passes (an entry is taken at
        # its word, unless a range stopped part way may have left it stale: then its session
        # row's last_ts and state decide)
        after_ms = cfg.sessions.close_after_ms
        width = open_index.bucket_width(after_ms)
        stored = state_store.read_partition(rng.topic, rng.partition, width)
        state, since, check_below = stored.state, stored.cutoff, stored.check_below
        cutoff = open_index.cutoff(max([state.watermark, *(e.ts for _, e in events)]),
                                   after_ms)
        found = open_index.expiring(
            state_store.scan_open(rng.topic, rng.partition, since, cutoff), cutoff)
        rows = sessions_table.read({e.session_id for _, e in events})
        stale = open_index.to_check(found, check_below)
        checked = sessions_table.read_expiry(stale - rows.keys())
        before = open_index.known_rows(found, stale, checked, rows)
        state.open_sessions = OpenSessions(open_index.open_set(found, before))
        report.expiring = len(found)
        # 3. fold
        folder = PartitionFolder(fence_key(rng.topic, rng.partition), after_ms, state, rows)
        for offset, event in events:
            folder.feed(offset, event)
        result = folder.finish()
        t2 = time.monotonic()
        report.fold_s = t2 - t1
        # 4. if this driver still holds the lease: the outbox (the closed sessions this range
        # will publish, and any an earlier attempt still owes: outbox.py says why it comes
        # first), then the session rows, each with its fence. (Thrift1 has no multi-column
        # check-and-mutate, so this narrows the zombie window to the time between this read
        # and the writes; it cannot close it.)
        _check_lease(state_store, cfg, rng, epoch)
        outbox = None
        if cfg.output.closed_sessions_topic:
            outbox = _owed(cfg, rng, epoch, batch_ms, stored.outbox, result)
            if outbox is not None:
                state_store.write_outbox(rng.topic, rng.partition, outbox)
        sessions_table.write(result.touched.values(), close=result.closed_untouched)
        crash_point("task_after_sessions")
        # 5. dead letters
        DeadLetterStore(conn.table(cfg.hbase.dead_letter_table)).write(dead, batch_ms)
        # 6. partition state, last
        state_store.write_partition(rng.topic, rng.partition, result.partition,
                                    open_index.changes(width, found, before, result), cutoff,
                                    check_below)
        # 7. closed summaries: the outbox, read from the rows as they now stand, in one
        # transaction with its marker
        if outbox is not None:
            rows = {sid: s for sid, s in result.touched.items() if s.closed}
            rows.update(sessions_table.read(set(outbox.sessions) - rows.keys()))
            t_pub = time.monotonic()
            _sink(cfg, rng.partition).publish(_summaries(rows), outbox.id, rng.until_offset)
            crash_point("task_after_publish")
            state_store.outbox_published(rng.topic, rng.partition, outbox.id)
            report.publish_s = time.monotonic() - t_pub
        report.write_s = time.monotonic() - t2
    report.applied, report.replayed, report.late = result.applied, result.replayed, result.late
    report.duplicates, report.unknown_types = result.duplicates, result.unknown_types
    report.sessions = len(result.touched)
    report.closed = len(result.closed_now)


def _check_lease(state_store: StateStore, cfg: Config, rng: OffsetRange, epoch: int) -> None:
    holder = state_store.lease_epoch(rng.topic, cfg.kafka.group_id)
    if holder != epoch:
        raise CommitRefused(f"{rng}: the lease of {rng.topic}:{cfg.kafka.group_id} is at "
                            f"epoch {holder}, this driver's is {epoch}; not writing")


def _owed(cfg: Config, rng: OffsetRange, epoch: int, batch_ms: int, stored: Outbox,
          result: FoldResult) -> Outbox | None:
    """The outbox this range writes, or None: the sessions it closed or changed while
    closed, and those a pending outbox still owes (unless its marker says it went out)."""
    if stored.pending and _sink(cfg, rng.partition).published(stored.id):
        stored = Outbox(stored.id, stored.sessions, published=stored.id)
    closed = [sid for sid, s in result.touched.items() if s.closed]
    return stored.next(outbox_id(batch_ms, rng.from_offset, rng.until_offset, epoch),
                       [*closed, *result.closed_untouched])


_sinks: dict[tuple[str, str, str, OutputConfig, int], ClosedSink] = {}


def _sink(cfg: Config, partition: int) -> ClosedSink:
    """One per worker and source partition: its transactional producer lives as long as the
    worker, until the broker fences it (then the next range makes another)."""
    k = cfg.kafka
    key = (k.bootstrap_servers, k.group_id, k.topic, cfg.output, partition)
    sink = _sinks.get(key)
    if sink is None:
        sink = _sinks[key] = ClosedSink(cfg.kafka, cfg.output, partition)
    return sink


def _summaries(rows: dict[str, SessionState]) -> list[tuple[bytes, bytes]]:
    """Key = session id, value = the row's cells as JSON, state closed: on a compacted topic
    the newest summary of a session is the one kept."""
    out = []
    for sid, s in rows.items():
        summary = readable(to_cells(s))
        summary["state"] = "closed"
        out.append((sid.encode("utf-8"),
                    json.dumps({"session_id": sid, **summary}).encode()))
    return out
