#!/usr/bin/env python3
"""make soak MINUTES=N (and make chaos): steady production, a random fault every 1-3 minutes.

The job runs as users run it: under spark-submit on the project's Spark standalone cluster
(driver in client mode) when its master is up, else ``leakproof run`` with local[2]. A small
supervisor restarts the driver whenever it exits, as YARN's next application attempt would.
After the last fault, production stops, the job drains and stops with SIGTERM, and the oracle
judges every session row, the dead letters and the offsets chain. Then a summary table:
faults injected, recovery per fault (fault -> next committed batch), worst recovery, lag
high-water mark, memory of driver and executors at start and end.

Faults that lose data by design (delete_records under on_data_loss: skip) or that split
sessions across partitions (adding partitions while keyed producers run) are left out: the
verdict must stay "exact". Each has its own integration test.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from leakproof.commands.produce import send_events
from leakproof.commit_stores.hbase import OffsetStore
from leakproof.core import config
from leakproof.core.offsets import CommittedBatch
from leakproof.hbase.connection import connect
from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec, generate
from proctools import pids_matching, tree_rss_mib

ROOT = Path(__file__).resolve().parent.parent
STACK = [sys.executable, str(ROOT / "scripts" / "stack.py")]


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stack(*args: str) -> None:
    subprocess.run([*STACK, *args], check=True, timeout=300, stdout=subprocess.DEVNULL)


def spark_up() -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", 7077)) == 0


@dataclass
class Supervisor:
    """Keeps one driver running; restarts it (after 2 s) whenever it exits."""

    cfg_path: Path
    work: Path
    cluster: bool
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    exits: list[int] = field(default_factory=list)
    stopping: bool = False

    def command(self, *extra: str) -> list[str]:
        run = ["run", "--config", str(self.cfg_path), "--log-format", "json", *extra]
        if not self.cluster:
            return [sys.executable, "-m", "leakproof.cli", *run]
        import pyspark

        submit = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
        return [str(submit), "--master", "spark://127.0.0.1:7077", "--deploy-mode", "client",
                "--conf", f"spark.pyspark.python={sys.executable}",
                "--conf", "spark.executor.memory=640m", "--conf", "spark.ui.enabled=false",
                "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.task.maxFailures=8",
                str(ROOT / "scripts" / "spark_main.py"), *run]

    def start(self) -> None:
        self.starts += 1
        out = open(self.work / f"driver-{self.starts}.log", "wb")  # noqa: SIM115 - kept open
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log(f"driver start #{self.starts} (pid {self.proc.pid})")

    def watch(self) -> None:
        while not self.stopping:
            if self.proc is not None and self.proc.poll() is not None:
                self.exits.append(self.proc.returncode)
                log(f"driver exited {self.proc.returncode}; restarting")
                time.sleep(2)
                if not self.stopping:
                    self.start()
            time.sleep(0.5)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self) -> int:
        self.stopping = True
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=300)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name = f"soak{int(time.time())}"
        self.work = ROOT / ".services" / "soak" / self.name
        self.work.mkdir(parents=True)
        data = yaml.safe_load((ROOT / "config.yml").read_text())
        data["kafka"].update(topic=self.name, group_id="soak", max_rate_per_partition=5000)
        data["hbase"]["table_prefix"] = self.name
        data["job"]["batch_interval_s"] = 2
        data["sessions"].update(inactivity_gap_s=600, grace_s=30)
        self.cfg_path = self.work / "config.yml"
        self.cfg_path.write_text(yaml.safe_dump(data))
        self.cfg = config.load(self.cfg_path)
        self.cluster = spark_up() and not args.local
        self.sup = Supervisor(self.cfg_path, self.work, self.cluster)
        self.specs: list[GeneratorSpec] = []
        self.recoveries: list[tuple[str, float | None]] = []
        self.lag_max = 0

    # ------------------------------------------------------------------ observation

    def latest(self) -> CommittedBatch | None:
        """The newest offsets row, read on a connection of its own (no retries: the caller
        polls); raises while HBase does not answer."""
        conn = connect(self.cfg.hbase)
        try:
            return OffsetStore(conn.table(self.cfg.hbase.offsets_table), self.name,
                               "soak").latest()
        finally:
            conn.close()

    def newest_row(self) -> int:
        """The newest committed batch time; -1 while HBase does not answer."""
        try:
            latest = self.latest()
        except Exception:  # noqa: BLE001 - HBase may be the thing that is down
            return -1
        return latest.batch_ms if latest else 0

    def wait_commit_after(self, since: float, before: int, timeout: float = 600) -> float | None:
        while time.monotonic() - since < timeout:
            row = self.newest_row()
            if row > before:
                return time.monotonic() - since
            time.sleep(0.5)
        return None

    def memory(self) -> dict[str, float]:
        driver = tree_rss_mib(self.sup.proc.pid) if self.sup.proc else 0.0
        executors = sum(tree_rss_mib(p) for p in pids_matching(b"CoarseGrainedExecutorBackend"))
        return {"driver_mib": round(driver, 1), "executors_mib": round(executors, 1)}

    # ------------------------------------------------------------------ faults

    def faults(self) -> dict[str, Callable[[], None]]:
        def bounce(*down: list[str], pause: float, up: list[list[str]]) -> Callable[[], None]:
            def run() -> None:
                for args in down:
                    stack(*args)
                time.sleep(pause)
                for args in up:
                    stack(*args)
            return run

        def kill_one(marker: bytes, program: str | None = None) -> Callable[[], None]:
            def run() -> None:
                pids = pids_matching(marker, program)
                if pids:
                    os.kill(random.choice(pids), signal.SIGKILL)
            return run

        def rival() -> None:
            # A second driver on the same topic and group takes the lease; the first is
            # fenced and exits; the supervisor's restart takes the lease back.
            out = open(self.work / "rival.log", "wb")  # noqa: SIM115
            rival = subprocess.Popen([sys.executable, "-m", "leakproof.cli", "run", "--config",
                                      str(self.cfg_path), "--max-batches", "3"], stdout=out,
                                     stderr=subprocess.STDOUT)
            rival.wait(timeout=300)

        chosen = {
            "driver SIGKILL": self.sup.kill,
            "python worker SIGKILL": kill_one(b"pyspark.daemon"),
            "kafka broker SIGKILL + restart": bounce(["kill", "kafka"], pause=5, up=[["up"]]),
            "thrift SIGKILL + restart": bounce(["kill", "thrift"], pause=3,
                                               up=[["start", "thrift"]]),
            "hbase restart": bounce(["kill", "thrift"], ["kill", "hbase"], pause=2, up=[["up"]]),
            "hbase away 10 s": bounce(["stop", "thrift"], pause=10, up=[["start", "thrift"]]),
            "second driver": rival,
        }
        if self.cluster:
            chosen["executor JVM SIGKILL"] = kill_one(b"CoarseGrainedExecutorBackend", "java")

            def worker() -> None:
                stack("kill", random.choice(["spark-worker1", "spark-worker2"]))
                time.sleep(10)
                stack("up", "--spark")

            chosen["spark worker SIGKILL"] = worker
        return chosen

    # ------------------------------------------------------------------ the run

    def produce(self, stop: threading.Event) -> None:
        """Steady production in one-minute generator chunks, each a seeded spec."""
        i = 0
        while not stop.is_set():
            per_minute = self.args.rate * 60
            sessions = max(1, per_minute // 10)
            # each chunk's event time follows the last one's (the generator spreads session
            # starts over 2 s per session), as a live site's would
            spec = GeneratorSpec(seed=self.args.seed * 1000 + i, events=per_minute,
                                 sessions=sessions, start_ts=DEFAULT_START_TS + i * sessions * 2000)
            self.specs.append(spec)
            send_events(self.cfg.kafka, self.name, generate(spec), rate=self.args.rate)
            i += 1

    def run(self) -> int:
        try:
            return self._run()
        finally:  # never leave a driver behind: it would hold the cluster's cores
            self.sup.stopping = True
            self.sup.kill()

    def _run(self) -> int:
        rng = random.Random(self.args.seed)
        create_topic(self.cfg.kafka, self.name, 4)
        how = "spark-submit on spark://127.0.0.1:7077" if self.cluster else "local[2]"
        log(f"topic {self.name}; {how}; {self.args.minutes} min at {self.args.rate} events/s; "
            f"work dir {self.work}")
        stop_producing = threading.Event()
        producer = threading.Thread(target=self.produce, args=(stop_producing,), daemon=True)
        producer.start()
        self.sup.start()
        watcher = threading.Thread(target=self.sup.watch, daemon=True)
        watcher.start()
        threading.Thread(target=self.sample_lag, args=(stop_producing,), daemon=True).start()
        if self.wait_commit_after(time.monotonic(), 0, timeout=300) is None:
            log("no first commit within 5 min; see the driver log")
            return 1
        mem_start = self.memory()
        faults = self.faults()
        deadline = time.monotonic() + self.args.minutes * 60
        while True:
            pause = rng.uniform(self.args.min_gap_s, self.args.max_gap_s)
            if time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            name = rng.choice(sorted(faults))
            before = self.newest_row()
            at = time.monotonic()
            log(f"fault: {name}")
            try:
                faults[name]()
            except Exception as exc:  # noqa: BLE001 - a fault that failed is reported
                log(f"fault {name} could not be injected: {exc}")
            took = self.wait_commit_after(at, max(before, 0))
            self.recoveries.append((name, took))
            log(f"  next commit {took:.1f}s after the fault" if took is not None
                else "  NO commit within 10 min")
        mem_end = self.memory()
        stop_producing.set()
        producer.join()
        log("production stopped; draining")
        self.drain()
        rc = self.sup.stop()
        log(f"driver stopped with exit {rc}")
        return self.verdict(mem_start, mem_end)

    def drain(self) -> None:
        from leakproof.kafka.admin import KafkaMetadata

        meta = KafkaMetadata(self.cfg.kafka)
        try:
            parts = meta.partitions(self.name)
            ends = {p: b.log_end for p, b in meta.log_bounds(self.name, parts).items()}
        finally:
            meta.close()
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            try:
                latest = self.latest()
            except Exception:  # noqa: BLE001 - wait for HBase too
                latest = None
            if latest and all(latest.offsets.get(p) == e for p, e in ends.items()):
                return
            time.sleep(2)
        log("did not drain within 15 min")

    def sample_lag(self, stop: threading.Event) -> None:
        """Every 5 s: log ends now minus the newest commit (what an operator's lag is)."""
        from leakproof.commit_stores import open_store
        from leakproof.kafka.admin import KafkaMetadata

        while not stop.wait(5):
            try:
                meta = KafkaMetadata(self.cfg.kafka)
                try:
                    ends = meta.log_bounds(self.name, meta.partitions(self.name))
                finally:
                    meta.close()
                store = open_store(self.cfg)
                try:
                    latest = store.latest()
                finally:
                    store.close()
            except Exception:  # noqa: BLE001 - a fault may be under way; sample later
                continue
            done = latest.offsets if latest else {}
            lag = sum(b.log_end - done.get(p, 0) for p, b in ends.items())
            self.lag_max = max(self.lag_max, lag)

    def verdict(self, mem_start: dict[str, float], mem_end: dict[str, float]) -> int:
        args = [a for s in self.specs
                for a in ("--spec", f"{s.seed}:{s.events}:{s.sessions}:{s.start_ts}")]
        out = subprocess.run([sys.executable, "-m", "leakproof.cli", "verify", "--config",
                              str(self.cfg_path), *args], capture_output=True, text=True,
                             check=False)
        (self.work / "verify.txt").write_text(out.stdout + out.stderr)
        took = [t for _, t in self.recoveries if t is not None]
        by_kind: dict[str, list[float | None]] = {}
        for name, t in self.recoveries:
            by_kind.setdefault(name, []).append(t)
        print()
        print(f"soak {self.name}: {self.args.minutes} min, "
              f"{sum(len(generate(s)) for s in self.specs)} records produced, "
              f"{len(self.recoveries)} faults, {self.sup.starts} driver starts "
              f"(exits: {', '.join(map(str, self.sup.exits)) or 'none'})")
        print(f"{'fault':34} {'count':>5} {'recovered':>9} {'worst s':>8} {'mean s':>7}")
        for name, times in sorted(by_kind.items()):
            ok = [t for t in times if t is not None]
            print(f"{name:34} {len(times):5d} {len(ok):9d} "
                  f"{max(ok, default=float('nan')):8.1f} "
                  f"{(sum(ok) / len(ok)) if ok else float('nan'):7.1f}")
        print(f"worst recovery: {max(took, default=float('nan')):.1f}s; "
              f"lag high-water mark: {self.lag_max} records (sampled every 5 s)")
        print(f"memory at start: {mem_start}; at end: {mem_end}")
        print(out.stdout.strip())
        exact = out.returncode == 0 and "EXACT MATCH" in out.stdout
        unrecovered = len(self.recoveries) - len(took)
        print(f"VERDICT: {'EXACT' if exact else 'NOT EXACT'}"
              f"{f', {unrecovered} faults without recovery' if unrecovered else ''}")
        return 0 if exact and not unrecovered else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("MINUTES", 30)))
    parser.add_argument("--rate", type=int, default=int(os.environ.get("RATE", 500)),
                        help="events/s produced (default 500)")
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SEED", 7)))
    parser.add_argument("--min-gap-s", type=float, default=60.0)
    parser.add_argument("--max-gap-s", type=float, default=180.0)
    parser.add_argument("--local", action="store_true", help="local[2], not spark-submit")
    args = parser.parse_args()
    try:
        return Soak(args).run()
    finally:
        subprocess.run([*STACK, "up", "--spark"] if spark_up() or not args.local
                       else [*STACK, "up"], check=False, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())
