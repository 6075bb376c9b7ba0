"""Executor-side faults on the project's Spark standalone cluster, job under spark-submit.

The driver runs in client mode; executors are separate JVMs on two workers, each with its own
Python workers. Spark retries a failed task elsewhere (spark.task.maxFailures), and every step
of a task is idempotent, so these faults cost a retry, not a restart: the job finishes by
itself, exact. Each test prints the recovery time: fault -> next committed batch.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    Background,
    Env,
    audit_total,
    finish_exact,
    offsets_rows,
    published_once_per_change,
    records,
    run_cli,
    stack,
    submit,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.cluster,
              pytest.mark.slow, pytest.mark.xdist_group("cluster")]


def crash_once(env: Env, point: str, label: str, evidence: str) -> float:
    """Run under spark-submit with a one-time crash in an executor; seconds to recover."""
    # 2 000 records a batch: the crash comes in the first, five more follow it
    spec = GeneratorSpec(seed=1700 + len(label), events=12_000, sessions=1_200)
    env.produce(spec)
    marker = env.tmp / f"{label}.crashed"
    with submit(env, env.capped(500), label, "--until-idle", "6",
                executor_env={"LEAKPROOF_CRASH_AT": point,
                              "LEAKPROOF_CRASH_ONCE": str(marker)}) as job:
        job.wait_until("the crash", marker.exists)
        crashed_ms = marker.stat().st_mtime
        rows = {k for k, _ in offsets_rows(env)}
        job.wait_until("a commit after the crash",
                       lambda: {k for k, _ in offsets_rows(env)} - rows)
        recovery = time.time() - crashed_ms
        text = finish_exact(env, spec, job)
    assert evidence in text  # Spark saw the crash and retried the task
    print(f"{label}: fault -> next commit {recovery:.1f}s")
    return recovery


@pytest.mark.deep
def test_python_worker_killed_mid_task_is_retried(env: Env) -> None:
    crash_once(env, "task_after_sessions@2", "python-worker-kill",
               "Python worker exited unexpectedly (crashed)")


@pytest.mark.deep
def test_executor_jvm_killed_mid_task_is_retried(env: Env) -> None:
    crash_once(env, "task_after_sessions@2:executor", "executor-kill", "ExecutorLostFailure")


def test_executor_jvm_killed_with_a_transaction_open_publishes_each_summary_once(
        env: Env) -> None:
    """The executor dies between the summaries' sends and their commit: the transaction is
    left open, the task is retried on the other executor (whose producer of the same
    transactional id fences the dead one's and aborts what it left), and a read_committed
    consumer sees every closed session once per change."""
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    spec = GeneratorSpec(seed=1790, events=12_000, sessions=1_200, span_s=4 * 3600)
    env.produce(spec)
    config = env.variant("closing", output={"closed_sessions_topic": topic},
                         kafka={"max_rate_per_partition": 500})
    marker = env.tmp / "publish.crashed"
    with submit(env, config, "publish-kill", "--until-idle", "6",
                executor_env={"LEAKPROOF_CRASH_AT": "task_before_publish_commit@2:executor",
                              "LEAKPROOF_CRASH_ONCE": str(marker)}) as job:
        job.wait_until("the crash", marker.exists)
        text = finish_exact(env, spec, job)
    assert "ExecutorLostFailure" in text
    assert len(published_once_per_change(env, topic)) > 500


def test_whole_worker_killed_mid_stream(env: Env) -> None:
    # 1 600 records a batch: the kill after two leaves seven
    spec = GeneratorSpec(seed=1750, events=14_400, sessions=1_440)
    env.produce(spec)
    try:
        with submit(env, env.capped(400), "worker-kill", "--until-idle", "6") as job:
            job.wait_until("two commits", lambda: len(offsets_rows(env)) >= 2)
            rows = {k for k, _ in offsets_rows(env)}
            killed = time.monotonic()
            stack("kill", "spark-worker1")  # the worker JVM; its executor loses its worker
            wait_for("a commit after the worker died",
                     lambda: {k for k, _ in offsets_rows(env)} - rows, timeout=240)
            recovery = time.monotonic() - killed
            text = finish_exact(env, spec, job)
    finally:
        stack("up", "--spark")  # bring the worker back for later tests
    print(f"worker-kill: fault -> next commit {recovery:.1f}s")
    assert "worker lost" in text


def stalling(env: Env, config: str, label: str) -> AbstractContextManager[Background]:
    """spark-submit whose first Python worker to reach its third range's lease check waits
    there, alive, until the test releases it (``release``), then writes; it leaves its pid in
    ``<label>.stalled``. The job runs until the test stops it (``stop_after_stall``), so the
    sleeper's writes land while it still runs."""
    return submit(env, config, label, "--until-idle", "900",
                  executor_env={"LEAKPROOF_CRASH_AT": "task_after_lease_check@3:stall="
                                                      f"{env.tmp / f'{label}.release'}",
                                "LEAKPROOF_CRASH_ONCE": str(env.tmp / f"{label}.stalled")})


def stalled_pid(env: Env, label: str) -> int:
    """Waits for the stall of ``stalling``; the sleeping Python worker's pid."""
    marker = env.tmp / f"{label}.stalled"
    wait_for("the stall", lambda: marker.exists() and marker.read_text(), timeout=240)
    return int(marker.read_text())


def release(env: Env, label: str, pid: int) -> None:
    """Let the stalled worker go on, and wait until it has made its writes (or died with its
    executor: a lost executor's worker may be killed before it wakes)."""
    (env.tmp / f"{label}.release").touch()
    after = env.tmp / f"{label}.release.after"
    wait_for("the stalled attempt's writes", lambda: not Path(f"/proc/{pid}").exists() or (
        after.exists() and "task_done" in after.read_text().split()), timeout=240)


def stop_after_stall(env: Env, spec: GeneratorSpec, job: Background) -> str:
    """Every record committed, then ``leakproof stop``; the run held to the oracle."""
    wait_for("every record committed", lambda: audit_total(env, b"records") >= records(spec),
             timeout=300)
    run_cli("stop", "--config", str(env.path), "--wait", "120")
    return finish_exact(env, spec, job)


def committed_within(env: Env, seconds: float, what: str) -> float:
    """Waits for a commit newer than now (at most ``seconds``); how long it took."""
    t0, rows = time.monotonic(), {k for k, _ in offsets_rows(env)}
    wait_for(what, lambda: {k for k, _ in offsets_rows(env)} - rows, timeout=seconds)
    return time.monotonic() - t0


def test_speculation_with_the_slow_attempt_writing_after_its_copy_is_exact(env: Env) -> None:
    """``spark.speculation=true``: a task stalls right after its lease check (the Python
    worker of the first executor to get there waits until released), Spark runs a copy on
    the other executor, the batch commits and later batches move the same sessions on; the stalled
    attempt -- its Python worker left alive (``spark.python.task.killTimeout``) -- then
    writes what it folded from the rows as they were. Every session exact, each closed
    summary published once per change."""
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    spec = GeneratorSpec(seed=4590, events=12_000, sessions=1_200, span_s=4 * 3600)
    env.produce(spec)
    config = env.variant("speculating", output={"closed_sessions_topic": topic},
                         kafka={"max_rate_per_partition": 250},
                         job={"spark_conf": {
                             "spark.speculation": "true", "spark.speculation.interval": "200ms",
                             "spark.speculation.quantile": "0.5",
                             "spark.speculation.multiplier": "1.5",
                             "spark.speculation.minTaskRuntime": "1s",
                             # a batch that is one task (placement not yet learned) is
                             # speculated too: Spark's quantile rule needs two tasks
                             "spark.speculation.task.duration.threshold": "5s",
                             "spark.python.task.killTimeout": "120s"}})
    with stalling(env, config, "speculation") as job:
        pid = stalled_pid(env, "speculation")
        # the copy finishes the batch while the original sleeps on
        copied = committed_within(env, 240, "a commit while the attempt stalls")
        release(env, "speculation", pid)
        stop_after_stall(env, spec, job)
    print(f"speculation: a stalled attempt's batch committed {copied:.1f}s into the stall")
    assert len(published_once_per_change(env, topic)) > 500


def test_a_lost_executors_python_worker_writing_after_the_rerun_is_exact(env: Env) -> None:
    """An executor JVM stops (SIGSTOP: no heartbeats) while its Python worker is stalled
    right after a lease check; the driver gives the executor up, runs the task on the other
    one and goes on; the Python worker -- alive all along -- then writes what it folded from
    the rows as they were. Every session exact."""
    import os
    import signal

    from leakproof.testing.crashpoints import executor_jvm

    spec = GeneratorSpec(seed=4600, events=12_000, sessions=1_200, span_s=3600)
    env.produce(spec)
    config = env.variant("heartbeats", kafka={"max_rate_per_partition": 250},
                         job={"spark_conf": {"spark.executor.heartbeatInterval": "1s",
                                             "spark.network.timeout": "8s",
                                             "spark.network.timeoutInterval": "2s",
                                             "spark.python.task.killTimeout": "120s"}})
    with stalling(env, config, "executor-lost") as job:
        pid = stalled_pid(env, "executor-lost")
        jvm = executor_jvm(pid)
        assert jvm is not None, "the stalled Python worker has no executor JVM above it"
        os.kill(jvm, signal.SIGSTOP)
        try:
            lost_s = committed_within(env, 240, "a commit without the stopped executor")
        finally:
            os.kill(jvm, signal.SIGCONT)  # (the worker kills it, or it finds itself lost)
        release(env, "executor-lost", pid)
        stop_after_stall(env, spec, job)
    print(f"executor lost: the batch committed {lost_s:.1f}s after its executor stopped")
