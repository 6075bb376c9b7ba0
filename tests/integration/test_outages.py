"""HBase outages under a running job: ridden out within hbase.outage_tolerance_s, exact after.

Each test prints its recovery time: from the service being back (and from the fault) to the
next committed batch. The Thrift outages hit a spare Thrift server that only the job uses, so
they run beside other tests; the whole-HBase restart runs alone. (An outage longer than the
tolerance stops the job instead: see test_pipeline's
test_failed_batch_stops_the_job_without_committing_past_it.)
"""

from __future__ import annotations

import time

import pytest

from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    ROW_RE,
    THRIFT,
    Env,
    assert_offsets_chain,
    audit_total,
    offsets_rows,
    records,
    stack,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]


def ride_through(env: Env, spec: GeneratorSpec, label: str, fault: list[list[str]],
                 down_s: float, restore: list[list[str]],
                 thrift_port: int = THRIFT[1]) -> dict[str, float]:
    """Run the job capped (through the Thrift server on ``thrift_port``), inject ``fault``
    after its first commit, wait ``down_s``, run ``restore``; the job must finish by itself
    (exit 0) and the oracle must be exact."""
    env.produce(spec)
    cfg = env.variant(label, kafka={"max_rate_per_partition": 400},
                      hbase={"port": thrift_port})
    try:
        with env.background("--until-idle", "8", config=cfg, name=label) as job:
            wait_for("a first commit", lambda: len(offsets_rows(env)) >= 1)
            rows_before = len(offsets_rows(env))
            fault_at = time.monotonic()
            for args in fault:
                stack(*args)
            time.sleep(down_s)
            for args in restore:
                stack(*args)
            back = time.monotonic()
            back_ms = int(time.time() * 1000)
            wait_for("a commit after the outage", lambda: len(offsets_rows(env)) > rows_before,
                     timeout=180)
            done = time.monotonic()
            rc = job.wait(timeout=300)
            text = job.text()
    finally:  # whatever happened, leave the service up for the next test
        for args in restore:
            stack(*args)
    assert rc == 0, text[-4000:]
    assert "retry" in text  # the outage was seen and ridden out, not missed
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(spec)
    # the batches that waited: planned before the service was back, committed after it --
    # on a slow day the backlog planned before the fault, on a usual one the batches planned
    # during it (a batch's planning never needs HBase)
    commits = [(int(m["ms"]), int(cells[b"audit:committed_ms"]))
               for k, cells in offsets_rows(env) if (m := ROW_RE.match(k))]
    queued = [t for t, at in commits if t < back_ms <= at]
    figures = {"down_s": round(back - fault_at, 1), "recovery_s": round(done - back, 1),
               "fault_to_commit_s": round(done - fault_at, 1), "queued_batches": len(queued)}
    print(f"{label}: {figures}")
    return figures


@pytest.mark.xdist_group("spare-thrift")
def test_thrift_server_restart_is_ridden_out(env: Env, spare_thrift: int) -> None:
    ride_through(env, GeneratorSpec(seed=1500, events=24_000, sessions=2_400), "thrift-bounce",
                 [["kill", "thrift-spare"]], 3, [["start", "thrift-spare"]], spare_thrift)


@pytest.mark.serial  # HBase goes away for every test beside it
def test_whole_hbase_restart_is_ridden_out(env: Env) -> None:
    ride_through(env, GeneratorSpec(seed=1510, events=24_000, sessions=2_400), "hbase-bounce",
                 [["kill", "thrift"], ["kill", "hbase"]], 2, [["up"]])


@pytest.mark.xdist_group("spare-thrift")
def test_hbase_unavailable_for_several_intervals_batches_queue(env: Env,
                                                               spare_thrift: int) -> None:
    # SIGKILL: the outage starts at once (a graceful stop can take longer than the data
    # lasts on a slow day, the job draining it meanwhile)
    figures = ride_through(env, GeneratorSpec(seed=1520, events=24_000, sessions=2_400),
                           "thrift-away", [["kill", "thrift-spare"]], 8,
                           [["start", "thrift-spare"]], spare_thrift)
    # batches waited through the outage and committed afterwards, in order
    assert figures["queued_batches"] >= 3, figures
