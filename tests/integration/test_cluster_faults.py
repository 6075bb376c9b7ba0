"""Executor-side faults on the project's Spark standalone cluster, job under spark-submit.

The driver runs in client mode; executors are separate JVMs on two workers, each with its own
Python workers. Spark retries a failed task elsewhere (spark.task.maxFailures), and every step
of a task is idempotent, so these faults cost a retry, not a restart: the job finishes by
itself, exact. Each test prints the recovery time: fault -> next committed batch.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from leakproof.generator import GeneratorSpec

from .conftest import SPARK_MASTER, Env, _open, wait_for
from .test_pipeline import finish_exact, offsets_rows, stack
from .test_spark_submit import standalone_submit

pytestmark = pytest.mark.integration


def submit(env: Env, config: str, label: str, *args: str, executor_env: dict[str, str] | None
           = None) -> tuple[subprocess.Popen[bytes], Path]:
    if not _open(SPARK_MASTER):
        pytest.fail("the Spark standalone master is not running: `make stack-up SPARK=1`")
    extra = {f"spark.executorEnv.{k}": v for k, v in (executor_env or {}).items()}
    cmd = standalone_submit(config, *args, **{"spark.executor.memory": "640m",
                                              "spark.task.maxFailures": "8", **extra})
    log = env.tmp / f"{label}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def crash_once(env: Env, point: str, label: str, evidence: str) -> float:
    """Run under spark-submit with a one-time crash in an executor; seconds to recover."""
    spec = GeneratorSpec(seed=1700 + len(label), events=24_000, sessions=2_400)
    env.produce(spec)
    marker = env.tmp / f"{label}.crashed"
    job, log = submit(env, env.capped(500), label, "--until-idle", "6",
                      executor_env={"LEAKPROOF_CRASH_AT": point,
                                    "LEAKPROOF_CRASH_ONCE": str(marker)})
    wait_for("the crash", marker.exists, timeout=240)
    crashed_ms = marker.stat().st_mtime
    rows = {k for k, _ in offsets_rows(env)}
    wait_for("a commit after the crash", lambda: {k for k, _ in offsets_rows(env)} - rows,
             timeout=240)
    recovery = time.time() - crashed_ms
    finish_exact(env, spec, job, log)
    assert evidence in log.read_text()  # Spark saw the crash and retried the task
    print(f"{label}: fault -> next commit {recovery:.1f}s")
    return recovery


def test_python_worker_killed_mid_task_is_retried(env: Env) -> None:
    crash_once(env, "task_after_sessions@2", "python-worker-kill",
               "Python worker exited unexpectedly (crashed)")


def test_executor_jvm_killed_mid_task_is_retried(env: Env) -> None:
    crash_once(env, "task_after_sessions@2:executor", "executor-kill", "ExecutorLostFailure")


def test_whole_worker_killed_mid_stream(env: Env) -> None:
    spec = GeneratorSpec(seed=1750, events=24_000, sessions=2_400)
    env.produce(spec)
    job, log = submit(env, env.capped(400), "worker-kill", "--until-idle", "6")
    try:
        wait_for("two commits", lambda: len(offsets_rows(env)) >= 2, timeout=180)
        rows = {k for k, _ in offsets_rows(env)}
        killed = time.monotonic()
        stack("kill", "spark-worker1")  # the worker JVM; its executor loses its worker
        wait_for("a commit after the worker died",
                 lambda: {k for k, _ in offsets_rows(env)} - rows, timeout=240)
        recovery = time.monotonic() - killed
        finish_exact(env, spec, job, log)
    finally:
        stack("up", "--spark")  # bring the worker back for later tests
    print(f"worker-kill: fault -> next commit {recovery:.1f}s")
    assert "worker lost" in log.read_text()
