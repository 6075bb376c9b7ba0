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
it starts in the plain one's place (``scripts/test.sh``): there the spark-submit run takes
every fault in turn; ``make test-all`` also takes each fault alone, in local mode."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import happybase
import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError
from kazoo.client import KazooClient
from thriftpy2.thrift import TApplicationException

from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    BOOTSTRAP,
    THRIFT,
    Background,
    Env,
    audit_total,
    finish_exact,
    offsets_rows,
    published_once_per_change,
    records,
    stack,
    submit,
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
    nodes_back()


def nodes_back() -> None:
    """Every node a test stopped running again (a paused one resumed, a killed one started),
    none cut off, every partition's replicas in sync."""
    stack("heal")
    for node in NODES:
        stack("resume", f"broker{node}")
    stack("up", "--cluster")
    wait_for("three brokers again", lambda: len(_brokers()) == 3, timeout=180)
    wait_for("every partition fully replicated", _replicated, timeout=180)


def _admin(avoid: int | None = None) -> KafkaAdminClient:
    """An admin client; bootstrapped away from node ``avoid`` (one that is paused and would
    hold its first request until it times out)."""
    servers = [s for s in BOOTSTRAP.split(",") if avoid is None or s != f"127.0.0.{avoid}:9092"]
    return KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=10_000)


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


def leader_of(topic: str, partition: int, avoid: int | None = None) -> int:
    admin = _admin(avoid)
    try:
        (described,) = admin.describe_topics([topic])
        return int(next(p["leader_id"] for p in described["partitions"]
                        if p["partition_index"] == partition))
    finally:
        admin.close()


def leader_answered(topic: str, partition: int, avoid: int) -> int | None:
    """``leader_of``, or None when the request timed out: the client knows the paused node
    ``avoid`` from metadata and may ask it, however it was bootstrapped."""
    try:
        return leader_of(topic, partition, avoid)
    except KafkaError:
        return None


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


def fault_then_commit(env: Env, job: Background, fault: Callable[[], None], what: str) -> float:
    """Two commits, then ``fault``; the seconds from it to the next commit (a job that
    ends meanwhile fails the test at once, with its log)."""
    wait_for("two commits", lambda: len(commits(env)) >= 2, timeout=240)
    return next_commit_after(env, job, fault, what)


def next_commit_after(env: Env, job: Background, fault: Callable[[], None], what: str) -> float:
    """``fault``, then the seconds to the next commit (the job still running)."""
    before = commits(env)
    t0 = time.monotonic()
    fault()
    wait_for(f"a commit after {what}", lambda: running(job) and commits(env) - before,
             timeout=300)
    return time.monotonic() - t0


def running(job: Background) -> bool:
    assert job.poll() is None, f"the job ended ({job.poll()}):\n{job.text()[-6000:]}"
    return True


def exact_with_summaries(env: Env, spec: GeneratorSpec, job: Background, topic: str,
                         label: str, recovery: float) -> None:
    """The run ended by itself (exit 0), exact, its chain whole; every summary once."""
    finish_exact(env, spec, job, timeout=600)
    published_once_per_change(env, topic)
    replays = audit_total(env, b"replayed")
    print(f"{label}: fault -> next commit {recovery:.1f}s; events replayed {replays}")


SPEC = GeneratorSpec(seed=5801, events=9_600, sessions=960, span_s=3 * 3600)
# the waves' event times: each an hour after the last, so the sessions of the one before close
WAVE_START = 1_700_000_000_000
WAVE_MS = 3_600_000


@pytest.mark.deep  # one fault alone, in local mode: the spark-submit run below takes each
def test_partition_leader_killed_mid_batch_while_summaries_publish(env: Env) -> None:
    with job_with_summaries(env, SPEC, "leader-kill") as (job, topic):
        victim = leader_of(env.name, 0)
        recovery = fault_then_commit(env, job, lambda: stack("kill", f"broker{victim}"),
                                     f"broker{victim} (leader of partition 0) was killed")
        assert leader_of(env.name, 0) != victim
        exact_with_summaries(env, SPEC, job, topic, "leader-kill", recovery)


def _stall_at_publish_commit(env: Env, label: str) -> tuple[dict[str, str], Path, Path]:
    """A worker's crash-point settings that hold its third transaction open before the
    commit (after the sends and ``send_offsets_to_transaction``) until the test releases
    it; with the file that says it stalled and the file that releases it."""
    release, stalled = env.tmp / f"{label}.release", env.tmp / f"{label}.stalled"
    return ({"LEAKPROOF_CRASH_AT": f"task_before_publish_commit@3:stall={release}",
             "LEAKPROOF_CRASH_ONCE": str(stalled)}, stalled, release)


def kill_with_a_transaction_open(env: Env, job: Background, stalled: Path, release: Path,
                                 victim: Callable[[], int], what: str) -> tuple[int, float]:
    """Once a worker holds its transaction open: kill broker ``victim()``, release the
    worker; the node killed, and the seconds from the kill to the next commit."""
    wait_for("a transaction held open", stalled.exists, timeout=240)
    node = victim()

    def kill_then_release() -> None:
        stack("kill", f"broker{node}")
        release.touch()

    return node, next_commit_after(env, job, kill_then_release,
                                   f"{what} (broker{node}) was killed")


@pytest.mark.deep  # one fault alone, in local mode: the spark-submit run below takes each
@pytest.mark.parametrize("who", ["coordinator", "controller"])
def test_killed_with_a_transaction_open(env: Env, who: str) -> None:
    """A worker stops before its transaction's commit; the transaction's coordinator (or the
    active controller) is killed; the worker goes on. The transaction either commits (a new
    coordinator took the log over) or the batch fails and is replayed (its producer fenced,
    the transaction aborted): once either way."""
    crash, stalled, release = _stall_at_publish_commit(env, who)
    victim = ((lambda: coordinator_of_open_transaction()[1]) if who == "coordinator"
              else active_controller)
    with job_with_summaries(env, SPEC, f"{who}-kill", extra_env=crash) as (job, topic):
        node, recovery = kill_with_a_transaction_open(env, job, stalled, release, victim,
                                                      f"the {who}")
        if who == "controller":
            wait_for("a new controller", lambda: active_controller() != node, timeout=120)
        exact_with_summaries(env, SPEC, job, topic, f"{who}-kill", recovery)


@pytest.mark.deep  # one fault alone, in local mode: the spark-submit run below takes each
def test_a_leader_cut_off_from_its_peers_while_the_job_reaches_it(env: Env) -> None:
    """The leader of partition 0 loses its peers (not its clients): its followers leave the
    ISR or it is fenced, leadership moves, and writes it took but could not replicate are
    never acknowledged; no offset is committed past one."""
    with job_with_summaries(env, SPEC, "cut-off") as (job, topic):
        victim = leader_of(env.name, 0)
        recovery = fault_then_commit(env, job, lambda: stack("cut", f"broker{victim}"),
                                     f"broker{victim} was cut off")
        wait_for("leadership moved", lambda: leader_of(env.name, 0) != victim, timeout=120)
        wait_for("another commit while it is cut off",
                 lambda: len(commits(env)) >= 4, timeout=300)
        stack("heal")
        exact_with_summaries(env, SPEC, job, topic, "cut-off", recovery)


@pytest.mark.deep  # one fault alone, in local mode: the spark-submit run below takes each
def test_region_server_of_the_sessions_table_killed_mid_drain(env: Env) -> None:
    """Its regions are unavailable until its WAL is split and they are reassigned: the
    job's writes retry through Thrift, the run keeps going and exits 0."""
    with job_with_summaries(env, SPEC, "rs-kill") as (job, topic):
        wait_for("the sessions table on a region server",
                 lambda: _has_table(env, "web_sessions")
                 and region_servers_of(env, "web_sessions"), timeout=240)
        (port, *_) = sorted(region_servers_of(env, "web_sessions"))
        victim = 1 if port == 16020 else 2
        recovery = fault_then_commit(env, job, lambda: stack("kill", f"regionserver{victim}"),
                                     f"regionserver{victim} was killed")
        exact_with_summaries(env, SPEC, job, topic, "rs-kill", recovery)
    assert region_servers_of(env, "web_sessions") == {16020 if victim == 2 else 16021}


@pytest.mark.deep  # one fault alone, in local mode: the spark-submit run below takes each
def test_active_master_killed_the_backup_takes_over(env: Env) -> None:
    with job_with_summaries(env, SPEC, "master-kill") as (job, topic):
        port = active_master()
        victim = 1 if port == 16000 else 2
        recovery = fault_then_commit(env, job, lambda: stack("kill", f"hmaster{victim}"),
                                     f"the active master hmaster{victim} was killed")
        wait_for("the backup active", lambda: active_master() != port, timeout=120)
        exact_with_summaries(env, SPEC, job, topic, "master-kill", recovery)


def test_under_spark_submit_every_fault_in_turn(env: Env) -> None:
    """Every fault above, and a leader paused (SIGSTOP) past its session timeout then
    resumed, in one run under spark-submit on the standalone cluster (executors in their own
    JVMs, tasks retried elsewhere). A region server or master is killed while a broker is
    still down, so that one restart serves two faults; every broker is back and every
    partition in sync before the next broker's fault. A wave of events before each fault
    keeps the job reading through it; the run stops on a group SIGTERM once every wave is
    committed, as a supervisor stops it."""
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    crash, stalled, release = _stall_at_publish_commit(env, "standalone")
    config = env.variant("standalone", output=OUTPUT | {"closed_sessions_topic": topic},
                         kafka={"max_rate_per_partition": 25},
                         hbase={"outage_tolerance_s": 180})
    waves: list[GeneratorSpec] = []
    figures: dict[str, float] = {}

    def wave() -> None:  # about 20 s of reading at 25 records a second a partition
        waves.append(GeneratorSpec(seed=5810 + len(waves), events=2_000, sessions=200,
                                   span_s=1800, start_ts=WAVE_START + len(waves) * WAVE_MS))
        env.produce(waves[-1])

    def step(label: str, fault: Callable[[], None], what: str) -> None:
        running(job)
        wave()
        figures[label] = fault_then_commit(env, job, fault, what)

    def hbase_fault(label: str, service: str) -> None:
        step(label, lambda: stack("kill", service), f"{service} was killed")

    with submit(env, config, "standalone", "--until-idle", "3600", executor_env=crash) as job:
        wave()
        _, figures["coordinator"] = kill_with_a_transaction_open(
            env, job, stalled, release, lambda: coordinator_of_open_transaction()[1],
            "the coordinator")
        wait_for("the sessions table on a region server",
                 lambda: region_servers_of(env, "web_sessions"), timeout=240)
        holder = min(region_servers_of(env, "web_sessions"))
        hbase_fault("region server", f"regionserver{1 if holder == 16020 else 2}")
        nodes_back()
        leader = leader_of(env.name, 0)
        step("leader", lambda: stack("kill", f"broker{leader}"), f"broker{leader} was killed")
        hbase_fault("master", f"hmaster{1 if active_master() == 16000 else 2}")
        nodes_back()
        controller = active_controller()
        step("controller", lambda: stack("kill", f"broker{controller}"),
             f"the active controller broker{controller} was killed")
        nodes_back()
        paused = leader_of(env.name, 0)
        step("pause", lambda: stack("pause", f"broker{paused}"), f"broker{paused} was paused")
        wait_for("leadership moved off the paused node",
                 lambda: leader_answered(env.name, 0, avoid=paused) not in (None, paused),
                 timeout=120)
        stack("resume", f"broker{paused}")
        wait_for("every partition fully replicated", _replicated, timeout=180)
        cut = leader_of(env.name, 0)
        step("cut-off", lambda: stack("cut", f"broker{cut}"), f"broker{cut} was cut off")
        wait_for("leadership moved off the cut node", lambda: leader_of(env.name, 0) != cut,
                 timeout=120)
        next_commit_after(env, job, wave, "a wave with the new leader")
        stack("heal")
        wait_for("every wave committed",
                 lambda: running(job) and audit_total(env, b"records") >= records(*waves),
                 timeout=900)
        job.signal_group(signal.SIGTERM)
        finish_exact(env, tuple(waves), job, timeout=180)
    published_once_per_change(env, topic)
    print("standalone: fault -> next commit " + ", ".join(
        f"{label} {seconds:.1f}s" for label, seconds in figures.items())
        + f"; events replayed {audit_total(env, b'replayed')}")


def _has_table(env: Env, table: str) -> bool:
    conn = happybase.Connection(*THRIFT)
    try:
        return f"{env.cfg.hbase.table_prefix}_{table}".encode() in conn.tables()
    finally:
        conn.close()

