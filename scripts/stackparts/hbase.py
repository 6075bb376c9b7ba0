"""The plain HBase (master with its ZooKeeper) and its Thrift1 servers: the JVM options,
the site file, the host name HBase needs to resolve, and the create/put/get probe."""

from __future__ import annotations

import os
import shutil
import socket

from stackparts.base import HOST, RUN, SERVICES, StackError, log, render
from stackparts.process import Service

ZK_PORT = 2181
THRIFT_PORT = 9090
THRIFT_FC_PORT = 9091  # optional second Thrift server: framed transport, compact protocol
THRIFT_SPARE_PORT = 9096  # optional: one the tests may stop and kill (not 9095: Thrift's UI)

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
