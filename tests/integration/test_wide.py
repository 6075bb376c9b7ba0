"""A wide topic (240 partitions): a batch's ranges run several to a task, each its own fence,
state and report. Exact through a graceful restart and a driver kill, with partitions added
while the job runs, and with an executor killed under a task carrying several partitions."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewPartitions

from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    KAFKA,
    Env,
    assert_offsets_chain,
    background,
    fresh_env,
    offsets_rows,
    partition_count,
    require_standalone,
    standalone_submit,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WIDE = 240


DRAIN = {"max_rate_per_partition": 50}  # a run that only drains: the few largest
# partitions' tails (up to ~1 000 records) in tens of batches, not a hundred


@pytest.fixture
def wide(tmp_path: Path) -> Env:
    """A fresh topic of WIDE partitions and its table prefix; about 2 400 records a batch."""
    return fresh_env(tmp_path, f"wide{uuid.uuid4().hex[:8]}", WIDE,
                     kafka={"max_rate_per_partition": 10})


def test_a_wide_topic_is_exact_through_a_restart_and_a_driver_kill(wide: Env) -> None:
    spec = GeneratorSpec(seed=3001, events=16_000, sessions=2_000)
    wide.produce(spec)
    wide.run("--max-batches", "2")
    killed = wide.run(check=False, env={"LEAKPROOF_CRASH_AT": "driver_after_tasks@2"})
    assert killed.returncode != 0, killed.stderr[-3000:]
    wide.run("--until-idle", "4", config=wide.variant("drain", kafka=DRAIN))
    wide.verify(spec)
    rows = assert_offsets_chain(wide)
    assert len(rows[-1]) == WIDE  # one offsets row holds every partition


@pytest.mark.deep  # test_operations adds partitions to a running job's 4-partition topic
def test_partitions_added_to_a_wide_topic_while_the_job_runs(wide: Env) -> None:
    before = GeneratorSpec(seed=3011, events=8_000, sessions=1_000)
    wide.produce(before)
    with wide.background("--until-idle", "8", name="grow",
                         config=wide.variant("drain", kafka=DRAIN)) as job:
        wait_for("a first commit", lambda: bool(offsets_rows(wide)), timeout=120)
        client = KafkaAdminClient(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}")
        try:
            client.create_partitions({wide.name: NewPartitions(total_count=WIDE + 20)})
        finally:
            client.close()
        # each produce makes a producer, whose metadata is the brokers' at that moment
        wait_for("the new partitions in the brokers' metadata",
                 lambda: partition_count(wide.name) == WIDE + 20)
        after = GeneratorSpec(seed=3012, events=8_000, sessions=1_000)
        wide.produce(after)
        assert job.wait(timeout=300) == 0, job.text()[-4000:]
    wide.verify(before, after)
    assert len(assert_offsets_chain(wide)[-1]) == WIDE + 20


@pytest.mark.cluster
@pytest.mark.faults
@pytest.mark.xdist_group("cluster")
@pytest.mark.deep
def test_a_task_of_several_partitions_is_retried_exactly_after_an_executor_kill(
        wide: Env) -> None:
    require_standalone()
    spec = GeneratorSpec(seed=3021, events=16_000, sessions=2_000)
    wide.produce(spec)
    marker = wide.tmp / "wide.crashed"
    cmd = standalone_submit(str(wide.path), "--until-idle", "6", **{
        "spark.executor.memory": "640m", "spark.task.maxFailures": "8",
        "spark.executorEnv.LEAKPROOF_CRASH_AT": "task_after_sessions@8:executor",
        "spark.executorEnv.LEAKPROOF_CRASH_ONCE": str(marker)})
    with background(cmd, wide.tmp / "wide-kill.log") as job:
        job.wait_until("the crash", marker.exists)
        assert job.wait(timeout=400) == 0, job.text()[-5000:]
        text = job.text()
    assert "ExecutorLostFailure" in text, text[-3000:]
    wide.verify(spec)
    assert_offsets_chain(wide)
