"""The same job under spark-submit, on the project's Spark standalone cluster (client mode)."""

from __future__ import annotations

import json
import subprocess

import pytest

from leakproof.generator import GeneratorSpec

from .helpers import Env, assert_offsets_chain, require_standalone, standalone_submit

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.xdist_group("cluster")]


def test_job_under_spark_submit_on_the_standalone_cluster(env: Env) -> None:
    require_standalone()
    spec = GeneratorSpec(seed=901, events=20_000, sessions=2_000)
    env.produce(spec)
    cmd = standalone_submit(str(env.path), "--until-idle", "5")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    (env.tmp / "spark-submit.log").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stderr[-5000:]
    # spark-submit merges the Python driver's stderr into its own stdout
    assert "on spark://127.0.0.1:7077" in out.stdout + out.stderr
    env.verify(spec)
    assert_offsets_chain(env)


def test_each_partition_keeps_its_executor_so_its_worker_caches_hit(env: Env) -> None:
    """Ranges prefer the executor their partition ran on, so from the second batch on a
    task finds its partition's Kafka consumer and kept state in its worker. A long locality
    wait makes the preference binding here. Not every time: an executor forks a second Python
    worker when a task starts before the last one's worker is back in the pool (seen: 2 of
    22 tasks), and a worker's caches are its own. Without placement, half the tasks land on
    the other executor (make bench: 12 of 23 states kept); with it, at least 3 in 4 must hit."""
    require_standalone()
    spec = GeneratorSpec(seed=902, events=24_000, sessions=2_400)
    env.produce(spec)
    cmd = standalone_submit(env.capped(1_000), "--until-idle", "5", "--log-format", "json",
                            **{"spark.locality.wait": "60s"})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    (env.tmp / "spark-submit.log").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stderr[-5000:]
    batches = [json.loads(line[line.index('{"'):]) for line in
               (out.stdout + out.stderr).splitlines() if '"cache"' in line and '{"' in line]
    batches = [b for b in batches if b["records"]]
    assert len(batches) >= 4, f"want a drain of several batches, got {len(batches)}"
    later = [b["cache"] for b in batches[1:]]
    tasks = sum(c["tasks"] for c in later)
    assert sum(c["consumer"] for c in later) >= 0.75 * tasks, later
    assert sum(c["state"] for c in later) >= 0.75 * tasks, later
    env.verify(spec)
    assert_offsets_chain(env)
