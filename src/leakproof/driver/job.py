"""The Spark glue: a StreamingContext whose batches read Kafka ranges and commit offsets.

A queue stream with a default RDD is the batch clock. For each batch time Spark calls
``plan_rdd`` (in ``transform``, when the batch is *generated*, on its generator thread) and
later ``output`` (in ``foreachRDD``, when its job *runs*, on the job thread). Batch N+1 is
generated on schedule even while N runs: planning advances its positions at plan time, the
commit chain only when a batch's output committed (see committing.py for the steps).
With ``input.rekey``, ``plan_rdd`` first runs the re-keying stage (``rekeying``) and the
job proper reads the internal topic (``config.session_stage``).

Anything failing stops the job with exit code 1 before a later batch commits; a restart
resumes from the newest committed offsets and the session fences make the replay exact.
This is the only module of the driver that imports pyspark.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from leakproof.commit_stores import open_store
from leakproof.core import native
from leakproof.core.backpressure import PIDRateEstimator
from leakproof.core.cell_clock import CellClock
from leakproof.core.config import Config, session_stage
from leakproof.core.errors import (
    BatchFailed,
    CommitRefused,
    KafkaReadError,
    LeakproofError,
)
from leakproof.core.reports import TaskReport
from leakproof.core.runs import heartbeat_period_s
from leakproof.driver.batch import BatchOutcome, BatchPlan, batch_millis
from leakproof.driver.committing import Committer
from leakproof.driver.control import RunControl, RunLimits, describe
from leakproof.driver.dispatch import run_tasks
from leakproof.driver.input_report import InputReport
from leakproof.driver.key_guard import KeyMoveGuard
from leakproof.driver.outcome import run_outcome
from leakproof.driver.planning import Planner
from leakproof.driver.progress import Progress, log_line
from leakproof.driver.rekeying import RekeyStage
from leakproof.driver.shutdown_hook import JvmShutdownHook
from leakproof.driver.spark_session import (
    BatchTasks,
    warm_up_workers,
)
from leakproof.driver.startup import check_output_topic, prepare_tables, start_driver
from leakproof.driver.stopping import StopRequests
from leakproof.hbase.state_store import HBaseLeaseStore, HBaseRunRecord, HBaseTableSet
from leakproof.kafka.admin import KafkaMetadata
from leakproof.model.fingerprint import meaning
from leakproof.testing.crashpoints import crash_point

log = logging.getLogger(__name__)

__all__ = ["Job", "RunLimits"]


class Job:
    """One run of the streaming job on the current SparkContext's cluster."""

    def __init__(self, cfg: Config, limits: RunLimits | None = None) -> None:
        limits = limits or RunLimits()
        # with input.rekey the session job reads the internal topic; the stage the source
        self.source_cfg = cfg
        cfg = session_stage(cfg)
        self.cfg = cfg
        self._rekey: RekeyStage | None = None
        self.topic, self.group = cfg.kafka.topic, cfg.kafka.group_id
        self.control = RunControl(limits)
        self.progress = Progress(log_line(limits.log_format))
        bp = cfg.kafka.backpressure
        self._estimator = PIDRateEstimator(
            round(cfg.job.batch_interval_s * 1000), bp.proportional, bp.integral, bp.derived,
            bp.min_rate) if bp.enabled else None
        self._closing: list[Any] = []  # clients to close when the run ends
        self.planner: Planner | None = None
        self.committer: Committer | None = None
        # a batch's RDD, each range preferring its last executor: the planning thread's
        self._tasks = BatchTasks()
        self._outputs = 0  # batch outputs that succeeded (the output thread's count)
        self._abandoned = False  # a stop's deadline passed with a batch still running
        self._dispatched = threading.Event()  # a batch's tasks were submitted to Spark
        # partitions added: batches run as one task while keys may be in two (moved_keys);
        # the planning thread's once the stream runs
        self._guard: KeyMoveGuard | None = None
        self._moves_store: HBaseLeaseStore | None = None
        # the cell timestamps of this driver's batches: the planning thread's (cell_clock)
        self._clock = CellClock(0, -1)
        self._incarnation = ""  # the fence tag of the topic read (sessions.fence_key)
        self._inputs: InputReport | None = None  # each batch's input, told to Spark's UI

    # ------------------------------------------------------------------ start

    def prepare(self) -> dict[int, int]:
        """Tables, lease, start positions: everything that can refuse before Spark starts.

        Returns each assigned partition's start offset.
        """
        cfg = self.cfg
        if self.source_cfg.input.rekey is not None:
            # its own client: from here on only the planning thread uses it
            self._rekey = RekeyStage(self.source_cfg,
                                     self._closes(KafkaMetadata(self.source_cfg.kafka)))
            self._rekey.prepare()  # the internal topic exists before its start is judged
        prepare_tables(cfg.hbase)
        leases = self._closes(HBaseLeaseStore(cfg.hbase, self.topic, self.group))
        meta = self._closes(KafkaMetadata(cfg.kafka))
        check_output_topic(meta.describe, cfg.output.closed_sessions_topic)
        self.planner = Planner(cfg.kafka, cfg.job.batch_interval_s, meta,
                               cfg.sessions.idle_after_s)
        mirror = None
        if cfg.kafka.mirror_group_offsets and cfg.offsets.store != "kafka":
            # its own client: the planner's belongs to the generator thread
            mirror = self._closes(KafkaMetadata(cfg.kafka))
        started = start_driver(self.topic, self.group, leases=leases,
                               store=self._closes(open_store(cfg)),
                               tables=self._closes(HBaseTableSet(cfg.hbase)),
                               planner=self.planner,
                               mirror=mirror, holder=f"start:{uuid.uuid4().hex[:8]}",
                               now_ms=int(time.time() * 1000),
                               model=meaning(cfg.model, cfg.sessions))
        log.info("driver lease epoch %d for %s:%s", started.lease.epoch, self.topic,
                 self.group)
        self.committer, self._clock = started.committer, started.clock
        self._incarnation = started.incarnation
        if started.incarnation:
            log.info("%s was recreated since this job first read it: its fences carry the "
                     "tag %s, apart from the old topic's", self.topic, started.incarnation)
        latest, start = started.latest, started.start
        limits = self.control.limits  # a backfill's end (--until-offsets / --until-time)
        self.planner.bound(limits.until_offsets, limits.until_time_ms)
        # its own connection: from here on only the planning thread uses it
        self._moves_store = self._closes(HBaseLeaseStore(cfg.hbase, self.topic, self.group))
        self._guard = KeyMoveGuard(self._moves_store, self.topic,
                                   cfg.kafka.partitions_settle_s)
        self._guard.start(int(time.time() * 1000), first_run=latest is None,
                          partitions_added=latest is not None
                          and bool(set(start.positions) - set(latest.offsets)))
        where = (f"offsets row {latest.batch_ms}" if latest else
                 f"no offsets row, auto_offset_reset={cfg.kafka.auto_offset_reset}")
        log.info("starting %s group %s from %s: %s", self.topic, self.group, where,
                 ", ".join(f"p{p}@{o} ({start.reasons[p]})" for p, o in start.positions.items()))
        return start.positions

    def _closes(self, client: Any) -> Any:
        self._closing.append(client)
        return client

    # ------------------------------------------------------------------ per batch: plan

    def plan_rdd(self, t: datetime, _tick: Any) -> Any:
        """``transform`` callback: build this batch's RDD, one Spark partition per task, each
        holding a run of ranges (``grouping``)."""
        from pyspark import SparkContext

        sc = SparkContext.getOrCreate()
        assert self.planner is not None
        batch_ms = batch_millis(t)
        if not self.control.planning_allowed():
            return sc.emptyRDD()
        # the stage first: the ranges planned next hold what it copied
        if self._rekey is not None and not self._rekey.before_batch(sc, batch_ms, self.control):
            return sc.emptyRDD()
        try:
            crash_point("driver_planning")
            plan = self.planner.plan(batch_ms, self.control.rate)
        except KafkaReadError as exc:
            log.warning("batch %d: Kafka metadata unavailable (%s); planning nothing this "
                        "batch", batch_ms, exc)
            self.control.not_idle()
            return sc.emptyRDD()
        except LeakproofError as exc:
            self.control.fail(exc)
            return sc.emptyRDD()
        what = "that partitions were added"
        try:  # both records before any task: without them a restart or a late write would
            assert self._guard is not None  # forget the rule, or hide a newer batch's cells
            plan = self._guard.plan(plan, int(time.time() * 1000),
                                    self.control.take_keys_moved())
            if plan.work:
                what = "its cell timestamps"
                plan = replace(plan, cell_ts=self._clock.stamp(batch_ms, plan.cell_room,
                                                               self._reserve_cell_ts))
        except Exception as exc:  # noqa: BLE001 - the batch must not run: named, it stops
            self.control.hand_over(plan)
            self.control.fail(exc if isinstance(exc, LeakproofError) else BatchFailed(
                f"batch {batch_ms}: could not record {what}: {describe(exc)}"))
            return sc.emptyRDD()
        self.control.hand_over(plan)
        if self._inputs is not None:
            self._inputs.report(plan)
        if not plan.work:
            return sc.emptyRDD()
        return self._tasks.rdd(sc, plan)

    def _reserve_cell_ts(self, until: int) -> None:
        """Record in the lease row how far this driver's cell timestamps may go."""
        assert self._moves_store is not None and self.committer is not None
        epoch = self.committer.lease.epoch
        if not self._moves_store.reserve_cell_ts(epoch, until):
            raise CommitRefused(f"the driver lease of {self.topic}:{self.group} is no longer "
                                f"epoch {epoch}: another driver or a rewind took it")

    # ------------------------------------------------------------------ per batch: output

    def output(self, t: datetime, rdd: Any) -> None:
        """``foreachRDD`` callback: run the tasks, then commit (steps in committing.py)."""
        plan = self.control.take(batch_millis(t))
        if plan is None:
            return
        try:
            self._output(plan, rdd)
        finally:
            self.control.output_done()

    def _output(self, plan: BatchPlan, rdd: Any) -> None:
        assert self.committer is not None
        if self.control.failure is not None:
            log.error("batch %d not run: an earlier batch failed", plan.batch_ms)
            return
        started = time.monotonic()
        started_wall_ms = time.time() * 1000
        try:
            self.committer.check_chain(plan)  # no task may write past an uncommitted batch
            reports = self._run_tasks(plan, rdd)
            crash_point("driver_after_tasks")
            committed = self.committer.commit(plan, reports)
        except Exception as exc:  # noqa: BLE001 - any failure must stop the job, named
            self.control.fail(exc if isinstance(exc, LeakproofError) else
                              BatchFailed(f"batch {plan.batch_ms} failed: {describe(exc)}"))
            return
        took = time.monotonic() - started
        self._outputs += 1
        if self._estimator is not None and committed.totals.records:
            # scheduling delay: how long after its batch time this batch's output began
            rate = self._estimator.compute(plan.batch_ms, committed.totals.records, took * 1000,
                                           max(0.0, started_wall_ms - plan.batch_ms))
            if rate is not None:
                self.control.set_rate(rate)
        self.progress.batch(BatchOutcome(plan, committed, took, self.control.rate,
                                         max(0.0, started_wall_ms - plan.batch_ms) / 1000))

    def _run_tasks(self, plan: BatchPlan, rdd: Any) -> list[TaskReport]:
        assert self.committer is not None
        self._dispatched.set()
        return run_tasks(self.cfg, plan, rdd, self.committer.lease.epoch, self._incarnation,
                         self.control.keys_moved)

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        """Run until stopped: 0 after a stop (asked for, or by the run limits), 1 after a
        failed batch that nobody asked for."""
        from pyspark import SparkContext
        from pyspark.streaming import StreamingContext

        hook = None
        rc: int | None = None
        try:
            sc = SparkContext.getOrCreate()
            # from here on the executors' Python workers start while the driver prepares
            warm_up_workers(sc, self.cfg, lambda: not self._dispatched.is_set())
            self.prepare()
            assert self.committer is not None
            if self.cfg.job.metrics_port:
                self._start_metrics(sc)
            # a short timeout: the main thread must not hang in a stalled HBase
            quick = replace(self.cfg.hbase, timeout_ms=min(self.cfg.hbase.timeout_ms, 5000))
            stops = StopRequests(self.control, self._closes(HBaseRunRecord(
                quick, self.topic, self.group)), self.committer.lease.epoch,
                heartbeat_period_s(self.cfg.job.batch_interval_s),
                f"{socket.gethostname()}:{os.getpid()}")
            # PySpark's hints say int, but it multiplies by 1000 and takes fractions of a second.
            ssc = StreamingContext(sc, self.cfg.job.batch_interval_s)  # type: ignore[arg-type]
            ticks = ssc.queueStream([], oneAtATime=True, default=sc.parallelize([0], 1))
            self._inputs = InputReport(ssc, ticks)
            # PySpark counts a callback's arguments: pass plain two-argument functions.
            ticks.transform(lambda t, rdd: self.plan_rdd(t, rdd)).foreachRDD(
                lambda t, rdd: self.output(t, rdd))
            self.control.install_signal_handlers()
            hook = JvmShutdownHook.install(sc, self.control, self.cfg.job.stop_timeout_s)
            ssc.start()
            log.info("streaming %s every %.3gs on %s; records read by the %s path here",
                     self.topic, self.cfg.job.batch_interval_s, sc.master, native.describe())
            stops.poll()
            self._wait(ssc, stops)
            rc, detail = self._outcome()
            stops.ended(detail)
            return rc
        finally:
            self.control.finish(rc)
            if hook is not None:
                hook.done(rc)
            for client in reversed(self._closing):
                try:
                    client.close()
                except Exception:
                    log.debug("closing %r failed", client, exc_info=True)

    def _wait(self, ssc: Any, stops: StopRequests) -> None:
        """The main thread: heartbeats and stop requests, a failure, idleness, a stop.

        Once a stop is asked, the batch in flight may finish and commit for up to
        ``job.stop_timeout_s``; then the StreamingContext stops without waiting for it.
        """
        control = self.control
        deadline: float | None = None
        while not ssc.awaitTerminationOrTimeout(0.5):
            stops.poll()
            if control.failure is not None:
                break
            if control.idle():
                control.request_stop(f"no new records for {control.limits.until_idle_s}s "
                                     f"(--until-idle)")
            if control.stop_reason is None:
                continue
            if deadline is None:
                deadline = time.monotonic() + self.cfg.job.stop_timeout_s
            if control.quiescent():
                break
            if time.monotonic() > deadline:
                self._abandoned = True
                log.warning("stop: the batch in flight did not finish within %.0fs "
                            "(job.stop_timeout_s); abandoning it uncommitted",
                            self.cfg.job.stop_timeout_s)
                break
        ssc.stop(stopSparkContext=False, stopGraceFully=False)

    def _outcome(self) -> tuple[int, str]:
        """The exit code and the run record's account of the end (JSON)."""
        assert self.committer is not None
        return run_outcome(self.control, self.committer.committed,
                           self.committer.last_batch_ms, self._outputs, self._abandoned,
                           self.planner.until if self.planner else None)

    def _start_metrics(self, sc: Any) -> None:
        from leakproof.driver import metrics

        for client in metrics.start(self.topic, self.group, self.cfg.job, self.progress,
                                    sc.version, sc.applicationId):
            self._closes(client)
