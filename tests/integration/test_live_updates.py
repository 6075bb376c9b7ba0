"""``output.emit: update``: every batch that changes a session publishes it, open or closed,
each summary with a version strictly increasing per key and ``final`` once closed -- across
crashes mid-publish and restarts from HBase, as a read_committed consumer sees the topic.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import random
import time
from collections import defaultdict
from typing import Any

import fastavro
import pytest

from leakproof.core.config import Registry
from leakproof.core.events import WebEvent
from leakproof.kafka.admin import create_topic
from leakproof.kafka.registry import RegistryClient
from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec

from .helpers import (
    Background,
    Env,
    assert_offsets_chain,
    crash_mid_publish,
    offsets_rows,
    session_rows,
    topic_records,
    wait_for,
)
from .test_gap_sessions import day

pytestmark = [pytest.mark.integration, pytest.mark.faults]
REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"


def read_committed(topic: str) -> list[tuple[str, bytes | None, dict[str, bytes]]]:
    """Every record of ``topic`` a read_committed consumer sees: key, value, headers."""
    return [(m.key.decode(), m.value, dict(m.headers)) for m in topic_records(topic)]


@pytest.mark.slow
@pytest.mark.deep
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


def many_batch_sessions(sessions: int, pages: int, apart_s: int) -> list[WebEvent]:
    """``sessions`` visits of ``pages`` pages each, ``apart_s`` apart in event time, their
    starts spread over as long as one visit lasts; in event-time order, as a busy site
    sends them. Each visit's pages are a few hundred records apart in its partition, so a
    read capped at 100 records per partition and batch sees each in a batch of its own."""
    rng = random.Random(2730)
    lasts = (pages - 1) * apart_s * 1000
    events = [WebEvent(f"v{i:05d}", f"u{i:05d}", k, start + k * apart_s * 1000, "pageview",
                       f"/p{k}", 200, 100 + k)
              for i in range(sessions)
              for start in [DEFAULT_START_TS + rng.randrange(lasts)]
              for k in range(pages)]
    return sorted(events, key=lambda e: (e.ts, e.session_id))


@pytest.mark.slow
def test_live_updates_exact_across_driver_kills_at_random_moments(env: Env) -> None:
    """2 000 sessions, each changed in seven batches or more; the whole driver (its JVM and
    Python workers) SIGKILLed three times at moments drawn at random (the seed is in the
    failure message), each time restarted from HBase. Then ``verify`` is exact (topic
    included: per key strictly increasing versions, the last record its row) and, read at
    read_committed: no (key, version) twice, the topic compacted by key equal to the
    sessions table cell for cell, ``final`` exactly on the closed rows."""
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    topic = f"{env.name}-kills"
    create_topic(env.cfg.kafka, topic, 2)
    env.produce_events(many_batch_sessions(2_000, 8, 20))
    live = env.variant("kills", output={"closed_sessions_topic": topic, "emit": "update"},
                       # (no idle closes: a run restarted after a kill, or one behind its
                       # planning on a slow day, is silent by its own clock, and this test
                       # is of kills, with the oracle's event-time closes)
                       sessions={"inactivity_gap_s": 60, "grace_s": 10, "idle_after_s": None},
                       kafka={"max_rate_per_partition": 100})
    for kill in range(3):
        before = len(offsets_rows(env))
        wanted = before + rng.randint(1, 6)  # then a moment inside the next batch or so
        with env.background("--until-idle", "4", config=live, name=f"kill{kill}") as job:
            def committed_or_ended(n: int = wanted, job: Background = job) -> bool:
                return len(offsets_rows(env)) >= n or job.poll() is not None
            wait_for(f"commit {wanted} (seed {seed})", committed_or_ended, timeout=240)
            assert job.poll() is None, f"seed {seed}: the job ended before kill {kill}: " \
                                       f"{job.text()[-3000:]}"
            # the stimulus, not a wait for a result: a moment inside the next batch or two
            time.sleep(rng.uniform(0.0, 2.0))
        # (leaving the block SIGKILLs the job's process group: driver, JVM, workers)
    env.run("--until-idle", "4", config=live)
    env.verify(config=live)
    assert_offsets_chain(env)

    rows = session_rows(env)
    seen: set[tuple[str, int]] = set()
    twice: list[tuple[str, int]] = []
    compacted: dict[str, tuple[bytes | None, dict[str, bytes]]] = {}
    versions: dict[str, int] = defaultdict(int)
    for key, value, headers in read_committed(topic):
        version = int(headers["leakproof.version"])
        if (key, version) in seen:
            twice.append((key, version))
        seen.add((key, version))
        versions[key] += 1
        compacted[key] = (value, headers)
    assert not twice, f"seed {seed}: {len(twice)} (key, version) pairs twice: {twice[:3]}"
    assert set(compacted) == set(rows), f"seed {seed}"
    for key, (value, headers) in compacted.items():
        assert value is not None, key
        summary = json.loads(value)
        final = rows[key]["state"] == "closed"
        assert headers["leakproof.final"] == (b"true" if final else b"false"), key
        assert (summary.pop("final"), summary.pop("session_id")) == (final, key), key
        summary.pop("version")
        assert summary == rows[key], (seed, key)
    assert {row["state"] for row in rows.values()} == {"open", "closed"}
    assert sum(n >= 7 for n in versions.values()) >= 1_900, (
        seed, sorted(versions.values())[:20])


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
