"""The plain stack as a whole: ``up`` in dependency order with every readiness wait,
``down`` in reverse (and the wipe), ``status``."""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from functools import partial

from stackparts.base import HOST, RUN, StackError, log
from stackparts.catalog import all_services, optional_services
from stackparts.cluster import (
    CLUSTER,
    NODES,
    cluster_services,
    cluster_thrift_service,
    kafka_node,
    links_service,
    master_service,
    prepare_hbase_cluster,
    prepare_kafka_cluster,
    region_server_service,
    zookeeper_service,
)
from stackparts.hbase import (
    THRIFT_PORT,
    ZK_PORT,
    ensure_hostname_resolves,
    hbase_service,
    prepare_hbase,
    probe_hbase,
    thrift_service,
)
from stackparts.jars import fetch
from stackparts.kafka import KAFKA_PORT, kafka_service, prepare_kafka, probe_kafka
from stackparts.process import port_open, rss_mib
from stackparts.readiness import probe_port, wait_until
from stackparts.registry import REGISTRY_API, probe_registry, registry_service
from stackparts.secure import secure_services
from stackparts.spark import SPARK_MASTER_PORT, spark_services, wait_spark_workers


def up(spark: bool, wipe: bool, cluster: bool = False) -> None:
    """The plain stack, or with ``cluster`` the cluster stack in place of its Kafka and
    HBase (``stackparts.cluster``); the registry, and Spark if asked, either way."""
    fetch()
    ensure_hostname_resolves()
    registry = registry_service()
    if wipe:
        down(wipe=False)
    t0 = time.monotonic()
    if wipe and registry.pid() is None:  # its ids name schemas of the records just wiped
        shutil.rmtree(RUN / "registry" / "data", ignore_errors=True)
    if cluster:
        _cluster_up(wipe, t0)
        registry.start()
    else:
        _plain_up(wipe, t0, registry.start)
    if spark:
        master, *workers = spark_services()
        master.start()
    wait_until(registry, "GET /subjects", probe_registry)
    log(f"schema registry ready at {REGISTRY_API} ({time.monotonic() - t0:.1f}s)")
    if spark:
        wait_until(master, "master port", probe_port(SPARK_MASTER_PORT))
        for worker in workers:
            worker.start()
        for worker in workers:
            wait_until(worker, "worker port", probe_port(worker.port, worker.host))
        wait_spark_workers(len(workers))
        log(f"spark standalone ready at spark://{HOST}:{SPARK_MASTER_PORT} "
            f"({time.monotonic() - t0:.1f}s)")


def _plain_up(wipe: bool, t0: float, meanwhile: Callable[[], None]) -> None:
    kafka, hbase, thrift = kafka_service(), hbase_service(), thrift_service()
    if kafka.pid() is None:
        prepare_kafka(wipe)
    if hbase.pid() is None:
        prepare_hbase(wipe)
    kafka.start()
    hbase.start()
    meanwhile()  # about 3 s, while HBase starts: it adds nothing to the wait
    wait_until(kafka, "describe_cluster", probe_kafka)
    log(f"kafka ready on {HOST}:{KAFKA_PORT} ({time.monotonic() - t0:.1f}s)")
    wait_until(hbase, "zookeeper port", probe_port(ZK_PORT))
    thrift.start()
    wait_until(thrift, "create/put/get", probe_hbase)
    log(f"hbase + thrift ready on {HOST}:{THRIFT_PORT} ({time.monotonic() - t0:.1f}s)")


def _cluster_up(wipe: bool, t0: float) -> None:
    """The relays and the three Kafka nodes; ZooKeeper, the active master, the region
    servers, then the backup master (so the first is the active one) and Thrift."""
    for plain in (kafka_service(), hbase_service(), thrift_service()):
        if plain.pid() is not None:
            raise StackError(f"{plain.name} of the plain stack is running: `stack.py down` "
                             "first (the cluster stack takes its ports)")
    if all(kafka_node(n).pid() is None for n in NODES):
        prepare_kafka_cluster(wipe)
    if zookeeper_service().pid() is None:
        prepare_hbase_cluster(wipe)
    links_service().start()
    nodes = [kafka_node(n) for n in NODES]
    for node in nodes:
        node.start()
    zk = zookeeper_service()
    zk.start()
    wait_until(zk, "zookeeper port", probe_port(ZK_PORT))
    active = master_service(1)
    active.start()
    servers = [region_server_service(i) for i in (1, 2)]
    for rs in servers:
        rs.start()
    for node in nodes:
        wait_until(node, "describe_cluster", partial(probe_kafka, node.host, node.port))
    wait_until(nodes[0], "three brokers", lambda: _brokers(3))
    log(f"kafka cluster ready on {', '.join(f'{n.host}:{n.port}' for n in nodes)} "
        f"({time.monotonic() - t0:.1f}s)")
    for svc in (active, *servers):
        wait_until(svc, "rpc port", probe_port(svc.port))
    backup, thrift = master_service(2), cluster_thrift_service()
    backup.start()
    thrift.start()
    wait_until(thrift, "create/put/get", probe_hbase)
    wait_until(backup, "rpc port", probe_port(backup.port))
    log(f"hbase cluster (2 masters, 2 region servers) + thrift ready on {HOST}:{THRIFT_PORT} "
        f"({time.monotonic() - t0:.1f}s)")


def _brokers(count: int) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{KAFKA_PORT}",
                             request_timeout_ms=5000)
    try:
        found = len(admin.describe_cluster()["brokers"])
    finally:
        admin.close()
    if found < count:
        raise ConnectionError(f"{found} of {count} brokers registered")


def down(wipe: bool) -> None:
    # Consumers first, the store last: Spark, Thrift, HBase, Kafka. Data about to be wiped
    # needs no clean shutdown: SIGKILL (a loaded HBase ignored SIGTERM for the whole 30 s).
    for svc in reversed(all_services()):
        svc.stop(signal.SIGKILL if wipe else signal.SIGTERM)
    if wipe:
        for sub in ("kafka/data", "hbase/root", "hbase/tmp", "hbase/zk", "registry/data",
                    "spark", "yarn/tmp", "yarn/target", "secure/kafka/data",
                    "secure/hbase/root", "secure/hbase/tmp", "secure/hbase/zk"):
            shutil.rmtree(RUN / sub, ignore_errors=True)
        for sub in (*(f"broker{n}/data" for n in NODES), "hbase/root", "hbase/tmp", "hbase/zk",
                    "cluster.id"):
            path = CLUSTER / sub
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        log("data wiped")


def status() -> int:
    optional = {s.name for s in [*optional_services(), *secure_services(),
                                 *cluster_services()]}
    for svc in all_services():
        pid = svc.pid()
        if pid is None:
            state = "not started (optional)" if svc.name in optional else "stopped"
            print(f"{svc.name:22s} {state}")
            continue
        state = "listening" if port_open(svc.port, svc.host) else "NOT LISTENING"
        print(f"{svc.name:22s} pid {pid:<7d} {svc.host}:{svc.port:<5d} {state:13s} "
              f"rss {rss_mib(pid):7.0f} MiB  log {svc.logfile}")
    return 0
