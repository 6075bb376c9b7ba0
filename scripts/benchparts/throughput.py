"""make bench's run in order: the job's config from config.yml and the environment, the
pre-fill (or TOPIC's earlier topic), the ceiling, the job and the peers (PEERS_FIRST=1: the
peers first), then the result; with LATENCY set, the latency mode takes the config instead."""

from __future__ import annotations

import os

import yaml

from benchparts.ceiling import measure_ceiling
from benchparts.drain import Drain
from benchparts.job import run_job
from benchparts.latency import latency_mode
from benchparts.load import prefill
from benchparts.peer import gap_fold, peer_fold, run_peer
from benchparts.rekeyed import keyed_beside
from benchparts.report import print_result
from benchparts.settings import (
    ACCESS,
    ACCESS_JSON,
    FRAMED,
    GAP,
    PARTITIONS,
    PEERS,
    PEERS_FIRST,
    REGISTRY_URL,
    REKEY,
    ROOT,
)
from leakproof.commands.verify import read_topic
from leakproof.core import config
from leakproof.core.offsets import OffsetRange
from leakproof.examples import access_log
from leakproof.kafka.admin import KafkaMetadata, create_topic


def measure(name: str) -> int:
    reuse = os.environ.get("TOPIC")  # an earlier run's topic: skip the pre-fill
    work = ROOT / ".services" / "bench" / name
    work.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((ROOT / "config.yml").read_text())
    data["kafka"]["topic"] = reuse or name
    data["hbase"]["table_prefix"] = name
    if os.environ.get("MASTER"):
        data["job"]["master"] = os.environ["MASTER"]
    if os.environ.get("INTERVAL"):  # another batch interval (s) than config.yml's
        data["job"]["batch_interval_s"] = float(os.environ["INTERVAL"])
    if os.environ.get("RATE_PER_PARTITION"):  # smaller batches: a longer drain of more batches
        data["kafka"]["max_rate_per_partition"] = int(os.environ["RATE_PER_PARTITION"])
    if os.environ.get("ISOLATION"):
        data["kafka"]["isolation_level"] = os.environ["ISOLATION"]
    if os.environ.get("SPARK_CONF"):  # k=v[;k=v...]: job.spark_conf entries, for A/B runs
        data["job"].setdefault("spark_conf", {}).update(
            item.split("=", 1) for item in os.environ["SPARK_CONF"].split(";") if item)
    if os.environ.get("KEPT_ROWS"):  # job.kept_rows: the rows a worker keeps between batches
        data["job"]["kept_rows"] = int(os.environ["KEPT_ROWS"])
    if os.environ.get("CLOSED") == "1":
        data.setdefault("output", {})["closed_sessions_topic"] = f"{name}-closed"
        data["output"]["transactional"] = os.environ.get("TRANSACTIONAL", "1") == "1"
        if os.environ.get("EMIT"):  # output.emit: update, or every_s:N
            emit = os.environ["EMIT"]
            data["output"]["emit"] = ({"every_s": float(emit.split(":", 1)[1])}
                                      if emit.startswith("every_s:") else emit)
    if os.environ.get("LATENCY"):
        return latency_mode(data, work, name)
    if FRAMED:
        data["events"].update(format="confluent", registry={"url": REGISTRY_URL})
    if GAP:
        data.setdefault("sessions", {})["by"] = "gap"
    if REKEY:
        data.setdefault("input", {})["rekey"] = {"field": "session_id"}
    if ACCESS:
        data.update(access_log.model_sections())
        data["events"]["format"] = "json" if ACCESS_JSON else "avro"
    cfg_path = work / "config.yml"
    cfg_path.write_text(yaml.safe_dump(data))
    cfg = config.load(cfg_path)

    if reuse:
        print(f"== reusing topic {reuse}", flush=True)
        name = reuse
    else:
        prefill(cfg, name)

    if cfg.output.closed_sessions_topic:
        create_topic(cfg.kafka, cfg.output.closed_sessions_topic, PARTITIONS)
    meta = KafkaMetadata(cfg.kafka)
    bounds = meta.log_bounds(name, meta.partitions(name))
    meta.close()
    ranges = [OffsetRange(name, p, b.log_start, b.log_end) for p, b in bounds.items()]

    ceiling = measure_ceiling(cfg_path, ranges)

    # PEERS_FIRST=1: the peers drain first, so that runs alternate which meets HBase cold
    job = None if PEERS_FIRST else run_job(cfg_path, cfg, work)
    peers: dict[str, Drain] = {}
    if any(PEERS):
        partitions, _ = read_topic(cfg)
        expected = gap_fold(cfg, partitions) if GAP else peer_fold(partitions)
        for variant in filter(None, PEERS):
            drain = run_peer(variant, cfg_path, cfg, work, expected)
            if drain is not None:
                peers[variant] = drain
    if PEERS_FIRST:
        job = run_job(cfg_path, cfg, work)
    if job is None:
        return 1

    result = print_result(ceiling, job, peers)
    if REKEY:  # the same events keyed, drained in this run: the ratio the target names
        return keyed_beside(data, work, name, job) or result
    return result
