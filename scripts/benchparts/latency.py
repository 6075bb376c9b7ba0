"""The latency mode (LATENCY=1, make bench-latency): a steady load (RATE, LATENCY_S) on a
topic of its own for the job and for the JVM peer, each record's Kafka timestamp to the
commit of its batch, and the percentiles over every record and after the warm-up."""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchparts.cpu import PeakSampler, batch_floor, per_million
from benchparts.hbase_log import batches_beside_store_work
from benchparts.load import PacedProducer
from benchparts.settings import HBASE_LOG, PARTITIONS, PEERS, ROOT, WARMUP_S
from leakproof import codec, config
from leakproof.commit_stores import open_store
from leakproof.generator import GeneratorSpec, generate
from leakproof.kafka.admin import KafkaMetadata, create_topic
from leakproof.kafka.reader import read_range
from leakproof.offsets import OffsetRange
from proctools import CpuByRole


def commit_times(batches: Sequence[tuple[float, Mapping[int, int]]]
                 ) -> dict[int, tuple[list[int], list[float]]]:
    """Per partition, the batches' end offsets (ascending) and commit times: a record at
    offset o was committed by the first batch whose end offset is above o."""
    per: dict[int, tuple[list[int], list[float]]] = {}
    for committed_ms, ends in sorted(batches, key=lambda b: b[0]):
        for partition, end in ends.items():
            until, when = per.setdefault(partition, ([], []))
            if not until or end > until[-1]:
                until.append(end)
                when.append(committed_ms)
    return per


def latencies(cfg: config.Config, topic: str,
              batches: Sequence[tuple[float, Mapping[int, int]]]) -> list[tuple[int, float]]:
    """Each record's Kafka timestamp (ms) and the seconds from it to the commit of the batch
    that holds it."""
    per = commit_times(batches)
    meta = KafkaMetadata(cfg.kafka)
    bounds = meta.log_bounds(topic, meta.partitions(topic))
    meta.close()
    out = []
    for partition, b in bounds.items():
        until, when = per.get(partition, ([], []))
        for rec in read_range(cfg.kafka, OffsetRange(topic, partition, b.log_start, b.log_end)):
            i = bisect.bisect_right(until, rec.offset)
            if i < len(until):
                out.append((rec.timestamp, (when[i] - rec.timestamp) / 1000))
    return out


def after_warmup(timed: list[tuple[int, float]], warmup_s: float) -> list[float]:
    """The latencies of records sent ``warmup_s`` or more after the first: a fresh job's first
    batches meet cold consumers, a fresh table and a cold Thrift server, and the backlog they
    leave is a start-up cost, not the steady state's."""
    if not timed:
        return []
    start = min(ts for ts, _ in timed) + warmup_s * 1000
    return [lat for ts, lat in timed if ts >= start]


def percentiles(values: list[float]) -> str:
    if not values:  # a run no longer than the warm-up has none after it
        return "no records"
    values = sorted(values)
    pick = [values[min(len(values) - 1, int(q * len(values)))] for q in (0.5, 0.95, 0.99)]
    return (f"p50 {pick[0]:.2f}s, p95 {pick[1]:.2f}s, p99 {pick[2]:.2f}s, max "
            f"{values[-1]:.2f}s over {len(values)} records")


def latency_mode(data: dict[str, Any], work: Path, name: str) -> int:
    """Steady load at half the measured maximum: p50/p95/p99 from Kafka timestamp to commit,
    for leakproof and the JVM-native peer, each on a topic of its own with the same load."""
    last = ROOT / ".services" / "bench" / "last.json"
    measured_max = json.loads(last.read_text())["leakproof_steady"] if last.exists() else 0
    if os.environ.get("RATE"):
        rate, source = float(os.environ["RATE"]), "RATE"
    elif measured_max:
        rate, source = measured_max / 2, f"half the last make bench's {measured_max:.0f} ev/s"
    else:
        rate, source = 12_000.0, "no make bench figure yet: a default"
    seconds = int(os.environ.get("LATENCY_S", "150"))
    count = int(rate * seconds)
    print(f"== latency: {rate:.0f} ev/s for {seconds}s ({count} events; {source})", flush=True)
    spec = GeneratorSpec(11, count, max(1, count // 10))
    pairs = [(codec.encode_key(e), codec.encode_value(e)) for e in generate(spec)]
    interval = float(data["job"]["batch_interval_s"])
    results: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}
    # PEERS without jvm (e.g. PEERS=) measures leakproof alone
    for program in ("leakproof", *(["peer jvm"] if "jvm" in PEERS else [])):
        topic = f"{name}-{'job' if program == 'leakproof' else 'peer'}"
        data["kafka"]["topic"] = topic
        cfg_path = work / f"config-{topic}.yml"
        cfg_path.write_text(yaml.safe_dump(data))
        cfg = config.load(cfg_path)
        create_topic(cfg.kafka, topic, PARTITIONS)
        log = work / f"latency-{topic}.log"
        if program == "leakproof":
            cmd = [sys.executable, "-m", "leakproof.cli", "run", "--config", str(cfg_path),
                   "--until-idle", "15"]
        else:
            cmd = [sys.executable, str(ROOT / "scripts" / "bench_peer.py"), "--config",
                   str(cfg_path), "--table", "peer_latency", "--checkpoint",
                   str(work / "checkpoint-latency"), "--expect", str(len(pairs))]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            marker = "streaming " if program == "leakproof" else "peer: engine"
            deadline = time.monotonic() + 180
            while marker not in log.read_text(errors="replace") and proc.poll() is None:
                assert time.monotonic() < deadline, f"{program} did not start; see {log}"
                time.sleep(0.5)
            time.sleep(10 if program != "leakproof" else 2)  # the peer resolves, then starts
            print(f"   {program}: producing", flush=True)
            by_role = CpuByRole()
            by_role.start()
            sampler = PeakSampler(proc.pid, by_role)
            producer = PacedProducer(cfg, topic, pairs, rate, work)
            producer.join()
            rc = proc.wait(timeout=seconds + 300)
            sampler.stop()
            spent = by_role.stop()
        if rc != 0:
            print(f"   {program} failed (exit {rc}); see {log}", flush=True)
            return 1
        if program == "leakproof":
            with contextlib.closing(open_store(cfg)) as store:
                rows = store.history(100_000)
            batches = [(float(r.audit["committed_ms"]), dict(r.offsets)) for r in rows]
        else:
            line = next(ln for ln in log.read_text(errors="replace").splitlines()
                        if ln.startswith("PEER "))
            batches = [(b["start_ms"] + b["took_ms"], {int(k): v for k, v in b["ends"].items()})
                       for b in json.loads(line[5:])["batches"]]
        timed = latencies(cfg, topic, batches)
        results[program] = [lat for _, lat in timed]
        steady[program] = after_warmup(timed, WARMUP_S)
        print(f"   {program}: {percentiles(results[program])}", flush=True)
        print(f"   {program} after the first {WARMUP_S:.0f}s: {percentiles(steady[program])}",
              flush=True)
        if program == "leakproof":
            print(f"   {program}: batch time (output start to commit) after the first "
                  f"{WARMUP_S:.0f}s, by what HBase did meanwhile: "
                  + batches_beside_store_work(log, HBASE_LOG, WARMUP_S), flush=True)
        per_m = per_million(spent, len(pairs))
        print(f"   {program}: CPU s per M events from the first record sent, by process: "
              + ", ".join(f"{role} {v:.1f}" for role, v in per_m.items()
                          if spent[role] > 0.05), flush=True)
        cores = len(os.sched_getaffinity(0))
        print(f"   {program}: {batch_floor(per_m, rate, interval, cores)}", flush=True)
    print(f"\nRESULT latency at {rate:.0f} ev/s, batch interval {interval:.0f}s: "
          + " | ".join(f"{k} {percentiles(v)}" for k, v in results.items())
          + f" | after the first {WARMUP_S:.0f}s: "
          + " | ".join(f"{k} {percentiles(v)}" for k, v in steady.items())
          + f" | target: leakproof p99 <= {interval + 1:.0f}s")
    return 0
