"""The Spark glue: a StreamingContext whose batches read Kafka ranges and commit offsets.

A queue stream with a default RDD is the batch clock. For each batch time Spark calls
``plan_rdd`` (in ``transform``, when the batch is *generated*, on its generator thread) and
later ``output`` (in ``foreachRDD``, when its job *runs*, on the job thread). Batch N+1 is
generated on schedule even while N runs: planning advances its positions at plan time, the
commit chain only when a batch's output committed (see committing.py for the steps).

Anything failing stops the job with exit code 1 before a later batch commits; a restart
resumes from the newest committed offsets and the session fences make the replay exact.
This is the only module of the driver that imports pyspark.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from leakproof.backpressure import PIDRateEstimator
from leakproof.commit_stores import open_store
from leakproof.config import Config
from leakproof.crashpoints import crash_point
from leakproof.driver.batch import BatchOutcome, BatchPlan, batch_millis
from leakproof.driver.committing import Committer
from leakproof.driver.control import RunControl, RunLimits
from leakproof.driver.planning import Planner
from leakproof.driver.progress import Progress, log_line
from leakproof.errors import BatchFailed, KafkaReadError, LeakproofError
from leakproof.hbase.connection import Connections, ensure_tables
from leakproof.hbase.state_store import HBaseLeaseStore
from leakproof.kafka.admin import KafkaMetadata
from leakproof.offsets import OffsetRange
from leakproof.reports import TaskReport

log = logging.getLogger(__name__)

__all__ = ["Job", "RunLimits", "describe", "spark_context"]


class Job:
    """One run of the streaming job on the current SparkContext's cluster."""

    def __init__(self, cfg: Config, limits: RunLimits | None = None) -> None:
        limits = limits or RunLimits()
        self.cfg = cfg
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
        self._outputs = 0  # batch outputs that succeeded (the output thread's count)

    # ------------------------------------------------------------------ start

    def prepare(self) -> dict[int, int]:
        """Tables, lease, start positions: everything that can refuse before Spark starts.

        Returns each assigned partition's start offset.
        """
        cfg = self.cfg
        conns = Connections(cfg.hbase)
        created = conns.call("create tables", lambda c: ensure_tables(c, cfg.hbase))
        conns.reset()
        if created:
            log.info("created HBase tables %s", ", ".join(created))
        leases = self._closes(HBaseLeaseStore(cfg.hbase, self.topic, self.group))
        lease = leases.take(f"start:{uuid.uuid4().hex[:8]}")
        log.info("driver lease epoch %d for %s:%s", lease.epoch, self.topic, self.group)
        store = self._closes(open_store(cfg))
        latest = store.latest()
        self.planner = Planner(cfg.kafka, cfg.job.batch_interval_s,
                               self._closes(KafkaMetadata(cfg.kafka)))
        start = self.planner.start(latest)
        mirror = None
        if cfg.kafka.mirror_group_offsets and cfg.offsets.store != "kafka":
            # its own client: the planner's belongs to the generator thread
            mirror = self._closes(KafkaMetadata(cfg.kafka))
        self.committer = Committer(self.topic, self.group, store, leases, mirror)
        self.committer.begin(lease, latest, start, self.planner.topic_id)
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
        """``transform`` callback: build this batch's RDD, one Spark partition per range."""
        from pyspark import SparkContext

        sc = SparkContext.getOrCreate()
        assert self.planner is not None
        batch_ms = batch_millis(t)
        if not self.control.planning_allowed():
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
        self.control.hand_over(plan)
        work = plan.work
        if not work:
            return sc.emptyRDD()
        return sc.parallelize(work, len(work))

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
        self.progress.batch(BatchOutcome(plan, committed, took, self.control.rate))

    def _run_tasks(self, plan: BatchPlan, rdd: Any) -> list[TaskReport]:
        if not plan.work:
            return []
        assert self.committer is not None
        cfg, batch_ms, epoch = self.cfg, plan.batch_ms, self.committer.lease.epoch

        def task(ranges: Iterator[OffsetRange]) -> Iterator[TaskReport]:
            from leakproof.partition_task import run_range

            for rng in ranges:
                yield run_range(cfg, batch_ms, rng, epoch)

        try:  # the Spark UI's job list then says which ranges each batch read
            rdd.context.setJobDescription(f"leakproof batch {batch_ms}: {plan.describe()}")
        except Exception:
            log.debug("could not set the job description", exc_info=True)
        reports: list[TaskReport] = rdd.mapPartitions(task).collect()
        return reports

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        """Run until stopped; 0 after a graceful stop, 1 after a failed batch."""
        from pyspark import SparkContext
        from pyspark.streaming import StreamingContext

        try:
            self.prepare()
            if self.cfg.job.metrics_port:
                self._start_metrics()
            sc = SparkContext.getOrCreate()
            # PySpark's hints say int, but it multiplies by 1000 and takes fractions of a second.
            ssc = StreamingContext(sc, self.cfg.job.batch_interval_s)  # type: ignore[arg-type]
            ticks = ssc.queueStream([], oneAtATime=True, default=sc.parallelize([0], 1))
            # PySpark counts a callback's arguments: pass plain two-argument functions.
            ticks.transform(lambda t, rdd: self.plan_rdd(t, rdd)).foreachRDD(
                lambda t, rdd: self.output(t, rdd))
            self.control.install_signal_handlers()
            ssc.start()
            self.control.not_idle()  # the idle clock starts with the stream
            log.info("streaming %s every %.3gs on %s", self.topic,
                     self.cfg.job.batch_interval_s, sc.master)
            self._wait(ssc)
        finally:
            for client in reversed(self._closing):
                try:
                    client.close()
                except Exception:
                    log.debug("closing %r failed", client, exc_info=True)
        failure = self.control.failure
        if failure is not None:
            log.error("job failed; offsets were not committed past the last good batch. "
                      "Restart to resume from HBase. Cause: %s", failure)
            return 1
        assert self.committer is not None
        log.info("stopped after %d batches; committed offsets %s", self._outputs,
                 dict(sorted(self.committer.committed.items())))
        return 0

    def _wait(self, ssc: Any) -> None:
        """The main thread: watch for a failure, idleness or a stop request."""
        control = self.control
        while not ssc.awaitTerminationOrTimeout(0.5):
            if control.failure is not None:
                ssc.stop(stopSparkContext=False, stopGraceFully=False)
                return
            if control.idle():
                control.request_stop(f"no new records for {control.limits.until_idle_s}s "
                                     f"(--until-idle)")
            if control.ready_to_stop():
                ssc.stop(stopSparkContext=False, stopGraceFully=True)
                return

    def _start_metrics(self) -> None:
        from leakproof.metrics import JobMetrics

        cfg = self.cfg.job
        metrics = self._closes(JobMetrics(self.topic, self.group, cfg.metrics_host,
                                          cfg.metrics_port))
        self.progress.add(lambda outcome, record: metrics.batch(
            record, outcome.plan.lag_by_partition()))
        log.info("metrics at http://%s:%d/metrics", cfg.metrics_host, cfg.metrics_port)


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
