"""spark-submit command lines for the project's clusters, shared by the tests and benches."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spark_submit() -> Path:
    """The spark-submit that comes with the installed pyspark."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"


def standalone_submit(config_path: str, *args: str, **conf: str) -> list[str]:
    """The command that runs ``leakproof run`` under spark-submit on the project's standalone
    cluster, driver in client mode; ``conf`` adds or overrides Spark settings."""
    settings = {"spark.pyspark.python": sys.executable, "spark.executor.memory": "768m",
                "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", **conf}
    cmd = [str(spark_submit()), "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client"]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(ROOT / "scripts" / "spark_main.py"), "run", "--config", config_path,
            *args]
