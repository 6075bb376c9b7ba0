"""The profile kept beside the job's log: py-spy on PySpark's Python workers for a window of
the drain (PROFILE_S), and the summary of where their time went."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from proctools import pids_matching


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
