"""What operators watch while the job runs: the Prometheus endpoint and the Spark UI, whose
jobs carry each batch's Kafka ranges as their description (what the Streaming tab's batch
pages list for each output operation)."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request

import pytest

from leakproof.generator import GeneratorSpec

from .helpers import Env, offsets_rows, records, wait_for

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, patience: float = 60) -> str:
    """GET with retries: the Spark UI's first REST call builds its Jersey application, which
    took over 5 s on a loaded 2-core CI machine."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with urllib.request.urlopen(url, timeout=20) as resp:
                return str(resp.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def committed(mport: int) -> float:
    """Records the job has accounted for, by the /metrics counters."""
    text = get(f"http://127.0.0.1:{mport}/metrics")
    return sum(metric(text, "leakproof_records_total", outcome=o)
               for o in ("applied", "duplicates", "late"))


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in /metrics")


def test_metrics_endpoint_and_batch_ranges_in_the_spark_ui(env: Env) -> None:
    spec = GeneratorSpec(seed=2000, events=16_000, sessions=1_600)
    env.produce(spec)
    mport, uport = free_port(), free_port()
    cfg = env.variant("observed", kafka={"max_rate_per_partition": 500},
                      job={"metrics_port": mport,
                           "spark_conf": {"spark.ui.enabled": True, "spark.ui.port": uport}})
    with env.background("--until-idle", "30", config=cfg, name="observed") as job:
        wait_for("four commits", lambda: len(offsets_rows(env)) >= 4)
        text = get(f"http://127.0.0.1:{mport}/metrics")
        assert metric(text, "leakproof_batches_total", topic=env.name) >= 1
        assert metric(text, "leakproof_records_total", outcome="applied") > 0
        assert metric(text, "leakproof_lag_records", partition="0") >= 0
        assert metric(text, "leakproof_batch_duration_seconds_count") >= 1
        apps = json.loads(get(f"http://127.0.0.1:{uport}/api/v1/applications"))
        jobs = json.loads(get(f"http://127.0.0.1:{uport}/api/v1/applications/{apps[0]['id']}"
                              f"/jobs"))
        described = [j.get("description", "") for j in jobs]
        assert any(d.startswith("leakproof batch ") and f"{env.name}:" in d and "[" in d
                   for d in described), described[:5]
        wait_for("everything committed", lambda: committed(mport) == records(spec), timeout=180)
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
        assert "metrics at http://127.0.0.1:" in job.text()
    env.verify(spec)
