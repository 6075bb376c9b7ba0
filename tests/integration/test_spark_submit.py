"""The same job under spark-submit, on the project's Spark standalone cluster (client mode)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leakproof.generator import GeneratorSpec

from .conftest import ROOT, SPARK_MASTER, Env, _open
from .test_pipeline import assert_offsets_chain

pytestmark = pytest.mark.integration


def spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


def standalone_submit(config: str, *args: str, **conf: str) -> list[str]:
    """The command that runs ``leakproof run`` under spark-submit on the project's standalone
    cluster, driver in client mode; ``conf`` adds or overrides Spark settings."""
    settings = {"spark.pyspark.python": sys.executable, "spark.executor.memory": "768m",
                "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", **conf}
    cmd = [str(spark_submit()), "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client"]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(ROOT / "scripts" / "spark_main.py"), "run", "--config", config, *args]


def test_job_under_spark_submit_on_the_standalone_cluster(env: Env) -> None:
    if not _open(SPARK_MASTER):
        pytest.fail("the Spark standalone master is not running: `make stack-up SPARK=1`")
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
