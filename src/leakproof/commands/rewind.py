"""Operator rewinds: write a new offsets row that the next run resumes from.

A rewind never edits history: it commits a new batch ``<now ms>`` through the store
``offsets.store`` names (in HBase, a row ``<topic>:<group>:<now ms>`` whose ``audit`` family
records what was asked), with offsets from an earlier row, from a point in (Kafka record)
time, or from explicit values. It also bumps the driver lease epoch, so a
job still running on that topic and group is fenced: its next task or commit sees the new
epoch and it stops (exit 1) without committing anything after the rewind row.

``--dry-run`` works the same plan out -- per partition the offset the next run resumes from
now and after, and how many offsets that reads again or skips -- and writes nothing: no
table is created, no lease taken, no row committed (Kafka's ``--reset-offsets`` without
``--execute``).

Rewinding over the same session tables re-reads records that the session fences already
hold, so nothing is counted twice -- and nothing is recomputed either. To *reprocess* (an
updated algorithm over known data), point a config with a fresh ``hbase.table_prefix`` at
the same topic and group and rewind that; see README, "Reprocessing".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from leakproof.core.config import Config, session_stage
from leakproof.core.errors import ForeignOffsets, OffsetError, StoreError, TableMissing
from leakproof.core.offsets import CommittedBatch, LogBounds
from leakproof.ports.driver import CommitStore, LeaseStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewindTarget:
    """Exactly one of the three ways to say where to go back to."""

    to_batch: int | None = None
    to_time_ms: int | None = None
    to_offsets: Mapping[int, int] | None = None
    # input.rekey: source partitions to source offsets, read again through their copies
    to_source_offsets: Mapping[int, int] | None = None

    def describe(self) -> str:
        if self.to_batch is not None:
            return f"to-batch {self.to_batch}"
        if self.to_time_ms is not None:
            return f"to-time {self.to_time_ms}"
        if self.to_source_offsets is not None:
            return "to-source-offsets " + _pairs(self.to_source_offsets)
        return "to-offsets " + _pairs(self.to_offsets or {})


def _pairs(offsets: Mapping[int, int]) -> str:
    return ",".join(f"{p}={o}" for p, o in sorted(offsets.items()))


def parse_offsets(text: str) -> dict[int, int]:
    """``0=120,3=7`` -> {0: 120, 3: 7}; raises ValueError naming the bad part."""
    out: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isdigit() or not value.strip().isdigit():
            raise ValueError(f"{part!r} is not PARTITION=OFFSET (two non-negative integers)")
        out[int(key)] = int(value)
    if not out:
        raise ValueError("no PARTITION=OFFSET pairs given")
    return out


def rewound_offsets(target: RewindTarget, store: CommitStore, bounds: Mapping[int, LogBounds],
                    by_time: Mapping[int, int | None] | None,
                    where: str, base: CommittedBatch | None = None) -> dict[int, int]:
    """Where the target points, checked against the log; ``where`` names topic and group.
    ``base``: where the partitions ``--to-offsets`` leaves out stay (default: the store's
    newest commit; on a takeover, the previous writer's)."""
    if target.to_batch is not None:
        row = store.get(target.to_batch)
        if row is None:
            if not store.keeps_history:
                raise OffsetError(
                    f"offsets.store: {store.name} keeps no history: only its newest commit "
                    f"can be named with --to-batch; use --to-time or --to-offsets")
            raise OffsetError(f"no offsets row {where}:{target.to_batch:013d}; "
                              f"see `leakproof offsets history`")
        offsets = dict(row.offsets)
    elif by_time is not None:
        # nothing that new: the readable end (an open transaction's records may commit)
        offsets = {p: bounds[p].readable_end if o is None else o for p, o in by_time.items()}
    else:
        latest = base if base is not None else _own_latest(store)
        offsets = {**(latest.offsets if latest else {}), **(target.to_offsets or {})}
    for p, o in sorted(offsets.items()):
        if p not in bounds:
            raise OffsetError(f"{where.split(':')[0]} has no partition {p} "
                              f"(partitions {sorted(bounds)})")
        if not bounds[p].log_start <= o <= bounds[p].log_end:
            raise OffsetError(f"{where.split(':')[0]} partition {p}: offset {o} is outside "
                              f"the log [{bounds[p].log_start}, {bounds[p].log_end}]")
    return offsets


def write_rewind(target: RewindTarget, offsets: Mapping[int, int], store: CommitStore,
                 leases: LeaseStore, topic_id: str | None, now_ms: int,
                 settle_s: float = 2.0) -> int:
    """Fence any running driver, then commit ``offsets`` as a new batch; returns its time.

    The epoch is bumped before the commit, so a driver still running fails its next lease
    check and commits nothing after the rewind -- but a commit that passed its lease check
    just before may still land after the rewind's. A store with history keeps both rows
    and resumes from the rewind's (a later batch time); one without keeps only the newest
    write, so the rewind reads its commit back after ``settle_s`` and writes it again if a
    driver's landed over it, saying so.
    """
    latest = _own_latest(store)
    # the rewind says where this group reads the tables from: it becomes their writer (a
    # job of another group still running on them is refused, one stopped is fenced), so
    # its next start resumes from this row rather than from the previous writer's head
    taken_from = leases.claim_tables(now_ms)
    if taken_from:
        log.warning("the rewind takes the tables over from the job of %s (not running): it "
                    "is fenced and may no longer write them", taken_from)
    epoch = leases.take("rewind").epoch
    if topic_id:  # a rewind accepts the topic as it is now (a recreated one, say)
        # the first topic's id pinned before it is replaced: its fences carry no tag, and a
        # recreated topic's are kept apart from them (sessions.incarnation_of)
        leases.first_topic_id(leases.topic_id() or topic_id)
        leases.record_topic_id(topic_id)
    batch_ms = max(now_ms, (latest.batch_ms + 1) if latest else now_ms)
    audit = {
        "rewind": target.describe(),
        "rewound_from": str(latest.batch_ms) if latest else "none",
        "epoch": str(epoch),
        "committed_ms": str(now_ms),
        **({"topic_id": topic_id} if topic_id else {}),
    }
    store.put(batch_ms, offsets, audit)
    if not store.keeps_history and settle_s > 0:
        time.sleep(settle_s)
        back = _own_latest(store)
        if back is None or back.batch_ms != batch_ms or dict(back.offsets) != dict(offsets):
            log.warning("a running driver's commit (batch %s) landed after this rewind; the "
                        "rewind is written again, and that driver is fenced now",
                        back.batch_ms if back else "none")
            store.put(batch_ms, offsets, audit)
    return batch_ms


def _own_latest(store: CommitStore) -> CommittedBatch | None:
    """The store's newest commit, or None where it holds none of the job's own: a rewind is
    the way out of offsets someone else wrote, or that vanished."""
    try:
        return store.latest()
    except ForeignOffsets as exc:
        log.warning("rewinding over offsets that are not the job's own: %s", exc)
        return None


@dataclass(frozen=True)
class PartitionMove:
    """One partition's rewind: the offset the next run resumes from now (``current``; None:
    nothing committed for it) and after the rewind (``target``)."""

    partition: int
    current: int | None
    target: int

    @property
    def read_again(self) -> int:
        """Offsets between the target and the current position, when going back: records
        read once already (a transaction's markers and aborted records count too)."""
        return 0 if self.current is None else max(0, self.current - self.target)

    @property
    def skipped(self) -> int:
        """Offsets jumped over, when going forward: records the job would never read."""
        return 0 if self.current is None else max(0, self.target - self.current)


@dataclass(frozen=True)
class RewindPlan:
    """What a rewind does, worked out before anything is written: what ``--dry-run``
    prints, and what a rewind then commits."""

    target: RewindTarget
    where: str  # topic:group
    store: str  # offsets.store
    latest_ms: int | None  # the newest commit now (None: nothing committed)
    moves: tuple[PartitionMove, ...]
    running: str | None = None  # the run a rewind would fence, as its record describes it

    @property
    def offsets(self) -> dict[int, int]:
        return {m.partition: m.target for m in self.moves}

    def summary(self, batch_ms: int | None) -> dict[str, object]:
        """The JSON line a rewind prints (``batch_ms`` None: a dry run, nothing written)."""
        return {"batch_ms": batch_ms, "dry_run": batch_ms is None, "store": self.store,
                "offsets": self.offsets,
                "from": {m.partition: m.current for m in self.moves},
                "read_again": {m.partition: m.read_again for m in self.moves}}

    def table(self) -> list[str]:
        """The plan as an operator reads it: a line per partition, the totals, who is fenced."""
        since = f"newest commit {self.latest_ms}" if self.latest_ms else "nothing committed yet"
        lines = [f"rewind of {self.where} (offsets.store {self.store}, {since}) with "
                 f"{self.target.describe()}:",
                 f"{'partition':>9}  {'from':>12}  {'to':>12}  {'read again':>10}  "
                 f"{'skipped':>10}"]
        for m in self.moves:
            lines.append(f"{m.partition:>9}  {'-' if m.current is None else m.current:>12}  "
                         f"{m.target:>12}  {m.read_again:>10}  {m.skipped:>10}")
        lines.append(f"{'total':>9}  {'':>12}  {'':>12}  "
                     f"{sum(m.read_again for m in self.moves):>10}  "
                     f"{sum(m.skipped for m in self.moves):>10}")
        if any(m.skipped for m in self.moves):
            lines.append("records skipped are never read by this group: their events never "
                         "reach the session rows")
        if self.running:
            lines.append(f"{self.running}: the rewind fences it (it stops, exit 1, at its "
                         f"next lease check)")
        return lines


def plan_moves(offsets: Mapping[int, int], latest: CommittedBatch | None
               ) -> tuple[PartitionMove, ...]:
    current = latest.offsets if latest else {}
    return tuple(PartitionMove(p, current.get(p), o) for p, o in sorted(offsets.items()))


def rewind(cfg: Config, target: RewindTarget, now_ms: int | None = None,
           dry_run: bool = False) -> tuple[int | None, RewindPlan]:
    """Rewind through the store ``offsets.store`` names; returns the new batch's time (None
    with ``dry_run``, which reads and writes nothing: no table is created, no lease taken)
    and the plan."""
    from leakproof.commit_stores import open_store
    from leakproof.hbase.connection import connect, ensure_tables
    from leakproof.hbase.state_store import HBaseLeaseStore
    from leakproof.kafka.admin import KafkaMetadata

    # input.rekey: the job's offsets are the internal topic's; a rewind re-reads it, which
    # its fences keep exact (the stage's own offsets are never rewound: docs/DESIGN.md)
    source_topic = cfg.kafka.topic
    if target.to_source_offsets is not None and cfg.input.rekey is None:
        raise OffsetError("--to-source-offsets names a re-keyed topic's offsets (input.rekey); "
                          "without re-keying, --to-offsets names them")
    cfg = session_stage(cfg)
    topic, group = cfg.kafka.topic, cfg.kafka.group_id
    meta = KafkaMetadata(cfg.kafka)
    try:
        topic_id, parts = meta.describe(topic)
        # input.rekey: the source's partitions, which --to-source-offsets names
        source_parts = (meta.partitions(source_topic)
                        if target.to_source_offsets is not None else [])
        bounds = meta.log_bounds(topic, parts)
        by_time = (meta.offsets_for_time(topic, parts, target.to_time_ms)
                   if target.to_time_ms is not None else None)
    finally:
        meta.close()
    if not dry_run:
        conn = connect(cfg.hbase)  # the lease lives in HBase whatever the store
        try:
            ensure_tables(conn, cfg.hbase)
        finally:
            conn.close()
    store = open_store(cfg)
    try:
        latest = _inherited(cfg, dry_run) or _latest(store, dry_run)
        asked = target
        if target.to_source_offsets is not None:
            asked = RewindTarget(to_offsets=through_copies(
                cfg, source_topic, source_parts, target.to_source_offsets, bounds,
                latest.offsets if latest else {}))
        offsets = rewound_offsets(asked, store, bounds, by_time, f"{topic}:{group}", latest)
        plan = RewindPlan(target, f"{topic}:{group}", store.name,
                          latest.batch_ms if latest else None, plan_moves(offsets, latest),
                          _running(cfg))
        if dry_run:
            return None, plan
        leases = HBaseLeaseStore(cfg.hbase, topic, group)
        try:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            batch_ms = write_rewind(target, offsets, store, leases, topic_id, now)
        finally:
            leases.close()
    finally:
        store.close()
    log.info("rewound %s:%s in offsets.store %s with %s: batch %d, offsets %s", topic, group,
             store.name, target.describe(), batch_ms, offsets)
    return batch_ms, plan


def through_copies(cfg: Config, source_topic: str, source_parts: list[int],
                   targets: Mapping[int, int], bounds: Mapping[int, LogBounds],
                   current: Mapping[int, int]) -> dict[int, int]:
    """``--to-source-offsets`` as the internal topic's positions (``rekey.SourceRewind``):
    each internal partition's records the job has read are scanned for the first copy of a
    source record at or after its target; the job goes back there. Raises ``OffsetError``
    for a rewind that would skip forward or needs copies retention removed."""
    from leakproof.core.offsets import OffsetRange
    from leakproof.core.rekey import SourceRewind
    from leakproof.kafka.reader import read_range

    if unknown := sorted(set(targets) - set(source_parts)):
        raise OffsetError(f"{source_topic} has no partition {unknown[0]} (partitions "
                          f"{source_parts})")
    found = SourceRewind(source_topic, targets)
    for q, position in sorted(current.items()):
        start = bounds[q].log_start if q in bounds else position
        for rec in read_range(cfg.kafka, OffsetRange(cfg.kafka.topic, q, start, position)):
            found.feed(q, rec.offset, rec.headers)
    problems = found.problems(q for q, b in bounds.items() if b.log_start > 0)
    if problems:
        raise OffsetError("cannot rewind " + "; ".join(problems))
    positions = found.positions(current)
    log.info("%s at %s is, on %s, %s", source_topic, _pairs(targets), cfg.kafka.topic,
             _pairs(positions))
    return positions


def _latest(store: CommitStore, dry_run: bool) -> CommittedBatch | None:
    """The newest commit; a dry run before the job's first run finds no table: nothing."""
    try:
        return _own_latest(store)
    except TableMissing:
        if not dry_run:
            raise
        return None


def _inherited(cfg: Config, dry_run: bool) -> CommittedBatch | None:
    """On a takeover, the previous writer's newest commit: the tables hold its events, so
    it is the rewind's starting point (``driver.startup.takeover``, which also refuses a
    takeover that would strand another topic's open sessions)."""
    from leakproof.driver.startup import takeover
    from leakproof.hbase.state_store import HBaseTableSet

    tables = HBaseTableSet(cfg.hbase)
    try:
        return takeover(cfg.kafka.topic, cfg.kafka.group_id, tables.owner(), tables)
    except TableMissing:
        if not dry_run:
            raise
        return None
    finally:
        tables.close()


def _running(cfg: Config) -> str | None:
    """The run of this topic and group that is alive now, as its run record says (best
    effort: a missing state table or an unreadable record says nothing)."""
    from leakproof.core.runs import stale_after_ms
    from leakproof.hbase.state_store import HBaseRunRecord

    record = HBaseRunRecord(cfg.hbase, cfg.kafka.topic, cfg.kafka.group_id)
    try:
        state = record.read()
    except StoreError as exc:
        log.debug("run record not read: %s", exc)
        return None
    finally:
        record.close()
    now = int(time.time() * 1000)
    if state is None or not state.alive(now, stale_after_ms(cfg.job.batch_interval_s)):
        return None
    return (f"a run is running (lease epoch {state.epoch}, driver {state.where}, heard from "
            f"{(now - state.heartbeat_ms) / 1000:.0f}s ago)")
