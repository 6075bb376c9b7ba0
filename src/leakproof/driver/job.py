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

import contextlib
import json
import logging
import os
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from leakproof.backpressure import PIDRateEstimator
from leakproof.cell_clock import CellClock
from leakproof.commit_stores import open_store
from leakproof.config import Config
from leakproof.crashpoints import crash_point
from leakproof.driver import spark_compat
from leakproof.driver.batch import BatchOutcome, BatchPlan, batch_millis
from leakproof.driver.committing import Committer
from leakproof.driver.control import RunControl, RunLimits
from leakproof.driver.grouping import group
from leakproof.driver.placement import place
from leakproof.driver.planning import Planner
from leakproof.driver.progress import Progress, log_line
from leakproof.driver.stopping import StopRequests
from leakproof.errors import (
    BatchFailed,
    CommitRefused,
    ConfigError,
    KafkaReadError,
    LeakproofError,
    StoreError,
)
from leakproof.hbase.connection import (
    ConnectionSlot,
    ensure_tables,
    family_advice,
    judge_families,
    ttl_refusal,
)
from leakproof.hbase.state_store import HBaseLeaseStore, HBaseRunRecord
from leakproof.kafka.admin import KafkaMetadata
from leakproof.moved_keys import NONE as NO_MOVES
from leakproof.moved_keys import KeyMoves
from leakproof.offsets import OffsetRange
from leakproof.reports import TaskReport
from leakproof.runs import heartbeat_period_s

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
        # partition -> preferred executor; written and read by the planning (transform) thread
        self._placement: dict[int, str] = {}
        self._placement_warned = False
        self._outputs = 0  # batch outputs that succeeded (the output thread's count)
        self._abandoned = False  # a stop's deadline passed with a batch still running
        self._dispatched = threading.Event()  # a batch's tasks were submitted to Spark
        # partitions added: batches run as one task while keys may be in two (moved_keys);
        # read and written by the planning thread once the stream runs
        self._moves: KeyMoves = NO_MOVES
        self._moves_store: HBaseLeaseStore | None = None
        self._mixing = False
        # when a batch found keys moved (the output thread's, for the planning thread)
        self._keys_moved_ms: int | None = None
        # the cell timestamps of this driver's batches: the planning thread's (cell_clock)
        self._clock = CellClock(0, -1)

    # ------------------------------------------------------------------ start

    def prepare(self) -> dict[int, int]:
        """Tables, lease, start positions: everything that can refuse before Spark starts.

        Returns each assigned partition's start offset.
        """
        cfg = self.cfg
        conns = ConnectionSlot(cfg.hbase)
        created = conns.call("create tables", lambda c: ensure_tables(c, cfg.hbase))
        advice, refusals = conns.call("read table settings", lambda c: judge_families(
            c, cfg.hbase, family_advice, ttl_refusal))
        conns.reset()
        if refusals:
            raise StoreError("; ".join(refusals))
        if created:
            log.info("created HBase tables %s", ", ".join(created))
        for command in advice:
            log.warning("an HBase table without a Bloom filter or block cache makes every "
                        "session row read go to disk; in the HBase shell: %s", command)
        leases = self._closes(HBaseLeaseStore(cfg.hbase, self.topic, self.group))
        lease = leases.take(f"start:{uuid.uuid4().hex[:8]}")
        log.info("driver lease epoch %d for %s:%s", lease.epoch, self.topic, self.group)
        # read after the take: a reservation of the old holder that lands later is refused
        self._clock = CellClock.start(int(time.time() * 1000), leases.cell_ts_bound())
        store = self._closes(open_store(cfg))
        latest = store.latest()
        self.planner = Planner(cfg.kafka, cfg.job.batch_interval_s,
                               self._closes(KafkaMetadata(cfg.kafka)))
        start = self.planner.start(latest, leases.topic_id())
        if self.planner.topic_id:
            leases.record_topic_id(self.planner.topic_id)
        mirror = None
        if cfg.kafka.mirror_group_offsets and cfg.offsets.store != "kafka":
            # its own client: the planner's belongs to the generator thread
            mirror = self._closes(KafkaMetadata(cfg.kafka))
        self.committer = Committer(self.topic, self.group, store, leases, mirror)
        self.committer.begin(lease, latest, start, self.planner.topic_id)
        # its own connection: from here on only the planning thread uses it
        self._moves_store = self._closes(HBaseLeaseStore(cfg.hbase, self.topic, self.group))
        self._moves = self._moves_store.key_moves()
        now = int(time.time() * 1000)
        if latest is None:  # a growth before this run, under its backlog, is unseen
            self._note_moves(self._moves.first_run(now))
        elif set(start.positions) - set(latest.offsets):
            self._note_moves(self._moves.added(now))
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
            plan = self._with_moves(plan)  # forget the rule, or hide a newer batch's cells
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
        work = plan.work
        if not work:
            return sc.emptyRDD()
        executors = executor_locations(sc)
        if executors is None and not self._placement_warned:
            self._placement_warned = True
            log.warning("cannot list the executors; ranges run without a preferred executor")
        cores = 1 if plan.one_task else int(sc.defaultParallelism)
        if not executors or plan.one_task:  # local mode (nothing to prefer), none listed yet
            runs = [ranges for ranges, _ in group(work, cores)]
            return sc.parallelize(runs, len(runs))
        # every assigned partition, with records or not, so a quiet one keeps its executor
        # and the first placement does not depend on which partitions had records
        placed = place((r.partition for r in plan.ranges), executors, self._placement)
        if placed != self._placement:
            log.info("ranges prefer executors: %s", ", ".join(
                f"p{p}@{where.rsplit('_', 1)[-1]}" for p, where in sorted(placed.items())))
        self._placement = placed
        return rdd_with_locations(sc, [(ranges, where or "")
                                       for ranges, where in group(work, cores, placed)])

    def _with_moves(self, plan: BatchPlan) -> BatchPlan:
        """The plan with what keys moving between partitions ask of its tasks
        (``moved_keys``); the rule's record is written before any task of the batch runs."""
        now = int(time.time() * 1000)
        moves = self._moves.added(now) if plan.appeared else self._moves
        if (moved := self._keys_moved_ms) is not None:
            moves = moves.added(moved)
            self._keys_moved_ms = None
        moves = moves.settled(now, round(self.cfg.kafka.partitions_settle_s * 1000),
                              {p: b.log_end for p, b in plan.bounds.items()})
        self._note_moves(moves)
        starts = {r.partition: r.from_offset for r in plan.work}
        mixing = moves.mixing(starts)
        checks = len(plan.bounds) if not mixing and moves.checking(starts) else None
        if mixing != self._mixing:
            self._mixing = mixing
            if mixing:
                log.info("partitions were added to %s: a session may have records in two "
                         "partitions, so batches run as one task until records written "
                         "%.0fs after that are reached", self.topic,
                         self.cfg.kafka.partitions_settle_s)
            else:
                log.info("%s: keys no longer move between partitions; batches run as "
                         "several tasks again", self.topic)
        return replace(plan, one_task=mixing, check_keys_in=checks)

    def _reserve_cell_ts(self, until: int) -> None:
        """Record in the lease row how far this driver's cell timestamps may go."""
        assert self._moves_store is not None and self.committer is not None
        epoch = self.committer.lease.epoch
        if not self._moves_store.reserve_cell_ts(epoch, until):
            raise CommitRefused(f"the driver lease of {self.topic}:{self.group} is no longer "
                                f"epoch {epoch}: another driver or a rewind took it")

    def _note_moves(self, moves: KeyMoves) -> None:
        if moves != self._moves:
            assert self._moves_store is not None
            self._moves_store.record_key_moves(moves)
            self._moves = moves

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
        self.progress.batch(BatchOutcome(plan, committed, took, self.control.rate))

    def _run_tasks(self, plan: BatchPlan, rdd: Any) -> list[TaskReport]:
        if not plan.work:
            return []
        assert self.committer is not None
        cfg, batch_ms, epoch = self.cfg, plan.batch_ms, self.committer.lease.epoch

        def tasks(check: int | None, cell_ts: dict[int, int]
                  ) -> Callable[[Iterator[tuple[OffsetRange, ...]]], Iterator[TaskReport]]:
            def task(runs: Iterator[tuple[OffsetRange, ...]]) -> Iterator[TaskReport]:
                from leakproof.task.worker import run_ranges

                for ranges in runs:  # in partition order, each its own fence and report
                    yield from run_ranges(cfg, batch_ms, ranges, epoch, check,
                                          cell_ts=cell_ts)
            return task

        try:  # the Spark UI's job list then says which ranges each batch read
            rdd.context.setJobDescription(f"leakproof batch {batch_ms}: {plan.describe()}")
        except Exception:
            log.debug("could not set the job description", exc_info=True)
        self._dispatched.set()
        reports: list[TaskReport] = rdd.mapPartitions(
            tasks(plan.check_keys_in, plan.stamps())).collect()
        held = [r for r in reports if r.moved_keys]
        if not held:
            return reports
        # Ranges holding keys written under another partition count wrote nothing; now that
        # the others are written they run alone, and later batches run as one task.
        self._keys_moved_ms = int(time.time() * 1000)
        log.warning("batch %d: %d keys sit in partitions Kafka's default partitioner does "
                    "not give them (partitions added under the backlog, or another "
                    "partitioner): partitions %s run again in one task, and batches run "
                    "as one task for a while", batch_ms, sum(r.moved_keys for r in held),
                    ",".join(str(r.partition) for r in held))
        again = {r.partition for r in held}
        rerun = tuple(r for r in plan.work if r.partition in again)
        # above every timestamp of the first pass: a late write of it cannot hide these
        redone: list[TaskReport] = rdd.context.parallelize([rerun], 1).mapPartitions(
            tasks(None, plan.stamps(again=True))).collect()
        return [r for r in reports if not r.moved_keys] + redone

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
                self._start_metrics()
            # a short timeout: the main thread must not hang in a stalled HBase
            quick = replace(self.cfg.hbase, timeout_ms=min(self.cfg.hbase.timeout_ms, 5000))
            stops = StopRequests(self.control, self._closes(HBaseRunRecord(
                quick, self.topic, self.group)), self.committer.lease.epoch,
                heartbeat_period_s(self.cfg.job.batch_interval_s),
                f"{socket.gethostname()}:{os.getpid()}")
            # PySpark's hints say int, but it multiplies by 1000 and takes fractions of a second.
            ssc = StreamingContext(sc, self.cfg.job.batch_interval_s)  # type: ignore[arg-type]
            ticks = ssc.queueStream([], oneAtATime=True, default=sc.parallelize([0], 1))
            # PySpark counts a callback's arguments: pass plain two-argument functions.
            ticks.transform(lambda t, rdd: self.plan_rdd(t, rdd)).foreachRDD(
                lambda t, rdd: self.output(t, rdd))
            self.control.install_signal_handlers()
            hook = _JvmShutdownHook.install(sc, self.control, self.cfg.job.stop_timeout_s)
            ssc.start()
            self.control.not_idle()  # the idle clock starts with the stream
            log.info("streaming %s every %.3gs on %s", self.topic,
                     self.cfg.job.batch_interval_s, sc.master)
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
        committed = dict(sorted(self.committer.committed.items()))
        last = self.committer.last_batch_ms
        failure = self.control.failure
        where = (f"the last committed batch is {last}" if last else
                 "this run committed no batch")
        if failure is not None and not self.control.asked_to_stop:
            log.error("job failed; offsets were not committed past the last good batch. "
                      "Restart to resume from HBase. Cause: %s", failure)
            rc, how = 1, f"failed: {failure}"
        elif failure is not None or self._abandoned:
            # Asked to stop, and the batch in flight could not finish: nothing after the last
            # commit was committed, so nothing is lost -- a restart replays that batch.
            log.warning("stopped as asked (%s); the batch in flight was abandoned without "
                        "commit%s. Nothing is lost: %s (offsets %s) and a restart resumes "
                        "there.", self.control.stop_reason,
                        f" ({failure})" if failure else "", where, committed)
            rc, how = 0, f"stopped ({self.control.stop_reason}); batch in flight abandoned"
        else:
            log.info("stopped after %d batches (%s); %s; committed offsets %s", self._outputs,
                     self.control.stop_reason, where, committed)
            rc, how = 0, f"stopped ({self.control.stop_reason})"
        return rc, json.dumps({"exit": rc, "how": how, "last_batch_ms": last,
                               "offsets": committed})

    def _start_metrics(self) -> None:
        from leakproof.driver.metrics import JobMetrics

        cfg = self.cfg.job
        metrics = self._closes(JobMetrics(self.topic, self.group, cfg.metrics_host,
                                          cfg.metrics_port))
        self.progress.add(lambda outcome, _record: metrics.batch(outcome))
        log.info("metrics at http://%s:%d/metrics", cfg.metrics_host, cfg.metrics_port)


class _JvmShutdownHook:
    """Lets the batch in flight finish before the driver JVM's shutdown stops Spark.

    Under spark-submit the driver JVM is this process's parent and shares its process group,
    so a supervisor's SIGTERM to the group (systemd, a container stop) reaches it too. Its
    shutdown hooks would stop the SparkContext, and with it the Python workers of the batch
    in flight. Spark's hooks run as one Hadoop shutdown hook of priority 40; this one runs
    before them (priority 100): it asks the run to stop and waits until it has, for at most
    ``job.stop_timeout_s``. Py4J calls ``run`` on a JVM thread; the Java Thread that wraps it
    is what Hadoop holds, so the same object can be removed when the run ends normally.
    """

    PRIORITY = 100
    RELEASE_S = 15.0  # done(): a SparkContext stop of at most 5 s, then the halt

    def __init__(self, sc: Any, control: RunControl, timeout_s: float) -> None:
        self._sc = sc
        self._submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the JVM is our parent
        self._control = control
        self._timeout_s = timeout_s
        self._manager: Any = None
        self._thread: Any = None
        self.triggered = False  # the JVM's shutdown began and called run()
        # Set once done() has decided not to halt: only then may Spark's hooks go on. Were
        # run() to return when the run finishes, the JVM could end (with 143) while done()
        # is still stopping the SparkContext before its halt(0).
        self._released = threading.Event()

    @classmethod
    def install(cls, sc: Any, control: RunControl, timeout_s: float) -> _JvmShutdownHook | None:
        hook = cls(sc, control, timeout_s)
        try:
            jvm = sc._jvm
            hook._manager = jvm.org.apache.hadoop.util.ShutdownHookManager.get()
            hook._thread = jvm.java.lang.Thread(hook)
            hook._manager.addShutdownHook(hook._thread, cls.PRIORITY,
                                          round(timeout_s + cls.RELEASE_S) + 5,
                                          jvm.java.util.concurrent.TimeUnit.SECONDS)
        except Exception:
            log.warning("could not install the JVM shutdown hook; a SIGTERM to the driver "
                        "JVM will not wait for the batch in flight", exc_info=True)
            return None
        return hook

    def done(self, exit_code: int | None) -> None:
        """The run is over (main thread). If the JVM is shutting down and the run ended
        with 0, end the JVM with 0 too: after SIGTERM it would exit 143 even after a clean
        stop, which supervisors count as a failure. So stop the SparkContext (Spark's own
        hook would) and halt; what else is left, Hadoop's file system caches, holds nothing
        of ours. Otherwise take the hook back, so a normal exit does not call into a Python
        process that has gone."""
        # A group SIGTERM reaches this process and the JVM at once, and the driver may finish
        # before the JVM has even begun its shutdown; it would then exit 143 afterwards. So
        # under spark-submit a driver stopped by a signal ends the JVM itself, whatever the
        # order: if the signal reached only this process, exit 0 is still the right answer.
        shutting_down = self.triggered or (self._submitted and self._control.signalled)
        if not shutting_down:
            try:
                shutting_down = bool(self._manager.isShutdownInProgress())
            except Exception:
                log.debug("could not ask the JVM whether it is shutting down", exc_info=True)
        if not shutting_down:
            self._released.set()
            with contextlib.suppress(Exception):  # the JVM may already be going
                self._manager.removeShutdownHook(self._thread)
            return
        if exit_code != 0:
            self._released.set()
            return  # Spark's own hooks go on; the exit code says what happened
        # A tidy SparkContext stop when it comes quickly (during the JVM's shutdown it can
        # block on the cluster manager), then the halt: every commit is already made.
        log.info("the driver JVM is shutting down: stopping the SparkContext and ending the "
                 "JVM with exit code 0")
        stopper = threading.Thread(target=self._stop_context, daemon=True)
        stopper.start()
        stopper.join(5.0)
        with contextlib.suppress(Exception):  # halt never answers: the JVM is gone
            self._sc._jvm.java.lang.Runtime.getRuntime().halt(0)
        self._released.set()  # only if the halt could not be made

    def _stop_context(self) -> None:
        try:
            self._sc._jsc.stop()
        except Exception:
            log.debug("stopping the SparkContext before the halt failed", exc_info=True)

    def run(self) -> None:
        """Called by the JVM's shutdown: stop the run, and keep Spark's own hooks waiting
        until it has stopped (``done`` then ends the JVM)."""
        self.triggered = True
        self._control.request_stop("the driver JVM is shutting down (SIGTERM)", operator=True)
        if self._control.wait_finished(self._timeout_s):
            self._released.wait(self.RELEASE_S)  # done() halts the JVM or releases it

    # Py4J forwards these to Python: Hadoop keeps hooks in a set.
    def hashCode(self) -> int:  # noqa: N802 - Java's name
        return id(self) & 0x7FFFFFFF

    def equals(self, other: object) -> bool:
        return other is self

    def toString(self) -> str:  # noqa: N802 - Java's name
        return "leakproof: finish the batch in flight"

    class Java:
        implements = ["java.lang.Runnable"]


_PY_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Refused|Failed)): (.+)$")


def executor_locations(sc: Any) -> list[str] | None:
    """The live executors as Spark location strings (``executor_<host>_<id>``): the hosts
    from the status tracker, each host's executor ids from the task scheduler (Py4J cannot
    reflect on the block manager's classes without protobuf on the driver's class path).
    None: this Spark would not say (the caller warns once and runs without preferences)."""
    try:
        scheduler = sc._jsc.sc().taskScheduler()
        spark = spark_compat.line(sc)
        found = []
        for host in {i.host() for i in sc._jsc.sc().statusTracker().getExecutorInfos()}:
            ids = scheduler.getExecutorsAliveOnHost(host)
            if ids.isDefined():
                found += [f"executor_{host}_{e}" for e in spark.to_java_list(sc._jvm, ids.get())
                          if e != "driver"]
        return sorted(found)
    except Exception:  # placement is a preference: run without it
        log.debug("cannot list the executors", exc_info=True)
        return None


def warm_up_workers(sc: Any, cfg: Config, wanted: Callable[[], bool],
                    wait_s: float = 30.0) -> threading.Thread:
    """Start every executor's Python worker now, in a thread of its own, so that the first
    batch does not pay for it: a worker's start (the interpreter, pyspark, then leakproof's
    Kafka, Thrift and Avro imports, the schema, an HBase connection) took ~3.5 s on a loaded
    two-core machine, and after a restart the first batch is the one carrying the backlog.

    One task per executor, preferring it (on a cluster, once executors have registered:
    waited for up to ``wait_s`` while ``wanted()`` holds, i.e. until a batch is dispatched,
    whose tasks would start the workers anyway); in local mode one per core. A failure here
    only costs the head start."""

    def run() -> None:
        from leakproof.task.worker import warm_up

        started = time.monotonic()
        try:
            if str(sc.master).startswith("local"):
                slots = int(sc.defaultParallelism)
                rdd = sc.parallelize(range(slots), slots)
            else:
                executors = executor_locations(sc)
                while not executors and wanted() and time.monotonic() - started < wait_s:
                    time.sleep(0.2)
                    executors = executor_locations(sc)
                if not executors or not wanted():
                    return
                rdd = rdd_with_locations(sc, [(e, e) for e in executors])
            with contextlib.suppress(Exception):
                sc.setJobDescription("leakproof: starting the Python workers")
            took = rdd.mapPartitions(lambda _: [warm_up(cfg)]).collect()
            log.info("started %d Python workers in %.1fs", len(took), time.monotonic() - started)
        except Exception:  # the first batch starts its workers itself
            log.debug("could not start the Python workers ahead of the first batch",
                      exc_info=True)

    thread = threading.Thread(target=run, name="leakproof-warm-up", daemon=True)
    thread.start()
    return thread


def rdd_with_locations(sc: Any, items: list[tuple[Any, str]]) -> Any:
    """A Python RDD with one partition per item, each preferring its location.

    ``parallelize`` cannot take preferred locations; ``SparkContext.makeRDD`` can. Each
    element is what ``parallelize`` would send in a batch of one: a pickled one-item list.
    """
    from pyspark.rdd import RDD
    from pyspark.serializers import BatchedSerializer, CPickleSerializer

    jvm, pickler = sc._jvm, CPickleSerializer()
    spark = spark_compat.line(sc)
    pairs = jvm.java.util.ArrayList()
    for item, location in items:
        where = spark.to_seq(jvm, jvm.java.util.Collections.singletonList(location))
        pairs.add(jvm.scala.Tuple2(pickler.dumps([item]), where))  # type: ignore[no-untyped-call]
    tag = jvm.scala.reflect.ClassTag.AnyRef()
    jrdd = sc._jsc.sc().makeRDD(spark.to_seq(jvm, pairs), tag)
    return RDD(jvm.org.apache.spark.api.java.JavaRDD.fromRDD(jrdd, tag), sc,
               BatchedSerializer(pickler, 1))  # type: ignore[no-untyped-call]


def describe(exc: BaseException) -> str:
    """The useful line of an error: for a failed Spark job, the Python error of the task."""
    lines = str(exc).splitlines()
    found = [m for m in map(_PY_ERROR.match, lines) if m]
    ours = [m for m in found if m.group(1).startswith("leakproof.")]
    pick = ours[0] if ours else (found[-1] if found else None)
    if pick is not None:
        return f"{pick.group(1).rsplit('.', 1)[-1]}: {pick.group(3)[:500]}"
    return f"{type(exc).__name__}: {lines[0][:500] if lines else ''}"


# An executor's JVM only hands ranges to its Python workers, which read, fold and write, and
# takes their small reports back: C2's compiles cost such a JVM more CPU than they win back,
# and they compete with the driver's and the other executors' start after a restart. In
# `make bench-recovery` runs (standalone, 2 cores) alternating with and without C1 only, a
# driver SIGKILL cost 29.2-30.1 s against 34.0-35.9 s to the next commit, then 19.2-23.7 s
# against 22.4-27.6 s. A default, not extra options: Spark puts
# spark.executor.extraJavaOptions after it, so a user's flags still win.
EXECUTOR_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


# What leakproof sets unless job.spark_conf or spark-submit (with its spark-defaults.conf)
# already did.
SPARK_DEFAULTS: Mapping[str, str] = MappingProxyType({
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.streaming.concurrentJobs": "1",
    "spark.executor.defaultJavaOptions": EXECUTOR_JAVA_OPTIONS,
})


def apply_settings(conf: Any, cfg: Config) -> None:
    """config.yml's job.spark_conf, then leakproof's defaults, each only for a key nothing set
    before: spark-submit's --conf and spark-defaults.conf, already in ``conf``, win."""
    for key, value in [*cfg.job.spark_conf.items(), *SPARK_DEFAULTS.items()]:
        conf.setIfMissing(key, value)


def spark_connect_requested(environ: Mapping[str, str], spark_conf: Mapping[str, str]
                            ) -> str | None:
    """What asks for a Spark Connect session (None: nothing does). A Connect client has no
    SparkContext, so no StreamingContext: DStreams cannot run there."""
    if environ.get("SPARK_CONNECT_MODE_ENABLED", "").lower() in ("1", "true"):
        return "SPARK_CONNECT_MODE_ENABLED is set"
    if environ.get("SPARK_REMOTE"):
        return "SPARK_REMOTE is set (spark-submit --remote)"
    if str(spark_conf.get("spark.api.mode", "")).lower() == "connect":
        return "spark.api.mode is connect"
    if spark_conf.get("spark.remote"):
        return "spark.remote is set"
    return None


def spark_context(cfg: Config) -> Any:
    """The SparkContext for ``leakproof run``: spark-submit's settings win over config.yml."""
    from pyspark import SparkConf, SparkContext

    connect = spark_connect_requested(os.environ, cfg.job.spark_conf)
    if connect is not None:
        raise ConfigError(f"Spark Connect was asked for ({connect}), and a Spark Connect "
                          f"session cannot run DStreams (it has no SparkContext); run "
                          f"leakproof with a classic session: spark-submit without --remote, "
                          f"spark.api.mode=classic")

    # Executors must run the Python that has leakproof and its dependencies installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkConf()
    # Under spark-submit the JVM already runs (it set PYSPARK_GATEWAY_PORT) and holds the
    # master and app name it was given; a SparkConf made before the context cannot see them.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted:
        conf.setMaster(cfg.job.master).setAppName(cfg.job.app_name)
    apply_settings(conf, cfg)
    if submitted:
        sc = SparkContext.getOrCreate(conf)
    else:
        from pyspark.java_gateway import launch_gateway

        # The JVM gets a session of its own: a signal to this run's process group (systemd,
        # a container stop, Ctrl-C) then reaches only this process, which lets the batch in
        # flight finish. The JVM still dies with this process: it exits when its stdin, a
        # pipe from here, closes.
        gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]
        sc = SparkContext(conf=conf, gateway=gateway)
    sc.setLogLevel(os.environ.get("LEAKPROOF_SPARK_LOG_LEVEL", "WARN"))
    spark = spark_compat.line(sc)
    if not spark.supported:
        sc.stop()
        raise ConfigError(f"Spark {sc.version} is not supported: leakproof runs on Spark 3.5 "
                          f"and 4.x (spark-submit from such a Spark, or its pyspark wheel)")
    log.info("Spark %s (Scala %d.%d)", sc.version, *spark.scala)
    return sc
