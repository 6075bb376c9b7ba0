"""The job end to end on real Kafka, HBase and Spark, judged by the oracle every time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from kafka import KafkaAdminClient

from leakproof.commands.produce import send_events
from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec, generate

from .helpers import (
    ROOT,
    Env,
    assert_offsets_chain,
    audit_total,
    offsets_rows,
    progress_lines,
    records,
    stack,
    wait_for,
)

pytestmark = pytest.mark.integration

def test_end_to_end_matches_the_oracle(env: Env) -> None:
    spec = GeneratorSpec(seed=101, events=30_000, sessions=3_000)
    env.produce(spec)
    out = env.run("--until-idle", "4")
    assert re.search(r"batch \d{13} \| p0:0->", out.stderr), out.stderr[-2000:]
    # local[2]: both Python workers were started while the driver prepared its first batch
    assert re.search(r"started 2 Python workers in", out.stderr), out.stderr[-2000:]
    env.verify(spec)
    newest = assert_offsets_chain(env)[-1]
    assert audit_total(env, b"records") == records(spec)
    assert audit_total(env, b"replayed") == 0
    lag = json.loads(subprocess.run([sys.executable, "-m", "leakproof.cli", "offsets", "lag",
                                     "--json", "--config", str(env.path)], capture_output=True,
                                    text=True, check=True).stdout)
    assert lag["total_lag"] == 0 and lag["age_s"] >= 0
    assert {r["partition"]: r["committed"] for r in lag["partitions"]} == newest
    # every commit is mirrored to the Kafka consumer group, for Kafka's own lag tools
    admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    try:
        group = admin.list_group_offsets({"it": None})["it"]
    finally:
        admin.close()
    assert {tp.partition: om.offset for tp, om in group.items()
            if tp.topic == env.name} == newest
    assert not [line for line in out.stderr.splitlines()
                if "WARNING" in line and "mirror" in line], out.stderr[-3000:]
    # ... which Kafka's own tool on the local stack reads: offsets, log ends, lag 0
    tool = subprocess.run([str(ROOT / "scripts" / "kafka-consumer-groups"), "--describe",
                           "--group", "it"], capture_output=True, text=True, timeout=120,
                          check=True)
    described = {int(f[2]): (int(f[3]), int(f[4]), int(f[5])) for f in
                 (line.split() for line in tool.stdout.splitlines())
                 if len(f) > 5 and f[1] == env.name}
    assert described == {p: (o, o, 0) for p, o in newest.items()}, tool.stdout
    # the CLI's own views of the result
    show = subprocess.run([sys.executable, "-m", "leakproof.cli", "offsets", "show", "--config",
                           str(env.path)], capture_output=True, text=True, check=True)
    assert '"offsets": {"0": ' in show.stdout
    conn = env.hbase()
    try:
        sid = next(k for k, _ in conn.table("web_sessions").scan(limit=1)).decode()
    finally:
        conn.close()
    got = subprocess.run([sys.executable, "-m", "leakproof.cli", "sessions", "get", "--config",
                          str(env.path), sid], capture_output=True, text=True, check=True)
    row = json.loads(got.stdout)
    assert int(row["events"]) >= 1 and row["state"] in ("open", "closed")


def test_compressed_batches_of_every_codec_read_exactly(env: Env) -> None:
    """Producers compress; the worker reads each fetched batch's records itself
    (``kafka.records``) once kafka-python has decompressed it: gzip, snappy, lz4 and zstd
    batches of one topic, in order, exact against the oracle."""
    spec = GeneratorSpec(seed=131, events=16_000, sessions=1_600)
    events = generate(spec)
    quarter = len(events) // 4
    for i, codec_name in enumerate(["gzip", "snappy", "lz4", "zstd"]):
        cfg = replace(env.cfg.kafka, consumer={**env.cfg.kafka.consumer,
                                               "compression_type": codec_name})
        chunk = events[i * quarter: None if i == 3 else (i + 1) * quarter]
        assert send_events(cfg, env.name, chunk).records == len(chunk)
    env.run("--until-idle", "4")
    env.verify(spec)
    assert audit_total(env, b"records") == records(spec)


def test_restart_after_some_batches_resumes_exactly(env: Env) -> None:
    first = GeneratorSpec(seed=201, events=20_000, sessions=2_000)
    env.produce(first)
    env.run("--max-batches", "2", config=env.capped(1000))
    partial = assert_offsets_chain(env, complete=False)[-1]
    assert 0 < sum(partial.values()) < 20_000  # stopped part way
    second = GeneratorSpec(seed=202, events=10_000, sessions=1_000,
                           start_ts=DEFAULT_START_TS + 3_600_000)
    env.produce(second)
    env.run("--until-idle", "4")
    env.verify(first, second)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(first, second)  # each once


def test_open_sets_of_the_state_layout_before_the_index_move_into_it(env: Env) -> None:
    """A job upgraded over state written before the open-session index: each wm: row's open
    set (family o) moves into the index at the partition's next range, and the sessions in it
    close when the next wave's watermark passes them."""
    first = GeneratorSpec(seed=241, events=4_000, sessions=400)
    env.produce(first)
    env.run("--until-idle", "3")
    conn = env.hbase()
    try:  # rewrite the state the way the layout before the index kept it
        table = conn.table("leakproof_state")
        moved = 0
        for key, cells in list(table.scan(row_prefix=f"op:{env.name}:".encode())):
            partition = key.decode().split(":")[2]  # op:<topic>:<partition>:<bucket>
            table.put(f"wm:{env.name}:{partition}".encode(), cells)
            table.delete(key)
            moved += len(cells)
        for p in range(4):
            table.delete(f"wm:{env.name}:{p}".encode(), columns=[b"w:cutoff", b"w:check_below"])
        assert moved, "the first wave left no session open"
    finally:
        conn.close()
    second = GeneratorSpec(seed=242, events=2_000, sessions=200,
                           start_ts=DEFAULT_START_TS + 3 * 3_600_000)
    env.produce(second)
    env.run("--until-idle", "3")
    env.verify(first, second)  # the first wave's open sessions are closed now
    conn = env.hbase()
    try:
        old = [k for k, cells in conn.table("leakproof_state").scan(
            row_prefix=f"wm:{env.name}:".encode()) if any(c.startswith(b"o:") for c in cells)]
    finally:
        conn.close()
    assert not old, old


@pytest.mark.faults
def test_rows_kept_between_batches_stay_exact_through_a_driver_kill(env: Env) -> None:
    """Sessions that span batches: one Python worker (local[1]) takes the rows it wrote last
    batch instead of reading them; killed after a batch's writes, before its commit, the job
    restarts on two workers that take turns (each brings its rows up to date from the
    other's deltas) and replays that batch exactly."""
    spec = GeneratorSpec(seed=311, events=12_000, sessions=300, span_s=30)
    env.produce(spec)
    one = env.variant("one-worker", job={"master": "local[1]"},
                      kafka={"max_rate_per_partition": 400})
    killed = env.run("--until-idle", "4", "--log-format", "json", config=one, check=False,
                     env={"LEAKPROOF_CRASH_AT": "driver_after_tasks@4"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    kept = [p["cache"]["rows"] for p in progress_lines(killed.stderr)]
    assert len(kept) == 3 and kept[0] == 0 and all(k > 0 for k in kept[1:]), kept
    two = env.variant("two-workers", kafka={"max_rate_per_partition": 400})
    again = env.run("--until-idle", "4", "--log-format", "json", config=two)
    kept = [p["cache"]["rows"] for p in progress_lines(again.stderr) if p["records"]]
    assert kept[0] == 0 and sum(kept[1:]) > 0, kept
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"replayed") > 0


def test_driver_killed_after_session_writes_before_commit(env: Env) -> None:
    spec = GeneratorSpec(seed=301, events=20_000, sessions=2_000)
    env.produce(spec)
    crashed = env.run("--until-idle", "4", env={"LEAKPROOF_CRASH_AT": "driver_before_commit"},
                      check=False)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert offsets_rows(env) == []  # it died before its first commit
    conn = env.hbase()
    try:
        written = sum(1 for _ in conn.table("web_sessions").scan(columns=[b"s:events"]))
    finally:
        conn.close()
    assert written > 0  # ... but after writing sessions: the replay must not double count
    env.run("--until-idle", "4")
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"replayed") > 0


@pytest.mark.faults
@pytest.mark.xdist_group("spare-thrift")  # the job's Thrift server goes away
def test_failed_batch_stops_the_job_without_committing_past_it(env: Env,
                                                               spare_thrift: int) -> None:
    spec = GeneratorSpec(seed=401, events=40_000, sessions=4_000)
    env.produce(spec)
    impatient = env.variant("impatient", kafka={"max_rate_per_partition": 500},
                            hbase={"outage_tolerance_s": 2, "port": spare_thrift})
    try:
        with env.background(config=impatient, name="failing-run") as job:
            wait_for("a first commit", lambda: bool(offsets_rows(env)))
            # HBase unreachable for longer than outage_tolerance_s
            stack("stop", "thrift-spare")
            time.sleep(6)
            rc = job.wait(timeout=120)
            text = job.text()
    finally:
        stack("start", "thrift-spare")
    assert rc == 1, text[-4000:]
    assert "job failed; offsets were not committed past the last good batch" in text
    committed = assert_offsets_chain(env, complete=False)[-1]
    assert sum(committed.values()) < 40_000
    env.run("--until-idle", "4")
    env.verify(spec)
    assert_offsets_chain(env)
