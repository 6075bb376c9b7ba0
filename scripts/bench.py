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
same-run baseline of read_committed's cost); CLOSED=1 also publishes closed-session
summaries to a topic of their own, in transactions (TRANSACTIONAL=0: plain sends), and prints
what publishing cost per batch;
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
"""

from __future__ import annotations

import bisect
import contextlib
import datetime
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from leakproof import codec, config
from leakproof.commands.produce import create_topic, send_confluent, send_events, send_raw
from leakproof.commands.verify import read_topic
from leakproof.commit_stores import open_store
from leakproof.errors import DecodeError
from leakproof.events import Event, WebEvent
from leakproof.examples import access_log
from leakproof.generator import GeneratorSpec, generate
from leakproof.hbase.connection import connect
from leakproof.hbase.session_store import scan_readable
from leakproof.kafka.admin import KafkaMetadata
from leakproof.kafka.reader import read_range
from leakproof.kafka.registry import decoder_for
from leakproof.offsets import OffsetRange
from proctools import CpuByRole, pids_matching, tree_rss_mib

ROOT = Path(__file__).resolve().parent.parent
HBASE_LOG = ROOT / ".services" / "hbase" / "logs" / "hbase.out"  # the local stack's region server
EVENTS = int(os.environ.get("EVENTS", "1000000"))
# MANY=1: the many-concurrent-sessions topic (494 000 events, 130 000 sessions all starting
# within one hour of event time); SESSIONS and SPAN_S set them one by one
_MANY = os.environ.get("MANY") == "1"
if _MANY:
    EVENTS = int(os.environ.get("EVENTS", "494000"))
SESSIONS = int(os.environ.get("SESSIONS") or (130_000 if _MANY else EVENTS // 10))
SPAN_S = int(os.environ.get("SPAN_S") or (3600 if _MANY else 0)) or None
SPEC = GeneratorSpec(7, EVENTS, SESSIONS, span_s=SPAN_S)
PARTITIONS = int(os.environ.get("PARTITIONS", "4"))
WORKERS = int(os.environ.get("WORKERS", "2"))
# only a run of make bench's own load records its maximum for the latency mode (a wide,
# capped or many-sessions run's rate is no maximum of the 4-partition topic)
MAKE_BENCH_SHAPE = not any(os.environ.get(k) for k in (
    "EVENTS", "SESSIONS", "SPAN_S", "MANY", "PARTITIONS", "RATE_PER_PARTITION", "MODEL",
    "FORMAT", "CLOSED", "ISOLATION"))
PROFILE_S = int(os.environ.get("PROFILE_S", "12"))  # py-spy window on the job's workers
# the peer's variants: decode in the JVM / in mapInPandas; capped batches / one batch
PEERS = os.environ.get("PEERS", "jvm,jvm-one-batch,pandas").split(",")
PEERS_FIRST = os.environ.get("PEERS_FIRST") == "1"
# the latency mode's load: Kafka's Java client (jvm) or kafka-python in this process (python)
PRODUCER = os.environ.get("PRODUCER", "jvm")
WARMUP_S = float(os.environ.get("WARMUP_S", "30"))  # the latency mode's start-up, also shown apart
# MODEL=access: the proxy access-log example (a foreign schema, 13 aggregates with where
# filters and a Python aggregate) in place of the web model; no peers (theirs is the web
# fold). FORMAT=json: its records as JSON objects.
ACCESS = os.environ.get("MODEL") == "access"
ACCESS_JSON = ACCESS and os.environ.get("FORMAT") == "json"  # the same records as JSON
# FORMAT=confluent (web model): the events registry-framed, the schema in the stack's registry
FRAMED = not ACCESS and os.environ.get("FORMAT") == "confluent"
REGISTRY_URL = "http://127.0.0.1:8081/apis/ccompat/v7"
if ACCESS or FRAMED:  # the peers read bare web events only
    PEERS = []
if ACCESS:
    PEERS = []


class PeakSampler:
    """Samples a process tree's RSS every 0.2 s in a thread; ``peak`` is the maximum seen.
    With ``cpu``, also samples every process's CPU time once a second."""

    def __init__(self, pid: int, cpu: CpuByRole | None = None) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._cpu = cpu
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_mib(self.pid))
            if self._cpu is not None and n % 5 == 0:
                self._cpu.sample()
            n += 1
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


class WorkerProfile:
    """py-spy on the job's Python workers for a window of the drain, as collapsed stacks.

    It waits for PySpark's worker daemon to appear under the job, lets the first batch pass
    (start-up is not the steady state), then samples the daemon and the workers it forks,
    without pausing them (``--nonblocking``), so the drain it watches is barely slowed.
    """

    def __init__(self, job_pid: int, out: Path, seconds: int, delay_s: float = 6.0) -> None:
        self.out, self.ok = out, False
        self._thread = threading.Thread(target=self._run, args=(job_pid, seconds, delay_s),
                                        daemon=True)
        self._thread.start()

    def _run(self, job_pid: int, seconds: int, delay_s: float) -> None:
        if seconds <= 0:
            return
        spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which(
            "py-spy")
        if spy is None:
            print("   (no py-spy: pip install py-spy to keep a profile)", flush=True)
            return
        deadline = time.monotonic() + 120
        daemons: list[int] = []
        while not daemons and time.monotonic() < deadline:
            daemons = [p for p in pids_matching(b"pyspark.daemon") if in_tree(p, job_pid)]
            time.sleep(0.2)
        if not daemons:
            return
        time.sleep(delay_s)
        done = subprocess.run([spy, "record", "--pid", str(min(daemons)), "--subprocesses",
                               "--nonblocking", "--rate", "50", "--duration", str(seconds),
                               "--format", "raw", "--output", str(self.out)],
                              capture_output=True, check=False)
        self.ok = done.returncode == 0 and self.out.exists()

    def summary(self, top: int = 22) -> str:
        """Where the workers' time went: per function, the share of samples it was on the
        stack (inclusive) and on top of it (self), for the busiest functions."""
        self._thread.join()
        if not self.ok:
            return "   no profile taken"
        inclusive: dict[str, int] = {}
        own: dict[str, int] = {}
        total = 0
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            # "func (file:line)" -> "func (file)"; the process frames and PySpark's worker
            # loop are on every stack and say nothing
            frames = [f.rsplit(":", 1)[0] + ")" for f in stack.split(";")
                      if " (" in f and not f.startswith("process ")]
            frames = frames[next((i + 1 for i, f in enumerate(frames)
                                  if f.startswith("AutoBatchedSerializer.dump_stream")), 0):]
            n = int(count)
            total += n
            for frame in set(frames):
                inclusive[frame] = inclusive.get(frame, 0) + n
            if frames:
                own[frames[-1]] = own.get(frames[-1], 0) + n
        busy = sorted(inclusive.items(), key=lambda kv: -kv[1])
        lines = [f"   worker profile ({total} samples, {self.out}): inclusive / self"]
        for frame, n in busy:
            lines.append(f"   {100 * n / total:5.1f}% {100 * own.get(frame, 0) / total:5.1f}%"
                         f"  {frame}")
            if len(lines) > top:
                break
        return "\n".join(lines)


def in_tree(pid: int, root: int) -> bool:
    """Whether ``pid`` descends from ``root`` (PySpark's daemon forks under the JVM)."""
    while pid > 1:
        if pid == root:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def cache_hits(log: Path) -> str:
    """The share of tasks after the first batch whose worker still had the partition's
    Kafka consumer (the JSON lines' ``cache``), and the open-session entries read."""
    tasks = consumer = expiring = 0
    for record in batch_records(log)[1:]:
        tasks += record["cache"]["tasks"]
        consumer += record["cache"]["consumer"]
        expiring += record["expiring"]
    if not tasks:
        return "no tasks after the first batch"
    return (f"after the first batch, {consumer}/{tasks} tasks found their consumer cached; "
            f"{expiring} open-session entries read for expiry")


def batch_records(log: Path) -> list[dict[str, Any]]:
    """The job log's per-batch JSON lines that read records (also ``bench_wide``'s)."""
    records = []
    for line in log.read_text(errors="replace").splitlines():
        start = line.find('{"')
        if start >= 0 and '"fold_s"' in line:
            record = json.loads(line[start:])
            if record.get("records"):
                records.append(record)
    return records


def task_times(log: Path) -> list[float]:
    """Per batch with records, its slowest task's read + fold + write (the JSON lines)."""
    times = []
    for record in batch_records(log):
        times.append(record["read_s"] + record["fold_s"] + record["write_s"])
    return times


def read_ranges(cfg_path: str, ranges: list[OffsetRange]) -> int:
    cfg = config.load(cfg_path)
    n = 0
    decoder = decoder_for(cfg.model, cfg.input)
    for rng in ranges:
        for offset, key, value, timestamp, headers in read_range(cfg.kafka, rng):
            with contextlib.suppress(DecodeError):  # the job dead-letters; same cost here
                decoder.decode(key, value, topic=rng.topic, partition=rng.partition,
                               offset=offset, timestamp=timestamp, headers=headers)
            n += 1
    return n


def per_million(seconds: Mapping[str, float], events: int) -> dict[str, float]:
    """CPU seconds by process as CPU s per M events, the busiest first."""
    return dict(sorted(((role, s / events * 1e6) for role, s in seconds.items()),
                       key=lambda kv: -kv[1]))


@dataclass
class Drain:
    """One program's drain of the topic, as the figures need it."""

    name: str
    records: int
    first_start_ms: float  # when the first batch began
    commits: list[tuple[float, int]]  # per batch in order: (commit time ms, records)
    cpu_s: float = 0.0  # the whole machine's, over the program's life
    peak_mib: float = 0.0
    by_role: dict[str, float] = field(default_factory=dict)
    verdict: str = "not checked"

    @property
    def rate(self) -> float:
        return self.records / ((self.commits[-1][0] - self.first_start_ms) / 1000)

    @property
    def steady(self) -> float:
        """Events/s after the first batch's commit: start-up (JIT, first connections,
        worker fork) is paid once per run, not per event."""
        span = (self.commits[-1][0] - self.commits[0][0]) / 1000
        return (self.records - self.commits[0][1]) / span if span > 0 else 0.0

    @property
    def cpu_per_m(self) -> float:
        return self.cpu_s / self.records * 1e6

    def batch_times(self) -> list[float]:
        """Seconds between consecutive commits, first batch excluded."""
        return [(b[0] - a[0]) / 1000 for a, b in zip(self.commits, self.commits[1:],
                                                       strict=False)]

    def describe(self) -> str:
        times = sorted(self.batch_times())
        spread = (f"batch time min {times[0]:.1f}s / median {times[len(times) // 2]:.1f}s / "
                  f"max {times[-1]:.1f}s" if times else "one batch")
        roles = ", ".join(f"{role} {v:.1f}" for role, v in
                          per_million(self.by_role, self.records).items() if v >= 0.1)
        return (f"   {self.records} records in {len(self.commits)} batches: {self.rate:.0f} "
                f"ev/s first batch to last commit, steady {self.steady:.0f} ev/s; {spread}; "
                f"peak RSS {self.peak_mib:.0f} MiB; machine CPU {self.cpu_per_m:.1f} s per M "
                f"events\n   by process, s per M events: {roles}\n   check: {self.verdict}")


def measured(cmd: list[str], log: Path, profile: Path | None = None
             ) -> tuple[int, float, float, dict[str, float], WorkerProfile | None]:
    """Run ``cmd`` to its end: exit code, machine CPU s, peak RSS of its tree, CPU by role."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        by_role = CpuByRole()
        by_role.start()
        sampler = PeakSampler(proc.pid, by_role)
        spy = WorkerProfile(proc.pid, profile, PROFILE_S) if profile else None
        cpu0 = machine_cpu_s()
        rc = proc.wait()
        cpu_s = machine_cpu_s() - cpu0  # includes start-up and the stop: a little high
        peak = sampler.stop()
        spent = by_role.stop()
    spent["unattributed (kernel, short-lived)"] = cpu_s - sum(spent.values())
    return rc, cpu_s, peak, spent, spy


def peer_fold(partitions: Mapping[int, Sequence[Event]]) -> dict[str, dict[str, str]]:
    """What the peer's semantics give, folded in plain Python: the first of each repeated
    (session_id, seq) counts, every other event is summed; no late rule, no state."""
    kept: dict[str, dict[int, WebEvent]] = {}
    for events in partitions.values():
        for e in events:
            assert e.seq is not None  # the web model has a sequence
            kept.setdefault(e.session_id, {}).setdefault(e.seq, WebEvent(**e.record))
    rows = {}
    for sid, by_seq in kept.items():
        evs = [by_seq[k] for k in sorted(by_seq)]
        rows[sid] = {
            "user_id": evs[0].user_id, "events": str(len(evs)),
            "pageviews": str(sum(e.event_type == "pageview" for e in evs)),
            "clicks": str(sum(e.event_type == "click" for e in evs)),
            "purchases": str(sum(e.event_type == "purchase" for e in evs)),
            "errors": str(sum(e.status >= 500 for e in evs)),
            "bytes": str(sum(e.bytes for e in evs)),
            "first_ts": str(min(e.ts for e in evs)), "last_ts": str(max(e.ts for e in evs)),
            "entry_url": evs[0].url, "exit_url": evs[-1].url,
        }
    return rows


def check_peer(cfg: config.Config, table: str,
               expected: Mapping[str, Mapping[str, str]]) -> str:
    conn = connect(cfg.hbase)
    try:
        got = scan_readable(conn.table(table))
    finally:
        conn.close()
    wrong = [sid for sid in expected.keys() | got.keys() if expected.get(sid) != got.get(sid)]
    if not wrong:
        return f"EXACT MATCH ({len(got)} sessions against the independent fold)"
    sid = sorted(wrong)[0]
    return (f"MISMATCH in {len(wrong)} sessions, e.g. {sid}: expected {expected.get(sid)}, "
            f"HBase has {got.get(sid)}")


def run_job(cfg_path: Path, cfg: config.Config, work: Path) -> Drain | None:
    print("== the job: leakproof run --until-idle 5 (config.yml settings)", flush=True)
    log = work / "job.log"
    rc, cpu_s, peak, spent, spy = measured(
        [sys.executable, "-m", "leakproof.cli", "run", "--config", str(cfg_path),
         "--until-idle", "5", "--log-format", "json"], log, work / "worker-profile.txt")
    if rc != 0:
        print(f"job failed (exit {rc}); see {log}")
        return None
    with contextlib.closing(open_store(cfg)) as store:
        rows = store.history(100_000)
    rows.reverse()
    commits, before = [], 0
    for row in rows:
        total = sum(row.offsets.values())
        commits.append((float(row.audit["committed_ms"]), total - before))
        before = total
    # from the first batch's time (when it was planned) to the last commit
    drain = Drain("leakproof", before, float(rows[0].batch_ms), commits, cpu_s, peak, spent)
    # a reused topic is taken to be one make bench filled with the same EVENTS
    checked = subprocess.run([sys.executable, "-m", "leakproof.cli", "verify", "--config",
                              str(cfg_path), *([] if ACCESS else ["--spec", SPEC.as_arg()])],
                             capture_output=True, text=True, check=False)
    drain.verdict = ("EXACT MATCH (the oracle)" if checked.returncode == 0 and "EXACT MATCH"
                     in checked.stdout else
                     "MISMATCH: " + (checked.stdout + checked.stderr)[-500:])
    print(drain.describe(), flush=True)
    assert spy is not None
    print(spy.summary(), flush=True)
    print(f"   cache: {cache_hits(log)}", flush=True)
    if cfg.output.closed_sessions_topic:
        publish = sorted(r["publish_s"] * 1000 for r in batch_records(log))
        mode = "transactions" if cfg.output.transactional else "plain sends"
        if publish:
            print(f"   closed-session summaries ({mode}): slowest task's publish per batch "
                  f"median {publish[len(publish) // 2]:.0f} ms, max {publish[-1]:.0f} ms, "
                  f"over {len(publish)} batches", flush=True)
    tasks = task_times(log)
    if len(tasks) >= 5:
        print(f"   slowest task per batch (read+fold+write): 2nd {tasks[1]:.2f}s, last three "
              f"{', '.join(f'{t:.2f}' for t in tasks[-4:-1])}s, min {min(tasks):.2f}s, max "
              f"{max(tasks):.2f}s; last three / 2nd "
              f"{sum(tasks[-4:-1]) / 3 / tasks[1]:.2f} (target <= 1.20)", flush=True)
    return drain


def run_peer(variant: str, cfg_path: Path, cfg: config.Config, work: Path,
             expected: Mapping[str, Mapping[str, str]]) -> Drain | None:
    decode = "pandas" if variant.startswith("pandas") else "jvm"
    table = f"peer_{variant.replace('-', '_')}"
    print(f"== the peer, {variant}: Structured Streaming, RocksDB state, foreachBatch to HBase",
          flush=True)
    log = work / f"peer-{variant}.log"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_peer.py"), "--config", str(cfg_path),
           "--table", table, "--checkpoint", str(work / f"checkpoint-{variant}"),
           "--decode", decode, *(["--one-batch"] if "one-batch" in variant else [])]
    rc, cpu_s, peak, spent, _ = measured(cmd, log)
    line = next((ln for ln in log.read_text(errors="replace").splitlines()
                 if ln.startswith("PEER ")), None)
    if rc != 0 or line is None:
        print(f"   the peer failed (exit {rc}); see {log}", flush=True)
        return None
    result = json.loads(line[5:])
    batches = result["batches"]
    commits = [(b["start_ms"] + b["took_ms"], b["rows"]) for b in batches]
    drain = Drain(f"peer {variant}", result["done"], batches[0]["start_ms"], commits, cpu_s,
                  peak, spent)
    drain.verdict = check_peer(cfg, table, expected)
    print(drain.describe(), flush=True)
    return drain


# ---------------------------------------------------------------------- latency mode


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


_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"
_BATCH_LINE = re.compile(r"^(\S+ \S+) INFO leakproof\.stream: batch .* total ([\d.]+)s")
# HBase writes its log's times as the job does, with a "T" between day and clock
_FLUSHED = re.compile(r"^(\S+T\S+) INFO .*Finished flush of .* in (\d+)ms")
_COMPACTED = re.compile(r"^(\S+T\S+) INFO .*CompactSplit: Completed compaction .*"
                        r"duration=(\d+)sec")


def _log_time(text: str) -> float:
    return datetime.datetime.strptime(text.replace("T", " "), _LOG_TIME).timestamp()


def store_work(hbase_log: Path) -> list[tuple[float, float, str]]:
    """The region server's memstore flushes and compactions, (start, end, kind), as its log
    says (a compaction's duration is in whole seconds: at least one is counted). HBase's own
    system tables (the master's store, hbase:meta) are left out."""
    spans = []
    for line in hbase_log.read_text(errors="replace").splitlines():
        if (m := _FLUSHED.match(line)) and "master:store" not in line \
                and " 1588230740 " not in line:
            end = _log_time(m[1])
            spans.append((end - int(m[2]) / 1000, end, "flush"))
        elif m := _COMPACTED.match(line):
            end = _log_time(m[1])
            spans.append((end - max(1, int(m[2])), end, "compaction"))
    return spans


def batches_beside_store_work(job_log: Path, hbase_log: Path, warmup_s: float) -> str:
    """Where a steady batch's extra time goes: the batches' time (output start to commit)
    after the first ``warmup_s``, grouped by what the region server did meanwhile -- nothing
    of its own, a memstore flush, or a compaction (which rewrites the sessions store's files
    on one of the two cores the job shares)."""
    if not hbase_log.exists():
        return "no local HBase log to compare with"
    spans = store_work(hbase_log)
    batches = []
    for line in job_log.read_text(errors="replace").splitlines():
        if m := _BATCH_LINE.match(line):
            end = _log_time(m[1])
            batches.append((end - float(m[2]), end))
    if not batches:
        return "no batch lines in the job's log"
    start = batches[0][0] + warmup_s
    groups: dict[str, list[float]] = {"none": [], "flush": [], "compaction": []}
    for begin, end in batches:
        if begin >= start:
            kinds = {kind for s, e, kind in spans if s < end and e > begin}
            group = "compaction" if "compaction" in kinds else "flush" if kinds else "none"
            groups[group].append(end - begin)
    return "; ".join(
        f"{'beside ' + kind if kind != 'none' else 'alone'}: {len(took)} batches, mean "
        f"{sum(took) / len(took):.2f}s, max {max(took):.2f}s"
        for kind, took in groups.items() if took) or "no batch after the warm-up"


# the bench's own processes: the load it makes, not the job's work
LOAD_ROLES = frozenset({"bench producer", "bench script"})


def batch_floor(per_m: Mapping[str, float], rate: float, interval: float, cores: int) -> str:
    """The shortest a batch can be when it is CPU-bound: the machine CPU its records cost
    (every process but the bench's own load, ``per_m`` in CPU s per M events) spread over the
    cores the load leaves free. Under half load a batch near this floor has no faster code
    path left to wait on: only less CPU per event shortens it.

    Records sent evenly wait for their batch's boundary up to an interval, so the 99th
    percentile of commit latency is at least 0.99 interval plus the floor. At half of a
    CPU-bound maximum the floor is over half an interval whatever the CPU per event (less
    CPU per event raises the maximum, so the half load with it): the bound is then over
    1.49 intervals."""
    records = rate * interval
    job_us = sum(s for role, s in per_m.items() if role not in LOAD_ROLES)
    load_cores = sum(s for role, s in per_m.items() if role in LOAD_ROLES) * rate / 1e6
    cpu_s = records * job_us / 1e6
    free = cores - load_cores
    head = (f"a batch of {records:.0f} records costs {cpu_s:.2f} CPU s ({job_us:.1f} us an "
            f"event, all but the bench's load): ")
    cores_left = f" on {cores} cores less the load's {load_cores:.2f}"
    if free <= 0:
        return f"{head}no core left{cores_left}"
    floor = cpu_s / free
    return (f"{head}at least {floor:.2f}s{cores_left}; records sent evenly, so p99 at least "
            f"{0.99 * interval + floor:.2f}s")


def percentiles(values: list[float]) -> str:
    if not values:  # a run no longer than the warm-up has none after it
        return "no records"
    values = sorted(values)
    pick = [values[min(len(values) - 1, int(q * len(values)))] for q in (0.5, 0.95, 0.99)]
    return (f"p50 {pick[0]:.2f}s, p95 {pick[1]:.2f}s, p99 {pick[2]:.2f}s, max "
            f"{values[-1]:.2f}s over {len(values)} records")


class PacedProducer:
    """Sends pre-encoded records at a steady rate, from a process of its own: Kafka's Java
    client (scripts/PacedProducer.java, about a seventh of kafka-python's CPU a record), or with
    PRODUCER=python kafka-python in a thread of this one (what earlier runs used)."""

    def __init__(self, cfg: config.Config, topic: str, pairs: list[tuple[bytes, bytes]],
                 rate: float, work: Path) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        if PRODUCER == "python":
            self._thread = threading.Thread(
                target=send_raw, args=(cfg.kafka, topic, pairs, rate), daemon=True)
            self._thread.start()
            return
        records = work / f"pairs-{topic}.bin"
        with open(records, "wb") as out:
            for key, value in pairs:
                out.write(b"".join((len(key).to_bytes(4, "big"), key,
                                    len(value).to_bytes(4, "big"), value)))
        self._proc = subprocess.Popen(
            ["java", "-cp", str(ROOT / ".services" / "kafka" / "lib" / "*"),
             str(ROOT / "scripts" / "PacedProducer.java"), cfg.kafka.bootstrap_servers, topic,
             str(rate), str(records)])

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
        elif self._proc is not None and self._proc.wait() != 0:
            raise RuntimeError(f"the paced producer failed (exit {self._proc.returncode})")


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


def drop_tables(cfg: config.HBaseConfig, prefix: str) -> None:
    """Drop a run's tables (KEEP=1 keeps them): HBase slows down as they pile up. Measured:
    with ~200 tables of earlier runs left over, the same leakproof drain ran at 22 361 ev/s
    with HBase at 40 CPU s per M events; on a clean HBase, 37 651 ev/s and 14.8."""
    if os.environ.get("KEEP") == "1":
        return
    with contextlib.closing(connect(replace(cfg, table_prefix=prefix))) as conn:
        for table in conn.tables():  # with a prefix, happybase lists only its tables
            conn.delete_table(table, disable=True)


LEFTOVER_TABLES = 40  # more than this on the HBase a bench starts on: say so


def leftover_note(tables: int) -> str | None:
    """What to say of the tables an HBase holds before a run: the figures of a region server
    that carries hundreds of tables (left by tests, or runs with KEEP=1) are not comparable."""
    if tables <= LEFTOVER_TABLES:
        return None
    return (f"note: HBase holds {tables} tables before this run (tests and KEEP=1 runs leave "
            "theirs); it slows as they pile up (see drop_tables), so these figures compare "
            "only with runs on as full an HBase. `make stack-down WIPE=1 && make stack-up` "
            "starts an empty one.")


def count_tables(cfg: config.HBaseConfig) -> int:
    with contextlib.closing(connect(replace(cfg, table_prefix=None))) as conn:
        return len(conn.tables())


def main() -> int:
    name = f"bench{int(time.time())}"
    note = leftover_note(count_tables(config.load(ROOT / "config.yml").hbase))
    if note:
        print(note, flush=True)
    try:
        return measure(name)
    finally:
        drop_tables(config.load(ROOT / "config.yml").hbase, name)


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
    if os.environ.get("CLOSED") == "1":
        data.setdefault("output", {})["closed_sessions_topic"] = f"{name}-closed"
        data["output"]["transactional"] = os.environ.get("TRANSACTIONAL", "1") == "1"
    if os.environ.get("LATENCY"):
        return latency_mode(data, work, name)
    if FRAMED:
        data["events"].update(format="confluent", registry={"url": REGISTRY_URL})
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
        what = (f"about {EVENTS} access-log requests in {EVENTS // 12} visits" if ACCESS else
                f"{EVENTS} events, {SESSIONS} sessions"
                f"{f' starting within {SPAN_S} s' if SPAN_S else ''}")
        print(f"== pre-fill {what} into {name} ({PARTITIONS} partitions)", flush=True)
        create_topic(cfg.kafka, name, PARTITIONS)
        if ACCESS:
            encode = access_log.json_value if ACCESS_JSON else access_log.avro_value
            report = send_raw(cfg.kafka, name, ((r["visit"].encode(), encode(r))
                                                for r in access_log.requests(7, EVENTS // 12)))
        elif FRAMED:
            assert cfg.input.registry is not None
            report = send_confluent(cfg.kafka, name, generate(SPEC), cfg.input.registry)
        else:
            report = send_events(cfg.kafka, name, generate(SPEC))
        print(f"   produced in {report.seconds:.1f}s ({report.rate:.0f} ev/s)", flush=True)

    if cfg.output.closed_sessions_topic:
        create_topic(cfg.kafka, cfg.output.closed_sessions_topic, PARTITIONS)
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

    # PEERS_FIRST=1: the peers drain first, so that runs alternate which meets HBase cold
    job = None if PEERS_FIRST else run_job(cfg_path, cfg, work)
    peers: dict[str, Drain] = {}
    if any(PEERS):
        partitions, _ = read_topic(cfg)
        expected = peer_fold(partitions)
        for variant in filter(None, PEERS):
            drain = run_peer(variant, cfg_path, cfg, work, expected)
            if drain is not None:
                peers[variant] = drain
    if PEERS_FIRST:
        job = run_job(cfg_path, cfg, work)
    if job is None:
        return 1

    print("\nRESULT (same topic, same machine, one run)")
    print(f"  {'':24} {'ev/s':>7} {'steady':>7} {'CPU s/M':>8} {'peak MiB':>9}  check")
    print(f"  {'ceiling (read+decode)':24} {ceiling_rate:7.0f} {'':>7} {ceiling_cpu:8.1f} "
          f"{ceiling_peak:9.0f}")
    for d in (job, *peers.values()):
        print(f"  {d.name:24} {d.rate:7.0f} {d.steady:7.0f} {d.cpu_per_m:8.1f} "
              f"{d.peak_mib:9.0f}  {d.verdict[:40]}")
    print(f"  leakproof / ceiling: {job.rate / ceiling_rate:.2f} (target >= 0.60)")
    targets = {"jvm": 1.5, "jvm-one-batch": 1.0}
    for variant, d in peers.items():
        want = f" (target >= {targets[variant]})" if variant in targets else ""
        steady = f"{job.steady / d.steady:.2f} steady" if d.steady else "no steady state"
        print(f"  leakproof / peer {variant}: {job.rate / d.rate:.2f} overall, "
              f"{steady}{want}; CPU per M events {job.cpu_per_m / d.cpu_per_m:.2f} (target < 1)")
    if MAKE_BENCH_SHAPE:  # the latency mode's half load is half of this run's figure
        (ROOT / ".services" / "bench" / "last.json").write_text(json.dumps(
            {"leakproof_steady": job.steady, "leakproof_rate": job.rate,
             "ceiling": ceiling_rate}))
    ok = job.verdict.startswith("EXACT") and all(d.verdict.startswith("EXACT")
                                                 for d in peers.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
