#!/usr/bin/env python3
"""make bench-cluster: make bench's job on the one-node stack and on the cluster stack, in one
run, so that what replication costs is read off one machine on one day.

The two stacks share ports, so they take turns: for each of ROUNDS rounds (default 2) the
one-node stack and the cluster stack (three KRaft nodes, RF 3, min ISR 2; HBase with two
masters and two region servers) are each started empty (``stack.py up --wipe``) and drained
by ``scripts/bench.py`` with no peers (EVENTS, default 300 000, over 4 partitions); the
order alternates from round to round, so neither always meets the machine first. Every drain
is held to the oracle. Printed: each drain's events/s, steady events/s, CPU seconds per M
events of the whole machine and of Kafka's and HBase's processes, then the medians and the
cluster's ratio to the one node. The one-node stack is left running, empty.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("ROUNDS", "2"))
EVENTS = os.environ.get("EVENTS", "300000")
STACKS = {"one node": [], "cluster": ["--cluster"]}


def stack(*args: str) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), *args], check=True,
                   stdout=subprocess.DEVNULL)


def drain(name: str, flags: list[str], n: int) -> dict[str, Any]:
    """Start ``name``'s stack empty, drain the bench's topic into it; the job's figures."""
    stack("down", "--wipe")
    stack("up", "--wipe", *flags)
    out = ROOT / ".services" / "bench" / f"cluster-{n}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py")], check=False,
                         env={**os.environ, "PEERS": "", "EVENTS": EVENTS,
                              "RESULT_JSON": str(out)})
    if run.returncode != 0:
        raise SystemExit(f"the drain on the {name} stack failed (exit {run.returncode})")
    return {"stack": name, **json.loads(out.read_text())["leakproof"]}


def kind(figures: dict[str, Any], word: str) -> float:
    """CPU s per M events of the processes whose role names ``word``."""
    return float(sum(v for role, v in figures["by_role"].items() if word in role))


def main() -> int:
    runs: list[dict[str, Any]] = []
    for rnd in range(ROUNDS):
        order = list(STACKS.items()) if rnd % 2 == 0 else list(reversed(STACKS.items()))
        for name, flags in order:
            runs.append(drain(name, flags, len(runs)))
    stack("down", "--wipe")
    stack("up", "--wipe")
    print(f"\nRESULT: make bench's job, {EVENTS} events, each stack started empty, in turn")
    print(f"  {'stack':10} {'ev/s':>7} {'steady':>7} {'CPU s/M':>8} {'HBase':>6} "
          f"{'Kafka':>6}  check")
    for r in runs:
        print(f"  {r['stack']:10} {r['rate']:7.0f} {r['steady']:7.0f} {r['cpu_per_m']:8.1f} "
              f"{kind(r, 'hbase'):6.1f} {kind(r, 'kafka'):6.1f}  {r['verdict'][:30]}")
    medians = {name: {key: statistics.median(float(r[key]) for r in runs if r["stack"] == name)
                      for key in ("rate", "steady", "cpu_per_m")} for name in STACKS}
    one, cluster = medians["one node"], medians["cluster"]
    print(f"  cluster / one node (medians): {cluster['rate'] / one['rate']:.2f} ev/s, "
          f"{cluster['steady'] / one['steady']:.2f} steady, "
          f"{cluster['cpu_per_m'] / one['cpu_per_m']:.2f} CPU per event")
    return 0 if all(r["verdict"].startswith("EXACT") for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
