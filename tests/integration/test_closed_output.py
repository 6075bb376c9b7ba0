"""The closed-session summaries on the output topic, published in Kafka transactions: a
``read_committed`` consumer sees each closed session once per change, whatever crashed
mid-publish (helpers.published_once_per_change says what that means). The executor kill on
the standalone cluster is in test_cluster_faults.py.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from leakproof.core.config import Registry
from leakproof.kafka.admin import create_topic
from leakproof.kafka.registry import RegistryClient
from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    Env,
    assert_offsets_chain,
    closed_rows,
    crash_mid_publish,
    offsets_rows,
    published_once_per_change,
    summaries,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults]
REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"


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
    # a batch's four ranges run in one task (1 600 records): the sixth publish of a worker
    # comes in a later batch than its first, so each crash finds a batch committed before it
    crash_mid_publish(env, closing)
    env.run("--until-idle", "4", config=closing)
    env.verify(spec)
    assert_offsets_chain(env)
    assert len(published_once_per_change(env, topic)) > 1_000


def test_without_transactions_every_closed_session_is_still_published(env: Env) -> None:
    """output.transactional: false, for brokers that forbid transactions: plain sends."""
    topic = f"{env.name}-plain"
    create_topic(env.cfg.kafka, topic, 1)
    spec = GeneratorSpec(seed=2610, events=4_000, sessions=600, span_s=3 * 3600)
    env.produce(spec)
    plain = env.variant("plain", output={"closed_sessions_topic": topic,
                                         "transactional": False})
    env.run("--until-idle", "4", config=plain)
    env.verify(spec)
    closed = closed_rows(env)
    assert closed and {s for s, _ in summaries(topic, "read_uncommitted")} == set(closed)
    assert len(summaries(topic, "read_uncommitted")) >= len(closed)


def test_two_workers_taking_turns_on_a_partition_each_publish(env: Env) -> None:
    """A partition's ranges move between Python workers, each with its own producer of the
    partition's transactional id: each new one fences the last, and the fenced one, when the
    partition comes back to it, makes a new producer and publishes -- wherever the broker's
    refusal surfaces (begin, a send, the commit)."""
    from leakproof.core import config as config_mod
    from leakproof.kafka.closed_sink import ClosedSink

    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 1)
    cfg = config_mod.load(env.variant("sink", output={"closed_sessions_topic": topic}))
    a, b = ClosedSink(cfg.kafka, cfg.output, 0), ClosedSink(cfg.kafka, cfg.output, 0)
    try:
        for turn, sink in enumerate((a, b, a, b, a)):
            # enough records that the broker's refusal arrives while they are being sent
            sink.publish([(f"s{turn}-{i}".encode(), b"{}") for i in range(3000)],
                         f"box-{turn}", 10 * (turn + 1))
            assert sink.published(f"box-{turn}")
    finally:
        a.close()
        b.close()
    seen = [sid for sid, _ in summaries(topic, "read_committed")]
    assert seen == [f"s{turn}-{i}" for turn in range(5) for i in range(3000)]


def test_avro_summaries_are_registry_framed_under_a_schema_derived_from_the_model(
        env: Env) -> None:
    """output.format: avro: the summary schema is registered as <topic>-value in the real
    registry, each value is magic 0 + that id + a typed record, and the summaries a
    read_committed consumer decodes with the registry's schema equal the closed rows."""
    topic = f"{env.name}-avro"
    create_topic(env.cfg.kafka, topic, 2)
    spec = GeneratorSpec(seed=2620, events=4_000, sessions=600, span_s=3 * 3600)
    env.produce(spec)
    registry = RegistryClient(Registry(REGISTRY))
    avro = env.variant("avro", output={"closed_sessions_topic": topic, "format": "avro",
                                       "registry": {"url": REGISTRY}})
    env.run("--until-idle", "4", config=avro)
    env.verify(spec)
    latest = json.loads(registry.latest(f"{topic}-value") or "null")
    assert latest["name"] == "SessionSummary"
    assert {"name": "events", "type": ["null", "long"], "default": None} in latest["fields"]
    writers: dict[bytes, Any] = {}

    def decode(value: bytes) -> dict[str, Any]:
        assert value[0] == 0, value[:5]
        if value[:5] not in writers:
            text = registry.schema(int.from_bytes(value[1:5], "big"))
            writers[value[:5]] = fastavro.parse_schema(json.loads(text or "null"))
        rec = fastavro.schemaless_reader(io.BytesIO(value[5:]), writers[value[:5]], None)
        assert isinstance(rec, dict)
        return {k: str(v) for k, v in rec.items() if v is not None}

    assert len(published_once_per_change(env, topic, decode)) > 300
    assert len(writers) == 1  # one schema for every summary


def test_two_attempts_of_one_range_publish_its_outbox_once(env: Env) -> None:
    """A speculative copy of a range and the original, each in its own Python worker with
    its own producer of the partition's transactional id: one after the other, and both at
    once. Each outbox goes out once; a copy scoped to other tables (a reprocessing run with
    another ``hbase.table_prefix``) has ids of its own and publishes its own."""
    import threading

    from leakproof.core import config as config_mod
    from leakproof.kafka.closed_sink import ClosedSink

    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 1)
    cfg = config_mod.load(env.variant("sink", output={"closed_sessions_topic": topic}))
    sinks = [ClosedSink(cfg.kafka, cfg.output, 0) for _ in range(4)]
    copy = ClosedSink(cfg.kafka, cfg.output, 0, scope="reprocess")
    assert copy.txn_id != sinks[0].txn_id
    try:
        first = [(f"a-{i}".encode(), b"{}") for i in range(500)]
        sinks[0].publish(first, "box-1", 10)
        sinks[1].publish(first, "box-1", 10)  # the copy that finished later
        second = [(f"b-{i}".encode(), b"{}") for i in range(3000)]
        errors: list[BaseException] = []

        def attempt(sink: ClosedSink) -> None:
            try:
                sink.publish(second, "box-2", 20)
            except Exception as exc:  # noqa: BLE001 - a fenced attempt fails its task
                errors.append(exc)

        both = [threading.Thread(target=attempt, args=(s,)) for s in sinks[2:]]
        for t in both:
            t.start()
        for t in both:
            t.join(120)
        assert len(errors) < 2, errors  # at least one attempt saw its outbox through
        copy.publish(first, "box-1", 10)
    finally:
        for s in (*sinks, copy):
            s.close()
    seen = [sid for sid, _ in summaries(topic, "read_committed")]
    assert sorted(seen) == sorted([f"a-{i}" for i in range(500)] * 2
                                  + [f"b-{i}" for i in range(3000)])


def test_a_missing_summaries_topic_is_refused_before_the_first_batch(env: Env) -> None:
    """leakproof does not create the summaries' topic; naming one that is not there stops
    the run at its start (exit 2, the key named) instead of failing its first batch after
    every transaction deadline ran out. Nothing is read or committed."""
    env.produce(GeneratorSpec(seed=2740, events=200, sessions=20))
    missing = env.variant("missing", output={"closed_sessions_topic": f"{env.name}-nowhere"})
    refused = env.run("--until-idle", "3", config=missing, check=False)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "output.closed_sessions_topic" in refused.stderr, refused.stderr[-3000:]
    assert f"create {env.name}-nowhere first" in refused.stderr
    assert offsets_rows(env) == []
