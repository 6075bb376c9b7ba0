#!/usr/bin/env python3
"""make bench: the job's drain rate against the raw ceiling, measured in one run.

1. pre-fill a fresh topic (EVENTS, default 1 000 000, over PARTITIONS, default 4);
2. ceiling: kafka-python read + Avro decode of the same ranges, with the job's parallelism
   (one process per core, as local[2] runs two tasks), no Spark, no HBase;
3. the job: ``leakproof run`` draining the topic into HBase (config.yml's settings);
4. print both rates, their ratio and the peak resident memory of each side.

Figures, not assertions: the point is the ratio on the same machine in the same run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from leakproof import codec, config
from leakproof.commit_stores.hbase import OffsetStore
from leakproof.errors import DecodeError
from leakproof.generator import GeneratorSpec, generate
from leakproof.hbase.connection import connect
from leakproof.kafka.admin import KafkaMetadata
from leakproof.kafka.reader import read_range
from leakproof.offsets import OffsetRange
from leakproof.produce import create_topic, send_events
from proctools import tree_rss_mib

ROOT = Path(__file__).resolve().parent.parent
EVENTS = int(os.environ.get("EVENTS", "1000000"))
PARTITIONS = int(os.environ.get("PARTITIONS", "4"))
WORKERS = int(os.environ.get("WORKERS", "2"))


class PeakSampler:
    """Samples a process tree's RSS every 0.2 s in a thread; ``peak`` is the maximum seen."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_mib(self.pid))
            time.sleep(0.2)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def read_ranges(cfg_path: str, ranges: list[OffsetRange]) -> int:
    cfg = config.load(cfg_path)
    n = 0
    decoder = codec.Decoder(cfg.input.writer_schemas, cfg.input.max_ahead_ms)
    for rng in ranges:
        for offset, key, value, timestamp in read_range(cfg.kafka, rng):
            with contextlib.suppress(DecodeError):  # the job dead-letters; same cost here
                decoder.decode(key, value, topic=rng.topic, partition=rng.partition,
                               offset=offset, timestamp=timestamp)
            n += 1
    return n


def main() -> int:
    reuse = os.environ.get("TOPIC")  # an earlier run's topic: skip the pre-fill
    name = f"bench{int(time.time())}"
    work = ROOT / ".services" / "bench" / name
    work.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((ROOT / "config.yml").read_text())
    data["kafka"]["topic"] = reuse or name
    data["hbase"]["table_prefix"] = name
    if os.environ.get("MASTER"):
        data["job"]["master"] = os.environ["MASTER"]
    cfg_path = work / "config.yml"
    cfg_path.write_text(yaml.safe_dump(data))
    cfg = config.load(cfg_path)

    if reuse:
        print(f"== reusing topic {reuse}", flush=True)
        name = reuse
    else:
        print(f"== pre-fill {EVENTS} events into {name} ({PARTITIONS} partitions)", flush=True)
        create_topic(cfg.kafka, name, PARTITIONS)
        report = send_events(cfg.kafka, name, generate(GeneratorSpec(7, EVENTS, EVENTS // 10)))
        print(f"   produced in {report.seconds:.1f}s ({report.rate:.0f} ev/s)", flush=True)

    meta = KafkaMetadata(cfg.kafka)
    bounds = meta.log_bounds(name, meta.partitions(name))
    meta.close()
    ranges = [OffsetRange(name, p, b.log_start, b.log_end) for p, b in bounds.items()]

    print(f"== ceiling: read + decode, {WORKERS} processes, no Spark, no HBase", flush=True)
    shares = [ranges[i::WORKERS] for i in range(WORKERS)]
    sampler = PeakSampler(os.getpid())
    t0 = time.monotonic()
    with mp.get_context("spawn").Pool(WORKERS) as pool:
        counts = pool.starmap(read_ranges, [(str(cfg_path), s) for s in shares])
    ceiling_s = time.monotonic() - t0
    ceiling_peak = sampler.stop()
    ceiling_rate = sum(counts) / ceiling_s
    print(f"   {sum(counts)} records in {ceiling_s:.1f}s: {ceiling_rate:.0f} ev/s, "
          f"peak RSS {ceiling_peak:.0f} MiB", flush=True)

    print("== the job: leakproof run --until-idle 5 (config.yml settings)", flush=True)
    log = work / "job.log"
    with open(log, "wb") as out:
        job = subprocess.Popen([sys.executable, "-m", "leakproof.cli", "run", "--config",
                                str(cfg_path), "--until-idle", "5"], stdout=out,
                               stderr=subprocess.STDOUT)
        sampler = PeakSampler(job.pid)
        rc = job.wait()
        job_peak = sampler.stop()
    if rc != 0:
        print(f"job failed (exit {rc}); see {log}")
        return 1
    conn = connect(cfg.hbase)
    try:
        rows = OffsetStore(conn.table(cfg.hbase.offsets_table), cfg.kafka.topic,
                           cfg.kafka.group_id).history(limit=100_000)
    finally:
        conn.close()
    first, last = rows[-1], rows[0]
    drained = sum(last.offsets.values())
    # from the first batch's time (when it was planned) to the last commit
    job_s = (int(last.audit["committed_ms"]) - first.batch_ms) / 1000
    job_rate = drained / job_s
    print(f"   {drained} records in {len(rows)} batches, {job_s:.1f}s from first batch to last "
          f"commit: {job_rate:.0f} ev/s, peak RSS (driver JVM + Python workers) "
          f"{job_peak:.0f} MiB", flush=True)
    print(f"\nRESULT ceiling {ceiling_rate:.0f} ev/s | job {job_rate:.0f} ev/s | "
          f"ratio {job_rate / ceiling_rate:.2f} (target >= 0.70) | peak RSS ceiling "
          f"{ceiling_peak:.0f} MiB, job {job_peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
