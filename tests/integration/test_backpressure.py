"""Backpressure on a backlog: the rate converges so batches fit the interval; exact result."""

from __future__ import annotations

import statistics

import pytest

from leakproof.testing.generator import GeneratorSpec

from .helpers import Env, progress_lines, records

# serial: it judges batch times, which other tests running beside it would stretch
pytestmark = [pytest.mark.integration, pytest.mark.serial]


def test_backlog_drains_with_batches_converging_under_the_interval(env: Env) -> None:
    spec = GeneratorSpec(seed=1800, events=60_000, sessions=6_000)
    env.produce(spec)
    # the cap (20 000 records a batch) keeps a fast machine's estimate from draining the
    # backlog in four batches: some batches must run while the job is still behind
    bp = env.variant("bp", job={"batch_interval_s": 2},
                     kafka={"max_rate_per_partition": 2_500,
                            "backpressure": {"enabled": True, "initial_rate": 250,
                                             "min_rate": 100}})
    ran = env.run("--until-idle", "5", "--log-format", "json", config=bp)
    batches = progress_lines(ran.stderr)
    trace = [(b["records"], b["total_s"], b["rate_limit"]) for b in batches]
    print("backpressure trace (records, seconds, rate limit):", trace)
    assert sum(b["records"] for b in batches) == records(spec)  # duplicates included
    assert batches[0]["records"] <= 250 * 2 * 4  # initial_rate caps the first batch
    assert batches[0]["rate_limit"] is None and batches[-1]["rate_limit"] is not None
    steady = [b["total_s"] for b in batches[3:] if b["lag"] > 0]  # while still behind
    assert steady, trace
    assert statistics.median(steady) <= 2.0 * 1.25, trace  # near or under the interval
    env.verify(spec)
