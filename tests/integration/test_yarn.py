"""The job on a real YARN (Hadoop's MiniCluster, started by `make yarn-up`), submitted as users
submit it: spark-submit --master yarn, the Python environment shipped with --archives (built by
`make yarn-pack`), config.yml shipped with --files in cluster mode.

In cluster mode the driver runs inside the ApplicationMaster. Killing the AM mid-stream makes
YARN start the next attempt (spark.yarn.maxAppAttempts=2), whose driver resumes from the HBase
offsets: the oracle must stay exact and every record must be in exactly one commit.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from leakproof.testing.generator import GeneratorSpec
from proctools import pids_matching

from .helpers import (
    Env,
    assert_offsets_chain,
    audit_total,
    finish_exact,
    offsets_rows,
    require_yarn,
    resume_exactly,
    run_cli,
    submit_yarn,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.xdist_group("cluster")]

@pytest.fixture(autouse=True)
def yarn() -> None:
    require_yarn()


def test_client_mode_on_yarn_with_a_packed_venv(env: Env) -> None:
    spec = GeneratorSpec(seed=1800, events=12_000, sessions=1_200)
    env.produce(spec)
    with submit_yarn(env, "client", str(env.path), "yarn-client", "--until-idle", "5") as job:
        text = finish_exact(env, spec, job, timeout=420)
    assert "on yarn" in text


@pytest.mark.faults
def test_application_master_killed_next_attempt_resumes_exactly(env: Env) -> None:
    # 1 200 records a batch: ten batches, so the kill after three leaves the next attempt
    # seven to commit
    spec = GeneratorSpec(seed=1810, events=12_000, sessions=1_200)
    env.produce(spec)
    started = time.monotonic()
    with submit_yarn(env, "cluster", env.capped(300), "yarn-cluster", "--until-idle",
                     "8") as job:
        wait_for("the first attempt's commits", lambda: len(offsets_rows(env)) >= 3,
                 timeout=300)
        first_commit_s = time.monotonic() - started
        ams = pids_matching(b"org.apache.spark.deploy.yarn.ApplicationMaster", program="java")
        assert len(ams) == 1, ams
        rows = {k for k, _ in offsets_rows(env)}
        killed = time.monotonic()
        os.kill(ams[0], signal.SIGKILL)
        wait_for("a commit by the next attempt",
                 lambda: {k for k, _ in offsets_rows(env)} - rows, timeout=300)
        recovery = time.monotonic() - killed
        finish_exact(env, spec, job, timeout=420)
    epochs = {cells[b"audit:epoch"] for _, cells in offsets_rows(env)}
    assert len(epochs) >= 2, epochs  # two drivers committed: the second attempt took over
    print(f"yarn cluster mode: submit -> 3 commits {first_commit_s:.1f}s; AM SIGKILL -> next "
          f"attempt's first commit {recovery:.1f}s")


def test_leakproof_stop_in_cluster_mode_succeeds_without_a_new_attempt(env: Env) -> None:
    """`yarn application -kill` gives the driver 250 ms; `leakproof stop` lets it finish its
    batch, so the application ends SUCCEEDED with one attempt, and the next run resumes where
    it stopped. (That run is a local one: a YARN attempt resuming is the AM-kill test's.)"""
    spec = GeneratorSpec(seed=1820, events=15_000, sessions=1_500)
    env.produce(spec)
    with submit_yarn(env, "cluster", env.capped(300), "yarn-stop") as job:
        wait_for("the first commits", lambda: len(offsets_rows(env)) >= 2, timeout=300)
        asked = time.monotonic()
        said = run_cli("stop", "--config", str(env.path), "--wait", "120").stdout
        stopped = time.monotonic() - asked
        rc = job.wait(timeout=180)  # spark-submit waits for the final status
        text = job.text()
    assert "stopped " in said and "stopped (leakproof stop was asked)" in said, said
    assert rc == 0, text[-5000:]  # spark-submit fails unless the final status is SUCCEEDED
    assert "(state: FINISHED)" in text and "final status: SUCCEEDED" in text, text[-3000:]
    # no new attempt: a second attempt's driver would have taken the lease as epoch 2
    assert {cells[b"audit:epoch"] for _, cells in offsets_rows(env)} == {b"1"}
    print(f"yarn cluster mode, leakproof stop: request -> stopped {stopped:.1f}s, "
          f"-> spark-submit exit {time.monotonic() - asked:.1f}s")
    part = assert_offsets_chain(env, complete=False)[-1]
    assert audit_total(env, b"records") == sum(part.values())
    resume_exactly(env, spec)
