"""The same job under spark-submit, on the project's Spark standalone cluster (client mode)."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    Env,
    assert_offsets_chain,
    background,
    offsets_rows,
    require_standalone,
    standalone_submit,
)

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


def test_each_partition_prefers_one_executor_and_the_run_reports_cache_hits(env: Env) -> None:
    """Ranges prefer an executor per partition, spread over the cluster's two, and each batch
    says how many tasks found their partition's consumer and state in the worker. The hit
    rate itself is make bench's figure, not asserted: an executor may fork a second Python
    worker (each has its own caches), and CI's load makes that common."""
    require_standalone()
    # half before the start, half after the first commit: the batches planned while the
    # executors were still starting (on a loaded machine, all of the first half's) prefer
    # none, and the ones planned once they run prefer one each
    first = GeneratorSpec(seed=902, events=12_000, sessions=1_200)
    then = GeneratorSpec(seed=903, events=12_000, sessions=1_200,
                         start_ts=first.start_ts + 3_600_000)
    env.produce(first)
    cmd = standalone_submit(env.capped(1_000), "--until-idle", "5", "--log-format", "json")
    with background(cmd, env.tmp / "spark-submit.log") as job:
        job.wait_until("a first commit", lambda: bool(offsets_rows(env)))
        env.produce(then)
        rc = job.wait(timeout=300)
        text = job.text()
    assert rc == 0, text[-5000:]
    # every log record of the job is one JSON object (--log-format json)
    messages = [json.loads(line)["message"] for line in text.splitlines()
                if line.startswith("{") and "ranges prefer executors: " in line]
    placements = [m.rsplit("ranges prefer executors: ", 1)[1].split(", ") for m in messages]
    assert placements, "no placement logged"
    last = dict(entry.split("@") for entry in placements[-1])
    assert sorted(last) == ["p0", "p1", "p2", "p3"]
    assert sorted(Counter(last.values()).values()) == [2, 2], last  # both executors used
    batches = [json.loads(line[line.index('{"'):]) for line in text.splitlines()
               if '"cache"' in line and '{"' in line]
    batches = [b for b in batches if b["records"]]
    assert len(batches) >= 4, f"want a drain of several batches, got {len(batches)}"
    assert all(b["cache"]["tasks"] == len(b["ranges"]) for b in batches)
    hits = sum(b["cache"]["consumer"] for b in batches[1:])
    print(f"consumer cached in {hits} of {sum(b['cache']['tasks'] for b in batches[1:])} later "
          f"tasks; placements logged: {len(placements)}")
    env.verify(first, then)
    assert_offsets_chain(env)
