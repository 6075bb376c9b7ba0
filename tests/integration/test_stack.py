"""The foundation: the real Kafka, HBase (Thrift + shell) and Spark the project starts."""

from __future__ import annotations

import ipaddress
import itertools
import subprocess
import sys
import textwrap

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from leakproof.commands.produce import send_raw
from leakproof.core.offsets import OffsetRange
from leakproof.hbase.partition_store import short_scan
from leakproof.kafka.reader import read_range

from .helpers import ROOT, Env, require_standalone

pytestmark = pytest.mark.integration


def test_keyed_records_read_back_in_order_by_assign_and_seek(env: Env) -> None:
    records = [(f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(500)]
    send_raw(env.cfg.kafka, env.name, records)
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9092", group_id=None,
                             enable_auto_commit=False)
    parts = sorted(consumer.partitions_for_topic(env.name))
    assert parts == [0, 1, 2, 3]
    ends = consumer.end_offsets([TopicPartition(env.name, p) for p in parts])
    consumer.close()
    assert sum(ends.values()) == 500
    by_partition: dict[int, list[bytes]] = {}
    for tp, end in ends.items():
        got = list(read_range(env.cfg.kafka, OffsetRange(env.name, tp.partition, 0, end)))
        assert [o for o, *_ in got] == list(range(end))
        by_partition[tp.partition] = [v for _, _, v, *_ in got if v is not None]
        keys = {k for _, k, *_ in got}
        # one key lives in one partition: keys never span partitions
        for other, values in by_partition.items():
            if other != tp.partition:
                assert not keys & {k for k, v in records if v in values}
    # per key, the order of sending is kept
    for key in {k for k, _ in records}:
        sent = [v for k, v in records if k == key]
        found = [v for vs in by_partition.values() for v in vs if v in set(sent)]
        assert found == sent
    # a middle range reads exactly [from, until)
    p = max(ends, key=lambda tp: ends[tp]).partition
    mid = list(read_range(env.cfg.kafka, OffsetRange(env.name, p, 10, 20)))
    assert [o for o, *_ in mid] == list(range(10, 20))



def test_ranges_read_exactly_when_record_sizes_outgrow_the_sized_fetches(env: Env) -> None:
    """Fetches are sized by the last records seen: small records, then ones far larger than
    that size (and than the fetch floor), then small again, read as consecutive ranges by one
    cached consumer, each exactly [from, until)."""
    sizes = [100] * 300 + [400 * 1024] * 4 + [100] * 300
    send_raw(env.cfg.kafka, env.name, [(b"k", bytes([i % 251]) * n)
                                       for i, n in enumerate(sizes)], partition=1)
    cuts = [0, 250, 299, 302, 303, 450, 604]
    got = []
    for lo, hi in itertools.pairwise(cuts):
        part = list(read_range(env.cfg.kafka, OffsetRange(env.name, 1, lo, hi)))
        assert [o for o, *_ in part] == list(range(lo, hi))
        got += part
    assert [len(v or b"") for _, _, v, *_ in got] == sizes
    assert all(v == bytes([o % 251]) * sizes[o] for o, _, v, *_ in got)

def test_happybase_batch_put_get_and_reverse_prefix_scan(env: Env) -> None:
    conn = env.hbase()
    try:
        conn.create_table("probe", {"f": {}})
        table = conn.table("probe")
        with table.batch() as b:
            for t in (1000, 2000, 3000):
                b.put(f"topic:grp:{t:013d}".encode(), {b"f:0": str(t).encode()})
            b.put(b"topic:grp2:0000000009999", {b"f:0": b"other group"})
        assert table.row(b"topic:grp:0000000002000") == {b"f:0": b"2000"}
        rows = list(table.scan(row_prefix=b"topic:grp:", reverse=True))
        assert [k for k, _ in rows] == [f"topic:grp:{t:013d}".encode() for t in (3000, 2000, 1000)]
        assert b"probe" in {t.split(b"_", 1)[-1] for t in conn.tables()}
    finally:
        conn.close()


def test_the_short_scan_reads_what_happybases_scan_reads_in_every_batch_size(
        env: Env) -> None:
    """``short_scan`` stops on a short answer: whether the rows fill the last batch or not,
    it returns exactly the rows happybase's own scan does, in order."""
    conn = env.hbase()
    try:
        conn.create_table("scan", {"o": {}})
        table = conn.table("scan")
        with table.batch() as b:
            for i in range(7):
                b.put(f"t:3:{i:03d}".encode(), {b"o:s": str(i).encode(), b"o:t": b"x"})
            b.put(b"t:4:000", {b"o:s": b"past the stop row"})
        want = list(table.scan(row_start=b"t:3:", row_stop=b"t:4:"))
        assert len(want) == 7
        for batch_size in (1, 3, 7, 10):
            assert list(short_scan(table, b"t:3:", b"t:4:", batch_size)) == want, batch_size
        assert list(short_scan(table, b"t:5:", b"t:6:", 3)) == []
    finally:
        conn.close()


def test_hbase_shell_shows_a_row_happybase_wrote(env: Env) -> None:
    conn = env.hbase()
    try:
        conn.create_table("shell", {"offsets": {}})
        conn.table("shell").put(b"web:g:1700000000000", {b"offsets:0": b"42"})
    finally:
        conn.close()
    table = f"{env.name}_shell"
    out = subprocess.run([str(ROOT / "scripts" / "hbase-shell")],
                         input=f"scan '{table}', {{REVERSED => true}}\n", capture_output=True,
                         text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "web:g:1700000000000 column=offsets:0" in out.stdout
    assert "value=42" in out.stdout
    bad = subprocess.run([str(ROOT / "scripts" / "hbase-shell")], input="scan 'no_such_table'\n",
                         capture_output=True, text=True, timeout=180, check=False)
    assert bad.returncode != 0  # -n: the first error ends the shell with a failure


SPARK_JOB = textwrap.dedent("""
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark import SparkConf, SparkContext
    conf = SparkConf().setMaster(sys.argv[1]).setAppName("leakproof-smoke")
    conf.set("spark.executor.memory", "512m").set("spark.ui.enabled", "false")
    sc = SparkContext(conf=conf)
    rdd = sc.parallelize(range(1000), 4).map(lambda x: (os.getpid(), x * x))
    pids = rdd.keys().distinct().count()
    print("RESULT", rdd.values().sum(), pids, flush=True)
    sc.stop()
""")


@pytest.mark.parametrize("master", [
    "local[2]",
    pytest.param("spark://127.0.0.1:7077",
                 marks=[pytest.mark.cluster, pytest.mark.xdist_group("cluster")]),
])
def test_pyspark_job_runs(master: str) -> None:
    if master.startswith("spark://"):
        require_standalone()
    out = subprocess.run([sys.executable, "-c", SPARK_JOB, master], capture_output=True,
                         text=True, timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-4000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT"))
    _, total, _pids = line.split()
    assert int(total) == sum(x * x for x in range(1000))


def test_range_read_steps_over_transaction_markers(env: Env) -> None:
    """Transactional writes leave control records: offsets with no record behind them."""
    producer = KafkaProducer(bootstrap_servers="127.0.0.1:9092",
                             transactional_id=f"{env.name}-tx")
    producer.init_transactions()
    for batch in range(3):
        producer.begin_transaction()
        for i in range(5):
            producer.send(env.name, key=b"k", value=f"{batch}-{i}".encode(), partition=0)
        producer.commit_transaction()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9092", group_id=None)
    end = consumer.end_offsets([TopicPartition(env.name, 0)])[TopicPartition(env.name, 0)]
    consumer.close()
    assert end == 18  # 15 records + 3 commit markers
    got = list(read_range(env.cfg.kafka, OffsetRange(env.name, 0, 0, end)))
    assert [v for _, _, v, *_ in got] == [f"{b}-{i}".encode() for b in range(3) for i in range(5)]
    assert [o for o, *_ in got] == [o for o in range(18) if o % 6 != 5]
    # a range ending on a marker ends there; one starting after it starts cleanly
    assert [o for o, *_ in read_range(env.cfg.kafka, OffsetRange(env.name, 0, 3, 6))] == [3, 4]
    assert [o for o, *_ in read_range(env.cfg.kafka, OffsetRange(env.name, 0, 5, 8))] == [6, 7]


def test_every_service_listens_on_loopback_only() -> None:
    """The stack is for one machine: no port it opens may be reachable from another."""
    import proctools
    import stack as stack_script

    running = {s.name: pid for s in stack_script.all_services() if (pid := s.pid())}
    broker = "kafka3" if "kafka3" in running else "kafka"  # make test-kafka3 runs the 3.x one
    assert {broker, "hbase", "thrift"} <= running.keys(), running
    seen = {name: proctools.listening_sockets(pid) for name, pid in running.items()}
    exposed = {name: [a for a in socks if not ipaddress.ip_address(a[0]).is_loopback]
               for name, socks in seen.items()}
    assert not any(exposed.values()), exposed
    assert all(seen[name] for name in (broker, "hbase", "thrift")), seen
    print({name: sorted(port for _, port in socks) for name, socks in seen.items()})
