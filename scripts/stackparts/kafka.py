"""The plain Kafka broker (4.x, or the 3.x line in its place): its listeners and test
credentials, its properties, certificate and storage, its process and its readiness probe."""

from __future__ import annotations

import base64
import shutil
import subprocess
import uuid
from pathlib import Path

from stackparts.base import HOST, RUN, SERVICES, StackError, render
from stackparts.jars import fetch
from stackparts.process import Service
from stackparts.tls import make_certificate

KAFKA_PORT = 9092
KAFKA_CONTROLLER_PORT = 9093
# The SASL_SSL listener: TLS with a self-signed certificate made at first start (its PEM is
# the clients' ssl_cafile) and SASL/PLAIN with one user. Test credentials for a loopback-only
# broker; the security tests use the SASL password as their canary (it must never be logged).
KAFKA_SASL_PORT = 9094
KAFKA_SASL_USER = "leakproof"
KAFKA_SASL_PASSWORD = "canary-Zx81-do-not-log"
KAFKA_TLS_PASSWORD = "leakproof-test-keystore"
KAFKA_TLS_DIR = RUN / "kafka" / "tls"
KAFKA_CA_PEM = KAFKA_TLS_DIR / "broker.pem"


def kafka_service() -> Service:
    run = RUN / "kafka"
    opts = [
        "-Xms512m", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
        "-Djava.awt.headless=true", f"-Dkafka.logs.dir={run / 'logs'}",
        f"-Dlog4j2.configurationFile=file:{SERVICES / 'kafka' / 'log4j2.properties'}",
    ]
    return Service("kafka", "kafka", KAFKA_PORT,
                   ["java", *opts, "-cp", f"{run / 'lib'}/*", "kafka.Kafka",
                    str(run / "server.properties")])


def kafka3_service() -> Service:
    """A Kafka 3.x broker (``services/kafka3``) in place of the 4.x one: same port, same
    settings, its own data; for running the Kafka-facing tests against the older line."""
    run = RUN / "kafka3"
    opts = ["-Xms512m", "-Xmx1g", "-server", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={run / 'logs'}",
            f"-Dlog4j.configuration=file:{SERVICES / 'kafka3' / 'log4j.properties'}"]
    return Service("kafka3", "kafka3", KAFKA_PORT,
                   ["java", *opts, "-cp", f"{run / 'lib'}/*", "kafka.Kafka",
                    str(run / "server.properties")])


def prepare_kafka3() -> None:
    """Its jars, its server.properties (the 4.x broker's, which it shares the TLS keystore
    with), its storage formatted once."""
    fetch(("kafka3",))
    run = RUN / "kafka3"
    make_broker_certificate()
    render_kafka_properties(run / "server.properties", run / "data")
    if not (run / "data" / "meta.properties").exists():
        format_kafka_storage(run / "server.properties", run / "lib")


def make_broker_certificate() -> None:
    make_certificate(KAFKA_TLS_DIR / "broker.p12", KAFKA_CA_PEM, KAFKA_TLS_PASSWORD)


def prepare_kafka(wipe: bool) -> None:
    run = RUN / "kafka"
    if wipe:
        shutil.rmtree(run / "data", ignore_errors=True)
    make_broker_certificate()
    render_kafka_properties(run / "server.properties", run / "data")
    if (run / "data" / "meta.properties").exists():
        return
    format_kafka_storage(run / "server.properties")


def render_kafka_properties(dest: Path, data: Path) -> None:
    """The broker's settings (either line's): its log directory ``data``, the 4.x broker's
    TLS keystore and ports."""
    render(SERVICES / "kafka" / "server.properties", dest, ROOT=RUN / "kafka", DATA=data,
           PORT=KAFKA_PORT, CONTROLLER_PORT=KAFKA_CONTROLLER_PORT, SASL_PORT=KAFKA_SASL_PORT,
           SASL_USER=KAFKA_SASL_USER, SASL_PASSWORD=KAFKA_SASL_PASSWORD,
           TLS_PASSWORD=KAFKA_TLS_PASSWORD)


def format_kafka_storage(properties: Path, lib: Path = RUN / "kafka" / "lib") -> None:
    # A random id starts with "-" one time in 64, and the tool's parser then takes it for an
    # option ("--cluster-id: expected one argument"): Kafka's own random-uuid never makes one
    # like that, so neither do we, and the value is attached with "=" as well.
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    result = subprocess.run(
        ["java", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*",
         f"-Dlog4j2.configurationFile=file:{SERVICES / 'kafka' / 'log4j2.properties'}",
         "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c",
         str(properties), "--ignore-formatted"],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")


def probe_kafka(host: str = HOST, port: int = KAFKA_PORT) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=f"{host}:{port}", bootstrap_timeout_ms=5000,
                             request_timeout_ms=5000)
    try:
        admin.describe_cluster()
    finally:
        admin.close()
