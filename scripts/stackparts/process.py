"""The processes the stack owns: starting one detached with its pid file and log, telling
whether it still runs, stopping or killing it and waiting until its port is free."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from stackparts.base import HOST, RUN, StackError, log

STOP_TIMEOUT_S = 30.0


@dataclass
class Service:
    """One JVM this script owns: how to start it, where it logs, which port says it is up."""

    name: str
    group: str
    port: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    host: str = HOST  # the loopback address it binds to

    @property
    def dir(self) -> Path:
        return RUN / self.group

    @property
    def pidfile(self) -> Path:
        return self.dir / f"{self.name}.pid"

    @property
    def logfile(self) -> Path:
        return self.dir / "logs" / f"{self.name}.out"

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def start(self) -> None:
        if self.pid() is not None:
            log(f"{self.name} already running (pid {self.pid()})")
            return
        if port_open(self.port, self.host):
            raise StackError(
                f"{self.name}: port {HOST}:{self.port} is taken by a process this script did not "
                f"start; stop it first (see `ss -ltnp 'sport = :{self.port}'`)"
            )
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        with open(self.logfile, "ab") as out:
            proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.dir, start_new_session=True,
            )
        self.pidfile.write_text(str(proc.pid))
        log(f"{self.name} started (pid {proc.pid}, log {self.logfile})")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        pid = self.pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):
            log(f"{self.name} ignored {signal.Signals(sig).name} for {STOP_TIMEOUT_S:.0f}s; "
                "killing")
            os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        wait_port_closed(self)
        log(f"{self.name} stopped")

    def pause(self) -> None:
        """SIGSTOP: the process hangs with its sockets open, as a stalled host does."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown hook runs."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.05)
        self.pidfile.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); read its state to be sure.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_port_closed(svc: Service, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while port_open(svc.port, svc.host):
        if time.monotonic() > deadline:
            raise StackError(f"{svc.name} stopped but {svc.host}:{svc.port} is still bound")
        time.sleep(0.2)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
