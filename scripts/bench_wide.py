#!/usr/bin/env python3
"""make bench-wide: a batch's cost against its partition count, same records.

The same seeded events (EVENTS, default 45 000, in SESSIONS, default 12 000) go into topics
of 4, 240 and 900 partitions (WIDTHS), one after another in one run, each drained in one
batch by ``scripts/bench.py`` (leakproof alone, no profile); then the 240-partition topic
again at ``max_rate_per_partition`` RATE (default 20: every partition in every batch) for
the steady state. Prints drain time, events/s and machine CPU per M events for each width,
its ratio to the 4-partition run, and the steady run's batch times. Figures, not assertions.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVENTS = os.environ.get("EVENTS", "45000")
SESSIONS = os.environ.get("SESSIONS", "12000")
WIDTHS = [int(w) for w in os.environ.get("WIDTHS", "4,240,900").split(",")]
RATE = os.environ.get("RATE", "20")
DRAIN = re.compile(r"(\d+) records in (\d+) batches: (\d+) ev/s first batch to last commit.*"
                   r"machine CPU ([\d.]+) s per M")
BATCHES = re.compile(r"batch time min ([\d.]+)s / median ([\d.]+)s / max ([\d.]+)s")


def bench(partitions: int, **extra: str) -> tuple[str, str]:
    env = {**os.environ, "EVENTS": EVENTS, "SESSIONS": SESSIONS, "PARTITIONS": str(partitions),
           "PEERS": "", "PROFILE_S": "0", **extra}
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py")], env=env,
                         capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    job = next((line for line in text.splitlines() if "first batch to last commit" in line
                and "ceiling" not in line), "")
    check = next((line.strip() for line in text.splitlines() if "check:" in line), "no check")
    if not job:
        print(text[-3000:], file=sys.stderr)
    return job, check


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
    job, check = bench(240, RATE_PER_PARTITION=RATE)
    times = BATCHES.search(job)
    print(f"\nsteady, 240 partitions at max_rate_per_partition {RATE}: {job.strip()}\n  {check}")
    if times:
        print(f"  batch time min {times.group(1)} / median {times.group(2)} / max "
              f"{times.group(3)} s against a 2 s interval")
    return 0 if all(r[4].startswith("check: EXACT") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
