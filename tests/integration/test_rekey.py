"""``input.rekey`` against the real stack: a topic whose records carry null or random keys,
as log shippers send them, re-keyed by the visitor field through the internal topic exactly
once -- each source record there once at read_committed, under its session key, with its
source coordinates -- and the visitors' gap sessions exact against the oracle (``verify``),
also after a driver SIGKILL between a batch's writes and its commit, and a Python worker
killed in the middle of the stage's transaction."""

from __future__ import annotations

import json
import random
import time
import uuid
from pathlib import Path

import happybase
import pytest
from kafka import KafkaAdminClient

from leakproof.commands.produce import send_raw
from leakproof.core import codec
from leakproof.core.config import load
from leakproof.core.rekey import SOURCE_HEADER
from leakproof.kafka.admin import KafkaMetadata
from leakproof.kafka.rekey import rekey_partition
from leakproof.testing.generator import GeneratorSpec, generate

from .helpers import KAFKA, THRIFT, Env, fresh_env, run_cli, stack, topic_records

pytestmark = pytest.mark.integration

SPEC = GeneratorSpec(seed=4242, events=20_500, sessions=2_000)


def produce_unkeyed(env: Env, spec: GeneratorSpec, keyed: int = 500) -> None:
    """The spec's events, the first all but ``keyed`` with null keys (spread over the
    partitions by the producer), the rest under random keys."""
    events = generate(spec)
    rng = random.Random(spec.seed)
    split = len(events) - keyed
    send_raw(env.cfg.kafka, env.cfg.kafka.topic,
             [(None if i < split else f"r-{rng.getrandbits(40):010x}".encode(),
               codec.encode_value(e)) for i, e in enumerate(events)])


def rekey_config(env: Env, **kafka: object) -> str:
    return env.variant("rekey", input={"rekey": {"field": "session_id"}},
                       sessions={"by": "gap", "inactivity_gap_s": 600, "grace_s": 30,
                                 "late": "fold"},
                       kafka=dict(kafka))


def internal_records(env: Env, isolation: str = "read_committed"
                     ) -> list[tuple[int, bytes | None, str]]:
    """(partition, key, leakproof.source) of every record of the internal topic, read at
    ``isolation``."""
    return [(m.partition, m.key, dict(m.headers)[SOURCE_HEADER].decode())
            for m in topic_records(f"{env.cfg.kafka.topic}.leakproof-rekey", isolation)]


def internal_offsets_rows(env: Env, topic: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """The offsets rows of ``topic`` in the test's tables, oldest first."""
    conn = happybase.Connection(*THRIFT, table_prefix=env.cfg.hbase.table_prefix)
    try:
        return list(conn.table("stream_kafka_offsets").scan(row_prefix=f"{topic}:it:".encode()))
    finally:
        conn.close()


def key_mismatches(env: Env, config: str) -> int:
    out = run_cli("deadletters", "list", "--config", config, "--json", check=False)
    return out.stdout.count("key_mismatch")


def check_exact(env: Env, config: str, bad: int = 0, spec: GeneratorSpec = SPEC) -> None:
    copies = internal_records(env)
    sources = [s for _, _, s in copies]
    assert len(sources) == len(generate(spec)) + bad == len(set(sources))  # each one once
    assert sum(key is not None and key.startswith(b"s") for _, key, _ in copies) == len(
        generate(spec))
    assert key_mismatches(env, config) == 0
    env.verify(spec, config=config)  # the stage's copy and the sessions, by visitor


def test_unkeyed_records_are_rekeyed_once_and_sessions_are_exact(env: Env) -> None:
    produce_unkeyed(env, SPEC)
    send_raw(env.cfg.kafka, env.cfg.kafka.topic, [(None, b"\xff not avro")] * 3)
    config = rekey_config(env)
    env.run("--until-idle", "4", config=config)
    check_exact(env, config, bad=3)
    behind = json.loads(run_cli("offsets", "lag", "--config", config, "--json").stdout)
    assert behind["topic"] == f"{env.name}.leakproof-rekey" and behind["total_lag"] == 0
    assert behind["rekey"]["group"] == "it.rekey" and behind["rekey"]["total_lag"] == 0
    assert sum(r["log_end"] for r in behind["rekey"]["partitions"]) == len(generate(SPEC)) + 3
    letters = [json.loads(line) for line in run_cli(
        "deadletters", "list", "--config", config, "--json").stdout.splitlines()
        if line.startswith("{") and '"kind"' in line]
    assert [x["kind"] for x in letters] == ["not_avro"] * 3, letters
    assert all(x["source"].startswith(f"{env.name}:") for x in letters)
    shown = run_cli("deadletters", "show", "--config", config,
                    f"{letters[0]['partition']}:{letters[0]['offset']}").stdout
    assert f"source record {letters[0]['source']}" in shown
    # a rewind re-reads the internal topic (the job's offsets are its), fenced: still exact,
    # and the source is not copied again
    rewound = run_cli("offsets", "rewind", "--config", config, "--to-offsets",
                      "0=0,1=0,2=0,3=0")
    assert f"{env.name}.leakproof-rekey" in rewound.stdout + rewound.stderr
    env.run("--until-idle", "4", config=config)
    check_exact(env, config, bad=3)
    rows = internal_offsets_rows(env, f"{env.name}.leakproof-rekey")
    assert rows, "no offsets row of the internal topic committed"

@pytest.mark.faults
@pytest.mark.deep
def test_a_stage_killed_mid_transaction_and_a_driver_killed_restart_exactly(env: Env
                                                                            ) -> None:
    """A capped rate makes many batches: a Python worker dies inside the stage's second
    transaction it runs (left open: the next init_transactions of its id aborts it), so the
    run fails; the restart's driver SIGKILLs itself in its second batch after the session
    writes (that batch's stage committed, its sessions not); a last run finishes. Each source
    record is copied once, the sessions exact."""
    produce_unkeyed(env, SPEC)
    config = rekey_config(env, max_rate_per_partition=1000)
    failed = env.run("--until-idle", "4", config=config,
                     env={"LEAKPROOF_CRASH_AT": "rekey_before_commit@2"}, check=False)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "re-keying" in failed.stderr, failed.stderr[-3000:]
    crashed = env.run("--until-idle", "4", config=config,
                      env={"LEAKPROOF_CRASH_AT": "driver_after_tasks@2"}, check=False)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    env.run("--until-idle", "4", config=config)
    check_exact(env, config)
    # the killed transaction's records are in the log, aborted: only read_uncommitted sees them
    assert len(internal_records(env, "read_uncommitted")) > len(internal_records(env))


def test_a_rewind_named_in_source_offsets_reads_their_copies_again_exactly(env: Env) -> None:
    """``offsets rewind --to-source-offsets`` takes each source partition back to half its
    length: each internal partition goes back to its first copy of a source record at or
    after its partition's target, as the test finds it with its own consumer. The run
    after it reads those copies again and stays exact (fenced), copying nothing anew; a
    target past what was read is refused, naming why."""
    produce_unkeyed(env, SPEC)
    config = rekey_config(env)
    env.run("--until-idle", "4", config=config)
    copies = [(m.partition, m.offset, dict(m.headers)[SOURCE_HEADER].decode())
              for m in topic_records(f"{env.cfg.kafka.topic}.leakproof-rekey")]
    ends: dict[int, int] = {}
    for _, _, source in copies:
        _, p, o = source.rsplit(":", 2)
        ends[int(p)] = max(ends.get(int(p), 0), int(o) + 1)
    targets = {p: end // 2 for p, end in ends.items()}
    expected: dict[int, int] = {}
    for q, offset, source in copies:  # in offset order within each internal partition
        _, p, o = source.rsplit(":", 2)
        if int(o) >= targets[int(p)] and q not in expected:
            expected[q] = offset
    asked = ",".join(f"{p}={o}" for p, o in sorted(targets.items()))
    plan = run_cli("offsets", "rewind", "--config", config, "--to-source-offsets", asked,
                   "--dry-run")
    summary = json.loads(plan.stdout.strip().splitlines()[-1])
    assert len(expected) == 4  # every internal partition holds copies past the targets
    assert {int(q): o for q, o in summary["offsets"].items()} == expected, plan.stdout
    assert sum(summary["read_again"].values()) > 0
    run_cli("offsets", "rewind", "--config", config, "--to-source-offsets", asked)
    before = len(internal_records(env))
    env.run("--until-idle", "4", config=config)
    assert len(internal_records(env)) == before  # the source is not copied again
    check_exact(env, config)
    past = run_cli("offsets", "rewind", "--config", config, "--to-source-offsets",
                   f"0={ends[0] + 5}", check=False)
    assert past.returncode != 0 and "only goes back" in past.stderr, past.stderr[-2000:]


def test_the_stages_offsets_are_kept_alive_and_rebuilt_from_the_copies_when_gone(env: Env
                                                                                 ) -> None:
    """The stage's group never has members, so the broker expires an offset nobody commits
    for its retention, and a stage copying that partition again from its start would count
    it twice. A caught-up partition's refresh task (each hour, and at a driver's start)
    commits the same offset in a transaction, copying nothing. And with the group's offsets
    gone all the same (deleted here, as an expiry leaves them), the next run resumes each
    partition after its last copy: each source record on the internal topic once, exact."""
    first = GeneratorSpec(seed=4243, events=400, sessions=40)
    produce_unkeyed(env, first, keyed=0)
    config = rekey_config(env, group_id=env.name)  # its stage's group is deleted below:
    group = f"{env.name}.rekey"                    # never one the tests beside it commit to
    env.run("--until-idle", "3", config=config)
    cfg = load(config)
    meta = KafkaMetadata(cfg.kafka)
    try:
        done = {p: o for p, (o, _) in meta.group_offsets(group, env.name).items()}
        copies = sorted(internal_records(env))
        reports = [rekey_partition(cfg, p, o, 4, None, refresh=True) for p, o in done.items()]
        assert [(r.partition, r.from_offset, r.until_offset, r.records, r.committed)
                for r in reports] == [(p, o, o, 0, True) for p, o in done.items()]
        assert {p: o for p, (o, _) in meta.group_offsets(group, env.name).items()} == done
        assert sorted(internal_records(env)) == copies
        admin = KafkaAdminClient(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}")
        try:
            admin.delete_groups([group])
        finally:
            admin.close()
        assert meta.group_offsets(group, env.name) == {}
    finally:
        meta.close()
    second = GeneratorSpec(seed=4244, events=300, sessions=30)
    produce_unkeyed(env, second, keyed=0)
    ran = env.run("--until-idle", "3", config=config)
    sources = [s for _, _, s in internal_records(env)]
    assert len(sources) == len(set(sources)) == len(generate(first)) + len(generate(second))
    assert "is gone" in ran.stderr and "resuming after its last copy" in ran.stderr
    env.verify(first, second, config=config)


@pytest.fixture
def eight(tmp_path: Path) -> Env:
    """A fresh topic of 8 partitions and its table prefix."""
    return fresh_env(tmp_path, f"rekey8{uuid.uuid4().hex[:8]}", 8)


@pytest.mark.serial  # every test beside it would lose its broker
@pytest.mark.slow
@pytest.mark.faults
def test_300_000_unkeyed_records_through_two_driver_kills_a_worker_kill_and_a_broker_bounce(
        eight: Env) -> None:
    """300 000 events of 20 000 visitors under null keys on 8 partitions, and 5 000 more
    under random keys, re-keyed at 5 000 records a partition a batch: the driver SIGKILLs
    itself in its second batch; a Python worker dies inside a stage transaction; the driver
    SIGKILLs itself again in its third batch; a last run rides out a broker SIGKILL and
    restart. Each source record is on the internal topic once at read_committed, under its
    session key, no key_mismatch, and the sessions exact against the source by visitor."""
    env = eight
    spec = GeneratorSpec(seed=4300, events=305_000, sessions=20_000)
    produce_unkeyed(env, spec, keyed=5_000)
    config = rekey_config(env, max_rate_per_partition=5_000)
    killed = env.run("--until-idle", "6", config=config, timeout=600,
                     env={"LEAKPROOF_CRASH_AT": "driver_after_tasks@2"}, check=False)
    assert killed.returncode == -9, killed.stderr[-3000:]
    failed = env.run("--until-idle", "6", config=config, timeout=600,
                     env={"LEAKPROOF_CRASH_AT": "rekey_before_commit@3"}, check=False)
    assert failed.returncode == 1 and "re-keying" in failed.stderr, failed.stderr[-3000:]
    killed = env.run("--until-idle", "6", config=config, timeout=600,
                     env={"LEAKPROOF_CRASH_AT": "driver_after_tasks@3"}, check=False)
    assert killed.returncode == -9, killed.stderr[-3000:]
    internal = f"{env.name}.leakproof-rekey"
    with env.background("--until-idle", "8", config=config, name="bounce") as job:
        before = len(internal_offsets_rows(env, internal))
        job.wait_until("a commit of the last run",
                       lambda: len(internal_offsets_rows(env, internal)) > before)
        stack("kill", "kafka")  # SIGKILL: no controlled shutdown
        time.sleep(3)
        stack("up")  # restarts Kafka and waits until it answers
        rows = len(internal_offsets_rows(env, internal))
        job.wait_until("a commit after the broker came back",
                       lambda: len(internal_offsets_rows(env, internal)) > rows)
        assert job.wait(timeout=600) == 0, job.text()[-4000:]
    behind = json.loads(run_cli("offsets", "lag", "--config", config, "--json").stdout)
    assert behind["total_lag"] == 0 and behind["rekey"]["total_lag"] == 0, behind
    check_exact(env, config, spec=spec)
