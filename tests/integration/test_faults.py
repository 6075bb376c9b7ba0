"""Crashes at every named point of a batch, then a restart from HBase: the oracle stays exact.

``LEAKPROOF_CRASH_AT=<point>@<n>`` makes the process SIGKILL itself the n-th time it passes
the point (src/leakproof/testing/crashpoints.py), so each crash lands at a known step of the batch.
"""

from __future__ import annotations

import time

import pytest

from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    Env,
    assert_offsets_chain,
    audit_total,
    offsets_rows,
    records,
    stack,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults]


POINTS = ["driver_planning", "driver_after_tasks", "driver_before_commit",
          "driver_during_commit", "driver_after_commit"]


@pytest.mark.slow
def test_driver_sigkill_at_every_point_in_turn_restarting_from_hbase(env: Env) -> None:
    """One topic, five crashes in a row (one per named point, each in its second batch), a
    restart from HBase after each: the next crash lands on state the last one left."""
    spec = GeneratorSpec(seed=1000, events=40_000, sessions=4_000)
    env.produce(spec)
    capped = env.capped(1000)
    for point in POINTS:
        crashed = env.run("--until-idle", "4", config=capped,
                          env={"LEAKPROOF_CRASH_AT": f"{point}@2"}, check=False)
        assert crashed.returncode == -9, (point, crashed.stderr[-3000:])
    env.run("--until-idle", "4")
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(spec)  # every record in exactly one commit


def test_python_worker_killed_mid_task_fails_the_batch_then_restart(env: Env) -> None:
    spec = GeneratorSpec(seed=1100, events=12_000, sessions=1_200)
    env.produce(spec)
    failed = env.run("--until-idle", "4", env={"LEAKPROOF_CRASH_AT": "task_after_sessions"},
                     check=False)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "job failed; offsets were not committed past the last good batch" in failed.stderr
    env.run("--until-idle", "4")
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"replayed") > 0


@pytest.mark.serial  # every test beside it would lose its broker
@pytest.mark.slow
def test_kafka_broker_sigkill_and_restart_mid_stream(env: Env) -> None:
    """The job rides through a broker restart: planning pauses, reads resume, no restart."""
    spec = GeneratorSpec(seed=1300, events=16_000, sessions=1_600)
    env.produce(spec)
    # 300/s per partition: about 13 one-second batches, so data is left when Kafka is back
    with env.background("--until-idle", "8", config=env.capped(300),
                        name="broker-bounce") as job:
        wait_for("a first commit", lambda: len(offsets_rows(env)) >= 1)
        stack("kill", "kafka")  # SIGKILL: no controlled shutdown
        time.sleep(5)
        stack("up")  # restarts Kafka (the rest is running) and waits until it answers
        back = time.monotonic()
        rows = len(offsets_rows(env))
        wait_for("a commit after the broker came back", lambda: len(offsets_rows(env)) > rows)
        recovery = time.monotonic() - back
        rc = job.wait(timeout=240)
        assert rc == 0, job.text()[-4000:]
    print(f"broker back -> next commit: {recovery:.1f}s")
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(spec)


def test_second_driver_fences_the_first_and_the_result_is_exact(env: Env) -> None:
    spec = GeneratorSpec(seed=1400, events=30_000, sessions=3_000)
    env.produce(spec)
    with env.background(config=env.capped(150), name="first-driver") as first:
        wait_for("the first driver's commits", lambda: len(offsets_rows(env)) >= 2)
        second = env.run("--until-idle", "5")  # takes the lease, drains the topic
        rc = first.wait(timeout=120)
        text = first.text()
    assert rc == 1, text[-4000:]
    assert "lease" in text and ("epoch" in text or "another driver" in text), text[-4000:]
    assert "driver lease epoch 2" in second.stderr
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(spec)
