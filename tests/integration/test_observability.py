"""What operators watch while the job runs: the Prometheus endpoint (found through its
file-based service-discovery target, parsed with prometheus_client's own parser) and the
Spark UI (on by default), whose jobs carry each batch's Kafka ranges as their description
and whose Streaming tab and REST API count each batch's input records, as for Spark's own
Kafka stream."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from leakproof.driver.metrics import METRICS
from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    Env,
    assert_offsets_chain,
    audit_total,
    offsets_rows,
    records,
    run_cli,
    wait_for,
)

pytestmark = pytest.mark.integration

UI_LINE = re.compile(r"Spark UI at (http://\S+)")


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


def scrape(url: str, patience: float = 60
           ) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the endpoint, parsed by prometheus_client: name -> labels -> value
    (topic and group left out of the labels; each sample must carry them)."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(get(url, patience)):
        for s in family.samples:
            assert {"topic", "group"} <= set(s.labels), s
            labels = tuple(sorted((k, v) for k, v in s.labels.items()
                                  if k not in ("topic", "group")))
            found.setdefault(s.name, {})[labels] = s.value
    return found


def ui_url(log: str) -> str:
    found = UI_LINE.search(log)
    assert found, "the driver logged no Spark UI address"
    return found.group(1).replace("://localhost", "://127.0.0.1")


def test_metrics_endpoint_and_batch_inputs_in_the_spark_ui(env: Env) -> None:
    spec = GeneratorSpec(seed=2000, events=16_000, sessions=1_600)
    env.produce(spec)
    mport = free_port()
    targets = env.tmp / "sd" / "leakproof.json"
    # no Spark UI setting: the UI is on by default, on Spark's port or the next free one
    cfg = env.variant("observed", kafka={"max_rate_per_partition": 500},
                      job={"metrics_port": mport, "metrics_sd_file": str(targets)})
    # ended by SIGTERM below: the idle bound outlasts the Spark UI's first answers on a
    # slow day (the job must still serve them after draining the topic)
    with env.background("--until-idle", "600", config=cfg, name="observed") as job:
        job.wait_until("four commits", lambda: len(offsets_rows(env)) >= 4)
        # Prometheus finds the endpoint through the file-based service-discovery target
        (target,) = json.loads(targets.read_text())
        assert target["targets"] == [f"127.0.0.1:{mport}"]
        assert target["labels"]["leakproof_app_id"].startswith("local-")
        url = f"http://{target['targets'][0]}/metrics"
        # a batch's figures reach the endpoint just after its commit row
        wait_for("four batches in the metrics", lambda: min(
            (got := scrape(url))["leakproof_batch_processing_seconds_count"][()],
            got["leakproof_batch_scheduling_delay_seconds_count"][()]) >= 4)
        got = scrape(url)
        (versions,) = got["leakproof_build_info"]
        assert {k for k, _ in versions} == {"version", "spark", "python"}
        assert dict(versions)["spark"][0] in "34"
        assert got["leakproof_batches_total"][()] >= 1
        assert got["leakproof_records_total"][(("outcome", "applied"),)] > 0
        assert got["leakproof_lag_records"][(("partition", "0"),)] >= 0
        assert got["leakproof_lag_seconds"][(("partition", "0"),)] >= 0
        assert got["leakproof_batch_processing_seconds_count"][()] >= 4
        assert got["leakproof_batch_scheduling_delay_seconds_count"][()] >= 4
        exposed = {n for n in got if not n.endswith(("_bucket", "_count", "_sum"))}
        assert exposed | {"leakproof_batch_processing_seconds",
                          "leakproof_batch_scheduling_delay_seconds"} >= set(METRICS) - {
            "leakproof_dead_letters_total"}  # no bad record in this topic: no kind yet
        ui = ui_url(job.text())
        app = json.loads(get(f"{ui}/api/v1/applications"))[0]["id"]
        assert app == target["labels"]["leakproof_app_id"]
        jobs = json.loads(get(f"{ui}/api/v1/applications/{app}/jobs"))
        described = [j.get("description", "") for j in jobs]
        assert any(d.startswith("leakproof batch ") and f"{env.name}:" in d and "[" in d
                   for d in described), described[:5]
        wait_for("everything committed",
                 lambda: scrape(url)["leakproof_records_read_total"][()] == records(spec),
                 timeout=180)
        got = scrape(url)
        # the counters match what was committed: the offsets (from 0) and the audit
        offsets = sum(assert_offsets_chain(env)[-1].values())
        assert offsets == audit_total(env, b"records") == records(spec)
        assert sum(v for (o,), v in got["leakproof_records_total"].items()) == records(spec)
        assert got["leakproof_commits_total"][()] == len(offsets_rows(env))
        # every batch's input, as the Streaming tab and its REST API count it
        batches = json.loads(get(f"{ui}/api/v1/applications/{app}/streaming/batches"))
        assert sum(b["inputSize"] for b in batches) == offsets
        assert sum(1 for b in batches if b["inputSize"]) >= 4
        newest = max(b["batchId"] for b in batches if b["inputSize"])
        page = get(f"{ui}/streaming/batch/?id={newest}")
        assert f"topic: {env.name}" in page and "Input Metadata" in page
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == 0
        assert "metrics at http://127.0.0.1:" in job.text()
    assert not Path(targets).exists()  # the driver's end takes its target away
    env.verify(spec)


def record_times(env: Env) -> dict[tuple[int, int], int]:
    """Every record's Kafka timestamp (epoch ms) by (partition, offset): what lag in seconds
    is computed from, read back independently."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9092", enable_auto_commit=False)
    try:
        tps = [TopicPartition(env.name, p) for p in range(4)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        found: dict[tuple[int, int], int] = {}
        while len(found) < sum(ends.values()):
            for tp, recs in consumer.poll(timeout_ms=1000).items():
                found.update({(tp.partition, r.offset): r.timestamp for r in recs})
        return found
    finally:
        consumer.close()


def test_lag_in_seconds_after_the_producer_stopped(env: Env) -> None:
    """A producer sends, then stops for STOP_S; the job starts late and reads slowly. Every
    age reported -- by `offsets lag`, in each batch's JSON line, by the metric -- is the age
    of the oldest unread record, held to the records' own timestamps (never to the job's
    speed), and so at least STOP_S while anything is unread."""
    stop_s = 12
    spec = GeneratorSpec(seed=2100, events=4_000, sessions=400)
    env.produce(spec)
    times = record_times(env)
    time.sleep(stop_s)
    before = time.time() * 1000
    out = run_cli("offsets", "lag", "--config", str(env.path), "--json", check=False)
    after = time.time() * 1000
    lag = json.loads(out.stdout)  # nothing committed yet: every record is unread
    for row in lag["partitions"]:
        first = times[(row["partition"], 0)]
        assert (before - first) / 1000 - 0.01 <= row["lag_s"] <= (after - first) / 1000 + 0.01
        assert row["lag_s"] >= stop_s
    table = run_cli("offsets", "lag", "--config", str(env.path), check=False).stdout
    assert table.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                             "LOG-END-OFFSET", "LAG", "LAG-SECONDS",
                                             "STABLE-END", "STATE"]
    mport = free_port()
    cfg = env.variant("slow", kafka={"max_rate_per_partition": 150},
                      job={"metrics_port": mport})
    scraped: list[tuple[float, float, float]] = []  # (scrape ms, lag s, lag records), p0
    with env.background("--log-format", "json", "--until-idle", "8", config=cfg,
                        name="slow") as job:
        while job.poll() is None:
            try:
                t0 = time.time() * 1000
                got = scrape(f"http://127.0.0.1:{mport}/metrics", patience=0)
                scraped.append((t0, got["leakproof_lag_seconds"][(("partition", "0"),)],
                                got["leakproof_lag_records"][(("partition", "0"),)]))
            except (OSError, KeyError):
                pass
            time.sleep(1)
        assert job.wait() == 0, job.text()[-4000:]
        lines = [json.loads(line) for line in job.text().splitlines()
                 if line.startswith("{") and '"batch_ms"' in line]
    behind = [rec for rec in lines if rec["lag_s_by_partition"]]
    assert len(behind) >= 3, lines[:3]
    for rec in behind:
        logged = datetime.fromisoformat(rec["time"]).timestamp() * 1000
        until = {r["partition"]: r["until"] for r in rec["ranges"]}
        for p, age in rec["lag_s_by_partition"].items():
            # the oldest unread record is the one at the end of this batch's range
            oldest = times[(int(p), until[int(p)])]
            assert age is not None and age >= stop_s
            assert (logged - oldest) / 1000 - 1.0 <= age <= (logged - oldest) / 1000 + 0.1
        assert rec["lag_s"] == max(rec["lag_s_by_partition"].values())
    assert lines[-1]["lag"] == 0 and lines[-1]["lag_s"] == 0.0
    newest_p0 = max(ts for (p, _), ts in times.items() if p == 0)
    while_behind = [(t, s) for t, s, n in scraped if n > 0]
    assert while_behind, scraped[:5]
    for t, age in while_behind:  # at scrape time, older than every record of partition 0
        assert (t - newest_p0) / 1000 - 0.1 <= age <= (t - times[(0, 0)]) / 1000 + 0.1
    assert [age for _, age, n in scraped if n == 0][-1:] in ([], [0.0])
    lag = json.loads(run_cli("offsets", "lag", "--config", str(env.path), "--json").stdout)
    assert lag["total_lag"] == 0 and lag["lag_s"] == 0.0
    env.verify(spec)


def test_record_timestamps_look_up_after_look_up_each_at_once(env: Env) -> None:
    """The driver reads the oldest unread records' timestamps every batch, through one
    long-lived consumer: each look-up finds every record at once, whatever the look-ups
    before it assigned, found or left fetched. (Pausing a partition once found made later
    look-ups of it wait out their full 2 s, in a live run and in look-ups like these over
    most topics written at a steady rate; whether it shows depends on where the producer's
    batches end, so this test does not always catch that.)"""
    from leakproof.commands.produce import send_events
    from leakproof.kafka.admin import KafkaMetadata
    from leakproof.testing.generator import generate

    # at a steady rate, as producers send: many small record batches in each partition
    send_events(env.cfg.kafka, env.name, generate(GeneratorSpec(2300, 20_000, 2_000)),
                rate=8000)
    times = record_times(env)
    ends = {p: max(o for q, o in times if q == p) + 1 for p in range(4)}
    meta = KafkaMetadata(env.cfg.kafka)
    try:
        for step in range(12):  # as a driver's batches ask: moving on, now and then fewer
            parts = [0, 2] if step in (9, 11) else [0, 1, 2, 3]
            offsets = {p: min(100 + 400 * step, ends[p] - 1) for p in parts}
            started = time.monotonic()
            got = meta.record_timestamps(env.name, offsets)
            took = time.monotonic() - started
            assert got == {p: times[(p, o)] for p, o in offsets.items()}, (step, offsets)
            assert took < 1.5, (step, offsets, took)
    finally:
        meta.close()
