"""The driver: a StreamingContext whose batches read Kafka ranges and commit offsets to HBase.

A queue stream with a default RDD is the batch clock. For each batch time Spark calls
``_plan`` (in ``transform``, when the batch is *generated*) and later ``_output`` (in
``foreachRDD``, when its job *runs*). Batch N+1 is generated on schedule even while N runs, so
planning advances its own positions (``_next``) at plan time; the commit chain (``_committed``)
advances only when a batch's output succeeded. A batch's commit:

1. every task of the batch succeeded (collect returned a report for each range);
2. the batch's from offsets are the until offsets of the last commit (no skipped batch);
3. checkAndPut on the lease cell: still this driver's epoch, previous batch as expected;
4. put the offsets row ``<topic>:<group>:<batch ms>`` with every partition's until offset.

Anything failing stops the job with exit code 1 before a later batch commits; a restart
resumes from the newest offsets row and the session fences make the replay exact.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from leakproof.backpressure import PIDRateEstimator, split_budgets
from leakproof.commit_stores import open_store
from leakproof.config import Config
from leakproof.crashpoints import crash_point
from leakproof.errors import BatchFailed, CommitRefused, KafkaReadError, LeakproofError, OffsetError
from leakproof.hbase.connection import Connections, ensure_tables
from leakproof.hbase.state_store import StateStore
from leakproof.kafka.admin import KafkaMetadata
from leakproof.offsets import (
    CommitStore,
    Gap,
    LogBounds,
    OffsetRange,
    check_position,
    per_partition_budget,
    plan_ranges,
    resolve_start,
)

if TYPE_CHECKING:
    from leakproof.metrics import JobMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunLimits:
    """When ``leakproof run`` stops by itself (besides SIGTERM / SIGINT)."""

    until_idle_s: float | None = None
    max_batches: int | None = None  # batches with records; later ones are not planned
    log_format: str = "text"  # text | json: how the per-batch progress line is written


@dataclass
class BatchPlan:
    """What ``_plan`` decided for one batch time."""

    batch_ms: int
    ranges: list[OffsetRange]
    bounds: dict[int, LogBounds]
    gaps: list[Gap] = field(default_factory=list)
    planned_at: float = field(default_factory=time.monotonic)

    @property
    def records(self) -> int:
        return sum(r.count for r in self.ranges)

    @property
    def lag(self) -> int:
        return sum(self.bounds[r.partition].log_end - r.until_offset for r in self.ranges)


def progress_record(plan: BatchPlan, reports: list[dict[str, Any]], took: float,
                    commit_s: float) -> dict[str, Any]:
    """One batch's figures: counts summed over tasks, task timings as the slowest task's."""

    def total(k: str) -> int:
        return sum(int(r[k]) for r in reports)

    def worst(k: str) -> float:
        return round(max((float(r[k]) for r in reports), default=0.0), 3)

    kinds: dict[str, int] = {}
    for r in reports:
        for kind, n in r["dead_letter_kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    records = total("records")
    return {
        "batch_ms": plan.batch_ms,
        "ranges": [{"partition": r.partition, "from": r.from_offset, "until": r.until_offset}
                   for r in plan.ranges if r.count],
        "records": records, "applied": total("applied"), "replayed": total("replayed"),
        "late": total("late"), "duplicates": total("duplicates"),
        "unknown_types": total("unknown_types"), "dead_letters": total("dead_letters"),
        "dead_letter_kinds": kinds, "sessions": total("sessions"), "closed": total("closed"),
        "lag": plan.lag, "events_per_s": round(records / took if took else 0.0, 1),
        "read_s": worst("read_s"), "fold_s": worst("fold_s"), "write_s": worst("write_s"),
        "commit_s": round(commit_s, 3), "total_s": round(took, 3),
        "gaps": [{"partition": g.partition, "from": g.stored, "to": g.resumed_at}
                 for g in plan.gaps],
    }


def batch_millis(t: datetime) -> int:
    """PySpark hands batch times as local datetimes built from epoch ms; get the ms back."""
    return round(t.timestamp() * 1000)


class Job:
    """One run of the streaming job on the current SparkContext's cluster."""

    def __init__(self, cfg: Config, limits: RunLimits = RunLimits()) -> None:
        self.cfg = cfg
        self.limits = limits
        self.topic = cfg.kafka.topic
        self.group = cfg.kafka.group_id
        self._lock = threading.Lock()
        self._plans: dict[int, BatchPlan] = {}
        self._next: dict[int, int] = {}  # next offset to plan, per partition
        self._committed: dict[int, int] = {}  # until offsets of the last commit
        self._lease: bytes = b""
        self._failure: BaseException | None = None
        self._stop_reason: str | None = None
        self._batches = 0  # outputs run
        self._planned_with_data = 0
        self._last_data = time.monotonic()
        self._hbase = Connections(cfg.hbase)
        self._kafka: KafkaMetadata | None = None
        self._topic_id: str | None = None  # Kafka's id of the topic this run reads
        self._store: CommitStore | None = None  # where commits go: offsets.store
        self._metrics: JobMetrics | None = None  # job.metrics_port > 0
        bp = cfg.kafka.backpressure
        self._estimator = PIDRateEstimator(
            round(cfg.job.batch_interval_s * 1000), bp.proportional, bp.integral, bp.derived,
            bp.min_rate) if bp.enabled else None
        self._rate: float | None = None  # the estimator's newest rate, records/s
        self._unmirrored: tuple[int, dict[int, int]] | None = None  # group copy still owed

    # ------------------------------------------------------------------ start

    def prepare(self) -> dict[int, int]:
        """Tables, lease, start positions: everything that can refuse before Spark starts."""
        with self._hbase.get() as conn:
            created = ensure_tables(conn, self.cfg.hbase)
            if created:
                log.info("created HBase tables %s", ", ".join(created))
            self._lease = self._take_lease(StateStore(conn, self.cfg.hbase.state_table))
        self._store = open_store(self.cfg)
        latest = self._store.latest()
        self._kafka = KafkaMetadata(self.cfg.kafka)
        partitions = self._assigned()
        stored_id = latest.audit.get("topic_id") if latest else None
        if latest and stored_id and self._topic_id and stored_id != self._topic_id:
            raise OffsetError(
                f"{self.topic} was deleted and recreated: the offsets row {latest.batch_ms} "
                f"belongs to topic id {stored_id}, the topic now has id {self._topic_id}. "
                f"Refusing to start: its offsets mean nothing in the new topic. Rewind "
                f"(leakproof offsets rewind --to-time/--to-offsets) once you know which data "
                f"to process.")
        bounds = self._kafka.log_bounds(self.topic, partitions)
        stored = latest.offsets if latest else None
        plan = resolve_start(self.topic, partitions, stored, bounds,
                             auto_offset_reset=self.cfg.kafka.auto_offset_reset,
                             on_data_loss=self.cfg.kafka.on_data_loss)
        for gap in plan.gaps:
            self._record_gap(gap)
        self._next = dict(plan.positions)
        # The chain starts at the stored row (partitions no longer assigned keep their
        # offsets), moved to where this run really starts: new partitions, skipped gaps.
        self._committed = {**(stored or {}), **plan.positions}
        where = (f"offsets row {latest.batch_ms}" if latest else
                 f"no offsets row, auto_offset_reset={self.cfg.kafka.auto_offset_reset}")
        log.info("starting %s group %s from %s: %s", self.topic, self.group, where,
                 ", ".join(f"p{p}@{o} ({plan.reasons[p]})" for p, o in plan.positions.items()))
        return plan.positions

    def _take_lease(self, state: StateStore) -> bytes:
        """Bump the epoch: a driver still running on the old epoch can no longer commit."""
        lease = state.bump_epoch(self.topic, self.group, f"start:{uuid.uuid4().hex[:8]}")
        log.info("driver lease epoch %s for %s:%s", lease.split(b":", 1)[0].decode(),
                 self.topic, self.group)
        return lease

    def _record_gap(self, gap: Gap) -> None:
        log.warning("data loss on %s partition %d: offsets [%d, %d) were deleted before being "
                    "read; skipping them (kafka.on_data_loss=skip), gap recorded in %s",
                    self.topic, gap.partition, gap.stored, gap.resumed_at,
                    self.cfg.hbase.full_name(self.cfg.hbase.state_table))
        self._hbase.call("record gap", lambda c: StateStore(c, self.cfg.hbase.state_table)
                         .record_gap(self.topic, self.group, gap.partition, gap.stored,
                                     gap.resumed_at))

    def _assigned(self) -> list[int]:
        assert self._kafka is not None
        topic_id, existing = self._kafka.describe(self.topic)
        if self._topic_id is None:
            self._topic_id = topic_id
        elif topic_id and topic_id != self._topic_id:
            raise OffsetError(
                f"{self.topic} was deleted and recreated while this job ran (topic id "
                f"{self._topic_id}, now {topic_id}); stopping without reading the new topic. "
                f"Rewind (leakproof offsets rewind) once you know which data to process.")
        wanted = self.cfg.kafka.partitions
        if wanted is None:
            return existing
        missing = sorted(set(wanted) - set(existing))
        if missing:
            raise OffsetError(f"kafka.partitions lists {missing}, but {self.topic} has "
                              f"partitions {existing}")
        return list(wanted)

    # ------------------------------------------------------------------ per batch: plan

    def _plan(self, batch_ms: int) -> BatchPlan:
        """Ranges for one batch: from the last planned position up to the rate cap."""
        assert self._kafka is not None
        partitions = self._assigned()
        bounds = self._kafka.log_bounds(self.topic, partitions)
        gaps = []
        positions = {}
        for p in partitions:
            if p not in self._next:
                # Added while running: read it from its start, like a stored row lacking it.
                log.info("partition %d of %s appeared; reading it from offset %d", p,
                         self.topic, bounds[p].log_start)
                self._next[p] = bounds[p].log_start
                self._committed.setdefault(p, bounds[p].log_start)
            positions[p], gap = check_position(self.topic, p, self._next[p], bounds[p],
                                               self.cfg.kafka.on_data_loss)
            if gap is not None:
                gaps.append(gap)
        k = self.cfg.kafka
        budget: int | Mapping[int, int | None] | None
        if self._estimator is not None:
            budget = split_budgets(self._rate, {p: bounds[p].log_end - positions[p]
                                                for p in positions},
                                   self.cfg.job.batch_interval_s, k.max_rate_per_partition,
                                   k.min_rate_per_partition, k.backpressure.initial_rate)
        else:
            budget = per_partition_budget(self.cfg.job.batch_interval_s,
                                          k.max_rate_per_partition, k.min_rate_per_partition)
        ranges = plan_ranges(self.topic, positions,
                             {p: b.log_end for p, b in bounds.items()}, budget)
        for r in ranges:
            self._next[r.partition] = r.until_offset
        return BatchPlan(batch_ms, ranges, bounds, gaps)

    def plan_rdd(self, t: datetime, _tick: Any) -> Any:
        """``transform`` callback: build this batch's RDD, one Spark partition per range."""
        from pyspark import SparkContext

        sc = SparkContext.getOrCreate()
        batch_ms = batch_millis(t)
        with self._lock:
            if self._failure is not None or self._stop_reason is not None:
                return sc.emptyRDD()
            try:
                crash_point("driver_planning")
                plan = self._plan(batch_ms)
            except KafkaReadError as exc:
                log.warning("batch %d: Kafka metadata unavailable (%s); planning nothing this "
                            "batch", batch_ms, exc)
                # Unknown is not idle: --until-idle must not stop the job during an outage.
                self._last_data = time.monotonic()
                return sc.emptyRDD()
            except LeakproofError as exc:
                self._fail(exc)
                return sc.emptyRDD()
            self._plans[batch_ms] = plan
            if plan.records:
                self._last_data = time.monotonic()
                self._planned_with_data += 1
                # Count at plan time: batches generated while earlier ones run would
                # otherwise all commit before a stop requested at output time takes hold.
                if self.limits.max_batches and self._planned_with_data >= self.limits.max_batches:
                    self._request_stop(f"{self._planned_with_data} batches planned "
                                       f"(--max-batches)")
        work = [r for r in plan.ranges if r.count]
        if not work:
            return sc.emptyRDD()
        return sc.parallelize(work, len(work))

    # ------------------------------------------------------------------ per batch: output

    def output(self, t: datetime, rdd: Any) -> None:
        """``foreachRDD`` callback: run the tasks, then commit (numbered in the module doc)."""
        batch_ms = batch_millis(t)
        with self._lock:
            plan = self._plans.pop(batch_ms, None)
            if plan is None:
                return
            if self._failure is not None:
                log.error("batch %d not run: an earlier batch failed", batch_ms)
                return
        started = time.monotonic()
        started_wall = time.time() * 1000
        try:
            reports = self._run_tasks(batch_ms, plan, rdd)
            crash_point("driver_after_tasks")
            commit_s = self._commit(plan, reports)
        except Exception as exc:  # noqa: BLE001 - any failure must stop the job, named
            with self._lock:
                self._fail(exc if isinstance(exc, LeakproofError) else
                           BatchFailed(f"batch {batch_ms} failed: {describe(exc)}"))
            return
        took = time.monotonic() - started
        with self._lock:
            self._batches += 1
            if self._estimator is not None and reports:
                # scheduling delay: how long after its batch time this batch's output began
                rate = self._estimator.compute(plan.batch_ms, sum(r["records"] for r in reports),
                                               took * 1000, max(0.0, started_wall - plan.batch_ms))
                if rate is not None:
                    self._rate = rate
        self._progress(plan, reports, took, commit_s)

    def _run_tasks(self, batch_ms: int, plan: BatchPlan, rdd: Any) -> list[dict[str, Any]]:
        if not any(r.count for r in plan.ranges):
            return []
        cfg = self.cfg
        epoch = int(self._lease.split(b":", 1)[0])

        def task(ranges: Iterator[OffsetRange]) -> Iterator[dict[str, Any]]:
            from leakproof.partition_task import run_range

            for rng in ranges:
                yield run_range(cfg, batch_ms, rng, epoch).as_dict()

        try:  # the Spark UI's job list then says which ranges each batch read
            rdd.context.setJobDescription(
                f"leakproof batch {batch_ms}: " + ", ".join(str(r) for r in plan.ranges
                                                             if r.count))
        except Exception:
            log.debug("could not set the job description", exc_info=True)
        reports: list[dict[str, Any]] = rdd.mapPartitions(task).collect()
        expected = {r.partition for r in plan.ranges if r.count}
        got = {r["partition"] for r in reports}
        if got != expected:  # 1. every task of the batch succeeded
            raise BatchFailed(f"batch {batch_ms}: reports for partitions {sorted(got)}, "
                              f"expected {sorted(expected)}")
        return reports

    def _commit(self, plan: BatchPlan, reports: list[dict[str, Any]]) -> float:
        t0 = time.monotonic()
        advanced = {r.partition: r.until_offset for r in plan.ranges}
        gap_parts = {g.partition for g in plan.gaps}
        # 2. the chain: each range starts where the last commit ended
        for r in plan.ranges:
            if r.partition in gap_parts:
                continue
            if self._committed.get(r.partition) != r.from_offset:
                raise CommitRefused(
                    f"batch {plan.batch_ms}: partition {r.partition} starts at {r.from_offset} "
                    f"but the last commit ended at {self._committed.get(r.partition)}; "
                    f"a batch was skipped")
        # deleted while the batch read them (kafka.on_data_loss: skip): recorded like the
        # gaps found at planning
        plan.gaps.extend(Gap(*g) for r in reports for g in r.get("gaps", ()))
        new_offsets = {**self._committed, **advanced}
        if new_offsets == self._committed:
            # Nothing moved: no row (readable history, no empty commits). An idle driver
            # must still notice that another one took the lease, or it idles on forever.
            self._check_lease()
            if self._unmirrored is not None:
                self._mirror(*self._unmirrored)
            return 0.0
        for gap in plan.gaps:
            self._record_gap(gap)
        epoch = self._lease.split(b":", 1)[0]
        new_lease = epoch + b":" + str(plan.batch_ms).encode()
        audit = self._audit(plan, reports)

        def commit(conn: Any) -> None:
            state = StateStore(conn, self.cfg.hbase.state_table)
            crash_point("driver_before_commit")
            # 3. the lease: still ours, and our previous batch was the last one
            # (a retried call may find its own earlier write: a lost reply, not a rival)
            ours = state.compare_and_set_lease(self.topic, self.group, self._lease, new_lease)
            holder = None if ours else state.read_lease(self.topic, self.group)
            if not ours and holder != new_lease:
                raise CommitRefused(
                    f"batch {plan.batch_ms}: the lease of {self.topic}:{self.group} moved on "
                    f"(now {holder!r}); another driver runs this topic and group. This driver "
                    f"stops without committing.")

        self._hbase.call("lease check-and-set", commit)
        crash_point("driver_during_commit")
        # 4. the offsets row (or the group / ZooKeeper commit: offsets.store)
        assert self._store is not None
        self._store.put(plan.batch_ms, new_offsets, audit)
        crash_point("driver_after_commit")
        with self._lock:
            self._lease = new_lease
            self._committed = new_offsets
        self._mirror(plan.batch_ms, new_offsets)
        return time.monotonic() - t0

    def _mirror(self, batch_ms: int, offsets: dict[int, int]) -> None:
        """Best effort: a Kafka hiccup here must not fail a batch HBase already committed.

        A mirror that failed (on a new broker the group coordinator appears only after the
        first request) stays pending and is retried at every later batch until it lands.
        """
        if (not self.cfg.kafka.mirror_group_offsets or self._kafka is None
                or self.cfg.offsets.store == "kafka"):  # the group is the store itself
            return
        self._unmirrored = (batch_ms, offsets)
        try:
            self._kafka.mirror_group_offsets(self.group, self.topic, offsets,
                                             f"leakproof batch {batch_ms}")
            self._unmirrored = None
        except Exception as exc:  # noqa: BLE001 - logged; HBase holds the truth
            log.warning("could not mirror offsets of batch %d to Kafka group %s (will retry): "
                        "%s", batch_ms, self.group, exc)

    def _check_lease(self) -> None:
        mine = int(self._lease.split(b":", 1)[0])
        holder = self._hbase.call("lease check", lambda c: StateStore(
            c, self.cfg.hbase.state_table).lease_epoch(self.topic, self.group))
        if holder != mine:
            raise CommitRefused(f"the lease of {self.topic}:{self.group} is at epoch {holder}, "
                                f"this driver's is {mine}: another driver took over. This "
                                f"driver stops.")

    def _audit(self, plan: BatchPlan, reports: list[dict[str, Any]]) -> dict[str, str]:
        def total(k: str) -> int:
            return sum(int(r[k]) for r in reports)

        audit = {
            "records": total("records"), "applied": total("applied"),
            "replayed": total("replayed"), "late": total("late"),
            "duplicates": total("duplicates"), "unknown_types": total("unknown_types"),
            "dead_letters": total("dead_letters"), "sessions": total("sessions"),
            "closed": total("closed"), "lag": plan.lag, "committed_ms": int(time.time() * 1000),
            "epoch": self._lease.split(b":", 1)[0].decode(),
            **({"topic_id": self._topic_id} if self._topic_id else {}),
            "ranges": ",".join(f"{r.partition}:{r.from_offset}-{r.until_offset}"
                               for r in plan.ranges),
        }
        if plan.gaps:
            audit["gaps"] = ",".join(f"{g.partition}:{g.stored}-{g.resumed_at}"
                                     for g in plan.gaps)
        return {k: str(v) for k, v in audit.items()}

    def _progress(self, plan: BatchPlan, reports: list[dict[str, Any]], took: float,
                  commit_s: float) -> None:
        """The one line per batch: text for people, or one JSON object (--log-format json)."""
        if not reports and not plan.gaps:
            log.debug("batch %d: no new records", plan.batch_ms)
            return
        p = progress_record(plan, reports, took, commit_s)
        p["rate_limit"] = None if self._rate is None else round(self._rate, 1)
        if self._metrics is not None:
            self._metrics.batch(p, {r.partition: plan.bounds[r.partition].log_end -
                                    r.until_offset for r in plan.ranges})
        if self.limits.log_format == "json":
            log.info("%s", json.dumps(p, sort_keys=True))
            return
        kinds = p["dead_letter_kinds"]
        log.info(
            "batch %s | %s | records %d (applied %d, replayed %d, late %d, duplicate %d, "
            "unknown type %d, dead %d%s) | "
            "sessions %d closed %d | lag %d | %.0f ev/s | read %.2fs fold %.2fs write %.2fs "
            "commit %.2fs total %.2fs%s",
            p["batch_ms"], " ".join(f"p{r['partition']}:{r['from']}->{r['until']}"
                                    for r in p["ranges"]),
            p["records"], p["applied"], p["replayed"], p["late"], p["duplicates"],
            p["unknown_types"], p["dead_letters"],
            f" {json.dumps(kinds, sort_keys=True)}" if kinds else "", p["sessions"],
            p["closed"], p["lag"], p["events_per_s"], p["read_s"], p["fold_s"], p["write_s"],
            p["commit_s"], p["total_s"],
            "" if p["rate_limit"] is None else f" | rate limit {p['rate_limit']:.0f} ev/s")

    # ------------------------------------------------------------------ stopping

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
            log.error("stopping: %s", exc)

    def _request_stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
            log.info("stopping gracefully: %s", reason)

    def request_stop(self, reason: str) -> None:
        with self._lock:
            self._request_stop(reason)

    def _idle(self) -> bool:
        with self._lock:
            if self.limits.until_idle_s is None or self._plans:
                return False
            return (time.monotonic() - self._last_data > self.limits.until_idle_s
                    and self._next == {p: o for p, o in self._committed.items()
                                       if p in self._next})

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        """Run until stopped; 0 after a graceful stop, 1 after a failed batch."""
        from pyspark import SparkContext
        from pyspark.streaming import StreamingContext

        self.prepare()
        if self.cfg.job.metrics_port:
            from leakproof.metrics import JobMetrics

            self._metrics = JobMetrics(self.topic, self.group, self.cfg.job.metrics_host,
                                       self.cfg.job.metrics_port)
            log.info("metrics at http://%s:%d/metrics", self.cfg.job.metrics_host,
                     self.cfg.job.metrics_port)
        sc = SparkContext.getOrCreate()
        # PySpark's hints say int, but it multiplies by 1000 and takes fractions of a second.
        ssc = StreamingContext(sc, self.cfg.job.batch_interval_s)  # type: ignore[arg-type]
        ticks = ssc.queueStream([], oneAtATime=True, default=sc.parallelize([0], 1))
        # PySpark counts a callback's arguments: pass plain two-argument functions.
        ticks.transform(lambda t, rdd: self.plan_rdd(t, rdd)).foreachRDD(
            lambda t, rdd: self.output(t, rdd))
        self._install_signal_handlers()
        ssc.start()
        self._last_data = time.monotonic()  # the idle clock starts with the stream
        log.info("streaming %s every %.3gs on %s", self.topic, self.cfg.job.batch_interval_s,
                 sc.master)
        try:
            while not ssc.awaitTerminationOrTimeout(0.5):  # type: ignore[func-returns-value,arg-type]
                if self._failure is not None:
                    ssc.stop(stopSparkContext=False, stopGraceFully=False)
                    break
                if self._idle():
                    self.request_stop(f"no new records for {self.limits.until_idle_s}s "
                                      f"(--until-idle)")
                with self._lock:
                    stopping = self._stop_reason is not None and not self._plans
                if stopping:
                    ssc.stop(stopSparkContext=False, stopGraceFully=True)
                    break
        finally:
            if self._kafka is not None:
                self._kafka.close()
            if self._store is not None:
                self._store.close()
            if self._metrics is not None:
                self._metrics.close()
            self._hbase.reset()
        if self._failure is not None:
            log.error("job failed; offsets were not committed past the last good batch. "
                      "Restart to resume from HBase. Cause: %s", self._failure)
            return 1
        log.info("stopped after %d batches; committed offsets %s", self._batches,
                 dict(sorted(self._committed.items())))
        return 0

    def _install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: FrameType | None) -> None:
            self.request_stop(f"{signal.Signals(signum).name} received")

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


_PY_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Refused|Failed)): (.+)$")


def describe(exc: BaseException) -> str:
    """The useful line of an error: for a failed Spark job, the Python error of the task."""
    lines = str(exc).splitlines()
    found = [m for m in map(_PY_ERROR.match, lines) if m]
    ours = [m for m in found if m.group(1).startswith("leakproof.")]
    pick = ours[0] if ours else (found[-1] if found else None)
    if pick is not None:
        return f"{pick.group(1).rsplit('.', 1)[-1]}: {pick.group(3)[:500]}"
    return f"{type(exc).__name__}: {lines[0][:500] if lines else ''}"


def spark_context(cfg: Config) -> Any:
    """The SparkContext for ``leakproof run``: spark-submit's settings win over config.yml."""
    import os
    import sys

    from pyspark import SparkConf, SparkContext

    # Executors must run the Python that has leakproof and its dependencies installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkConf()
    # Under spark-submit the JVM already runs (it set PYSPARK_GATEWAY_PORT) and holds the
    # master and app name it was given; a SparkConf made before the context cannot see them.
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf.setMaster(cfg.job.master).setAppName(cfg.job.app_name)
    for key, value in cfg.job.spark_conf.items():
        conf.setIfMissing(key, value)
    conf.setIfMissing("spark.ui.showConsoleProgress", "false")
    conf.setIfMissing("spark.ui.enabled", "false")
    conf.setIfMissing("spark.streaming.concurrentJobs", "1")
    sc = SparkContext.getOrCreate(conf)
    sc.setLogLevel(os.environ.get("LEAKPROOF_SPARK_LOG_LEVEL", "WARN"))
    return sc
