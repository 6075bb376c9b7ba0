"""The plain stack as a whole: ``up`` in dependency order with every readiness wait,
``down`` in reverse (and the wipe), ``status``."""

from __future__ import annotations

import shutil
import signal
import time

from stackparts.base import HOST, RUN, log
from stackparts.catalog import all_services, optional_services
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


def up(spark: bool, wipe: bool) -> None:
    fetch()
    ensure_hostname_resolves()
    kafka, hbase, thrift = kafka_service(), hbase_service(), thrift_service()
    registry = registry_service()
    if wipe:
        down(wipe=False)
    t0 = time.monotonic()
    if kafka.pid() is None:
        prepare_kafka(wipe)
    if hbase.pid() is None:
        prepare_hbase(wipe)
    if wipe and registry.pid() is None:  # its ids name schemas of the records just wiped
        shutil.rmtree(RUN / "registry" / "data", ignore_errors=True)
    kafka.start()
    hbase.start()
    registry.start()  # about 3 s, while HBase starts: it adds nothing to the wait
    if spark:
        master, *workers = spark_services()
        master.start()
    wait_until(kafka, "describe_cluster", probe_kafka)
    log(f"kafka ready on {HOST}:{KAFKA_PORT} ({time.monotonic() - t0:.1f}s)")
    wait_until(hbase, "zookeeper port", probe_port(ZK_PORT))
    thrift.start()
    wait_until(thrift, "create/put/get", probe_hbase)
    log(f"hbase + thrift ready on {HOST}:{THRIFT_PORT} ({time.monotonic() - t0:.1f}s)")
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
        log("data wiped")


def status() -> int:
    optional = {s.name for s in [*optional_services(), *secure_services()]}
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
