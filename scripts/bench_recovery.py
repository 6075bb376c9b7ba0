#!/usr/bin/env python3
"""make bench-recovery: what a driver SIGKILL under spark-submit costs, to the next commit.

Under a steady load (RATE ev/s, default 5 000), ``leakproof run`` runs under spark-submit on
the standalone cluster (client mode). After a few commits the driver's whole process group
(the spark-submit JVM and the Python driver) gets SIGKILL, as a node or container loss would
do, and the same command starts again at once, as a supervisor would (INITIAL_RATE=N: with
backpressure on and its first batch capped at N ev/s per partition). Printed, for ROUNDS
kills: seconds from the kill to the restarted driver's start line, to its streaming line, and
to its first commit; then the oracle's verdict over everything produced. The run's tables
are dropped after it (KEEP=1 keeps them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

import yaml

from bench import drop_tables
from leakproof.commands.produce import send_raw
from leakproof.commit_stores import open_store
from leakproof.core import codec, config
from leakproof.core.offsets import CommittedBatch
from leakproof.hbase.connection import connect, ensure_tables
from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import GeneratorSpec, generate
from submit import standalone_submit

ROOT = Path(__file__).resolve().parent.parent
RATE = float(os.environ.get("RATE", "5000"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
T = TypeVar("T")
EXECUTOR = {"spark.executor.memory": "640m"}


def history(cfg: config.Config, limit: int) -> list[CommittedBatch]:
    """The newest offsets rows first, from the store the config names."""
    with contextlib.closing(open_store(cfg)) as store:
        return store.history(limit)


def commits_after(cfg: config.Config, since_ms: float) -> list[float]:
    rows = history(cfg, 50)
    return sorted(float(r.audit["committed_ms"]) for r in rows
                  if float(r.audit["committed_ms"]) > since_ms)


def line_time(log: Path, marker: str) -> float | None:
    """The wall time (epoch s) of the first log line holding ``marker``."""
    for line in log.read_text(errors="replace").splitlines():
        if marker in line and line[:4].isdigit():
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp()
    return None


def drained(cfg: config.Config, total: int) -> bool:
    rows = history(cfg, 1)
    return bool(rows) and sum(rows[0].offsets.values()) >= total


def three_after(cfg: config.Config, since_ms: float) -> bool:
    return len(commits_after(cfg, since_ms)) >= 3


def wait_for(check: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)
    return found


def main() -> int:
    """Runs the rounds; whatever happens, no driver it started outlives it."""
    drivers: list[subprocess.Popen[bytes]] = []
    try:
        return rounds(drivers)
    finally:
        for proc in drivers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def rounds(drivers: list[subprocess.Popen[bytes]]) -> int:
    name = f"recovery{int(time.time())}"
    work = ROOT / ".services" / "bench" / name
    work.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((ROOT / "config.yml").read_text())
    data["kafka"]["topic"] = name
    data["hbase"]["table_prefix"] = name
    if os.environ.get("INITIAL_RATE"):  # backpressure's first-batch cap, per partition
        data["kafka"]["backpressure"].update(enabled=True,
                                             initial_rate=int(os.environ["INITIAL_RATE"]))
    cfg_path = work / "config.yml"
    cfg_path.write_text(yaml.safe_dump(data))
    cfg = config.load(cfg_path)
    create_topic(cfg.kafka, name, 4)
    conn = connect(cfg.hbase)
    try:
        ensure_tables(conn, cfg.hbase)  # so the commits can be read before the job starts
    finally:
        conn.close()
    seconds = 60 + ROUNDS * 45
    spec = GeneratorSpec(13, int(RATE * seconds), max(1, int(RATE * seconds) // 10))
    pairs = [(codec.encode_key(e), codec.encode_value(e)) for e in generate(spec)]
    print(f"== {len(pairs)} events at {RATE:.0f} ev/s into {name}; {ROUNDS} driver kills",
          flush=True)
    producer = threading.Thread(target=send_raw, args=(cfg.kafka, name, pairs, RATE),
                                daemon=True)
    producer.start()
    figures: list[tuple[float, float, float]] = []
    killed_at = 0.0
    for round_ in range(ROUNDS + 1):
        log = work / f"driver-{round_}.log"
        started = time.time()
        with open(log, "wb") as out:
            proc = subprocess.Popen(standalone_submit(str(cfg_path), **EXECUTOR), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        drivers.append(proc)
        if round_:
            first = wait_for(partial(commits_after, cfg, killed_at * 1000), 120,
                             "the first commit")
            start_line = line_time(log, "starting ")
            stream_line = line_time(log, "streaming ")
            figures.append((start_line - killed_at if start_line else float("nan"),
                            stream_line - killed_at if stream_line else float("nan"),
                            first[0] / 1000 - killed_at))
            print(f"   kill {round_}: restarted driver's start line after "
                  f"{figures[-1][0]:.1f}s, streaming after {figures[-1][1]:.1f}s, first commit "
                  f"after {figures[-1][2]:.1f}s", flush=True)
        if round_ == ROUNDS:
            break
        wait_for(partial(three_after, cfg, started * 1000), 180, "three commits")
        time.sleep(1.3)  # somewhere inside a batch
        killed_at = time.time()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    producer.join()
    # every record in a committed batch before the stop, or the oracle sees a short count
    wait_for(partial(drained, cfg, len(pairs)), 180, "the last records to be committed")
    stop = subprocess.run([sys.executable, "-m", "leakproof.cli", "stop", "--config",
                           str(cfg_path)], capture_output=True, text=True, check=False)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        print(f"the last driver did not stop: {stop.stdout}{stop.stderr}", flush=True)
    checked = subprocess.run([sys.executable, "-m", "leakproof.cli", "verify", "--config",
                              str(cfg_path), "--spec", f"{spec.seed}:{spec.events}:"
                              f"{spec.sessions}:{spec.start_ts}"],
                             capture_output=True, text=True, check=False)
    exact = checked.returncode == 0 and "EXACT MATCH" in checked.stdout
    drop_tables(cfg.hbase, name)  # left over, they slow HBase and every later run
    worst = max(f[2] for f in figures)
    print("\nRESULT driver SIGKILL -> next commit: "
          + ", ".join(f"{f[2]:.1f}s" for f in figures)
          + f" (worst {worst:.1f}s, target <= 20s) | oracle "
          + ("EXACT MATCH" if exact else "MISMATCH " + checked.stdout[-400:]))
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
