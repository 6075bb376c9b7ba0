"""The same job under spark-submit, on the project's Spark standalone cluster (client mode)."""

from __future__ import annotations

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
