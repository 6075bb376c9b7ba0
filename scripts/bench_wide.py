#!/usr/bin/env python3
"""make bench-wide: a batch's cost against its partition count, same records.

The same seeded events (EVENTS, default 45 000, in SESSIONS, default 12 000) go into topics
of 4, 240 and 900 partitions (WIDTHS), one after another in one run, each drained in one
batch by ``scripts/bench.py`` (leakproof alone, no profile); then a bigger 240-partition
topic (STEADY_EVENTS, default 400 000) at ``max_rate_per_partition`` RATE (default 84: about
40 000 records, 20 000 ev/s, per 2 s batch while every partition has records) for the steady
state. Prints drain time, events/s and machine CPU per M events for each width, its ratio
to the 4-partition run, and for the steady run each batch's processing time (output start
to commit, the job's ``total_s``) against the interval. Figures, not assertions.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench import batch_records

ROOT = Path(__file__).resolve().parent.parent
EVENTS = os.environ.get("EVENTS", "45000")
SESSIONS = os.environ.get("SESSIONS", "12000")
WIDTHS = [int(w) for w in os.environ.get("WIDTHS", "4,240,900").split(",")]
RATE = os.environ.get("RATE", "84")
STEADY_EVENTS = os.environ.get("STEADY_EVENTS", "400000")
INTERVAL_S = 2.0  # config.yml's batch interval
DRAIN = re.compile(r"(\d+) records in (\d+) batches: (\d+) ev/s first batch to last commit.*"
                   r"machine CPU ([\d.]+) s per M")


def bench(partitions: int, **extra: str) -> tuple[str, str]:
    env = {**os.environ, "EVENTS": EVENTS, "SESSIONS": SESSIONS, "PARTITIONS": str(partitions),
           "PEERS": "", "PROFILE_S": "0"}
    env.update(extra)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py")], env=env,
                         capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    job = next((line for line in text.splitlines() if "first batch to last commit" in line
                and "ceiling" not in line), "")
    check = next((line.strip() for line in text.splitlines() if "check:" in line), "no check")
    if not job:
        print(text[-3000:], file=sys.stderr)
    return job, check


def newest_job_log() -> Path:
    runs = sorted((ROOT / ".services" / "bench").glob("*/job.log"),
                  key=lambda p: p.stat().st_mtime)
    return runs[-1]


def steady_batches(log: Path) -> None:
    """Each batch's processing time (the job's JSON line: output start to commit) and size."""
    batches = [(record["records"], record["total_s"]) for record in batch_records(log)]
    full = [t for n, t in batches if n >= 30_000]  # while (nearly) every partition has records
    for name, times in (("every batch", [t for _, t in batches]), ("batches of 30 000+", full)):
        if times:
            times = sorted(times)
            print(f"  {name}: {len(times)}, processing min {times[0]:.2f} / median "
                  f"{statistics.median(times):.2f} / max {times[-1]:.2f} s against a "
                  f"{INTERVAL_S:.0f} s interval; {sum(t < INTERVAL_S for t in times)} under it")
    if full:
        sizes = [n for n, _ in batches if n >= 30_000]
        print(f"  those batches held {min(sizes)}-{max(sizes)} records "
              f"({statistics.mean(sizes) / INTERVAL_S:.0f} ev/s at the interval)")


def main() -> int:
    rows = []
    for width in WIDTHS:
        job, check = bench(width)
        m = DRAIN.search(job)
        if m is None:
            print(f"{width} partitions: no result ({check})")
            return 1
        records, rate, cpu = int(m.group(1)), int(m.group(3)), float(m.group(4))
        rows.append((width, records / rate, rate, cpu, check))
        print(f"{width:4d} partitions: drain {records / rate:5.1f} s, {rate:6d} ev/s, "
              f"CPU {cpu:6.1f} s/M  {check}", flush=True)
    base = rows[0]
    print("\nRESULT (same events, one run)")
    print(f"  {'partitions':>10} {'drain s':>8} {'ev/s':>7} {'CPU s/M':>8} {'drain ratio':>12}")
    for width, drain, rate, cpu, _ in rows:
        print(f"  {width:10d} {drain:8.2f} {rate:7d} {cpu:8.1f} {drain / base[1]:12.2f}")
    print("  targets: 240 within 1.5x the 4-partition drain, 900 within 2x")
    job, check = bench(240, RATE_PER_PARTITION=RATE, EVENTS=STEADY_EVENTS, SESSIONS="100000")
    print(f"\nsteady, 240 partitions at max_rate_per_partition {RATE}: {job.strip()}\n  {check}")
    steady_batches(newest_job_log())
    return 0 if all(r[4].startswith("check: EXACT") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
