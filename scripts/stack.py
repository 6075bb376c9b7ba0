#!/usr/bin/env python3
"""The local stack: real Apache Kafka, HBase (+ Thrift1) and Spark standalone, on loopback.

Kafka and HBase run from Maven Central jars that ``fetch`` copies into ``.services/``; Spark
runs from the pyspark package's own jars. Every process is started by this script, its pid
kept in ``.services/<service>/<name>.pid`` and its output in ``.services/<service>/logs``.

    stack.py fetch                     resolve the jars (cached in ~/.m2 and .services/*/lib)
    stack.py up [--spark] [--wipe]     start what is not running and wait until it answers
    stack.py down [--wipe]             stop everything this script started; ports are freed
    stack.py status                    one line per service: pid, port, resident memory
    stack.py start NAME                one service; returns once it answers (as `up` does)
    stack.py stop|kill NAME            one service (kafka, hbase, thrift, spark-master, ...)
    stack.py up --cluster              three Kafka nodes and a two-master, two-region-server
                                       HBase in place of the one-node Kafka and HBase
    stack.py cut brokerN | heal        one Kafka node of the cluster stack cut off from its
                                       peers (its clients still reach it), or none

It uses only the standard library plus kafka-python and happybase for the readiness probes,
so it runs from the project's virtualenv.

The work is done in ``stackparts/`` (one module per job: jars, processes, readiness, each
service family, the catalog of services, the whole-stack commands); this file is the command
line, and it re-exports every name the tests and other scripts read as ``stack.<name>``.
"""

from __future__ import annotations

import argparse
import sys

from stackparts.base import HOST, ROOT, RUN, SERVICES, StackError, log, render
from stackparts.catalog import all_services, by_name, optional_services, wait_ready
from stackparts.cluster import cut, heal
from stackparts.commands import down, status, up
from stackparts.hbase import (
    HBASE_JDK17_OPTS,
    THRIFT_CLASS,
    THRIFT_FC_PORT,
    THRIFT_PORT,
    THRIFT_SPARE_PORT,
    ZK_PORT,
    ensure_hostname_resolves,
    hbase_java,
    hbase_service,
    prepare_hbase,
    probe_hbase,
    thrift_service,
)
from stackparts.jars import fetch, unpack_registry
from stackparts.kafka import (
    KAFKA_CA_PEM,
    KAFKA_CONTROLLER_PORT,
    KAFKA_PORT,
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_PORT,
    KAFKA_SASL_USER,
    KAFKA_TLS_DIR,
    KAFKA_TLS_PASSWORD,
    format_kafka_storage,
    kafka3_service,
    kafka_service,
    make_broker_certificate,
    prepare_kafka,
    prepare_kafka3,
    probe_kafka,
    render_kafka_properties,
)
from stackparts.process import (
    STOP_TIMEOUT_S,
    Service,
    pid_alive,
    port_open,
    rss_mib,
    wait_port_closed,
)
from stackparts.readiness import READY_TIMEOUT_S, WillNotStart, probe_port, wait_until
from stackparts.registry import (
    REGISTRY_API,
    REGISTRY_PORT,
    probe_registry,
    registry_lacks_tables,
    registry_service,
)
from stackparts.secure import (
    CLIENT_PRINCIPAL,
    KDC_PORT,
    KEYTABS,
    REALM,
    SEC_KAFKA_CONTROLLER_PORT,
    SEC_KAFKA_PORT,
    SEC_KAFKA_SSL_PORT,
    SEC_MASTER_PORT,
    SEC_RS_PORT,
    SEC_TLS_PASSWORD,
    SEC_ZK_PORT,
    SECURE,
    SECURE_FACTS,
    THRIFT_HTTPS_PORT,
    THRIFT_SASL_PORT,
    hbase_classpath,
    kdc_service,
    krb5_jvm_opts,
    probe_secure_hbase,
    probe_secure_kafka,
    secure_client_config,
    secure_facts,
    secure_hbase_java,
    secure_kafka_service,
    secure_services,
    secure_up,
    service_hosts,
)
from stackparts.spark import (
    SPARK_MASTER_PORT,
    SPARK_MASTER_UI_PORT,
    SPARK_WORKER_PORTS,
    spark_home,
    spark_services,
    wait_spark_workers,
)
from stackparts.tls import make_certificate
from stackparts.yarn import YARN_CONF_DIR, YARN_RM_PORT, yarn_service, yarn_up

__all__ = [
    "CLIENT_PRINCIPAL", "HBASE_JDK17_OPTS", "HOST", "KAFKA_CA_PEM", "KAFKA_CONTROLLER_PORT",
    "KAFKA_PORT", "KAFKA_SASL_PASSWORD", "KAFKA_SASL_PORT", "KAFKA_SASL_USER", "KAFKA_TLS_DIR",
    "KAFKA_TLS_PASSWORD", "KDC_PORT", "KEYTABS", "READY_TIMEOUT_S", "REALM", "REGISTRY_API",
    "REGISTRY_PORT", "ROOT", "RUN", "SECURE", "SECURE_FACTS", "SEC_KAFKA_CONTROLLER_PORT",
    "SEC_KAFKA_PORT", "SEC_KAFKA_SSL_PORT", "SEC_MASTER_PORT", "SEC_RS_PORT", "SEC_TLS_PASSWORD",
    "SEC_ZK_PORT", "SERVICES", "SPARK_MASTER_PORT", "SPARK_MASTER_UI_PORT", "SPARK_WORKER_PORTS",
    "STOP_TIMEOUT_S", "THRIFT_CLASS", "THRIFT_FC_PORT", "THRIFT_HTTPS_PORT", "THRIFT_PORT",
    "THRIFT_SASL_PORT", "THRIFT_SPARE_PORT", "YARN_CONF_DIR", "YARN_RM_PORT", "ZK_PORT",
    "Service", "StackError", "WillNotStart", "all_services", "by_name", "down",
    "ensure_hostname_resolves", "fetch", "format_kafka_storage", "hbase_classpath", "hbase_java",
    "hbase_service", "kafka3_service", "kafka_service", "kdc_service", "krb5_jvm_opts", "log",
    "main", "make_broker_certificate", "make_certificate", "optional_services", "pid_alive",
    "port_open", "prepare_hbase", "prepare_kafka", "prepare_kafka3", "probe_hbase",
    "probe_kafka", "probe_port", "probe_registry", "probe_secure_hbase", "probe_secure_kafka",
    "registry_lacks_tables", "registry_service", "render", "render_kafka_properties", "rss_mib",
    "secure_client_config", "secure_facts", "secure_hbase_java", "secure_kafka_service",
    "secure_services", "secure_up", "service_hosts", "spark_home", "spark_services", "status",
    "thrift_service", "unpack_registry", "up", "wait_port_closed", "wait_ready",
    "wait_spark_workers", "wait_until", "yarn_service", "yarn_up",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch")
    p_up = sub.add_parser("up")
    p_up.add_argument("--spark", action="store_true", help="also a standalone master + 2 workers")
    p_up.add_argument("--wipe", action="store_true",
                      help="start from empty Kafka, HBase and schema registry")
    p_up.add_argument("--yarn", action="store_true",
                      help="also a YARN MiniCluster (ResourceManager on 8032)")
    p_up.add_argument("--cluster", action="store_true",
                      help="the cluster stack: 3 KRaft nodes (RF 3, min ISR 2), HBase with "
                           "2 masters and 2 region servers, in place of the one-node ones")
    p_up.add_argument("--secure", action="store_true",
                      help="also the secured stack: KDC, Kerberized Kafka and HBase (Thrift "
                           "SASL on 9190, HTTPS on 9191)")
    p_secure = sub.add_parser("secure-up", help="the secured stack alone")
    p_secure.add_argument("--wipe", action="store_true")
    p_sconf = sub.add_parser("secure-config", help="print a job config (YAML) for it")
    p_sconf.add_argument("--name", required=True, help="topic and table prefix")
    p_sconf.add_argument("--mode", choices=("sasl", "https"), default="sasl")
    p_down = sub.add_parser("down")
    p_down.add_argument("--wipe", action="store_true", help="also delete all data")
    sub.add_parser("status")
    for cmd in ("start", "stop", "kill", "pause", "resume", "cut"):
        p = sub.add_parser(cmd)
        p.add_argument("name")
    sub.add_parser("heal", help="every Kafka node of the cluster stack reaches its peers")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "fetch":
            fetch()
        elif args.cmd == "up":
            up(args.spark, args.wipe, args.cluster)
            if args.yarn:
                yarn_up()
            if args.secure:
                secure_up(args.wipe)
        elif args.cmd == "secure-up":
            secure_up(args.wipe)
        elif args.cmd == "secure-config":
            import yaml

            print(yaml.safe_dump(secure_client_config(args.name, args.mode), sort_keys=False),
                  end="")
        elif args.cmd == "down":
            down(args.wipe)
        elif args.cmd == "status":
            return status()
        elif args.cmd == "stop":
            by_name(args.name).stop()
        elif args.cmd == "kill":
            by_name(args.name).kill()
        elif args.cmd == "pause":
            by_name(args.name).pause()
        elif args.cmd == "resume":
            by_name(args.name).resume()
        elif args.cmd == "cut":
            cut(int(args.name.removeprefix("broker")))
        elif args.cmd == "heal":
            heal()
        elif args.cmd == "start" and args.name == "yarn":
            yarn_up()
        elif args.cmd == "start":
            svc = by_name(args.name)
            if args.name == "kafka3":
                prepare_kafka3()
            svc.start()
            wait_ready(svc)
    except StackError as exc:
        print(f"[stack] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
