"""The secured stack (``secure-up``), apart from the plain one: a KDC, a Kerberized Kafka
broker, a Kerberized HBase with a SASL and an HTTPS Thrift server, the facts file its
clients read, the job config for it (``secure-config``) and its readiness probes."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from stackparts.base import HOST, RUN, SERVICES, StackError, log, render
from stackparts.hbase import HBASE_JDK17_OPTS, THRIFT_CLASS, ensure_hostname_resolves
from stackparts.jars import fetch
from stackparts.kafka import format_kafka_storage
from stackparts.process import Service, port_open
from stackparts.readiness import probe_port, wait_until
from stackparts.tls import make_certificate

# The secured stack (``up --secure``): a KDC, a Kerberized Kafka broker and a Kerberized HBase
# with two Thrift1 servers, all apart from the plain stack so neither disturbs the other.
SECURE = RUN / "secure"
REALM = "LEAKPROOF.TEST"
KDC_PORT = 6088
SEC_KAFKA_PORT = 9192  # SASL_PLAINTEXT, GSSAPI
SEC_KAFKA_SSL_PORT = 9193  # SASL_SSL, GSSAPI
SEC_KAFKA_CONTROLLER_PORT = 9194
SEC_ZK_PORT = 2182
SEC_MASTER_PORT = 16100
SEC_RS_PORT = 16120
THRIFT_SASL_PORT = 9190  # SASL/GSSAPI, qop auth-conf, buffered/binary
THRIFT_HTTPS_PORT = 9191  # HTTPS + SPNEGO
SEC_TLS_PASSWORD = "leakproof-secure-keystore"
KEYTABS = SECURE / "keytabs"
CLIENT_PRINCIPAL = f"leakproof@{REALM}"
SECURE_FACTS = SECURE / "facts.json"  # what clients need: principals, keytabs, ports, CA


def kdc_service() -> Service:
    """Apache Kerby's KDC (services/kdc/Kdc.java): it makes every principal of the secured
    stack and exports their keytabs before it answers. ``_HOST`` in a principal is the host
    name the JVMs resolve for themselves, which HBase's Thrift server puts in its own."""
    k = KEYTABS
    specs = [
        f"{k}/kafka.keytab=kafka/127.0.0.1@{REALM},kafka/localhost@{REALM}",
        f"{k}/hbase.keytab=" + ",".join(f"hbase/{h}@{REALM}" for h in service_hosts()),
        f"{k}/http.keytab=" + ",".join(f"HTTP/{h}@{REALM}" for h in service_hosts()),
        f"{k}/leakproof.keytab={CLIENT_PRINCIPAL}",
        # for the bad-credential tests: an old key of the job's principal, and a principal
        # the KDC has since deleted
        f"stale:{k}/leakproof-stale.keytab={CLIENT_PRINCIPAL}",
        f"stale:{k}/deleted.keytab=deleted@{REALM}",
    ]
    return Service("kdc", "secure", KDC_PORT, [
        "java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{RUN / 'kdc' / 'lib'}/*",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        str(SERVICES / "kdc" / "Kdc.java"), str(SECURE / "kdc"), REALM, str(KDC_PORT),
        str(SECURE / "kdc" / "seed"), *specs])


def service_hosts() -> list[str]:
    """Every name a service of the secured stack may put in its principal."""
    names = {"localhost", "127.0.0.1", socket.gethostname().lower()}
    with contextlib.suppress(OSError):
        names.add(socket.gethostbyaddr(socket.gethostbyname(socket.gethostname()))[0].lower())
    names.add("_HOST")  # Kdc.java: the JVM's own canonical host name
    return sorted(names)


def krb5_jvm_opts() -> list[str]:
    return [f"-Djava.security.krb5.conf={SECURE / 'krb5.conf'}",
            "-Djavax.security.auth.useSubjectCredsOnly=false"]


def secure_kafka_service() -> Service:
    run = SECURE / "kafka"
    opts = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={run / 'logs'}", *krb5_jvm_opts(),
            f"-Dlog4j2.configurationFile=file:{SERVICES / 'kafka' / 'log4j2.properties'}"]
    return Service("kafka-secure", "secure", SEC_KAFKA_PORT,
                   ["java", *opts, "-cp", f"{RUN / 'kafka' / 'lib'}/*", "kafka.Kafka",
                    str(run / "server.properties")])


# Old servlet and Jetty 6 jars that Hadoop's tree brings: on the classpath of a Thrift server
# in HTTP mode they can shadow the servlet 3.1 API its shaded Jetty needs.
_SHADOWING = re.compile(r"^(servlet-api-2\.|jetty-(util-|sslengine-)?6\.)")


def hbase_classpath(conf: Path) -> str:
    jars = sorted(p for p in (RUN / "hbase" / "lib").glob("*.jar")
                  if not _SHADOWING.match(p.name))
    return ":".join([str(conf), *map(str, jars)])


def secure_hbase_java(name: str, heap: str, conf: str = "conf") -> list[str]:
    run = SECURE / "hbase"
    return [
        "java", f"-Dproc_{name}", f"-Xmx{heap}", "-XX:+UseG1GC", *HBASE_JDK17_OPTS,
        *krb5_jvm_opts(), f"-Dhbase.log.dir={run / 'logs'}", f"-Dhbase.log.file={name}.log",
        f"-Dlog4j2.configurationFile=file:{RUN / 'hbase' / 'conf' / 'log4j2.properties'}",
        "-cp", hbase_classpath(run / conf),
    ]


def secure_services() -> list[Service]:
    return [
        kdc_service(),
        secure_kafka_service(),
        Service("hbase-secure", "secure", SEC_ZK_PORT,
                [*secure_hbase_java("master-secure", "1g"),
                 "org.apache.hadoop.hbase.master.HMaster", "start"]),
        Service("thrift-sasl", "secure", THRIFT_SASL_PORT,
                [*secure_hbase_java("thrift-sasl", "256m"), THRIFT_CLASS,
                 "-b", HOST, "-p", str(THRIFT_SASL_PORT), "start"]),
        Service("thrift-https", "secure", THRIFT_HTTPS_PORT,
                [*secure_hbase_java("thrift-https", "256m", "conf-http"), THRIFT_CLASS,
                 "-b", HOST, "-p", str(THRIFT_HTTPS_PORT), "start"]),
    ]


def secure_up(wipe: bool) -> None:
    """The secured stack: KDC first (every keytab exists once it answers), then Kafka and
    HBase with Kerberos, then HBase's two secured Thrift servers."""
    import json

    fetch(("kafka", "hbase", "kdc"))
    ensure_hostname_resolves()
    kdc, kafka, hbase, sasl, https = secure_services()
    t0 = time.monotonic()
    if wipe:
        for svc in reversed(secure_services()):
            svc.stop()
        for sub in ("kafka/data", "hbase/root", "hbase/tmp", "hbase/zk"):
            shutil.rmtree(SECURE / sub, ignore_errors=True)
    for sub in ("kdc", "keytabs", "logs", "kafka", "hbase/conf", "hbase/logs", "hbase/tmp"):
        (SECURE / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(KEYTABS, 0o700)
    seed = SECURE / "kdc" / "seed"
    if not seed.is_file():
        seed.write_bytes(os.urandom(32))
        seed.chmod(0o600)
    render(SERVICES / "secure" / "krb5.conf", SECURE / "krb5.conf", REALM=REALM,
           KDC_PORT=KDC_PORT, LIFETIME="24h")
    tls = SECURE / "tls"
    make_certificate(tls / "server.p12", tls / "server.pem", SEC_TLS_PASSWORD)
    if kdc.pid() is None:
        (SECURE / "kdc" / "ready").unlink(missing_ok=True)
    kdc.start()

    def kdc_ready() -> None:
        if not (SECURE / "kdc" / "ready").is_file() or not port_open(KDC_PORT):
            raise StackError("not yet")

    wait_until(kdc, "keytabs written and port open", kdc_ready)
    log(f"kdc ready on {HOST}:{KDC_PORT}, realm {REALM} ({time.monotonic() - t0:.1f}s)")
    host = (SECURE / "kdc" / "host").read_text().strip()
    run = SECURE / "kafka"
    render(SERVICES / "secure" / "server.properties", run / "server.properties", ROOT=run,
           PORT=SEC_KAFKA_PORT, SSL_PORT=SEC_KAFKA_SSL_PORT,
           CONTROLLER_PORT=SEC_KAFKA_CONTROLLER_PORT, KEYTABS=KEYTABS, REALM=REALM,
           TLS_DIR=tls, TLS_PASSWORD=SEC_TLS_PASSWORD)
    if kafka.pid() is None and not (run / "data" / "meta.properties").exists():
        format_kafka_storage(run / "server.properties")
    http = "<property><name>hbase.regionserver.thrift.http</name><value>true</value></property>"
    for conf, extra in (("conf", ""), ("conf-http", http)):
        render(SERVICES / "secure" / "hbase-site.xml", SECURE / "hbase" / conf / "hbase-site.xml",
               ROOT=SECURE / "hbase", ZK_PORT=SEC_ZK_PORT, MASTER_PORT=SEC_MASTER_PORT,
               RS_PORT=SEC_RS_PORT, KEYTABS=KEYTABS, REALM=REALM, TLS_DIR=tls,
               TLS_PASSWORD=SEC_TLS_PASSWORD, EXTRA=extra)
        shutil.copy(SERVICES / "secure" / "core-site.xml", SECURE / "hbase" / conf)
    facts = {
        "realm": REALM, "kdc": f"{HOST}:{KDC_PORT}", "krb5_conf": str(SECURE / "krb5.conf"),
        "principal": CLIENT_PRINCIPAL, "keytab": str(KEYTABS / "leakproof.keytab"),
        "stale_keytab": str(KEYTABS / "leakproof-stale.keytab"),
        "deleted_keytab": str(KEYTABS / "deleted.keytab"), "deleted_principal": f"deleted@{REALM}",
        "kafka_sasl_plaintext": f"{HOST}:{SEC_KAFKA_PORT}",
        "kafka_sasl_ssl": f"{HOST}:{SEC_KAFKA_SSL_PORT}", "ca_file": str(tls / "server.pem"),
        "thrift_sasl_port": THRIFT_SASL_PORT, "thrift_https_port": THRIFT_HTTPS_PORT,
        "thrift_principal": f"hbase/{host}@{REALM}", "thrift_http_principal":
        f"HTTP/{host}@{REALM}", "zookeeper": f"{HOST}:{SEC_ZK_PORT}",
    }
    SECURE_FACTS.write_text(json.dumps(facts, indent=2) + "\n")
    kafka.start()
    hbase.start()
    wait_until(kafka, "describe_cluster over SASL/GSSAPI", probe_secure_kafka)
    log(f"kafka-secure ready on {HOST}:{SEC_KAFKA_PORT} (SASL_PLAINTEXT) and "
        f"{SEC_KAFKA_SSL_PORT} (SASL_SSL), GSSAPI ({time.monotonic() - t0:.1f}s)")
    wait_until(hbase, "zookeeper port", probe_port(SEC_ZK_PORT))
    sasl.start()
    https.start()
    wait_until(sasl, "create/put/get over SASL auth-conf", lambda: probe_secure_hbase("buffered"))
    wait_until(https, "create/put/get over HTTPS + SPNEGO", lambda: probe_secure_hbase("http"))
    log(f"hbase-secure ready: Thrift SASL on {HOST}:{THRIFT_SASL_PORT}, HTTPS on "
        f"{HOST}:{THRIFT_HTTPS_PORT} ({time.monotonic() - t0:.1f}s); facts in {SECURE_FACTS}")


def secure_facts() -> dict[str, object]:
    import json

    return dict(json.loads(SECURE_FACTS.read_text()))


def _client_kerberos() -> Any:
    from leakproof.core.config import KerberosConfig

    f = secure_facts()
    return KerberosConfig(principal=str(f["principal"]), keytab=str(f["keytab"]),
                          krb5_conf=str(f["krb5_conf"]))


def probe_secure_kafka() -> None:
    from kafka import KafkaAdminClient

    from leakproof.security import kerberos

    kerberos.login(_client_kerberos())
    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{SEC_KAFKA_PORT}",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI",
                             sasl_kerberos_service_name="kafka", bootstrap_timeout_ms=5000,
                             request_timeout_ms=5000)
    try:
        admin.describe_cluster()
    finally:
        admin.close()


def secure_client_config(name: str, mode: str) -> dict[str, Any]:
    """A job config for the secured stack (topic and table prefix ``name``): ``sasl`` =
    Kafka SASL_PLAINTEXT + Thrift SASL at auth-conf; ``https`` = Kafka SASL_SSL + Thrift over
    HTTPS with SPNEGO. The demo, the tests and the readiness probe all start from it."""
    f = secure_facts()
    https = mode == "https"
    consumer: dict[str, Any] = {"security_protocol": "SASL_SSL" if https else "SASL_PLAINTEXT",
                                "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka"}
    if https:
        consumer["ssl_cafile"] = f["ca_file"]
    hbase: dict[str, Any] = {"host": HOST, "table_prefix": name, "auth": "kerberos"}
    if https:
        hbase.update(port=f["thrift_https_port"], transport="http", tls=True,
                     tls_ca_file=f["ca_file"], service_principal=f["thrift_http_principal"])
    else:
        hbase.update(port=f["thrift_sasl_port"], transport="buffered", sasl_qop="auth-conf",
                     service_principal=f["thrift_principal"])
    return {
        "kafka": {"bootstrap_servers": f["kafka_sasl_ssl" if https else "kafka_sasl_plaintext"],
                  "topic": name, "group_id": "it", "read_timeout_s": 30, "consumer": consumer},
        "hbase": hbase,
        "security": {"kerberos": {"principal": f["principal"], "keytab": f["keytab"],
                                  "krb5_conf": f["krb5_conf"]}},
        "job": {"batch_interval_s": 1, "master": "local[2]"},
        "sessions": {"inactivity_gap_s": 600, "grace_s": 30},
    }


def probe_secure_hbase(transport: str) -> None:
    from dataclasses import replace

    from leakproof.core import config
    from leakproof.hbase.connection import connect

    data = secure_client_config("probe", "https" if transport == "http" else "sasl")
    data["hbase"].pop("table_prefix")
    cfg = replace(config.from_dict(data).hbase, timeout_ms=20000)
    conn = connect(cfg)
    try:
        if b"leakproof_probe" not in conn.tables():
            conn.create_table("leakproof_probe", {"p": {}})
        table = conn.table("leakproof_probe")
        table.put(b"r", {b"p:c": transport.encode()})
        if table.row(b"r").get(b"p:c") != transport.encode():
            raise RuntimeError("probe row did not read back")
    finally:
        conn.close()
