"""The closed-session summaries on the output topic, published in Kafka transactions: a
``read_committed`` consumer sees each closed session once per change, whatever crashed
mid-publish.

A closed session changes again only when a late event reaches it (its ``late_events`` goes
up), so a session's summaries, in topic order, must each carry more late events than the one
before (the same summary twice is a duplicate), and the last must equal its row.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest
from kafka import KafkaConsumer

from leakproof.generator import GeneratorSpec
from leakproof.produce import create_topic

from .helpers import Env, assert_offsets_chain, offsets_rows

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def closed_rows(env: Env) -> dict[str, dict[str, str]]:
    conn = env.hbase()
    try:
        return {k.decode(): {c.decode()[2:]: v.decode() for c, v in cells.items()}
                for k, cells in conn.table("web_sessions").scan(columns=[b"s"])
                if cells.get(b"s:state") == b"closed"}
    finally:
        conn.close()


def summaries(topic: str, isolation: str) -> list[tuple[str, dict[str, Any]]]:
    consumer = KafkaConsumer(topic, bootstrap_servers="127.0.0.1:9092", group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             isolation_level=isolation)
    try:
        return [(m.key.decode(), json.loads(m.value)) for m in consumer]
    finally:
        consumer.close()


@pytest.mark.slow
def test_each_closed_session_is_published_once_across_crashes_mid_publish(env: Env) -> None:
    """Three crashes, each restarted from HBase: the driver's JVM (and with it the local
    executor) killed with a transaction open, killed right after one committed (before the
    offsets did), and a Python worker killed after the session rows (outbox written, nothing
    published). Then the consumer: one summary per closed session, equal to its row."""
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    spec = GeneratorSpec(seed=2600, events=12_000, sessions=1_600, span_s=4 * 3600)
    env.produce(spec)
    closing = env.variant("closed", output={"closed_sessions_topic": topic},
                          kafka={"max_rate_per_partition": 400})
    for point, code in (("task_before_publish_commit@3:executor", None),
                        ("task_after_publish@3:executor", None),
                        ("task_after_sessions@2", 1)):
        before = len(offsets_rows(env))
        crashed = env.run("--until-idle", "4", config=closing,
                          env={"LEAKPROOF_CRASH_AT": point}, check=False)
        assert crashed.returncode != 0 if code is None else crashed.returncode == code, (
            point, crashed.returncode, crashed.stderr[-3000:])
        assert len(offsets_rows(env)) > before or point.endswith("@2"), point
    env.run("--until-idle", "4", config=closing)
    env.verify(spec)
    assert_offsets_chain(env)
    closed = closed_rows(env)
    assert len(closed) > 1_000
    seen = summaries(topic, "read_committed")
    by_session: dict[str, list[dict[str, Any]]] = {}
    for sid, summary in seen:
        by_session.setdefault(sid, []).append(summary)
    assert set(by_session) == set(closed), (f"{len(set(closed) - set(by_session))} missing, "
                                            f"{len(set(by_session) - set(closed))} extra")
    twice = [sid for sid, got in by_session.items()
             if any(int(b["late_events"]) <= int(a["late_events"])
                    for a, b in itertools.pairwise(got))]
    assert not twice, f"{len(twice)} sessions published twice for one change, e.g. {twice[0]}"
    for sid, got in by_session.items():
        row, last = closed[sid], got[-1]
        assert (last["events"], last["bytes"], last["late_events"], last["state"]) == (
            row["events"], row["bytes"], row["late_events"], "closed"), sid
    # the aborted attempts are in the log: a read_uncommitted consumer would count them
    assert len(summaries(topic, "read_uncommitted")) >= len(seen)


def test_without_transactions_every_closed_session_is_still_published(env: Env) -> None:
    """output.transactional: false, for brokers that forbid transactions: plain sends."""
    topic = f"{env.name}-plain"
    create_topic(env.cfg.kafka, topic, 1)
    spec = GeneratorSpec(seed=2610, events=4_000, sessions=600, span_s=3 * 3600)
    env.produce(spec)
    plain = env.variant("plain", output={"closed_sessions_topic": topic,
                                         "transactional": False})
    t0 = time.monotonic()
    env.run("--until-idle", "4", config=plain)
    assert time.monotonic() - t0 < 240
    env.verify(spec)
    closed = closed_rows(env)
    assert closed and {s for s, _ in summaries(topic, "read_uncommitted")} == set(closed)
