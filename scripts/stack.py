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

It uses only the standard library plus kafka-python and happybase for the readiness probes,
so it runs from the project's virtualenv.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "services"
RUN = Path(os.environ.get("LEAKPROOF_STACK_DIR", ROOT / ".services"))
HOST = "127.0.0.1"

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
ZK_PORT = 2181
THRIFT_PORT = 9090
THRIFT_FC_PORT = 9091  # optional second Thrift server: framed transport, compact protocol
THRIFT_SPARE_PORT = 9096  # optional: one the tests may stop and kill (not 9095: Thrift's UI)
SPARK_MASTER_PORT = 7077
SPARK_MASTER_UI_PORT = 8080
SPARK_WORKER_PORTS = ((7078, 8083), (7079, 8084))  # (8081 is the schema registry's)
REGISTRY_PORT = 8081
REGISTRY_API = f"http://127.0.0.1:{REGISTRY_PORT}/apis/ccompat/v7"  # Confluent-compatible
YARN_RM_PORT = 8032

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
YARN_CONF_DIR = RUN / "yarn" / "conf"  # HADOOP_CONF_DIR for spark-submit --master yarn

READY_TIMEOUT_S = float(os.environ.get("LEAKPROOF_READY_TIMEOUT_S", "240"))
STOP_TIMEOUT_S = 30.0

# What bin/hbase passes on JDK 11+: HBase's netty and Hadoop reach into java.base.
HBASE_JDK17_OPTS = [
    "-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true",
    "--add-modules", "jdk.unsupported",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-exports", "java.base/sun.net.dns=ALL-UNNAMED",
    "--add-exports", "java.base/sun.net.util=ALL-UNNAMED",
]


class StackError(RuntimeError):
    """A service did not start, stop or answer; the message names it and its log file."""


class WillNotStart(StackError):
    """A probe's answer that no wait will change: start-up gives up at once."""


def log(msg: str) -> None:
    print(f"[stack] {msg}", flush=True)


# --------------------------------------------------------------------------- jars


def fetch(names: tuple[str, ...] = ("kafka", "hbase", "kafka-tools", "kdc", "registry")
          ) -> None:
    """Copy each service's runtime classpath out of Maven Central, once per pom version
    (the registry's is a distribution: unpacked into its ``app`` directory)."""
    for name in names:
        pom = SERVICES / name / "pom.xml"
        lib = RUN / name / "lib"
        stamp = RUN / name / "lib.stamp"
        digest = hashlib.sha256(pom.read_bytes()).hexdigest()
        if lib.is_dir() and stamp.is_file() and stamp.read_text() == digest:
            continue
        shutil.rmtree(lib, ignore_errors=True)
        lib.parent.mkdir(parents=True, exist_ok=True)
        log(f"fetching {name} jars from Maven Central (first run only)")
        started = time.monotonic()
        cmd = [
            "mvn", "-B", "-q", "-f", str(pom),
            "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={lib}",
        ]
        result = subprocess.run(cmd, check=False, capture_output=True, text=True)
        # Maven 3.8 prints colour codes even in batch mode; keep only the words.
        text = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr).strip()
        if text:
            print(text, flush=True)
        if result.returncode != 0:
            raise StackError(f"maven could not resolve {pom}")
        size = sum(p.stat().st_size for p in lib.iterdir())
        log(f"{name}: {len(list(lib.iterdir()))} jars, {size / 2**20:.0f} MiB, "
            f"{time.monotonic() - started:.0f}s")
        if name == "registry":
            unpack_registry(lib)
        stamp.write_text(digest)
    hbase_lib = RUN / "hbase" / "lib"
    bad = [p.name for p in (hbase_lib.iterdir() if hbase_lib.is_dir() else ())
           if any(k in p.name for k in ("logback", "reload4j", "slf4j-log4j12"))]
    if bad:
        raise StackError(f"a second SLF4J binding leaked into the HBase classpath: {bad}")


def unpack_registry(lib: Path) -> None:
    """The registry's distribution (``*-all.tar.gz``) unpacked into ``registry/app``."""
    app = RUN / "registry" / "app"
    shutil.rmtree(app, ignore_errors=True)
    app.mkdir(parents=True)
    (tarball,) = lib.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        tar.extractall(app, filter="data")


# --------------------------------------------------------------------------- processes


@dataclass
class Service:
    """One JVM this script owns: how to start it, where it logs, which port says it is up."""

    name: str
    group: str
    port: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    host: str = HOST  # the loopback address it binds to

    @property
    def dir(self) -> Path:
        return RUN / self.group

    @property
    def pidfile(self) -> Path:
        return self.dir / f"{self.name}.pid"

    @property
    def logfile(self) -> Path:
        return self.dir / "logs" / f"{self.name}.out"

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def start(self) -> None:
        if self.pid() is not None:
            log(f"{self.name} already running (pid {self.pid()})")
            return
        if port_open(self.port, self.host):
            raise StackError(
                f"{self.name}: port {HOST}:{self.port} is taken by a process this script did not "
                f"start; stop it first (see `ss -ltnp 'sport = :{self.port}'`)"
            )
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        with open(self.logfile, "ab") as out:
            proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.dir, start_new_session=True,
            )
        self.pidfile.write_text(str(proc.pid))
        log(f"{self.name} started (pid {proc.pid}, log {self.logfile})")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        pid = self.pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):
            log(f"{self.name} ignored {signal.Signals(sig).name} for {STOP_TIMEOUT_S:.0f}s; "
                "killing")
            os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        wait_port_closed(self)
        log(f"{self.name} stopped")

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown hook runs."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.05)
        self.pidfile.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); read its state to be sure.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_port_closed(svc: Service, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while port_open(svc.port, svc.host):
        if time.monotonic() > deadline:
            raise StackError(f"{svc.name} stopped but {svc.host}:{svc.port} is still bound")
        time.sleep(0.2)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --------------------------------------------------------------------------- services


def render(template: Path, dest: Path, **values: object) -> None:
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)


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


def hbase_java(name: str, heap: str) -> list[str]:
    run = RUN / "hbase"
    return [
        "java", f"-Dproc_{name}", f"-Xmx{heap}", "-XX:+UseG1GC", *HBASE_JDK17_OPTS,
        f"-Dhbase.log.dir={run / 'logs'}", f"-Dhbase.log.file={name}.log",
        f"-Dlog4j2.configurationFile=file:{run / 'conf' / 'log4j2.properties'}",
        "-cp", f"{run / 'conf'}:{run / 'lib'}/*",
    ]


def hbase_service() -> Service:
    return Service("hbase", "hbase", ZK_PORT,
                   [*hbase_java("master", "3g"), "org.apache.hadoop.hbase.master.HMaster",
                    "start"])


THRIFT_CLASS = "org.apache.hadoop.hbase.thrift.ThriftServer"


def thrift_service(name: str = "thrift", port: int = THRIFT_PORT, framed: bool = False,
                   compact: bool = False) -> Service:
    """Buffered/binary by default, as happybase expects; -f / -c for the other transports."""
    extra = (["-f"] if framed else []) + (["-c"] if compact else [])
    return Service(name, "hbase", port,
                   [*hbase_java(name, "384m"), THRIFT_CLASS, "-b", HOST, "-p", str(port),
                    *extra, "start"])


def spark_home() -> Path:
    import pyspark  # the venv's own Spark distribution

    return Path(pyspark.__file__).resolve().parent


def spark_services() -> list[Service]:
    home = spark_home()
    cls = str(home / "bin" / "spark-class")
    env = {"SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(RUN / "spark"),
           "PYSPARK_PYTHON": sys.executable}
    master = Service("spark-master", "spark", SPARK_MASTER_PORT,
                     [cls, "org.apache.spark.deploy.master.Master", "--host", HOST,
                      "--port", str(SPARK_MASTER_PORT), "--webui-port", str(SPARK_MASTER_UI_PORT)],
                     env={**env, "SPARK_DAEMON_MEMORY": "512m"})
    workers = []
    # each worker (and its executor) under a loopback address of its own: to Spark they are
    # two hosts, as on a real cluster -- which speculation needs (a task's copy never runs
    # on a host where the task already runs)
    for i, (port, ui) in enumerate(SPARK_WORKER_PORTS, start=1):
        wdir = RUN / "spark" / f"worker{i}"
        host = f"127.0.0.{i}"
        workers.append(Service(
            f"spark-worker{i}", "spark", port,
            [cls, "org.apache.spark.deploy.worker.Worker", "--host", host, "--port", str(port),
             "--webui-port", str(ui), "--cores", "1", "--memory", "1g", "--work-dir", str(wdir),
             f"spark://{HOST}:{SPARK_MASTER_PORT}"],
            env={**env, "SPARK_LOCAL_IP": host, "SPARK_DAEMON_MEMORY": "256m"}, host=host))
    return [master, *workers]


def yarn_service() -> Service:
    """A ResourceManager and one NodeManager in one JVM (Hadoop's MiniYARNCluster), no HDFS.

    ``services/yarn/MiniYarn.java`` runs as a single-file program. Once the NodeManager has
    registered it writes the cluster's configuration to ``YARN_CONF_DIR/yarn-site.xml``,
    which is what spark-submit reads through HADOOP_CONF_DIR. The file system is the local
    one, so Spark's staging directory and the NodeManager's localized files are plain
    directories. Every port is bound to 127.0.0.1 (the ``bind-host`` keys).
    """
    run = RUN / "yarn"
    settings = {
        "yarn.resourcemanager.hostname": HOST,
        "yarn.resourcemanager.address": f"{HOST}:{YARN_RM_PORT}",
        "yarn.resourcemanager.bind-host": HOST,
        "yarn.nodemanager.hostname": HOST,
        "yarn.nodemanager.bind-host": HOST,
        "yarn.nodemanager.resource.memory-mb": "6144",
        "yarn.nodemanager.vmem-check-enabled": "false",
        "yarn.nodemanager.pmem-check-enabled": "false",
        "yarn.resourcemanager.am.max-attempts": "4",
        "hadoop.tmp.dir": str(run / "tmp"),
    }
    return Service("yarn", "yarn", YARN_RM_PORT, [
        "java", "-Xmx768m", *HBASE_JDK17_OPTS, "-cp", f"{run / 'lib'}/*",
        str(ROOT / "services" / "yarn" / "MiniYarn.java"), str(YARN_CONF_DIR / "yarn-site.xml"),
        *[f"{k}={v}" for k, v in settings.items()],
    ])


def yarn_up() -> None:
    fetch(("yarn",))
    svc = yarn_service()
    t0 = time.monotonic()
    if svc.pid() is None:
        shutil.rmtree(YARN_CONF_DIR, ignore_errors=True)
        YARN_CONF_DIR.mkdir(parents=True)
    svc.start()
    conf = YARN_CONF_DIR / "yarn-site.xml"

    def written() -> None:
        if not conf.is_file() or not port_open(YARN_RM_PORT):
            raise StackError("not yet")

    wait_until(svc, "resourcemanager port and yarn-site.xml", written)
    log(f"yarn ready: HADOOP_CONF_DIR={YARN_CONF_DIR} ({time.monotonic() - t0:.1f}s)")


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


def registry_service() -> Service:
    """Apicurio Registry: its Confluent API at REGISTRY_API. Its schemas are kept in an H2
    database file under ``registry/data`` (not the default in-memory one), so a registry
    stopped and started again still knows every id, as a production registry does."""
    runner = next((RUN / "registry" / "app").glob("*-runner.jar"), Path("runner.jar"))
    data = RUN / "registry" / "data" / "registry_db"
    return Service("registry", "registry", REGISTRY_PORT,
                   ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                    f"-Dquarkus.http.port={REGISTRY_PORT}", f"-Dquarkus.http.host={HOST}",
                    f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{data}",
                    "-jar", str(runner)])


def registry_lacks_tables(status: int, log_text: str) -> bool:
    """Whether a registry answering ``status`` has a database without its tables: one stopped
    while it first made them leaves them half made, and then skips making them on every
    start, so no wait will help. ``log_text``: its log (appended over starts; only the lines
    since its last start count)."""
    since_start = log_text.rpartition("Listening on: ")[2]
    return status == 500 and "JdbcSQLSyntaxErrorException: Table" in since_start


def probe_registry() -> None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{REGISTRY_API}/subjects", timeout=5) as resp:
            if resp.status != 200:
                raise ConnectionError(f"registry answered {resp.status}")
    except urllib.error.HTTPError as exc:
        log_file = RUN / "registry" / "logs" / "registry.out"
        text = log_file.read_text(errors="replace") if log_file.exists() else ""
        if registry_lacks_tables(exc.code, text):
            raise WillNotStart(
                f"the registry's database {RUN / 'registry' / 'data'} lacks its tables (a "
                f"registry stopped part way through its first start; see {log_file}); "
                "`stack.py down --wipe` clears it with the rest of the stack's data") from exc
        raise


def optional_services() -> list[Service]:
    """Started only on request (``stack.py start NAME``), e.g. by the transport tests."""
    return [thrift_service("thrift-framed-compact", THRIFT_FC_PORT, framed=True, compact=True),
            thrift_service("thrift-spare", THRIFT_SPARE_PORT),
            yarn_service(), kafka3_service()]


def all_services() -> list[Service]:
    return [*secure_services(), kafka_service(), hbase_service(), thrift_service(),
            registry_service(), *spark_services(), *optional_services()]


def by_name(name: str) -> Service:
    for svc in all_services():
        if svc.name == name:
            return svc
    raise StackError(f"unknown service {name!r}; valid: {[s.name for s in all_services()]}")


# --------------------------------------------------------------------------- readiness


def wait_until(svc: Service, probe_name: str, probe: Callable[[], None]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if svc.pid() is None:
            raise StackError(f"{svc.name} exited during start-up; see {svc.logfile}")
        try:
            probe()
            return
        except WillNotStart:
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure means "not yet"
            last = exc
            time.sleep(1.0)
    raise StackError(f"{svc.name} not ready after {READY_TIMEOUT_S:.0f}s ({probe_name}: {last}); "
                     f"see {svc.logfile}")


def probe_port(port: int, host: str = HOST) -> Callable[[], None]:
    def probe() -> None:
        if not port_open(port, host):
            raise ConnectionError(f"{host}:{port} closed")
    return probe


def probe_kafka() -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{KAFKA_PORT}", bootstrap_timeout_ms=5000,
                             request_timeout_ms=5000)
    try:
        admin.describe_cluster()
    finally:
        admin.close()


def probe_hbase(port: int = THRIFT_PORT, transport: str = "buffered",
                protocol: str = "binary") -> None:
    """A create/put/get round trip: tables() answers before hbase:meta is assigned."""
    import happybase

    conn = happybase.Connection(HOST, port, timeout=20000, transport=transport,
                                protocol=protocol)
    try:
        if b"leakproof_probe" not in conn.tables():
            conn.create_table("leakproof_probe", {"p": {}})
        table = conn.table("leakproof_probe")
        table.put(b"r", {b"p:c": b"1"})
        if table.row(b"r").get(b"p:c") != b"1":
            raise RuntimeError("probe row did not read back")
    finally:
        conn.close()


def wait_ready(svc: Service) -> None:
    """Return once ``svc`` answers the way its clients use it, not merely once it listens."""
    t0 = time.monotonic()
    if svc.name in ("kafka", "kafka3"):
        wait_until(svc, "describe_cluster", probe_kafka)
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


# --------------------------------------------------------------------------- commands


def ensure_hostname_resolves() -> None:
    """HBase names its servers by the local host name; it must resolve (to loopback here)."""
    name = socket.gethostname()
    try:
        socket.gethostbyname(name)
    except socket.gaierror:
        if os.geteuid() != 0:
            raise StackError(f"host name {name!r} does not resolve; add it to /etc/hosts") from None
        with open("/etc/hosts", "a") as hosts:
            hosts.write(f"\n127.0.0.1 {name}\n")
        log(f"added '127.0.0.1 {name}' to /etc/hosts")


def make_broker_certificate() -> None:
    make_certificate(KAFKA_TLS_DIR / "broker.p12", KAFKA_CA_PEM, KAFKA_TLS_PASSWORD)


def make_certificate(keystore: Path, pem: Path, password: str) -> None:
    """A self-signed certificate for 127.0.0.1 in a PKCS12 keystore, made once with the JDK's
    keytool, and its PEM for clients (kafka-python's ssl_cafile) to verify the server by."""
    if keystore.is_file() and pem.is_file():
        return
    keystore.parent.mkdir(parents=True, exist_ok=True)
    keystore.unlink(missing_ok=True)
    java = shutil.which("java")
    keytool = str(Path(java).resolve().parent / "keytool") if java else "keytool"
    common = ["-alias", "broker", "-keystore", str(keystore), "-storetype", "PKCS12",
              "-storepass", password]
    for args in (["-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
                  "-dname", "CN=127.0.0.1", "-ext", "SAN=ip:127.0.0.1,dns:localhost",
                  "-keypass", password],
                 ["-exportcert", "-rfc", "-file", str(pem)]):
        result = subprocess.run([keytool, *args, *common], capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise StackError(f"keytool failed:\n{result.stdout}{result.stderr}")


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


def prepare_hbase(wipe: bool) -> None:
    run = RUN / "hbase"
    if wipe:  # root and ZooKeeper data only make sense together
        for sub in ("root", "tmp", "zk"):
            shutil.rmtree(run / sub, ignore_errors=True)
    for sub in ("logs", "tmp"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    render(SERVICES / "hbase" / "hbase-site.xml", run / "conf" / "hbase-site.xml", ROOT=run,
           ZK_PORT=ZK_PORT)
    shutil.copy(SERVICES / "hbase" / "log4j2.properties", run / "conf" / "log4j2.properties")


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
    from leakproof.config import KerberosConfig

    f = secure_facts()
    return KerberosConfig(principal=str(f["principal"]), keytab=str(f["keytab"]),
                          krb5_conf=str(f["krb5_conf"]))


def probe_secure_kafka() -> None:
    from kafka import KafkaAdminClient

    from leakproof import kerberos

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

    from leakproof import config
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


def wait_spark_workers(count: int) -> None:
    """Workers listen before the master has registered them; ask the master's JSON view."""
    import json
    import urllib.request

    deadline = time.monotonic() + READY_TIMEOUT_S
    alive = 0
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{SPARK_MASTER_UI_PORT}/json/",
                                        timeout=5) as resp:
                state = json.load(resp)
            alive = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
            if alive >= count:
                return
        except OSError:
            pass
        time.sleep(1.0)
    raise StackError(f"spark master sees {alive} of {count} workers; see {RUN / 'spark' / 'logs'}")


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
    for cmd in ("start", "stop", "kill"):
        p = sub.add_parser(cmd)
        p.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "fetch":
            fetch()
        elif args.cmd == "up":
            up(args.spark, args.wipe)
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
