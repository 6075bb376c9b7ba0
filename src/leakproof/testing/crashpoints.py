"""Named places where fault tests kill the process as a crash would (SIGKILL, no cleanup).

``LEAKPROOF_CRASH_AT=<name>[@<n>][:executor]`` kills the process the n-th time (default 1st)
it passes the named point -- a driver (``leakproof run``) that launched its own JVM kills that
JVM's process group (the JVM and its Python workers) first, as a container's end or a host
crash takes the whole driver: an orphaned local JVM would otherwise spend a minute in Spark's
shutdown hooks, spinning on task launches its stopped executor rejects, before it exits; with
``:executor``, the Spark executor JVM the Python worker runs under is killed instead (its
whole process tree dies with it); with ``:stall=<file>`` nothing
is killed: the process waits there until ``<file>`` exists (the test releases it; at most an
hour) and goes on -- a task that stalled past its lease check, then writes: a zombie, or the
slow attempt of a speculated task -- and from then on appends the name of every point it
passes to ``<file>.after`` (``task_done`` once its task's writes are all made), so a test
waits for conditions, not for a number of seconds the rest must beat. With
``LEAKPROOF_CRASH_ONCE=<file>`` only the first process to get there crashes (it creates the
file and writes its pid there), so a task retried elsewhere passes. Unset, a crash point is
one dictionary lookup. Used only by tests; documented so that no one is surprised to find it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

ENV = "LEAKPROOF_CRASH_AT"
ONCE_ENV = "LEAKPROOF_CRASH_ONCE"
STALL_LIMIT_S = 3600.0  # a stall no test released ends by itself
_passes: dict[str, int] = {}
_resumed: list[Path] = []  # this process stalled and was released: where it tells its points


def crash_point(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    if _resumed:
        with _resumed[0].open("a") as out:
            out.write(name + "\n")
    _crash(spec, name)


def _crash(spec: str, name: str) -> None:
    spec, _, whom = spec.partition(":")
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] < int(nth or 1):
        return
    once = os.environ.get(ONCE_ENV)
    if once:
        try:
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, b"%d" % os.getpid())  # whose fault it is: a test may stop its executor
        os.close(fd)
    if whom.startswith("stall="):
        release = Path(whom.removeprefix("stall="))
        deadline = time.monotonic() + STALL_LIMIT_S
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        _resumed.append(release.with_name(release.name + ".after"))
        return
    pid = executor_jvm(os.getpid()) if whom == "executor" else os.getpid()
    if whom != "executor":
        for jvm in launched_jvms(os.getpid()):
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(jvm), signal.SIGKILL)
    os.kill(pid or os.getpid(), signal.SIGKILL)


def launched_jvms(pid: int) -> list[int]:
    """The Spark JVMs process ``pid`` launched itself (a local driver's gateway, in a session
    of its own: ``spark_session.spark_context``); none under spark-submit, where the JVM is
    the parent (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if _parent(int(entry.name)) == pid and \
                    b"org.apache.spark.deploy.SparkSubmit" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def executor_jvm(pid: int) -> int | None:
    """The nearest ancestor of process ``pid`` that is a Spark executor JVM (Linux /proc)."""
    pid = _parent(pid)
    while pid > 1:
        try:
            if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            return None
        pid = _parent(pid)
    return None


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4: the parent pid
