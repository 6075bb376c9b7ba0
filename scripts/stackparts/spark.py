"""The Spark standalone cluster (a master and two workers) run from the pyspark package's
own distribution, and the wait until the master has registered its workers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from stackparts.base import HOST, RUN, StackError
from stackparts.process import Service
from stackparts.readiness import READY_TIMEOUT_S

SPARK_MASTER_PORT = 7077
SPARK_MASTER_UI_PORT = 8080
SPARK_WORKER_PORTS = ((7078, 8083), (7079, 8084))  # (8081 is the schema registry's)


def spark_home() -> Path:
    import pyspark  # the venv's own Spark distribution

    return Path(pyspark.__file__).resolve().parent


def spark_services() -> list[Service]:
    home = spark_home()
    cls = str(home / "bin" / "spark-class")
    env = {"SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(RUN / "spark"),
           "PYSPARK_PYTHON": sys.executable}
    master = Service("spark-master", "spark", SPARK_MASTER_PORT,
                     [cls, "org.apache.spark.deploy.master.Master", "--host", HOST,
                      "--port", str(SPARK_MASTER_PORT), "--webui-port", str(SPARK_MASTER_UI_PORT)],
                     env={**env, "SPARK_DAEMON_MEMORY": "512m"})
    workers = []
    # each worker (and its executor) under a loopback address of its own: to Spark they are
    # two hosts, as on a real cluster -- which speculation needs (a task's copy never runs
    # on a host where the task already runs)
    for i, (port, ui) in enumerate(SPARK_WORKER_PORTS, start=1):
        wdir = RUN / "spark" / f"worker{i}"
        host = f"127.0.0.{i}"
        workers.append(Service(
            f"spark-worker{i}", "spark", port,
            [cls, "org.apache.spark.deploy.worker.Worker", "--host", host, "--port", str(port),
             "--webui-port", str(ui), "--cores", "1", "--memory", "1g", "--work-dir", str(wdir),
             f"spark://{HOST}:{SPARK_MASTER_PORT}"],
            env={**env, "SPARK_LOCAL_IP": host, "SPARK_DAEMON_MEMORY": "256m"}, host=host))
    return [master, *workers]


def wait_spark_workers(count: int) -> None:
    """Workers listen before the master has registered them; ask the master's JSON view."""
    import json
    import urllib.request

    deadline = time.monotonic() + READY_TIMEOUT_S
    alive = 0
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{SPARK_MASTER_UI_PORT}/json/",
                                        timeout=5) as resp:
                state = json.load(resp)
            alive = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
            if alive >= count:
                return
        except OSError:
            pass
        time.sleep(1.0)
    raise StackError(f"spark master sees {alive} of {count} workers; see {RUN / 'spark' / 'logs'}")
