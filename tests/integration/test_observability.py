"""What operators watch while the job runs: the Prometheus endpoint and the Spark UI (on by
default), whose jobs carry each batch's Kafka ranges as their description and whose Streaming
tab and REST API count each batch's input records, as for Spark's own Kafka stream."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.request

import pytest

from leakproof.generator import GeneratorSpec

from .helpers import Env, assert_offsets_chain, audit_total, offsets_rows, records, wait_for

UI_LINE = re.compile(r"Spark UI at (http://\S+)")

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


def ui_url(log: str) -> str:
    found = UI_LINE.search(log)
    assert found, "the driver logged no Spark UI address"
    return found.group(1).replace("://localhost", "://127.0.0.1")


def test_metrics_endpoint_and_batch_inputs_in_the_spark_ui(env: Env) -> None:
    spec = GeneratorSpec(seed=2000, events=16_000, sessions=1_600)
    env.produce(spec)
    mport = free_port()
    # no Spark UI setting: the UI is on by default, on Spark's port or the next free one
    cfg = env.variant("observed", kafka={"max_rate_per_partition": 500},
                      job={"metrics_port": mport})
    with env.background("--until-idle", "30", config=cfg, name="observed") as job:
        wait_for("four commits", lambda: len(offsets_rows(env)) >= 4)
        text = get(f"http://127.0.0.1:{mport}/metrics")
        assert metric(text, "leakproof_batches_total", topic=env.name) >= 1
        assert metric(text, "leakproof_records_total", outcome="applied") > 0
        assert metric(text, "leakproof_lag_records", partition="0") >= 0
        assert metric(text, "leakproof_batch_duration_seconds_count") >= 1
        ui = ui_url(job.text())
        app = json.loads(get(f"{ui}/api/v1/applications"))[0]["id"]
        jobs = json.loads(get(f"{ui}/api/v1/applications/{app}/jobs"))
        described = [j.get("description", "") for j in jobs]
        assert any(d.startswith("leakproof batch ") and f"{env.name}:" in d and "[" in d
                   for d in described), described[:5]
        wait_for("everything committed", lambda: committed(mport) == records(spec), timeout=180)
        # every batch's input, as the Streaming tab and its REST API count it: the offsets
        # the job read, which the committed offsets (from 0) add up to
        batches = json.loads(get(f"{ui}/api/v1/applications/{app}/streaming/batches"))
        offsets = sum(assert_offsets_chain(env)[-1].values())
        assert sum(b["inputSize"] for b in batches) == offsets == audit_total(env, b"records")
        assert sum(1 for b in batches if b["inputSize"]) >= 4
        newest = max(b["batchId"] for b in batches if b["inputSize"])
        page = get(f"{ui}/streaming/batch/?id={newest}")
        assert f"topic: {env.name}" in page and "Input Metadata" in page
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
        assert "metrics at http://127.0.0.1:" in job.text()
    env.verify(spec)
