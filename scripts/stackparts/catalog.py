"""Every service the script knows, by name (``start``/``stop``/``kill NAME``, ``status``,
``down``), and how each one is known ready once started."""

from __future__ import annotations

import time

from stackparts.base import StackError, log
from stackparts.cluster import cluster_services
from stackparts.hbase import (
    THRIFT_CLASS,
    THRIFT_FC_PORT,
    THRIFT_SPARE_PORT,
    hbase_service,
    probe_hbase,
    thrift_service,
)
from stackparts.kafka import kafka3_service, kafka_service, probe_kafka
from stackparts.process import Service
from stackparts.readiness import probe_port, wait_until
from stackparts.registry import probe_registry, registry_service
from stackparts.secure import secure_services
from stackparts.spark import SPARK_WORKER_PORTS, spark_services, wait_spark_workers
from stackparts.yarn import yarn_service


def optional_services() -> list[Service]:
    """Started only on request (``stack.py start NAME``), e.g. by the transport tests."""
    return [thrift_service("thrift-framed-compact", THRIFT_FC_PORT, framed=True, compact=True),
            thrift_service("thrift-spare", THRIFT_SPARE_PORT),
            yarn_service(), kafka3_service()]


def all_services() -> list[Service]:
    return [*secure_services(), kafka_service(), hbase_service(), thrift_service(),
            registry_service(), *spark_services(), *optional_services(), *cluster_services()]


def by_name(name: str) -> Service:
    for svc in all_services():
        if svc.name == name:
            return svc
    raise StackError(f"unknown service {name!r}; valid: {[s.name for s in all_services()]}")


def wait_ready(svc: Service) -> None:
    """Return once ``svc`` answers the way its clients use it, not merely once it listens."""
    t0 = time.monotonic()
    if svc.name in ("kafka", "kafka3"):
        wait_until(svc, "describe_cluster", probe_kafka)
    elif svc.group == "cluster" and svc.name.startswith("kafka"):
        wait_until(svc, "describe_cluster", lambda: probe_kafka(svc.host, svc.port))
    elif svc.name == "registry":
        wait_until(svc, "GET /subjects", probe_registry)
    elif svc.group == "hbase" and THRIFT_CLASS in svc.argv:  # any plain Thrift server
        # the transport and protocol its thrift_service flags (-f, -c) chose
        transport = "framed" if "-f" in svc.argv else "buffered"
        protocol = "compact" if "-c" in svc.argv else "binary"
        wait_until(svc, "create/put/get", lambda: probe_hbase(svc.port, transport, protocol))
    else:
        wait_until(svc, "port", probe_port(svc.port, svc.host))
        if svc.name.startswith("spark-worker"):
            wait_spark_workers(len(SPARK_WORKER_PORTS))
    log(f"{svc.name} ready on {svc.host}:{svc.port} ({time.monotonic() - t0:.1f}s)")
