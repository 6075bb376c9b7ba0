"""Stopping, partitions appearing while running, the closed-sessions topic."""

from __future__ import annotations

import json
import signal

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions

from leakproof.core.events import WebEvent
from leakproof.hbase.session_store import scan_readable
from leakproof.kafka.admin import create_topic
from leakproof.model.spec import web_model
from leakproof.testing import oracle
from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec, generate

from .helpers import (
    Env,
    assert_offsets_chain,
    audit_total,
    offsets_rows,
    records,
    topic_records,
    wait_for,
)

pytestmark = pytest.mark.integration


def test_sigterm_finishes_the_batch_in_flight_commits_and_exits_0(env: Env) -> None:
    spec = GeneratorSpec(seed=601, events=30_000, sessions=3_000)
    env.produce(spec)
    with env.background(config=env.capped(500), name="sigterm") as job:
        wait_for("a first commit", lambda: len(offsets_rows(env)) >= 2)
        job.send_signal(signal.SIGTERM)
        rc = job.wait(timeout=120)
        text = job.text()
    assert rc == 0, text[-4000:]
    assert "stopping gracefully: SIGTERM received" in text
    chain = assert_offsets_chain(env, complete=False)
    assert sum(chain[-1].values()) < 30_000
    # what it committed is exactly what it processed: the restart finishes the rest
    processed = audit_total(env, b"records")
    assert processed == sum(chain[-1].values())
    env.run("--until-idle", "4")
    env.verify(spec)
    assert audit_total(env, b"records") == records(spec)


def test_partitions_added_while_running_are_picked_up(env: Env) -> None:
    first = GeneratorSpec(seed=701, events=8_000, sessions=800)
    env.produce(first)
    with env.background(name="grow") as job:
        wait_for("the first records committed",
                 lambda: audit_total(env, b"records") == records(first))
        admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
        try:
            admin.create_partitions({env.name: 6})
        finally:
            admin.close()
        second = GeneratorSpec(seed=702, events=8_000, sessions=800,
                               start_ts=DEFAULT_START_TS + 1_800_000)
        env.produce(second)
        wait_for("all records committed",
                 lambda: audit_total(env, b"records") == records(first, second))
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == 0
        text = job.text()
    assert "partition 5 of" in text and "appeared; reading it from offset 0" in text
    assert "batches run as one task" in text  # keys may move for a while: moved_keys
    newest = offsets_rows(env)[-1][1]
    assert {k for k in newest if k.startswith(b"offsets:")} == {
        f"offsets:{p}".encode() for p in range(6)}
    env.verify(first, second)


# Long open sessions, produced in three parts to a 4-partition topic grown to 8 before the
# third, so most sessions have records in an old and a new partition of one batch. Two tasks
# at once would both read such a row and the second put would drop the first one's events.
STRADDLE = GeneratorSpec(seed=711, events=30_000, sessions=3_000, span_s=20, mean_think_s=0.2,
                         late_fraction=0.0)
LONG = {"inactivity_gap_s": 7200}  # every session stays open: no watermark in the oracle


def _grow(env: Env, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    try:
        admin.create_partitions({env.name: NewPartitions(total_count=partitions)})
    finally:
        admin.close()


def _exact_across_partitions(env: Env, events: list[WebEvent], in_order: bool = True) -> None:
    """The oracle, independently: every event counted once, in emission order (without
    ``in_order``, out_of_order is left out: it depends on the order ranges were applied)."""
    expected = oracle.expected_rows({0: [e.as_event() for e in events]}, 7_230_000,
                                    web_model())
    assert all(row["state"] == "open" for row in expected.values())
    conn = env.hbase()
    try:
        got = scan_readable(conn.table("web_sessions"))
    finally:
        conn.close()
    if not in_order:
        for rows in (expected, got):
            for row in rows.values():
                row.pop("out_of_order", None)
    problems = oracle.compare(expected, got)
    assert problems == [], (len(problems), sorted({p.split(":")[0].rsplit(".", 1)[-1]
                                                   for p in problems}), problems[:5])


def test_a_session_in_two_partitions_of_one_batch_after_partitions_were_added_is_exact(
        env: Env) -> None:
    # the first part read by a run that then stops; the restart sees partitions added and
    # runs its batches as one task until keys stop moving
    events = generate(STRADDLE)
    third = len(events) // 3
    env.produce_events(events[:third])
    env.run("--until-idle", "3", config=env.variant("long", sessions=LONG))
    env.produce_events(events[third:2 * third])
    _grow(env, 8)
    env.produce_events(events[2 * third:])
    settle = env.variant("settle", sessions=LONG,
                         kafka={"partitions_settle_s": 0, "max_rate_per_partition": 0})
    out = env.run("--until-idle", "3", config=settle)
    text = out.stdout + out.stderr
    assert "batches run as one task" in text, text[-3000:]
    assert "several tasks again" in text, text[-3000:]
    _exact_across_partitions(env, events)
    conn = env.hbase()
    try:
        moved = conn.table("leakproof_state").row(f"lease:{env.name}:{env.cfg.kafka.group_id}")
    finally:
        conn.close()
    assert moved[b"l:moved_since"] == b"" and moved[b"l:moved_until"].count(b"=") == 8
    assert len(assert_offsets_chain(env)[-1]) == 8


def test_a_first_run_over_a_backlog_grown_under_it_holds_back_moved_keys_and_is_exact(
        env: Env) -> None:
    # no stored offsets, so no partitions seen added: the first run checks where keys sit
    events = generate(STRADDLE)
    cut = 2 * len(events) // 3
    env.produce_events(events[:cut])
    _grow(env, 8)
    env.produce_events(events[cut:])
    settle = env.variant("settle", sessions=LONG,
                         kafka={"partitions_settle_s": 0, "max_rate_per_partition": 0})
    out = env.run("--until-idle", "3", config=settle)
    text = out.stdout + out.stderr
    assert "sit in partitions Kafka's default partitioner does not give them" in text, \
        text[-3000:]
    # a held range is applied after its batch's other ranges: out of emission order
    _exact_across_partitions(env, events, in_order=False)
    assert len(assert_offsets_chain(env)[-1]) == 8


def test_closed_sessions_are_produced_to_a_compacted_topic(env: Env) -> None:
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 1, {"cleanup.policy": "compact"})
    closing = env.variant("closed", output={"closed_sessions_topic": topic})
    spec = GeneratorSpec(seed=801, events=6_000, sessions=600)
    env.produce(spec)
    env.run("--until-idle", "4", config=closing)
    env.verify(spec)
    conn = env.hbase()
    try:
        closed = {k.decode(): {c.decode()[2:]: v.decode() for c, v in cells.items()}
                  for k, cells in conn.table("web_sessions").scan(columns=[b"s"])
                  if cells.get(b"s:state") == b"closed"}
    finally:
        conn.close()
    assert closed
    summaries = {m.key.decode(): json.loads(m.value)
                 for m in topic_records(topic, "read_uncommitted")}
    assert set(summaries) == set(closed)
    for sid, summary in summaries.items():
        assert summary["events"] == closed[sid]["events"]
        assert summary["state"] == "closed"
