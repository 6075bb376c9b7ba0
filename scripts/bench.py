#!/usr/bin/env python3
"""make bench: the job's drain rate against the raw ceiling, measured in one run.

1. pre-fill a fresh topic (EVENTS, default 1 000 000, over PARTITIONS, default 4);
2. ceiling: kafka-python read + Avro decode of the same ranges, with the job's parallelism
   (one process per core, as local[2] runs two tasks), no Spark, no HBase;
3. the job: ``leakproof run`` draining the topic into HBase (config.yml's settings), then
   ``leakproof verify`` against the oracle: a fast wrong answer is no answer;
4. print both rates, their ratio, the peak resident memory of each side, the CPU seconds
   per million events of the whole machine (every process: Kafka, HBase, Thrift, the JVMs,
   the Python workers; from /proc/stat), and whether a task's time stays flat from the
   second batch to the last ones.

Figures, not assertions: the point is the ratio on the same machine in the same run.
"""

from __future__ import annotations

import contextlib
import json
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


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent so far (every state but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def task_times(log: Path) -> list[float]:
    """Per batch with records, its slowest task's read + fold + write (the JSON lines)."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        start = line.find('{"')
        if start < 0 or '"fold_s"' not in line:
            continue
        record = json.loads(line[start:])
        if record.get("records"):
            times.append(record["read_s"] + record["fold_s"] + record["write_s"])
    return times


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
    t0, cpu0 = time.monotonic(), machine_cpu_s()
    with mp.get_context("spawn").Pool(WORKERS) as pool:
        counts = pool.starmap(read_ranges, [(str(cfg_path), s) for s in shares])
    ceiling_s = time.monotonic() - t0
    ceiling_cpu = (machine_cpu_s() - cpu0) / sum(counts) * 1e6
    ceiling_peak = sampler.stop()
    ceiling_rate = sum(counts) / ceiling_s
    print(f"   {sum(counts)} records in {ceiling_s:.1f}s: {ceiling_rate:.0f} ev/s, "
          f"peak RSS {ceiling_peak:.0f} MiB, machine CPU {ceiling_cpu:.1f} s per M events",
          flush=True)

    print("== the job: leakproof run --until-idle 5 (config.yml settings)", flush=True)
    log = work / "job.log"
    with open(log, "wb") as out:
        job = subprocess.Popen([sys.executable, "-m", "leakproof.cli", "run", "--config",
                                str(cfg_path), "--until-idle", "5", "--log-format", "json"],
                               stdout=out, stderr=subprocess.STDOUT)
        sampler = PeakSampler(job.pid)
        cpu0 = machine_cpu_s()
        rc = job.wait()
        job_cpu_s = machine_cpu_s() - cpu0  # includes the idle wait at the end: a little high
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
    job_cpu = job_cpu_s / drained * 1e6
    print(f"   {drained} records in {len(rows)} batches, {job_s:.1f}s from first batch to last "
          f"commit: {job_rate:.0f} ev/s, peak RSS (driver JVM + Python workers) "
          f"{job_peak:.0f} MiB, machine CPU {job_cpu:.1f} s per M events", flush=True)
    tasks = task_times(log)
    flat = "n/a"
    if len(tasks) >= 5:
        tail = sum(tasks[-4:-1]) / 3  # the very last batch is often a short remainder
        flat = f"{tail / tasks[1]:.2f}"
        print(f"   slowest task per batch (read+fold+write): 2nd {tasks[1]:.2f}s, last three "
              f"{', '.join(f'{t:.2f}' for t in tasks[-4:-1])}s, min {min(tasks):.2f}s, max "
              f"{max(tasks):.2f}s", flush=True)
    # a reused topic is taken to be one make bench filled with the same EVENTS
    spec = GeneratorSpec(7, EVENTS, EVENTS // 10)
    checked = subprocess.run([sys.executable, "-m", "leakproof.cli", "verify", "--config",
                              str(cfg_path), "--spec", f"{spec.seed}:{spec.events}:"
                              f"{spec.sessions}:{spec.start_ts}"],
                             capture_output=True, text=True, check=False)
    exact = checked.returncode == 0 and "EXACT MATCH" in checked.stdout
    verdict = "EXACT MATCH" if exact else "MISMATCH: " + (checked.stdout + checked.stderr)[-500:]
    print(f"   oracle: {verdict}", flush=True)
    print(f"\nRESULT ceiling {ceiling_rate:.0f} ev/s | job {job_rate:.0f} ev/s | "
          f"ratio {job_rate / ceiling_rate:.2f} (target >= 0.60) | machine CPU per M events "
          f"ceiling {ceiling_cpu:.0f} s, job {job_cpu:.0f} s | task time last/2nd {flat} "
          f"(target <= 1.20) | peak RSS ceiling {ceiling_peak:.0f} MiB, job {job_peak:.0f} "
          f"MiB | oracle {verdict}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
