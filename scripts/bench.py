#!/usr/bin/env python3
"""make bench: the job's drain rate against the raw ceiling and a Structured Streaming peer.

1. pre-fill a fresh topic (EVENTS, default 1 000 000, over PARTITIONS, default 4);
2. ceiling: kafka-python read + Avro decode of the same ranges, with the job's parallelism
   (one process per core, as local[2] runs two tasks), no Spark, no HBase;
3. the job: ``leakproof run`` draining the topic into HBase (config.yml's settings), then
   ``leakproof verify`` against the oracle: a fast wrong answer is no answer; a py-spy
   profile of its Python workers is kept beside the log;
4. the peer (scripts/bench_peer.py) on the same topic, same master, same records per batch:
   ``from_avro`` in the JVM; the same with the whole backlog in one batch; fastavro in
   ``mapInPandas``. Each is checked against a fold of its own semantics (PEERS= limits them);
5. for each: events/s from the first batch to the last commit, steady-state events/s (first
   batch excluded), the spread of per-batch times, the peak resident memory, and the CPU
   seconds per million events of the whole machine (every process: Kafka, HBase, Thrift, the
   JVMs, the Python workers; from /proc/stat) split by process; then the ratios.

Figures, not assertions: the point is the ratios on the same machine in the same run.
TOPIC= reuses an earlier run's topic; PEERS_FIRST=1 drains the peers before the job (runs
can so alternate which of them meets a cold HBase); RATE_PER_PARTITION= caps batches lower
(more of them); ISOLATION=read_uncommitted reads as before transactions were honoured (the
same-run baseline of read_committed's cost); SPARK_CONF="k=v;k=v" adds job.spark_conf entries
(an A/B of a Spark setting on the same topic), KEPT_ROWS= sets job.kept_rows; CLOSED=1 also
publishes closed-session summaries to a topic of their own, in transactions (TRANSACTIONAL=0:
plain sends), and prints what publishing cost per batch and how many offsets the summaries
took per record read (EMIT=update or EMIT=every_s:N: live updates, output.emit);
REKEY=1 sends the events under null keys and runs the job with input.rekey (no peers), then
the same events keyed through the job in the same run, and prints the ratio;
KEEP=1 keeps the run's HBase tables (dropped otherwise: HBase slows as they pile up); INTERVAL= sets
another batch interval (s) than config.yml's.
LATENCY=1 (make bench-latency): a steady load for LATENCY_S at RATE (default half the last
make bench's steady rate), sent by Kafka's Java client (scripts/PacedProducer.java; with
PRODUCER=python by kafka-python in this process, at about seven times its CPU a record);
percentiles of Kafka timestamp -> commit over every record and over those sent after the
first WARMUP_S, the CPU each process spent per M events, the steady batches' time by what
HBase did meanwhile (its flushes and compactions, from the local region server's log), and
a batch's CPU floor (its records' CPU over the cores the producer leaves) and the p99 it
bounds (0.99 interval + the floor: records wait up to an interval for their batch).

The work is done in ``benchparts/`` (one module per job: the settings read from the
environment, the load put on Kafka, CPU and memory accounting, the workers' profile, the job's
log, a drain and its figures, the job, the peer, the ceiling, the latency mode and the HBase
log it reads, the run's tables, the result and the throughput run in order); this file is the
entry point, and it re-exports every name the tests and other scripts read as
``bench.<name>``.
"""

from __future__ import annotations

import sys
import time

from benchparts.ceiling import read_ranges
from benchparts.cpu import LOAD_ROLES, PeakSampler, batch_floor, machine_cpu_s, per_million
from benchparts.drain import Drain, measured
from benchparts.hbase_log import batches_beside_store_work, store_work
from benchparts.job import run_job
from benchparts.joblog import batch_records, cache_hits, task_times
from benchparts.latency import after_warmup, commit_times, latencies, latency_mode, percentiles
from benchparts.load import PacedProducer
from benchparts.peer import check_peer, peer_fold, run_peer
from benchparts.settings import (
    ACCESS,
    ACCESS_JSON,
    EVENTS,
    FRAMED,
    HBASE_LOG,
    MAKE_BENCH_SHAPE,
    PARTITIONS,
    PEERS,
    PEERS_FIRST,
    PRODUCER,
    PROFILE_S,
    REGISTRY_URL,
    ROOT,
    SESSIONS,
    SPAN_S,
    SPEC,
    WARMUP_S,
    WORKERS,
)
from benchparts.tables import LEFTOVER_TABLES, count_tables, drop_tables, leftover_note
from benchparts.throughput import measure
from benchparts.worker_profile import WorkerProfile, in_tree
from leakproof.core import config

__all__ = [
    "ACCESS", "ACCESS_JSON", "EVENTS", "FRAMED", "HBASE_LOG", "LEFTOVER_TABLES", "LOAD_ROLES",
    "MAKE_BENCH_SHAPE", "PARTITIONS", "PEERS", "PEERS_FIRST", "PRODUCER", "PROFILE_S",
    "REGISTRY_URL", "ROOT", "SESSIONS", "SPAN_S", "SPEC", "WARMUP_S", "WORKERS", "Drain",
    "PacedProducer", "PeakSampler", "WorkerProfile", "after_warmup", "batch_floor",
    "batch_records", "batches_beside_store_work", "cache_hits", "check_peer", "commit_times",
    "count_tables", "drop_tables", "in_tree", "latencies", "latency_mode", "leftover_note",
    "machine_cpu_s", "main", "measure", "measured", "peer_fold", "per_million", "percentiles",
    "read_ranges", "run_job", "run_peer", "store_work", "task_times",
]


def main() -> int:
    name = f"bench{int(time.time())}"
    note = leftover_note(count_tables(config.load(ROOT / "config.yml").hbase))
    if note:
        print(note, flush=True)
    try:
        return measure(name)
    finally:
        drop_tables(config.load(ROOT / "config.yml").hbase, name)


if __name__ == "__main__":
    sys.exit(main())
