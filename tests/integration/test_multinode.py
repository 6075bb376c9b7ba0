"""A real cluster's faults, on the cluster stack (``make stack-up CLUSTER=1``: three KRaft
nodes with replication factor 3 and ``min.insync.replicas=2``, HBase with an active and a
backup master and two region servers): a partition's leader killed while the job reads it
and publishes summaries in transactions, the transaction coordinator killed with a
transaction open, the active controller killed, one node cut off from its peers while the
job still reaches it, the region server holding the sessions table killed mid-drain, the
active master killed. After each: the oracle exact, the offsets chain whole and at the log
end, one commit per record, and every summary once per change at read_committed. Each
prints the time from the fault to the next commit (the figures in docs/BENCHMARKS.md).

Run by ``make test``'s multinode tier, after the plain stack's tiers, on the cluster stack
it starts in the plain one's place (``scripts/test.sh``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import happybase
import pytest
from kafka import KafkaAdminClient
from kazoo.client import KazooClient
from thriftpy2.thrift import TApplicationException

from leakproof.generator import GeneratorSpec
from leakproof.kafka.admin import create_topic

from .helpers import (
    BOOTSTRAP,
    THRIFT,
    Background,
    Env,
    audit_total,
    background,
    finish_exact,
    offsets_rows,
    published_once_per_change,
    require_standalone,
    stack,
    standalone_submit,
    wait_for,
)

pytestmark = pytest.mark.multinode

NODES = (1, 2, 3)
# a transactional call stuck on a dead broker is given up after 10 s, not the default 30,
# and made again with a new producer (kafka.closed_sink): the time to the next commit after
# a broker's death is mostly this deadline
OUTPUT = {"transaction_timeout_s": 10}


@pytest.fixture(autouse=True)
def cluster_stack() -> Iterator[None]:
    """Three brokers and two region servers, or the test fails (it never skips); each test
    leaves every node running and none cut off, whatever it did."""
    if len(_brokers()) != 3:
        pytest.fail("the cluster stack is not running: `make stack-up CLUSTER=1` (three "
                    f"brokers at {BOOTSTRAP})", pytrace=False)
    yield
    stack("heal")
    stack("up", "--cluster")  # every node a test killed started again
    wait_for("three brokers again", lambda: len(_brokers()) == 3, timeout=180)
    wait_for("every partition fully replicated", _replicated, timeout=180)


def _admin() -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=10_000)


def _brokers() -> list[int]:
    admin = _admin()
    try:
        return sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
    finally:
        admin.close()


def _replicated() -> bool:
    """Every partition of every topic has its three replicas in sync."""
    admin = _admin()
    try:
        return all(len(p["isr_nodes"]) == 3 for t in admin.describe_topics()
                   for p in t["partitions"])
    finally:
        admin.close()


def leader_of(topic: str, partition: int) -> int:
    admin = _admin()
    try:
        (described,) = admin.describe_topics([topic])
        return int(next(p["leader_id"] for p in described["partitions"]
                        if p["partition_index"] == partition))
    finally:
        admin.close()


def active_controller() -> int:
    admin = _admin()
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    (leader,) = {int(p["leader_id"]) for t in quorum["topics"] for p in t["partitions"]}
    return leader


def coordinator_of_open_transaction() -> tuple[str, int]:
    """The transactional id of the job's open transaction, and its coordinator node."""
    admin = _admin()
    try:
        ongoing = [t.transactional_id for listed in admin.list_transactions().values()
                   for t in listed if t.state == "Ongoing"]
        assert ongoing, "no transaction open"
        described = admin.describe_transactions([ongoing[0]])
        return ongoing[0], int(described[ongoing[0]].coordinator_id)
    finally:
        admin.close()


def region_servers_of(env: Env, table: str) -> set[int]:
    """The RPC ports of the region servers holding ``table``'s regions (none while one is
    in transition: the Thrift server then fails the call on the region with no server)."""
    conn = happybase.Connection(*THRIFT)
    try:
        name = f"{env.cfg.hbase.table_prefix}_{table}".encode()
        return {r.port for r in conn.client.getTableRegions(name)}
    except TApplicationException:
        return set()
    finally:
        conn.close()


def active_master() -> int:
    """The RPC port of the active HBase master, as ZooKeeper names it."""
    zk = KazooClient(hosts="127.0.0.1:2181")
    zk.start(timeout=20)
    try:
        data, _ = zk.get("/hbase/master")
    finally:
        zk.stop()
        zk.close()
    for port in (16000, 16001):  # the server name's port, a protobuf varint after field 2
        if bytes([0x10, port & 0x7F | 0x80, port >> 7]) in data:
            return port
    raise AssertionError(f"no master port in {data!r}")


def commits(env: Env) -> set[bytes]:
    return {key for key, _ in offsets_rows(env)}


@contextmanager
def job_with_summaries(env: Env, spec: GeneratorSpec, label: str, rate: int = 300,
                       extra_env: dict[str, str] | None = None) -> Iterator[tuple[Background,
                                                                                  str]]:
    """The job in the background over ``spec`` at ``rate`` records a second per partition
    (a drain of many batches), publishing closed sessions to a topic of its own; yields the
    job and that topic."""
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    env.produce(spec)
    config = env.variant(label, output=OUTPUT | {"closed_sessions_topic": topic},
                         kafka={"max_rate_per_partition": rate},
                         hbase={"outage_tolerance_s": 180})
    with env.background("--until-idle", "5", config=config, name=label,
                        env=extra_env) as job:
        yield job, topic


def fault_then_commit(env: Env, fault: Callable[[], None], what: str) -> float:
    """Two commits, then ``fault``; the seconds from it to the next commit."""
    wait_for("two commits", lambda: len(commits(env)) >= 2, timeout=240)
    before = commits(env)
    t0 = time.monotonic()
    fault()
    wait_for(f"a commit after {what}", lambda: commits(env) - before, timeout=300)
    return time.monotonic() - t0


def exact_with_summaries(env: Env, spec: GeneratorSpec, job: Background, topic: str,
                         label: str, recovery: float) -> None:
    """The run ended by itself (exit 0), exact, its chain whole; every summary once."""
    finish_exact(env, spec, job, timeout=600)
    published_once_per_change(env, topic)
    replays = audit_total(env, b"replayed")
    print(f"{label}: fault -> next commit {recovery:.1f}s; events replayed {replays}")


SPEC = GeneratorSpec(seed=5801, events=9_600, sessions=960, span_s=3 * 3600)


def test_partition_leader_killed_mid_batch_while_summaries_publish(env: Env) -> None:
    with job_with_summaries(env, SPEC, "leader-kill") as (job, topic):
        victim = leader_of(env.name, 0)
        recovery = fault_then_commit(env, lambda: stack("kill", f"broker{victim}"),
                                     f"broker{victim} (leader of partition 0) was killed")
        assert leader_of(env.name, 0) != victim
        exact_with_summaries(env, SPEC, job, topic, "leader-kill", recovery)


def test_transaction_coordinator_killed_with_a_transaction_open(env: Env) -> None:
    """A worker stops before its transaction's commit; its coordinator is killed; it goes
    on. The transaction either commits (a new coordinator took the log over) or the batch
    fails and is replayed (its producer fenced, the transaction aborted): once either way."""
    release = env.tmp / "publish.release"
    stalled = env.tmp / "publish.stalled"
    crash = {"LEAKPROOF_CRASH_AT": f"task_before_publish_commit@3:stall={release}",
             "LEAKPROOF_CRASH_ONCE": str(stalled)}
    with job_with_summaries(env, SPEC, "coordinator-kill", extra_env=crash) as (job, topic):
        wait_for("a transaction held open", stalled.exists, timeout=240)
        _, coordinator = coordinator_of_open_transaction()
        before = commits(env)
        t0 = time.monotonic()
        stack("kill", f"broker{coordinator}")
        release.touch()
        wait_for("a commit after the coordinator was killed", lambda: commits(env) - before,
                 timeout=300)
        exact_with_summaries(env, SPEC, job, topic, "coordinator-kill", time.monotonic() - t0)


def test_active_controller_killed(env: Env) -> None:
    with job_with_summaries(env, SPEC, "controller-kill") as (job, topic):
        victim = active_controller()
        recovery = fault_then_commit(env, lambda: stack("kill", f"broker{victim}"),
                                     f"the active controller broker{victim} was killed")
        wait_for("a new controller", lambda: active_controller() != victim, timeout=120)
        exact_with_summaries(env, SPEC, job, topic, "controller-kill", recovery)


def test_a_leader_cut_off_from_its_peers_while_the_job_reaches_it(env: Env) -> None:
    """The leader of partition 0 loses its peers (not its clients): its followers leave the
    ISR or it is fenced, leadership moves, and writes it took but could not replicate are
    never acknowledged; no offset is committed past one."""
    with job_with_summaries(env, SPEC, "cut-off") as (job, topic):
        victim = leader_of(env.name, 0)
        recovery = fault_then_commit(env, lambda: stack("cut", f"broker{victim}"),
                                     f"broker{victim} was cut off")
        wait_for("leadership moved", lambda: leader_of(env.name, 0) != victim, timeout=120)
        wait_for("another commit while it is cut off",
                 lambda: len(commits(env)) >= 4, timeout=300)
        stack("heal")
        exact_with_summaries(env, SPEC, job, topic, "cut-off", recovery)


def test_region_server_of_the_sessions_table_killed_mid_drain(env: Env) -> None:
    """Its regions are unavailable until its WAL is split and they are reassigned: the
    job's writes retry through Thrift, the run keeps going and exits 0."""
    with job_with_summaries(env, SPEC, "rs-kill") as (job, topic):
        wait_for("the sessions table on a region server",
                 lambda: _has_table(env, "web_sessions")
                 and region_servers_of(env, "web_sessions"), timeout=240)
        (port, *_) = sorted(region_servers_of(env, "web_sessions"))
        victim = 1 if port == 16020 else 2
        recovery = fault_then_commit(env, lambda: stack("kill", f"regionserver{victim}"),
                                     f"regionserver{victim} was killed")
        exact_with_summaries(env, SPEC, job, topic, "rs-kill", recovery)
    assert region_servers_of(env, "web_sessions") == {16020 if victim == 2 else 16021}


def test_active_master_killed_the_backup_takes_over(env: Env) -> None:
    with job_with_summaries(env, SPEC, "master-kill") as (job, topic):
        port = active_master()
        victim = 1 if port == 16000 else 2
        recovery = fault_then_commit(env, lambda: stack("kill", f"hmaster{victim}"),
                                     f"the active master hmaster{victim} was killed")
        wait_for("the backup active", lambda: active_master() != port, timeout=120)
        exact_with_summaries(env, SPEC, job, topic, "master-kill", recovery)


def test_under_spark_submit_a_leader_then_a_region_server_killed(env: Env) -> None:
    """The same faults under spark-submit on the standalone cluster (executors in their own
    JVMs on two hosts, tasks retried elsewhere): a partition's leader killed, then the
    region server holding the sessions table, in one run."""
    require_standalone()
    spec = GeneratorSpec(seed=5802, events=16_000, sessions=1_600, span_s=3 * 3600)
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    env.produce(spec)
    config = env.variant("standalone", output=OUTPUT | {"closed_sessions_topic": topic},
                         kafka={"max_rate_per_partition": 100},
                         hbase={"outage_tolerance_s": 180})
    cmd = standalone_submit(config, "--until-idle", "5", **{
        "spark.executor.memory": "640m", "spark.task.maxFailures": "8"})
    with background(cmd, env.tmp / "standalone.log") as job:
        broker = leader_of(env.name, 0)
        to_kafka = fault_then_commit(env, lambda: stack("kill", f"broker{broker}"),
                                     f"broker{broker} (a leader) was killed")
        wait_for("the sessions table on a region server",
                 lambda: region_servers_of(env, "web_sessions"), timeout=240)
        server = 1 if min(region_servers_of(env, "web_sessions")) == 16020 else 2
        to_hbase = fault_then_commit(env, lambda: stack("kill", f"regionserver{server}"),
                                     f"regionserver{server} was killed")
        finish_exact(env, spec, job, timeout=600)
    published_once_per_change(env, topic)
    print(f"standalone: leader kill -> next commit {to_kafka:.1f}s; region server kill -> "
          f"next commit {to_hbase:.1f}s; events replayed {audit_total(env, b'replayed')}")


def _has_table(env: Env, table: str) -> bool:
    conn = happybase.Connection(*THRIFT)
    try:
        return f"{env.cfg.hbase.table_prefix}_{table}".encode() in conn.tables()
    finally:
        conn.close()

