"""Backfills on real Kafka and HBase: a run bounded by --until-time into new tables, held to
the oracle over the records before that time, then compared with the live tables by
``sessions diff``."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kafka import KafkaAdminClient, TopicPartition

from leakproof.testing.generator import GeneratorSpec

from .helpers import Env, log_ends, offsets_rows, records, run_cli, wait_for

pytestmark = pytest.mark.integration


def offsets_at(env: Env, ms: int) -> dict[int, int]:
    """Per partition, the first offset whose record timestamp is at or after ``ms``."""
    admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    try:
        found = admin.list_partition_offsets({TopicPartition(env.name, p): ms
                                              for p in range(4)})
    finally:
        admin.close()
    return {tp.partition: o.offset for tp, o in found.items()}


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def diff(env: Env, a: str, b: str) -> tuple[int, dict[str, Any]]:
    out = run_cli("sessions", "diff", "--config", a, "--against", b, "--json", check=False)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout)


def test_a_backfill_bounded_by_until_time_is_exact_and_diffs_equal_to_the_live_tables(
        env: Env) -> None:
    before = GeneratorSpec(seed=4801, events=6_000, sessions=600)
    after = GeneratorSpec(seed=4802, events=3_000, sessions=300)
    env.produce(before)
    env.run("--until-idle", "3")  # the live tables, over the period the backfill reprocesses
    ends_before = log_ends(env)
    time.sleep(1.0)
    until_ms = int(time.time() * 1000)
    time.sleep(1.0)
    env.produce(after)  # Kafka timestamps at or after the bound: never read by the backfill
    assert offsets_at(env, until_ms) == ends_before
    until = datetime.fromtimestamp(until_ms / 1000, UTC).isoformat(timespec="milliseconds")
    backfill = env.variant("backfill", hbase={"table_prefix": f"{env.name}bf"},
                           kafka={"max_rate_per_partition": 1_000})  # several batches
    ran = env.run("--until-time", until, "--log-format", "json", config=backfill)
    last = json_lines(ran.stderr)[-1]  # no --until-idle: it stopped by itself, exit 0
    assert last["stop_reason"] == f"every partition read to its bound (--until-time {until})"
    assert last["offsets"] == {str(p): o for p, o in ends_before.items()}
    batches = [rec for rec in json_lines(ran.stderr) if "batch_ms" in rec and "records" in rec]
    assert len(batches) > 1 and sum(int(str(b["records"])) for b in batches) == records(before)
    out = run_cli("verify", "--config", backfill, "--spec", before.as_arg(), "--until-time",
                  until, check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
    # the copy against the live tables: no difference over the period
    rc, same = diff(env, backfill, str(env.path))
    assert rc == 0 and same["equal"], same
    assert same["rows_a"] == same["rows_b"] == same["rows_equal"] == before.sessions
    text = run_cli("sessions", "diff", "--config", backfill, "--against", str(env.path)).stdout
    assert "family s only" in text and text.splitlines()[-1] == "EQUAL"
    # a row changed by hand in the copy (above its cells' timestamps), another deleted
    conn = env.hbase(f"{env.name}bf")
    try:
        table = conn.table("web_sessions")
        (changed, cells), (gone, _) = list(table.scan(columns=[b"s"], limit=2,
                                                      include_timestamp=True))
        events, ts = cells[b"s:events"]
        table.put(changed, {b"s:events": str(int(events) + 1).encode()}, timestamp=ts + 1)
        table.delete(gone, timestamp=ts + 1_000_000)
    finally:
        conn.close()
    rc, found = diff(env, backfill, str(env.path))
    assert rc == 1 and not found["equal"]
    assert (found["differ"], found["only_a"], found["only_b"]) == (1, 0, 1), found
    assert found["cells"] == {"s:events": 1}
    assert found["sample"]["differ"] == [{"row": changed.decode(), "cells": {
        "s:events": [str(int(events) + 1), events.decode()]}}]
    assert found["sample"]["only_b"] == [gone.decode()]


def test_a_backfill_stopped_before_its_bound_exits_3_naming_where_it_got_to(env: Env) -> None:
    spec = GeneratorSpec(seed=4803, events=20_000, sessions=2_000)
    env.produce(spec)
    ends = log_ends(env)
    until = datetime.fromtimestamp(time.time() + 3_600, UTC).isoformat(timespec="seconds")
    # 34 batches of 600 records: after two commits the batches planned meanwhile (the
    # interval's, while the first ones were slow) leave most of the copy still to do
    backfill = env.variant("short", hbase={"table_prefix": f"{env.name}sh"},
                           kafka={"max_rate_per_partition": 150})
    with env.background("--until-time", until, config=backfill, name="short") as job:
        wait_for("two commits", lambda: len(offsets_rows(env, f"{env.name}sh")) >= 2)
        said = run_cli("stop", "--config", backfill, "--wait", "60")
        rc = job.wait(timeout=120)
        text = job.text()
    assert rc == 3, f"exit {rc}: {said.stdout}\n{text[-3000:]}"
    assert "stopped before its bound" in text and "run again with the same bound" in text
    newest = offsets_rows(env, f"{env.name}sh")[-1][1]
    got = {p: int(newest[f"offsets:{p}".encode()]) for p in range(4)}
    short = [p for p in range(4) if got[p] < ends[p]]
    assert short and all(f"p{p} at {got[p]} of {ends[p]}" in text for p in short), text[-3000:]
    # the same bound run again finishes the copy: exit 0, exact
    env.run("--until-time", until, config=backfill)
    out = run_cli("verify", "--config", backfill, "--spec", spec.as_arg(), check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
