"""Stopping the way supervisors do: SIGTERM to the whole process group (systemd,
KillMode=control-group; a container stop), and `leakproof stop` where no signal can be sent
gracefully. Each ends with exit 0, its batch in flight committed, and an exact result after
a restart. Each test prints the time from the stop to the exit."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec

from .helpers import (
    Background,
    Env,
    assert_offsets_chain,
    audit_total,
    background,
    offsets_rows,
    records,
    require_standalone,
    resume_exactly,
    run_cli,
    standalone_submit,
    wait_for,
)

# slow: stop-and-restart scenarios of 30-45 s each; test_operations keeps the basic SIGTERM
# case in make test-fast
pytestmark = [pytest.mark.integration, pytest.mark.slow]

STOP_BOUND_S = 60  # well under systemd's default TimeoutStopSec (90 s)


def stopped_cleanly(env: Env, job: Background, asked_at: float, label: str) -> str:
    """The job exits 0 within the bound, having committed what it processed."""
    rc = job.wait(timeout=STOP_BOUND_S)
    took = time.monotonic() - asked_at
    text = job.text()
    assert rc == 0, text[-5000:]
    assert "stopping gracefully" in text, text[-3000:]
    assert "Python worker exited unexpectedly" not in text, text[-5000:]
    chain = assert_offsets_chain(env, complete=False)
    assert audit_total(env, b"records") == sum(chain[-1].values())  # committed = processed
    print(f"{label}: stop -> exit {took:.1f}s")
    return text


def leakproof_stop(env: Env, wait_s: int = STOP_BOUND_S) -> str:
    out = run_cli("stop", "--config", str(env.path), "--wait", str(wait_s))
    assert "stopped " in out.stdout and "s after the request" in out.stdout, out.stdout
    return out.stdout


def ask(env: Env, job: Background, how: str) -> str:
    """Stop the job the way an operator would; returns what `leakproof stop` said."""
    if how == "group SIGTERM":
        job.signal_group(signal.SIGTERM)  # the driver, its JVM, the Python workers: all
        return ""
    return leakproof_stop(env)


@pytest.mark.parametrize("how", [pytest.param("group SIGTERM", marks=pytest.mark.deep),
                                 "leakproof stop"])
def test_stop_mid_batch_local_mode(env: Env, how: str) -> None:
    spec = GeneratorSpec(seed=2100 + len(how), events=40_000, sessions=4_000)
    env.produce(spec)
    with env.background(config=env.capped(600), name=how.replace(" ", "-")) as job:
        wait_for("two commits", lambda: len(offsets_rows(env)) >= 2)
        asked = time.monotonic()
        said = ask(env, job, how)
        text = stopped_cleanly(env, job, asked, f"local, {how}")
    newest = assert_offsets_chain(env, complete=False)[-1]
    assert sum(newest.values()) < records(spec)  # stopped part way
    if how == "group SIGTERM":
        assert "stopping gracefully: SIGTERM received" in text
    else:
        assert "stopping gracefully: leakproof stop was asked" in text
        assert json.dumps({str(p): o for p, o in sorted(newest.items())}).replace('"', "'") \
            in said.replace('"', "'"), said  # --wait names the offsets it stopped at
    resume_exactly(env, spec)


def test_a_stale_stop_request_never_stops_a_later_run(env: Env) -> None:
    first = GeneratorSpec(seed=2120, events=20_000, sessions=2_000)
    env.produce(first)
    with env.background(config=env.capped(600), name="first") as job:
        wait_for("a commit", lambda: len(offsets_rows(env)) >= 1)
        leakproof_stop(env)
        assert job.wait(timeout=STOP_BOUND_S) == 0
    nothing = run_cli("stop", "--config", str(env.path))
    assert nothing.stdout.startswith("nothing to stop: no leakproof run is running for "
                                     f"{env.name}:it"), nothing.stdout
    second = GeneratorSpec(seed=2121, events=8_000, sessions=800,
                           start_ts=DEFAULT_START_TS + 3_600_000)
    env.produce(second)
    ran = env.run("--until-idle", "6")  # the old request names the old run's epoch
    assert "leakproof stop was asked" not in ran.stderr, ran.stderr[-3000:]
    env.verify(first, second)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(first, second)


def submit(env: Env, label: str, *args: str) -> Any:
    require_standalone()
    cmd = standalone_submit(env.capped(500), *args, **{"spark.executor.memory": "640m"})
    return background(cmd, env.tmp / f"{label}.log")


@pytest.mark.cluster
@pytest.mark.xdist_group("cluster")
# (a group SIGTERM under spark-submit also ends the multinode tier's run of every fault)
@pytest.mark.parametrize("how", [pytest.param("group SIGTERM", marks=pytest.mark.deep),
                                 "leakproof stop"])
def test_stop_standalone_client_mode(env: Env, how: str) -> None:
    """spark-submit's JVM is the driver's parent, in its group: on SIGTERM its shutdown hook
    waits for the batch in flight, then the JVM exits 0 instead of 143."""
    spec = GeneratorSpec(seed=2130 + len(how), events=30_000, sessions=3_000)
    env.produce(spec)
    with submit(env, how.replace(" ", "-")) as job:
        wait_for("two commits", lambda: len(offsets_rows(env)) >= 2, timeout=180)
        asked = time.monotonic()
        ask(env, job, how)
        stopped_cleanly(env, job, asked, f"standalone client mode, {how}")
    resume_exactly(env, spec)
