"""The cluster stack (``stack.py up --cluster``), in place of the one-node Kafka and HBase:
three KRaft nodes (each broker and controller) with replication factor 3 and
``min.insync.replicas=2`` for every topic, the transaction state log's included; and HBase
on its own ZooKeeper with an active and a backup master, two region servers and the Thrift
server. Same jars as the plain stack, same client ports (Kafka on 127.0.0.1-3:9092, Thrift
on 9090, ZooKeeper on 2181), so a job or a test configured for the plain stack runs
unchanged against it; the two never run at once.

Every link between Kafka nodes goes through ``links`` (a relay per pair), so ``stack.py cut
brokerN`` partitions one node from its peers while clients still reach it. Heaps are sized
for two cores and 24 GiB: 512 MiB per Kafka node, 640 MiB per HBase master and 1 GiB per
region server.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from stackparts.base import RUN, SERVICES, StackError, log
from stackparts.hbase import HBASE_JDK17_OPTS, THRIFT_CLASS, THRIFT_PORT, ZK_PORT
from stackparts.process import Service

CLUSTER = RUN / "cluster"
NODES = (1, 2, 3)
CLIENT_PORT = 9092
CONTROLLER_PORT = 9093
REPLICATION_BASE = 19100  # node N's listener REPLk (for node k's fetches): 19100 + k
REPL_RELAY_BASE = 19200  # relay for node k fetching from node N: 19200 + 10k + N
QUORUM_RELAY_BASE = 19300  # relay for node k's quorum traffic to node N: 19300 + 10k + N
MASTER_PORTS = (16000, 16001)  # the active first, then the backup (web UIs off)
REGION_SERVER_PORTS = (16020, 16021)
CUT_FILE = CLUSTER / "cut"
KAFKA_LIB = RUN / "kafka" / "lib"
HBASE_LIB = RUN / "hbase" / "lib"


def host(node: int) -> str:
    return f"127.0.0.{node}"


def bootstrap() -> str:
    """The three nodes' client listeners, for a job's ``kafka.bootstrap_servers``."""
    return ",".join(f"{host(n)}:{CLIENT_PORT}" for n in NODES)


# ---------------------------------------------------------------------------- Kafka


def kafka_node(node: int) -> Service:
    run = CLUSTER / f"broker{node}"
    opts = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={run / 'logs'}",
            f"-Dlog4j2.configurationFile=file:{SERVICES / 'kafka' / 'log4j2.properties'}"]
    return Service(f"broker{node}", "cluster", CLIENT_PORT,
                   ["java", *opts, "-cp", f"{KAFKA_LIB}/*", "kafka.Kafka",
                    str(run / "server.properties")], host=host(node))


def links() -> list[dict[str, object]]:
    """Every relay: node ``from`` reaches node ``to`` through ``port``."""
    out: list[dict[str, object]] = []
    for k in NODES:
        for n in NODES:
            if k == n:
                continue
            out.append({"port": REPL_RELAY_BASE + 10 * k + n, "from": k, "to": n,
                        "target": [host(n), REPLICATION_BASE + k]})
            out.append({"port": QUORUM_RELAY_BASE + 10 * k + n, "from": k, "to": n,
                        "target": [host(n), CONTROLLER_PORT]})
    return out


def links_service() -> Service:
    script = Path(__file__).resolve().parent / "links.py"
    return Service("cluster-links", "cluster", REPL_RELAY_BASE + 12,
                   [sys.executable, str(script), str(CLUSTER / "links.json"), str(CUT_FILE)])


def kafka_properties(node: int) -> str:
    """Node ``node``'s settings: its own view of the quorum and its own replication listener
    name, both through the relays of its pairs (``links``)."""
    voters = ",".join(
        f"{n}@{host(n)}:{CONTROLLER_PORT}" if n == node
        else f"{n}@127.0.0.1:{QUORUM_RELAY_BASE + 10 * node + n}" for n in NODES)
    repl = [f"REPL{k}" for k in NODES]
    listeners = [f"CLIENT://{host(node)}:{CLIENT_PORT}",
                 f"CONTROLLER://{host(node)}:{CONTROLLER_PORT}",
                 *(f"REPL{k}://{host(node)}:{REPLICATION_BASE + k}" for k in NODES)]
    advertised = [f"CLIENT://{host(node)}:{CLIENT_PORT}",
                  *(f"REPL{k}://" + (f"{host(node)}:{REPLICATION_BASE + k}" if k == node else
                                     f"127.0.0.1:{REPL_RELAY_BASE + 10 * k + node}")
                    for k in NODES)]
    protocols = ",".join(f"{name}:PLAINTEXT" for name in ("CLIENT", "CONTROLLER", *repl))
    return "\n".join([
        "process.roles=broker,controller",
        f"node.id={node}",
        f"controller.quorum.voters={voters}",
        f"listeners={','.join(listeners)}",
        f"advertised.listeners={','.join(advertised)}",
        "controller.listener.names=CONTROLLER",
        f"inter.broker.listener.name=REPL{node}",
        f"listener.security.protocol.map={protocols}",
        f"log.dirs={CLUSTER / f'broker{node}' / 'data'}",
        "num.partitions=1",
        "default.replication.factor=3",
        "min.insync.replicas=2",
        "offsets.topic.replication.factor=3",
        "offsets.topic.num.partitions=3",
        "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "transaction.state.log.num.partitions=3",
        "share.coordinator.state.topic.replication.factor=3",
        "share.coordinator.state.topic.min.isr=2",
        "unclean.leader.election.enable=false",
        # a follower cut off or stopped leaves the ISR after 10 s, not the default 30
        "replica.lag.time.max.ms=10000",
        # a node gone is fenced by the controller after 6 s of missed heartbeats
        "broker.session.timeout.ms=6000",
        "broker.heartbeat.interval.ms=1000",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        "delete.topic.enable=true",
        "num.network.threads=2",
        "num.io.threads=2",
        "num.replica.fetchers=1",
        "num.recovery.threads.per.data.dir=1",
        "background.threads=2",
        "log.cleaner.threads=1",
        "",
    ])


def prepare_kafka_cluster(wipe: bool) -> None:
    """Each node's properties, and its storage formatted with one cluster id."""
    if wipe:
        for n in NODES:
            shutil.rmtree(CLUSTER / f"broker{n}" / "data", ignore_errors=True)
    CLUSTER.mkdir(parents=True, exist_ok=True)
    (CLUSTER / "links.json").write_text(json.dumps(links(), indent=1))
    CUT_FILE.write_text("")
    id_file = CLUSTER / "cluster.id"
    if wipe or not id_file.exists():
        cluster_id = "-"
        while cluster_id.startswith("-"):  # the format tool takes "-x" for an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        id_file.write_text(cluster_id)
    cluster_id = id_file.read_text().strip()
    for n in NODES:
        props = CLUSTER / f"broker{n}" / "server.properties"
        props.parent.mkdir(parents=True, exist_ok=True)
        props.write_text(kafka_properties(n))
        if (CLUSTER / f"broker{n}" / "data" / "meta.properties").exists():
            continue
        result = subprocess.run(
            ["java", "-XX:TieredStopAtLevel=1", "-cp", f"{KAFKA_LIB}/*",
             f"-Dlog4j2.configurationFile=file:{SERVICES / 'kafka' / 'log4j2.properties'}",
             "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c",
             str(props), "--ignore-formatted"], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(f"broker{n} storage format failed:\n{result.stdout}{result.stderr}")


# ---------------------------------------------------------------------------- HBase


def hbase_cluster_java(name: str, heap: str) -> list[str]:
    run = CLUSTER / "hbase"
    return ["java", f"-Dproc_{name}", f"-Xmx{heap}", "-XX:+UseG1GC", *HBASE_JDK17_OPTS,
            f"-Dhbase.log.dir={run / 'logs'}", f"-Dhbase.log.file={name}.log",
            f"-Dlog4j2.configurationFile=file:{run / 'conf' / 'log4j2.properties'}",
            "-cp", f"{run / 'conf'}:{HBASE_LIB}/*"]


def zookeeper_service() -> Service:
    conf = CLUSTER / "hbase" / "conf"
    return Service("zookeeper", "cluster", ZK_PORT,
                   ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{HBASE_LIB}/*",
                    f"-Dlog4j2.configurationFile=file:{conf / 'log4j2.properties'}",
                    "org.apache.zookeeper.server.ZooKeeperServerMain", str(conf / "zoo.cfg")])


def master_service(i: int) -> Service:
    rpc = MASTER_PORTS[i - 1]
    return Service(f"hmaster{i}", "cluster", rpc,
                   [*hbase_cluster_java(f"hmaster{i}", "640m"),
                    "org.apache.hadoop.hbase.master.HMaster",
                    "-D", f"hbase.master.port={rpc}", "-D", "hbase.master.info.port=-1",
                    *(["--backup"] if i > 1 else []), "start"])


def region_server_service(i: int) -> Service:
    rpc = REGION_SERVER_PORTS[i - 1]
    return Service(f"regionserver{i}", "cluster", rpc,
                   [*hbase_cluster_java(f"regionserver{i}", "1g"),
                    "org.apache.hadoop.hbase.regionserver.HRegionServer",
                    "-D", f"hbase.regionserver.port={rpc}",
                    "-D", "hbase.regionserver.info.port=-1", "start"])


def cluster_thrift_service() -> Service:
    return Service("cluster-thrift", "cluster", THRIFT_PORT,
                   [*hbase_cluster_java("cluster-thrift", "384m"), THRIFT_CLASS, "-b",
                    "127.0.0.1", "-p", str(THRIFT_PORT), "start"])


def prepare_hbase_cluster(wipe: bool) -> None:
    run = CLUSTER / "hbase"
    if wipe:
        for sub in ("root", "tmp", "zk"):
            shutil.rmtree(run / sub, ignore_errors=True)
    for sub in ("logs", "tmp", "zk", "conf"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    (run / "conf" / "zoo.cfg").write_text("\n".join([
        "tickTime=1000", f"dataDir={run / 'zk'}", f"clientPort={ZK_PORT}",
        "clientPortAddress=127.0.0.1", "maxClientCnxns=200", "minSessionTimeout=2000",
        "admin.enableServer=false", "4lw.commands.whitelist=*", ""]))
    site = {
        "hbase.cluster.distributed": "true",
        "hbase.rootdir": f"file://{run / 'root'}",
        "hbase.tmp.dir": str(run / "tmp"),
        # the local file system cannot hflush/hsync: a process killed loses nothing the
        # kernel holds, which is the fault tried here (not a host's power cut)
        "hbase.unsafe.stream.capability.enforce": "false",
        "hbase.zookeeper.quorum": "127.0.0.1",
        "hbase.zookeeper.property.clientPort": str(ZK_PORT),
        "hbase.master.ipc.address": "127.0.0.1",
        "hbase.regionserver.ipc.address": "127.0.0.1",
        "hbase.master.hostname": "127.0.0.1",
        "hbase.unsafe.regionserver.hostname": "127.0.0.1",
        "hbase.thrift.info.port": "-1",
        "hbase.thrift.server.socket.read.timeout": "3600000",
        # a region server killed is known dead once its ZooKeeper session expires
        "zookeeper.session.timeout": "6000",
        "hbase.hregion.memstore.mslab.enabled": "false",
        "hbase.regionserver.handler.count": "10",
        "hbase.regionserver.global.memstore.size": "0.3",
        "hfile.block.cache.size": "0.25",
        "hbase.hstore.checksum.algorithm": "CRC32",
        "hbase.defaults.for.version.skip": "true",
        "hbase.regionserver.thrift.framed": "false",
        # the clients (Thrift's) retry a region in transition for up to about a minute
        "hbase.client.retries.number": "20",
        "hbase.client.pause": "250",
    }
    body = "".join(f"  <property><name>{k}</name><value>{v}</value></property>\n"
                   for k, v in site.items())
    (run / "conf" / "hbase-site.xml").write_text(
        f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
    shutil.copy(SERVICES / "hbase" / "log4j2.properties", run / "conf" / "log4j2.properties")


def cluster_services() -> list[Service]:
    """In start order."""
    return [links_service(), *(kafka_node(n) for n in NODES), zookeeper_service(),
            master_service(1), *(region_server_service(i) for i in (1, 2)), master_service(2),
            cluster_thrift_service()]


def cut(node: int) -> None:
    """Kafka node ``node`` cut off from its peers (its clients still reach it)."""
    nodes = {int(x) for x in CUT_FILE.read_text().split()} if CUT_FILE.exists() else set()
    CUT_FILE.write_text(" ".join(str(n) for n in sorted(nodes | {node})))
    log(f"broker{node} cut off from its peers")


def heal() -> None:
    CUT_FILE.write_text("")
    log("every Kafka node reaches its peers again")
