"""The latency mode (LATENCY=1, make bench-latency): a steady load (RATE, LATENCY_S) on a
topic of its own for the job and for the JVM peer, each record's Kafka timestamp to the
commit of its batch, and the percentiles over every record and after the warm-up; with live
updates (CLOSED=1 EMIT=update) also to the update holding it being visible at read_committed
(``visibility``), the peer then writing its update mode to a Kafka sink."""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from benchparts.cpu import PeakSampler, batch_floor, per_million
from benchparts.hbase_log import batches_beside_store_work
from benchparts.load import PacedProducer
from benchparts.settings import HBASE_LOG, PARTITIONS, PEERS, ROOT, WARMUP_S
from benchparts.visibility import UpdateWatch, visible_latencies
from leakproof.commit_stores import open_store
from leakproof.core import codec, config
from leakproof.core.offsets import OffsetRange
from leakproof.kafka.admin import KafkaMetadata, create_topic
from leakproof.kafka.reader import read_range
from leakproof.testing.generator import GeneratorSpec, generate
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
    for leakproof and the JVM-native peer, each on a topic of its own with the same load;
    with live updates (CLOSED=1 EMIT=update or every_s:N) also to the update's visibility
    at read_committed (``visibility``), the peer writing update mode to a Kafka sink."""
    rate, seconds, source = _rate()
    count = int(rate * seconds)
    print(f"== latency: {rate:.0f} ev/s for {seconds}s ({count} events; {source})", flush=True)
    updates = data.get("output", {}).get("emit", "close") != "close"
    # (live updates: no repeats, no late events, so a session's count tells its records)
    spec = GeneratorSpec(11, count, max(1, count // 10))
    if updates:
        spec = replace(spec, late_fraction=0.0, duplicate_fraction=0.0)
    pairs = [(codec.encode_key(e), codec.encode_value(e)) for e in generate(spec)]
    interval = float(data["job"]["batch_interval_s"])
    results: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}
    shown: dict[str, list[float]] = {}
    # PEERS without jvm (e.g. PEERS=) measures leakproof alone
    for program in ("leakproof", *(["peer jvm"] if "jvm" in PEERS else [])):
        run = _Run(program, data, work, name, updates)
        if not run.measure(pairs, rate, seconds):
            return 1
        results[program] = [lat for _, lat in run.timed]
        steady[program] = after_warmup(run.timed, WARMUP_S)
        if updates:
            shown[program] = after_warmup(run.visible, WARMUP_S)
        _report(run, len(pairs), rate, interval, results[program], steady[program],
                shown.get(program))
    print(f"\nRESULT latency at {rate:.0f} ev/s, batch interval {interval:.0f}s: "
          + " | ".join(f"{k} {percentiles(v)}" for k, v in results.items())
          + f" | after the first {WARMUP_S:.0f}s: "
          + " | ".join(f"{k} {percentiles(v)}" for k, v in steady.items())
          + "".join(f" | {k} update visible {percentiles(v)}" for k, v in shown.items())
          + f" | target: leakproof p99 <= {interval + 1:.0f}s")
    return 0


def _report(run: _Run, count: int, rate: float, interval: float, every: list[float],
            steady: list[float], shown: list[float] | None) -> None:
    """One program's figures: latency to commit (``every`` record's, and ``steady``: after
    the warm-up), with updates their visibility (``shown``), the batch times beside HBase's
    work, CPU per M events by process."""
    program = run.program
    print(f"   {program}: {percentiles(every)}", flush=True)
    print(f"   {program} after the first {WARMUP_S:.0f}s: {percentiles(steady)}", flush=True)
    if shown is not None:
        print(f"   {program}: Kafka timestamp -> its update visible at read_committed, "
              f"after the first {WARMUP_S:.0f}s: {percentiles(shown)}; "
              f"{run.unseen} records in no update seen; "
              f"{run.updates / count:.2f} update records out per record in", flush=True)
    if program == "leakproof":
        print(f"   {program}: batch time (output start to commit) after the first "
              f"{WARMUP_S:.0f}s, by what HBase did meanwhile: "
              + batches_beside_store_work(run.log, HBASE_LOG, WARMUP_S), flush=True)
    per_m = per_million(run.spent, count)
    print(f"   {program}: CPU s per M events from the first record sent, by process: "
          + ", ".join(f"{role} {v:.1f}" for role, v in per_m.items()
                      if run.spent[role] > 0.05), flush=True)
    cores = len(os.sched_getaffinity(0))
    print(f"   {program}: {batch_floor(per_m, rate, interval, cores)}", flush=True)


def _rate() -> tuple[float, int, str]:
    """The load's rate (ev/s), its length (s) and where the rate came from."""
    last = ROOT / ".services" / "bench" / "last.json"
    measured_max = json.loads(last.read_text())["leakproof_steady"] if last.exists() else 0
    if os.environ.get("RATE"):
        rate, source = float(os.environ["RATE"]), "RATE"
    elif measured_max:
        rate, source = measured_max / 2, f"half the last make bench's {measured_max:.0f} ev/s"
    else:
        rate, source = 12_000.0, "no make bench figure yet: a default"
    return rate, int(os.environ.get("LATENCY_S", "150")), source


class _Run:
    """One program's latency run: on a topic of its own, under the paced load, then each
    record's latency to its commit (and with ``updates`` to its update's visibility), the
    CPU each process spent and the run's log."""

    def __init__(self, program: str, data: dict[str, Any], work: Path, name: str,
                 updates: bool) -> None:
        self.program, self.updates_on = program, updates
        self.topic = f"{name}-{'job' if program == 'leakproof' else 'peer'}"
        data["kafka"]["topic"] = self.topic
        self.cfg_path = work / f"config-{self.topic}.yml"
        self.cfg_path.write_text(yaml.safe_dump(data))
        self.cfg = config.load(self.cfg_path)
        self.work, self.log = work, work / f"latency-{self.topic}.log"
        # the summaries' topic (CLOSED=1; the job does not create it), the peer's with updates
        self.sink = (str(data.get("output", {}).get("closed_sessions_topic") or "")
                     if program == "leakproof" else f"{self.topic}-updates" if updates else "")
        self.timed: list[tuple[int, float]] = []
        self.visible: list[tuple[int, float]] = []
        self.unseen = self.updates = 0
        self.spent: dict[str, float] = {}

    def _command(self, expect: int) -> list[str]:
        if self.program == "leakproof":
            return [sys.executable, "-m", "leakproof.cli", "run", "--config",
                    str(self.cfg_path), "--until-idle", "15"]
        return [sys.executable, str(ROOT / "scripts" / "bench_peer.py"), "--config",
                str(self.cfg_path), "--table", "peer_latency", "--checkpoint",
                str(self.work / "checkpoint-latency"), "--expect", str(expect),
                *(["--kafka-sink", self.sink] if self.updates_on else [])]

    def measure(self, pairs: list[tuple[bytes, bytes]], rate: float, seconds: int) -> bool:
        create_topic(self.cfg.kafka, self.topic, PARTITIONS)
        if self.sink:
            create_topic(self.cfg.kafka, self.sink, PARTITIONS)
        watch = UpdateWatch(self.cfg, self.sink) if self.updates_on else None
        with open(self.log, "wb") as out:
            proc = subprocess.Popen(self._command(len(pairs)), stdout=out,
                                    stderr=subprocess.STDOUT)
            marker = "streaming " if self.program == "leakproof" else "peer: engine"
            deadline = time.monotonic() + 180
            while marker not in self.log.read_text(errors="replace") and proc.poll() is None:
                assert time.monotonic() < deadline, f"{self.program} did not start; see {self.log}"
                time.sleep(0.5)
            time.sleep(10 if self.program != "leakproof" else 2)  # the peer resolves, then starts
            print(f"   {self.program}: producing", flush=True)
            by_role = CpuByRole()
            by_role.start()
            sampler = PeakSampler(proc.pid, by_role)
            PacedProducer(self.cfg, self.topic, pairs, rate, self.work).join()
            rc = proc.wait(timeout=seconds + 300)
            sampler.stop()
            self.spent = by_role.stop()
        if watch is not None:
            watch.stop()
            self.visible, self.unseen = visible_latencies(self.cfg, self.topic, watch)
            self.updates = watch.records
        if rc != 0:
            print(f"   {self.program} failed (exit {rc}); see {self.log}", flush=True)
            return False
        self.timed = latencies(self.cfg, self.topic, self._batches())
        return True

    def _batches(self) -> list[tuple[float, Mapping[int, int]]]:
        """The committed batches: when each committed, and its end offsets."""
        if self.program == "leakproof":
            with contextlib.closing(open_store(self.cfg)) as store:
                rows = store.history(100_000)
            return [(float(r.audit["committed_ms"]), dict(r.offsets)) for r in rows]
        line = next(ln for ln in self.log.read_text(errors="replace").splitlines()
                    if ln.startswith("PEER "))
        return [(b["start_ms"] + b["took_ms"], {int(k): v for k, v in b["ends"].items()})
                for b in json.loads(line[5:])["batches"]]
