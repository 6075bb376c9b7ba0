"""The Python worker's side of a task (runs on executors): adapters in, ``process_ranges``.

The worker's caches live here, all of them, each for as long as the Python worker process
(PySpark reuses a worker for task after task, ``spark.python.worker.reuse``) and each keyed
by the settings that made it, so a task of another config never gets a wrong one:

- HBase connections (``ConnectionSlot``, per ``HBaseConfig``): reset after an error;
- decoders (per model and ``InputConfig``) and compiled models (per model, in
  ``model.compiled.compile_model``): parsing schemas and compiling the fold are not free;
- schema registry clients (per registry, in ``registry.client``); the writer schemas they
  fetched, by id, live in the decoder (ids never change);
- the closed-session sinks (per servers, group, topic, output settings, partition and table
  prefix): a transactional producer lives until the broker fences it, then the next range
  makes another;
- kept session rows (``kept_rows``, per tables, group and driver epoch): the rows of a
  partition's last ranges, brought up to date from the host's other workers
  (``kept_trail``), so a range reads only the rows its partition's last ranges did not touch;
- Kafka consumers: ``kafka.reader`` keeps them (one per config and topic, assigned each
  range's partition in turn), since reading decides whether a consumer can be reused.

Nothing here is imported by the driver except ``run_ranges`` and ``warm_up``, which Spark
pickles by reference; nothing here imports the CLI's modules.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from leakproof.core import codec
from leakproof.core.config import Config, HBaseConfig, InputConfig, OutputConfig
from leakproof.core.frames import confluent_frame
from leakproof.core.gap_fold import GapRule
from leakproof.core.kept_rows import KeptRows
from leakproof.core.offsets import Gap, OffsetRange, named
from leakproof.core.reports import TaskReport
from leakproof.core.sessions import fence_key
from leakproof.core.summaries import Encode, EncodeUpdate, avro_summary, avro_update, summary_schema
from leakproof.hbase.connection import ConnectionSlot, riding_out
from leakproof.hbase.dead_letters import DeadLetterStore
from leakproof.hbase.partition_store import LeaseReader, PartitionStore
from leakproof.hbase.session_store import SessionStore
from leakproof.hbase.visit_store import VisitStore
from leakproof.kafka import stalls
from leakproof.kafka.closed_sink import ClosedSink
from leakproof.kafka.reader import consumer_cached, read_range
from leakproof.kafka.registry import client, decoder_for
from leakproof.model.compiled import CompiledModel, compile_model
from leakproof.model.spec import Model
from leakproof.task.kept_trail import SharedKeptRows, Trail, trail_root
from leakproof.task.process import Rules, Stores, TaskBatch, process_ranges

WAVE_RECORDS = 50_000  # at most this many records of a task's ranges in memory at once

log = logging.getLogger(__name__)

_connections: dict[HBaseConfig, ConnectionSlot] = {}
_decoders: dict[tuple[Model, InputConfig], codec.Decoder] = {}
_encoders: dict[tuple[Model, OutputConfig], Encode] = {}
_update_encoders: dict[tuple[Model, OutputConfig], EncodeUpdate] = {}
_sinks: dict[tuple[str, str, str, OutputConfig, int, str], ClosedSink] = {}
_kept: dict[tuple[HBaseConfig, str, int], KeptRows] = {}


def _connection(cfg: HBaseConfig) -> ConnectionSlot:
    conns = _connections.get(cfg)
    if conns is None:
        conns = _connections[cfg] = ConnectionSlot(cfg)
    return conns


def _decoder(model: Model, cfg: InputConfig) -> codec.Decoder:
    decoder = _decoders.get((model, cfg))
    if decoder is None:
        decoder = _decoders[model, cfg] = decoder_for(model, cfg)
    return decoder


def _kept_rows(cfg: Config, epoch: int) -> KeptRows:
    """This worker's kept rows for these tables and group under this driver epoch, shared
    with the host's other workers (``kept_trail``); rows kept under another epoch (a driver
    since replaced, a rewind) are dropped."""
    h, group, most = cfg.hbase, cfg.kafka.group_id, cfg.job.kept_rows
    kept = _kept.get((h, group, epoch))
    if kept is None:
        for key in [k for k in _kept if k[:2] == (h, group)]:
            del _kept[key]
        try:
            root = trail_root(h.host, str(h.port), h.sessions_table, h.state_table, group,
                              epoch=epoch)
            kept = SharedKeptRows(Trail(root), most)
        except OSError as exc:
            log.warning("kept rows stay in this Python worker (%s)", exc)
            kept = KeptRows(most)
        _kept[h, group, epoch] = kept
    return kept


def _sink(cfg: Config, partition: int) -> ClosedSink:
    k = cfg.kafka
    key = (k.bootstrap_servers, k.group_id, k.topic, cfg.output, partition,
           cfg.hbase.table_prefix or "")
    sink = _sinks.get(key)
    if sink is None:
        avro, updates = cfg.output.format == "avro", cfg.output.updates
        sink = _sinks[key] = ClosedSink(
            cfg.kafka, cfg.output, partition,
            _summary_encoder(cfg) if avro and not updates else None,
            cfg.hbase.table_prefix or "", _update_encoder(cfg) if avro and updates else None)
    return sink


def _summary_encoder(cfg: Config) -> Encode:
    """Avro: the summary schema registered (once per worker and output: registering is
    idempotent) and its id framed before each record."""
    key = (cfg.model, cfg.output)
    found = _encoders.get(key)
    if found is None:
        model = compile_model(cfg.model, by_time=cfg.sessions.by == "gap")
        found = _encoders[key] = avro_summary(model, _registered(cfg, summary_schema(model)))
    return found


def _update_encoder(cfg: Config) -> EncodeUpdate:
    """``_summary_encoder`` with ``output.emit: update``: ``version`` and ``final`` too."""
    key = (cfg.model, cfg.output)
    found = _update_encoders.get(key)
    if found is None:
        model = compile_model(cfg.model, by_time=cfg.sessions.by == "gap")
        found = _update_encoders[key] = avro_update(
            model, _registered(cfg, summary_schema(model, updates=True)))
    return found


def _registered(cfg: Config, schema: dict[str, Any]) -> bytes:
    """The Confluent frame of ``schema``, registered as ``<closed_sessions_topic>-value``."""
    assert cfg.output.registry is not None and cfg.output.closed_sessions_topic  # config
    schema_id = client(cfg.output.registry).register(
        f"{cfg.output.closed_sessions_topic}-value", json.dumps(schema))
    return confluent_frame(schema_id)


def waves(ranges: Sequence[OffsetRange], most: int = WAVE_RECORDS
          ) -> list[tuple[OffsetRange, ...]]:
    """A task's ranges (in order) cut into runs of at most ``most`` records, a bigger range
    alone: each run is held in memory at once (its records decoded, its rows read)."""
    out: list[tuple[OffsetRange, ...]] = []
    current: list[OffsetRange] = []
    held = 0
    for rng in ranges:
        if current and held + rng.count > most:
            out.append(tuple(current))
            current, held = [], 0
        current.append(rng)
        held += rng.count
    if current:
        out.append(tuple(current))
    return out


def run_ranges(cfg: Config, batch_ms: int, ranges: Sequence[OffsetRange], epoch: int,
               placed_in: int | None = None, *, cell_ts: Mapping[int, int],
               incarnation: str = "", owners_in: int | None = None,
               idle: Mapping[int, int] | None = None) -> list[TaskReport]:
    """A task's ranges end to end (``task.process``), a wave at a time (``waves``), riding
    out an HBase outage: every step is idempotent, so a wave interrupted by one is redone
    whole. ``placed_in``: check the keys against that partition count (``moved_keys``);
    ``cell_ts``: each partition's cell timestamp (``cell_clock``); ``incarnation``: the
    fence tag of a recreated topic (``sessions.fence_key``); ``owners_in``: the partition
    count of a topic that grew (``task.process``); ``idle``: how long each idle
    partition has been silent, ms (``task.process``).

    A wave whose writes failed or timed out forgets the rows kept for its partitions: a
    timed-out call may still land, so what HBase holds is read again, never assumed."""
    conns = _connection(cfg.hbase)
    gap = cfg.sessions.by == "gap"
    model = compile_model(cfg.model, by_time=gap)
    reports: list[TaskReport] = []
    rules = Rules(cfg.sessions.close_after_ms, round(cfg.sessions.grace_s * 1000),
                  cfg.sessions.late == "fold",
                  GapRule(cfg.sessions.gap_ms, cfg.sessions.max_duration_ms) if gap else None,
                  cfg.sessions.retention_ms)
    for wave in waves(ranges):
        topic = wave[0].topic
        for each in riding_out(cfg.hbase, f"writes of {named(wave)}", conns.reset):
            cached = consumer_cached(cfg.kafka, topic, wave[0].partition)
            stalled = stalls()
            gaps: dict[OffsetRange, list[Gap]] = {rng: [] for rng in wave}
            kept = _kept_rows(cfg, epoch)
            with each, _no_cycle_collection(), conns.get() as conn, \
                    _forgotten_on_failure(kept, wave, incarnation):
                done = process_ranges([(rng, read_range(cfg.kafka, rng, gaps[rng]))
                                       for rng in wave],
                                      _decoder(cfg.model, cfg.input).decode,
                                      _stores(cfg, conn, model, kept, topic), model, rules,
                                      TaskBatch(batch_ms, epoch, cell_ts, placed_in,
                                                incarnation, owners_in, idle or {}))
                for rng, report in zip(wave, done, strict=True):
                    # the first range found the topic's consumer or made it; the others use it
                    report.gaps = tuple(gaps[rng])
                    report.consumer_cached = cached or rng != wave[0]
                done[0].client_stalls = stalls() - stalled
                reports += done
    return reports


def _stores(cfg: Config, conn: Any, model: CompiledModel, kept: KeptRows, topic: str
            ) -> Stores:
    """A wave's stores, over one HBase connection."""
    gap = cfg.sessions.by == "gap"
    return Stores(
        SessionStore(conn.table(cfg.hbase.sessions_table), model),
        PartitionStore(conn, cfg.hbase.state_table),
        DeadLetterStore(conn.table(cfg.hbase.dead_letter_table)),
        LeaseReader(conn, cfg.hbase.state_table, topic, cfg.kafka.group_id),
        partial(_sink, cfg) if cfg.output.closed_sessions_topic else None,
        VisitStore(conn, cfg.hbase.state_table) if gap else None,
        kept)


@contextmanager
def _forgotten_on_failure(kept: KeptRows, wave: Sequence[OffsetRange], incarnation: str
                          ) -> Iterator[None]:
    """The rows kept for the wave's partitions, forgotten if its writes fail or time out: a
    timed-out call may still land, so HBase is read again, never assumed."""
    try:
        yield
    except BaseException:
        for rng in wave:
            kept.drop(fence_key(rng.topic, rng.partition, incarnation))
        raise


def warm_up(cfg: Config) -> float:
    """What a worker's first range would do before it reads a record: this module's imports
    (Kafka, Thrift, Avro: done by unpickling the call), the decoder and the compiled model,
    an HBase connection.
    Run at start by the driver, so the first batch finds its workers ready. Never raises: a
    connection that fails here is left to the first range, which rides out or reports it.
    Returns the seconds it took."""
    t0 = time.monotonic()
    _decoder(cfg.model, cfg.input)
    compile_model(cfg.model, by_time=cfg.sessions.by == "gap")
    conns = _connection(cfg.hbase)
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
