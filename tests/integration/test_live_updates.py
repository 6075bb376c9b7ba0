"""``output.emit: update``: every batch that changes a session publishes it, open or closed,
each summary with a version strictly increasing per key and ``final`` once closed -- across
crashes mid-publish and restarts from HBase, as a read_committed consumer sees the topic.
"""

from __future__ import annotations

import io
import itertools
import json
from collections import defaultdict
from typing import Any

import fastavro
import pytest
from kafka import KafkaConsumer

from leakproof.config import Registry
from leakproof.generator import GeneratorSpec
from leakproof.kafka.admin import create_topic
from leakproof.kafka.registry import RegistryClient

from .helpers import KAFKA, Env, assert_offsets_chain, crash_mid_publish, session_rows
from .test_gap_sessions import day

pytestmark = [pytest.mark.integration, pytest.mark.faults]
REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"


def read_committed(topic: str) -> list[tuple[str, bytes | None, dict[str, bytes]]]:
    """Every record of ``topic`` a read_committed consumer sees: key, value, headers."""
    consumer = KafkaConsumer(topic, bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}", group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             isolation_level="read_committed")
    try:
        return [(m.key.decode(), m.value, dict(m.headers)) for m in consumer]
    finally:
        consumer.close()


@pytest.mark.slow
def test_live_updates_are_versioned_and_exact_across_crashes_mid_publish(env: Env) -> None:
    """400 sessions open at once, read 80 events/s per partition: most sessions change in
    ten batches or more. The driver's JVM is killed with a transaction open, then right
    after one committed (before the offsets did), and a Python worker after the session
    rows (outbox written, nothing published); each time the job restarts from HBase. Then
    ``verify`` (which checks the topic too) is exact, and the consumer sees per key strictly
    increasing versions, its last record equal to its row, final exactly when closed."""
    topic = f"{env.name}-live"
    create_topic(env.cfg.kafka, topic, 2)
    spec = GeneratorSpec(seed=2700, events=12_000, sessions=400, span_s=240)
    env.produce(spec)
    live = env.variant("live", output={"closed_sessions_topic": topic, "emit": "update"},
                       sessions={"inactivity_gap_s": 120, "grace_s": 10},
                       kafka={"max_rate_per_partition": 80})
    crash_mid_publish(env, live)
    env.run("--until-idle", "4", config=live)
    env.verify(spec, config=live)
    assert_offsets_chain(env)

    rows = session_rows(env)
    versions: dict[str, list[int]] = defaultdict(list)
    last: dict[str, tuple[bytes | None, dict[str, bytes]]] = {}
    for key, value, headers in read_committed(topic):
        versions[key].append(int(headers["leakproof.version"]))
        last[key] = (value, headers)
    assert set(last) == set(rows)
    twice = [k for k, seen in versions.items() if seen != sorted(set(seen))]
    assert not twice, f"{len(twice)} keys whose versions do not strictly increase: {twice[:3]}"
    for key, (value, headers) in last.items():
        assert value is not None, key
        summary = json.loads(value)
        final = rows[key]["state"] == "closed"
        assert headers["leakproof.final"] == (b"true" if final else b"false"), key
        assert (summary.pop("version"), summary.pop("final"), summary.pop("session_id")) == (
            int(headers["leakproof.version"]), final, key)
        assert summary == rows[key], key
    states = {row["state"] for row in rows.values()}
    assert states == {"open", "closed"}, states  # both kinds of last record were seen
    assert sum(len(seen) >= 5 for seen in versions.values()) >= 300


def test_live_updates_in_avro_carry_version_and_final_as_fields(env: Env) -> None:
    """``output.format: avro`` with ``emit: update``: the schema registered for the topic
    has ``version`` and ``final`` (with defaults: a compatible change of a subject that
    held the close schema), and each record's fields equal its headers; the last record per
    key decodes to its row."""
    topic = f"{env.name}-live-avro"
    create_topic(env.cfg.kafka, topic, 2)
    spec = GeneratorSpec(seed=2710, events=4_000, sessions=300, span_s=240)
    env.produce(spec)
    registry = RegistryClient(Registry(REGISTRY))
    live = env.variant("live-avro", output={"closed_sessions_topic": topic, "emit": "update",
                                            "format": "avro", "registry": {"url": REGISTRY}},
                       sessions={"inactivity_gap_s": 120, "grace_s": 10},
                       kafka={"max_rate_per_partition": 100})
    env.run("--until-idle", "4", config=live)
    env.verify(spec, config=live)
    latest = json.loads(registry.latest(f"{topic}-value") or "null")
    assert latest["fields"][-2:] == [{"name": "version", "type": "long", "default": -1},
                                     {"name": "final", "type": "boolean", "default": True}]
    writer = fastavro.parse_schema(latest)
    rows = session_rows(env)
    last: dict[str, dict[str, Any]] = {}
    for key, value, headers in read_committed(topic):
        assert value is not None
        rec = fastavro.schemaless_reader(io.BytesIO(value[5:]), writer, None)
        assert isinstance(rec, dict)
        assert (rec["version"], rec["final"]) == (
            int(headers["leakproof.version"]), headers["leakproof.final"] == b"true"), key
        last[key] = rec
    assert set(last) == set(rows)
    for key, rec in last.items():
        assert rec.pop("final") == (rows[key]["state"] == "closed"), key
        rec.pop("version")
        assert rec.pop("session_id") == key
        assert {k: str(v) for k, v in rec.items() if v is not None} == rows[key], key


def test_every_s_sends_an_open_session_at_most_once_per_window_and_each_close(env: Env
                                                                             ) -> None:
    """``emit: {every_s: 3}`` over one-second batches: per key, the open sessions' versions
    (cell timestamps, by which the partition's window goes) at least 3 s apart, every
    closed session's last record its row with ``final``, and ``verify`` (with every_s: an
    open row's last change may be held) exact."""
    topic = f"{env.name}-every"
    create_topic(env.cfg.kafka, topic, 2)
    spec = GeneratorSpec(seed=2720, events=8_000, sessions=300, span_s=240)
    env.produce(spec)
    every = env.variant("every", output={"closed_sessions_topic": topic,
                                         "emit": {"every_s": 3}},
                        sessions={"inactivity_gap_s": 120, "grace_s": 10},
                        kafka={"max_rate_per_partition": 80})
    env.run("--until-idle", "4", config=every)
    env.verify(spec, config=every)
    rows = session_rows(env)
    opened: dict[str, list[int]] = defaultdict(list)
    last: dict[str, bytes | None] = {}
    for key, value, headers in read_committed(topic):
        if headers["leakproof.final"] == b"false":
            opened[key].append(int(headers["leakproof.version"]))
        last[key] = value
    close = [k for k, seen in opened.items()
             if any(b - a < 3_000 for a, b in itertools.pairwise(seen))]
    assert not close, f"{len(close)} keys sent twice within 3 s, e.g. {opened[close[0]]}"
    assert sum(len(seen) >= 3 for seen in opened.values()) >= 100  # updates did go out
    closed = {k for k, row in rows.items() if row["state"] == "closed"}
    assert closed
    for key in closed:
        value = last[key]
        assert value is not None
        summary = json.loads(value)
        assert summary.pop("final") is True and summary.pop("session_id") == key
        summary.pop("version")
        assert summary == rows[key], key


def test_live_updates_split_by_the_gap_end_merged_sessions_in_tombstones(env: Env) -> None:
    """``sessions.by: gap`` with ``emit: update``: a client-keyed day of visits, then late
    pages that bridge two closed visits or come before a first one, their batch killed
    after the merged-away rows were deleted and restarted. ``verify`` is exact, topic
    included: per key strictly increasing versions, each row's last record equal to it, and
    each merged-away or moved key's last record a tombstone."""
    topic = f"{env.name}-live-gap"
    create_topic(env.cfg.kafka, topic, 2)
    on_time, late = day()
    live = env.variant("live-gap", sessions={"by": "gap", "inactivity_gap_s": 60,
                                             "grace_s": 5, "late": "fold"},
                       output={"closed_sessions_topic": topic, "emit": "update"})
    env.produce_events(on_time)
    env.run("--until-idle", "3", config=live)
    env.produce_events(late)
    crashed = env.run("--until-idle", "3", config=live, check=False,
                      env={"LEAKPROOF_CRASH_AT": "task_after_session_deletes:executor"})
    assert crashed.returncode != 0, crashed.stderr[-3000:]
    env.run("--until-idle", "3", config=live)
    env.verify(config=live)
    rows = session_rows(env)
    last: dict[str, bytes | None] = {}
    for key, value, _ in read_committed(topic):
        last[key] = value
    gone = {k for k, v in last.items() if v is None}
    assert gone and not gone & set(rows)  # the merged-away and moved keys
    assert {k for k, v in last.items() if v is not None} == set(rows)
