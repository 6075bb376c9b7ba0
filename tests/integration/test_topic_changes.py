"""The topic changing under a running job: records deleted before they were read, and the
topic deleted and recreated. Each either stops the job with a message naming what was lost,
or (kafka.on_data_loss: skip) goes on with the gap recorded durably and the rest exact."""

from __future__ import annotations

import itertools

import pytest
from kafka import KafkaAdminClient, TopicPartition

from leakproof.commands.verify import read_topic
from leakproof.core.moved_keys import placed
from leakproof.hbase.connection import connect
from leakproof.hbase.session_store import scan_readable
from leakproof.hbase.state_store import StateStore
from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import GeneratorSpec, generate
from leakproof.testing.oracle import compare, expected_rows

from .helpers import Env, assert_offsets_chain, log_ends, offsets_rows, run_cli, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def admin() -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")


def recreate(env: Env) -> None:
    """The test's topic deleted and made again under the same name (4 partitions)."""
    client = admin()
    try:
        client.delete_topics([env.name])
        wait_for("the old topic gone", lambda: env.name not in set(client.list_topics()))
    finally:
        client.close()
    # a topic still being deleted on a broker refuses its name: made again once it takes it
    wait_for("the topic made again", lambda: create_topic(env.cfg.kafka, env.name, 4))


def delete_records(env: Env, partition: int, before: int) -> None:
    client = admin()
    try:
        client.delete_records({TopicPartition(env.name, partition): before})
    finally:
        client.close()


def delete_while_running(env: Env, config: str, idle_s: str, label: str) -> tuple[int, str, int]:
    """Start the job (capped, so it lags), delete partition 1 up to 100 records before its end
    after the first commit, and wait for the job to stop: exit code, log, the cut offset."""
    with env.background("--until-idle", idle_s, config=config, name=label) as job:
        wait_for("a first commit", lambda: len(offsets_rows(env)) >= 1)
        cut = log_ends(env)[1] - 100
        delete_records(env, 1, cut)
        rc = job.wait(timeout=240)
        return rc, job.text(), cut


def test_delete_records_under_a_running_job_fails_naming_the_loss(env: Env) -> None:
    env.produce(GeneratorSpec(seed=1600, events=24_000, sessions=2_400))
    rc, text, cut = delete_while_running(env, env.capped(200), "30", "delete-fail")
    assert rc == 1, text[-4000:]
    assert f"data loss on {env.name} partition 1" in text, text[-4000:]
    assert f"earliest available offset {cut}" in text
    committed = assert_offsets_chain(env, complete=False)[-1]
    assert committed[1] < cut  # nothing past the loss was committed


def test_delete_records_under_a_running_job_with_skip_records_the_gap(env: Env) -> None:
    spec = GeneratorSpec(seed=1610, events=24_000, sessions=2_400)
    env.produce(spec)
    before, _ = read_topic(env.cfg)  # every event with its offset (its index: no markers)
    skipping = env.variant("skip", kafka={"on_data_loss": "skip", "max_rate_per_partition": 200})
    rc, text, cut = delete_while_running(env, skipping, "6", "delete-skip")
    assert rc == 0, text[-4000:]
    conn = connect(env.cfg.hbase)
    try:
        gaps = StateStore(conn, env.cfg.hbase.state_table).gaps(env.name, "it")
        actual = scan_readable(conn.table(env.cfg.hbase.sessions_table))
    finally:
        conn.close()
    # one gap per batch that found its range deleted (batches planned before the deletion
    # each lose their own range): together one contiguous run of offsets, ending at the cut
    spans = sorted((int(g["stored"]), int(g["resumed_at"])) for g in gaps)
    assert {g["row"].split(":")[-2] for g in gaps} == {"1"}, gaps  # gap:topic:group:p:from
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), spans
    assert sum(int(g["lost"]) for g in gaps) == spans[-1][1] - spans[0][0]
    lost_from, lost_to = spans[0][0], spans[-1][1]
    assert lost_to == cut and 0 < lost_from < cut
    # the oracle over exactly the events that survived: partition 1 without [from, to)
    survived = {p: (evs[:lost_from] + evs[lost_to:] if p == 1 else evs)
                for p, evs in before.items()}
    expected = expected_rows(survived, env.cfg.sessions.close_after_ms, env.cfg.model)
    assert compare(expected, actual) == []
    assert assert_offsets_chain(env)[-1] == log_ends(env)


def test_topic_recreated_under_a_running_job_is_refused(env: Env) -> None:
    spec = GeneratorSpec(seed=1620, events=4_000, sessions=400)
    env.produce(spec)
    with env.background("--until-idle", "60", name="recreate") as job:
        wait_for("everything committed",
                 lambda: bool(offsets_rows(env)) and
                 assert_offsets_chain(env, complete=False)[-1] == log_ends(env))
        recreate(env)
        env.produce(GeneratorSpec(seed=1621, events=8_000, sessions=800))  # a longer new log
        rc = job.wait(timeout=120)
        text = job.text()
    assert rc == 1, text[-4000:]
    assert "was deleted and recreated while this job ran" in text, text[-4000:]
    # and a restart refuses too, though the new log is longer than the stored offsets
    again = env.run(check=False)
    assert again.returncode != 0
    assert "was deleted and recreated" in again.stderr, again.stderr[-3000:]


def test_a_recreated_topic_rewound_as_the_refusal_says_is_exact(env: Env) -> None:
    """Sessions with events on both sides of a delete and recreate: the job refuses the
    recreated topic, the operator rewinds it to its start as the refusal says, and no record
    of the new topic is taken for a replay of the old one's (fences of their own)."""
    events = generate(GeneratorSpec(seed=1630, events=8_000, sessions=2_000))
    half = len(events) // 2
    env.produce_events(events[:half])
    env.run("--until-idle", "4")
    recreate(env)
    env.produce_events(events[half:])
    refused = env.run(check=False)
    assert refused.returncode != 0 and "leakproof offsets rewind" in refused.stderr, \
        refused.stderr[-3000:]
    run_cli("offsets", "rewind", "--config", str(env.path), "--to-offsets",
            "0=0,1=0,2=0,3=0")
    env.run("--until-idle", "4")
    conn = connect(env.cfg.hbase)
    try:
        actual = scan_readable(conn.table(env.cfg.hbase.sessions_table))
    finally:
        conn.close()
    per_partition = {p: [e.as_event() for e in events if placed(e.session_id.encode(), p, 4)]
                     for p in range(4)}
    expected = expected_rows(per_partition, env.cfg.sessions.close_after_ms, env.cfg.model)
    problems = compare(expected, actual)
    assert problems == [], (len(problems), problems[:5])
