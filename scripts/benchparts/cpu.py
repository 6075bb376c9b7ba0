"""What a program costs the machine: its process tree's peak resident memory and every
process's CPU, sampled in a thread while it runs; the whole machine's CPU seconds from
/proc/stat; CPU by process per million events; and a batch's CPU floor, the p99 that CPU per
event bounds in the latency mode."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from proctools import CpuByRole, tree_rss_mib


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


def per_million(seconds: Mapping[str, float], events: int) -> dict[str, float]:
    """CPU seconds by process as CPU s per M events, the busiest first."""
    return dict(sorted(((role, s / events * 1e6) for role, s in seconds.items()),
                       key=lambda kv: -kv[1]))


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
