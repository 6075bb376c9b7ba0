"""make bench's result: every drain beside the ceiling in one table, the ratios against their
targets, make bench's own figures kept for the latency mode's half load (last.json), and
the exit code (0 only when every check was exact)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from benchparts.ceiling import Ceiling
from benchparts.drain import Drain
from benchparts.settings import MAKE_BENCH_SHAPE, RESULT_JSON, ROOT


def print_result(ceiling: Ceiling, job: Drain, peers: Mapping[str, Drain]) -> int:
    """The RESULT table and ratios; make bench's own figures kept for the latency mode; 0 if
    every check was exact, else 1."""
    ceiling_rate, ceiling_cpu, ceiling_peak = ceiling.rate, ceiling.cpu_per_m, ceiling.peak_mib
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
    if RESULT_JSON:  # another script's reading of this run (make bench-cluster)
        Path(RESULT_JSON).write_text(json.dumps({"ceiling": ceiling_rate, **{
            d.name: {"rate": d.rate, "steady": d.steady, "cpu_per_m": d.cpu_per_m,
                     "by_role": {r: s / d.records * 1e6 for r, s in d.by_role.items()},
                     "verdict": d.verdict} for d in (job, *peers.values())}}))
    ok = job.verdict.startswith("EXACT") and all(d.verdict.startswith("EXACT")
                                                 for d in peers.values())
    return 0 if ok else 1
