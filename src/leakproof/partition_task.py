"""What one Spark task does with one offset range (runs in an executor's Python worker).

1. read the range from Kafka, in offset order, and decode each record;
2. read the partition's watermark, the open sessions that may expire in the range, and the
   rows of those and of every session the range touches;
3. fold the events into the sessions (fences skip what an earlier attempt applied);
4. write the session rows, aggregate and fence in one put per row;
5. write the dead letters;
6. write the partition's open-session index, then its watermark -- last, so neither runs
   ahead of the session rows;
7. produce the summaries of sessions closed by this range, if configured.

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
from leakproof.config import Config, InputConfig
from leakproof.crashpoints import crash_point
from leakproof.errors import CommitRefused, DecodeError
from leakproof.events import WebEvent
from leakproof.hbase.connection import Connections, ride_out
from leakproof.hbase.dead_letters import DeadLetterStore
from leakproof.hbase.session_store import SessionStore
from leakproof.hbase.state_store import StateStore
from leakproof.kafka.reader import consumer_cached, read_range
from leakproof.offsets import Gap, OffsetRange
from leakproof.reports import TaskReport
from leakproof.sessions import OpenSessions, PartitionFolder, fence_key

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
        state, since, check_below = state_store.read_partition(rng.topic, rng.partition, width)
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
        # 4. session rows, each with its fence -- if this driver still holds the lease.
        # (Thrift1 has no multi-column check-and-mutate, so this narrows the zombie window
        # to the time between this read and the writes; it cannot close it.)
        holder = state_store.lease_epoch(rng.topic, cfg.kafka.group_id)
        if holder != epoch:
            raise CommitRefused(f"{rng}: the lease of {rng.topic}:{cfg.kafka.group_id} is at "
                                f"epoch {holder}, this driver's is {epoch}; not writing")
        sessions_table.write(result.touched.values(), close=result.closed_untouched)
        crash_point("task_after_sessions")
        # 5. dead letters
        DeadLetterStore(conn.table(cfg.hbase.dead_letter_table)).write(dead, batch_ms)
        # 6. partition state, last
        state_store.write_partition(rng.topic, rng.partition, result.partition,
                                    open_index.changes(width, found, before, result), cutoff,
                                    check_below)
        # 7. closed summaries
        if cfg.output.closed_sessions_topic and result.closed_now:
            closed_rows = {sid: s for sid, s in result.touched.items() if s.closed}
            closed_rows.update(sessions_table.read(result.closed_untouched))
            _produce_closed(cfg, closed_rows)
        report.write_s = time.monotonic() - t2
    report.applied, report.replayed, report.late = result.applied, result.replayed, result.late
    report.duplicates, report.unknown_types = result.duplicates, result.unknown_types
    report.sessions = len(result.touched)
    report.closed = len(result.closed_now)


_producers: dict[str, Any] = {}


def _produce_closed(cfg: Config, rows: dict[str, Any]) -> None:
    """Key = session id on a compacted topic: a replay re-sends the same value for the key.

    A late event for a closed session re-sends its summary with the new ``late_events``;
    compaction keeps the newest.
    """
    from kafka import KafkaProducer

    from leakproof.hbase.session_store import readable, to_cells
    from leakproof.produce import producer_settings

    topic = cfg.output.closed_sessions_topic
    assert topic is not None
    producer = _producers.get(cfg.kafka.bootstrap_servers)
    if producer is None:
        # only the passthrough keys a producer knows (kafka.consumer may hold consumer ones)
        producer = KafkaProducer(**producer_settings(cfg.kafka))
        _producers[cfg.kafka.bootstrap_servers] = producer
    for sid, s in rows.items():
        summary = readable(to_cells(s))
        summary["state"] = "closed"
        producer.send(topic, key=sid.encode("utf-8"),
                      value=json.dumps({"session_id": sid, **summary}).encode())
    producer.flush()
