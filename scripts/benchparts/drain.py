"""One program's drain of the topic as the figures need it (events/s overall and steady,
batch times, CPU per M events by process, peak memory, the check's verdict), and running a
program to its end under the samplers that measure it."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from benchparts.cpu import PeakSampler, machine_cpu_s, per_million
from benchparts.settings import PROFILE_S
from benchparts.worker_profile import WorkerProfile
from proctools import CpuByRole


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
