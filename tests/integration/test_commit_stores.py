"""The three commit stores behind one interface, each through the same tests: the store's own
contract against the real system (HBase, the Kafka group, HBase's ZooKeeper), then the job
end to end with it, interrupted and resumed, judged by the oracle."""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka import KafkaAdminClient
from kazoo.client import KazooClient

from leakproof.commit_stores import open_store
from leakproof.core import config
from leakproof.hbase.connection import DAY_S, connect, ensure_tables
from leakproof.kafka.admin import KafkaMetadata, create_topic
from leakproof.testing.generator import GeneratorSpec, generate

from .helpers import ROOT, Env, progress_lines, run_cli

pytestmark = pytest.mark.integration

STORES = ["hbase", "kafka", "zookeeper"]


def with_store(env: Env, store: str, **kafka: object) -> tuple[str, config.Config]:
    path = env.variant(store, offsets={"store": store}, kafka=dict(kafka))
    cfg = config.load(path)
    conn = connect(cfg.hbase)
    try:
        ensure_tables(conn, cfg.hbase)
    finally:
        conn.close()
    return path, cfg


@pytest.mark.parametrize("store", STORES)
def test_store_contract(env: Env, store: str) -> None:
    _, cfg = with_store(env, store)
    s = open_store(cfg)
    try:
        assert s.name == store
        assert s.latest() is None
        s.put(1_700_000_000_000, {0: 5, 1: 7, 2: 0, 3: 9},
              {"epoch": "3", "records": "21", "topic_id": "AAAA"})
        s.put(1_700_000_002_000, {0: 6, 1: 7, 2: 4, 3: 9},
              {"epoch": "3", "records": "5", "topic_id": "AAAA"})
        got = s.latest()
        assert got is not None
        assert (got.batch_ms, got.offsets) == (1_700_000_002_000, {0: 6, 1: 7, 2: 4, 3: 9})
        # the keys the start-up checks read (REQUIRED_AUDIT), kept by every store
        assert (got.audit["epoch"], got.audit["topic_id"]) == ("3", "AAAA")
        assert s.history(5)[0] == got
    finally:
        s.close()
    # what the store's own tools see
    if store == "kafka":
        admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
        try:
            group = admin.list_group_offsets({"it": None})["it"]
            seen = {tp.partition: om.offset for tp, om in group.items()
                    if tp.topic == env.name}
        finally:
            admin.close()
        assert seen == {0: 6, 1: 7, 2: 4, 3: 9}
    if store == "zookeeper":
        zk = KazooClient(hosts="127.0.0.1:2181")
        zk.start(timeout=15)
        try:
            assert zk.get(f"/consumers/it/offsets/{env.name}/2")[0] == b"4"
        finally:
            zk.stop()
            zk.close()


@pytest.mark.parametrize("store", ["hbase", *(pytest.param(s, marks=pytest.mark.deep)
                                              for s in STORES[1:])])
def test_job_resumes_exactly_from_each_store(env: Env, store: str) -> None:
    spec = GeneratorSpec(seed=1900 + STORES.index(store), events=12_000, sessions=1_200)
    env.produce(spec)
    path, cfg = with_store(env, store, max_rate_per_partition=400, mirror_group_offsets=False)
    env.run("--max-batches", "2", config=path)  # stop part way: the store holds the position
    s = open_store(cfg)
    try:
        part_way = s.latest()
        assert part_way is not None and 0 < sum(part_way.offsets.values()) < len(generate(spec))
    finally:
        s.close()
    ran = env.run("--until-idle", "4", config=path)
    assert f"from offsets row {part_way.batch_ms}" in ran.stderr, ran.stderr[-3000:]
    env.verify(spec)
    meta = KafkaMetadata(cfg.kafka)
    try:
        ends = {p: b.log_end for p, b in meta.log_bounds(env.name, range(4)).items()}
    finally:
        meta.close()
    s = open_store(cfg)
    try:
        done = s.latest()
    finally:
        s.close()
    assert done is not None and done.offsets == ends


def test_offsets_table_ttl_and_the_copy_that_outlives_it(env: Env) -> None:
    conn = connect(env.cfg.hbase)
    try:
        ensure_tables(conn, env.cfg.hbase)
        families = conn.table(env.cfg.hbase.offsets_table).families()
    finally:
        conn.close()
    assert families[b"offsets"]["time_to_live"] == 30 * DAY_S  # the default
    assert families[b"audit"]["time_to_live"] == 30 * DAY_S

    spec = GeneratorSpec(seed=1950, events=8_000, sessions=800)
    env.produce(spec)
    short = env.variant("short-ttl", hbase={"offsets_ttl_days": 6 / DAY_S,
                                            "table_prefix": env.name + "t"},
                        kafka={"max_rate_per_partition": 400})
    cfg = config.load(short)
    env.run("--max-batches", "2", config=short)
    time.sleep(8)  # every offsets row is older than its 6 s TTL now
    s = open_store(cfg)
    try:
        kept = s.latest()  # from the state table's copy
    finally:
        s.close()
    assert kept is not None and sum(kept.offsets.values()) > 0
    ran = env.run("--until-idle", "4", config=short)
    assert "expired by its TTL" in ran.stderr, ran.stderr[-3000:]
    # the oracle over this config's tables (its own prefix): nothing lost, nothing twice
    verdict = run_cli("verify", "--config", short, "--spec",
                      f"{spec.seed}:{spec.events}:{spec.sessions}:{spec.start_ts}", check=False)
    assert verdict.returncode == 0 and "EXACT MATCH" in verdict.stdout, verdict.stdout


@pytest.mark.parametrize("store", ["hbase", *(pytest.param(s, marks=pytest.mark.deep)
                                              for s in STORES[1:])])
def test_a_recreated_topic_is_refused_whatever_the_store(env: Env, store: str) -> None:
    """The start-up guard reads the topic id every store keeps with its commits: the new
    topic's log may already be longer than the stored offsets, so only the id tells."""
    path, cfg = with_store(env, store, mirror_group_offsets=False)
    env.produce(GeneratorSpec(seed=1960, events=2_000, sessions=200))
    env.run("--until-idle", "3", config=path)
    admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    try:
        admin.delete_topics([env.name])
    finally:
        admin.close()
    time.sleep(2)
    create_topic(cfg.kafka, env.name, 4)
    env.produce(GeneratorSpec(seed=1961, events=4_000, sessions=400))  # a longer new log
    again = env.run(config=path, check=False)
    assert again.returncode == 1, again.stderr[-3000:]
    assert "was deleted and recreated" in again.stderr, again.stderr[-3000:]


def test_tables_get_bloom_filters_and_the_block_cache_and_an_old_table_is_told_how(
        env: Env) -> None:
    # an older leakproof made the sessions table with Thrift1's defaults
    conn = env.hbase()
    try:
        conn.create_table(env.cfg.hbase.sessions_table, {"s": {"max_versions": 1},
                                                          "f": {"max_versions": 1}})
    finally:
        conn.close()
    told = run_cli("tables", "create", "--config", str(env.path))
    table = env.cfg.hbase.full_name(env.cfg.hbase.sessions_table)
    command = (f"alter '{table}', {{NAME => 'f', BLOOMFILTER => 'ROW', BLOCKCACHE => 'true'}}, "
               f"{{NAME => 's', BLOOMFILTER => 'ROW', BLOCKCACHE => 'true'}}")
    assert command in told.stdout, told.stdout
    conn = env.hbase()
    try:  # the tables it made itself have both, in every family
        for name in (env.cfg.hbase.state_table, env.cfg.hbase.offsets_table,
                     env.cfg.hbase.dead_letter_table):
            for family, opts in conn.table(name).families().items():
                assert (opts["bloom_filter_type"], opts["block_cache_enabled"]) == (
                    b"ROW", True), (name, family, opts)
    finally:
        conn.close()
    # the operator runs the command in the HBase shell; the advice is then gone
    shell = subprocess.run([str(ROOT / "scripts" / "hbase-shell")], input=command + "\n",
                           capture_output=True, text=True, timeout=180, check=False)
    assert shell.returncode == 0, shell.stdout[-2000:] + shell.stderr[-2000:]
    again = run_cli("tables", "create", "--config", str(env.path))
    assert "alter" not in again.stdout, again.stdout


def test_two_creators_racing_make_each_table_once_and_both_go_on(env: Env) -> None:
    # two jobs (or a job and `leakproof tables create`) starting together on fresh tables
    cfg = env.cfg.hbase
    barrier = threading.Barrier(2)

    def ensure() -> list[str]:
        conn = connect(cfg)
        try:
            barrier.wait(timeout=30)
            return ensure_tables(conn, cfg)
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = (f.result(timeout=120) for f in [pool.submit(ensure), pool.submit(ensure)])
    wanted = {cfg.sessions_table, cfg.dead_letter_table, cfg.offsets_table, cfg.state_table}
    assert not set(first) & set(second), (first, second)  # each made by one of them
    assert set(first) | set(second) == wanted, (first, second)
    conn = env.hbase()
    try:
        assert {t.decode() for t in conn.tables()} >= wanted
        assert set(conn.table(cfg.sessions_table).families()) == {b"s", b"f"}
    finally:
        conn.close()
    again = connect(cfg)
    try:
        assert ensure_tables(again, cfg) == []
    finally:
        again.close()


def test_group_offsets_written_by_someone_else_are_refused_and_gone_ones_resume(
        env: Env) -> None:
    """offsets.store kafka: offsets another consumer committed under the job's group id are
    refused naming the way out, never taken for the job's own, and the rewind the refusal
    names resumes it exactly; offsets the broker expired (deleted here) resume from the
    copy of the job's newest commit, not from auto_offset_reset."""
    spec = GeneratorSpec(seed=1930, events=2_000, sessions=200)
    env.produce(spec)
    group = env.name  # deleted below: never the group the tests beside it commit to
    path, cfg = with_store(env, "kafka", mirror_group_offsets=False, group_id=group)
    env.run("--until-idle", "3", config=path)
    meta = KafkaMetadata(cfg.kafka)
    try:
        meta.commit_group_offsets(group, env.name, {0: 0, 1: 0, 2: 0, 3: 0}, "")  # not ours
    finally:
        meta.close()
    refused = env.run(config=path, check=False)
    assert refused.returncode != 0
    assert "were not written by leakproof" in refused.stderr, refused.stderr[-3000:]
    run_cli("offsets", "rewind", "--config", path, "--to-offsets", "0=0,1=0,2=0,3=0")
    env.run("--until-idle", "3", config=path)
    env.verify(spec)
    admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    try:
        admin.delete_groups([group])
    finally:
        admin.close()
    env.produce(GeneratorSpec(seed=1931, events=500, sessions=50, start_ts=1_767_240_000_000))
    gone = env.run("--until-idle", "3", "--log-format", "json", config=path)
    assert "no offsets in the group (expired or deleted)" in gone.stderr, gone.stderr[-3000:]
    assert sum(line["records"] for line in progress_lines(gone.stderr)) == 500  # the new ones
