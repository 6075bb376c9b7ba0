"""Process-tree facts from /proc for the bench and soak scripts (Linux only)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


def pids_matching(marker: bytes, program: str | None = None) -> list[int]:
    """Pids whose command line contains ``marker`` (e.g. b"CoarseGrainedExecutorBackend"),
    and, with ``program``, whose argv[0] is that program (YARN's launch shells carry the
    same words as the JVM they start)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            argv0 = cmdline.split(b"\0", 1)[0].rsplit(b"/", 1)[-1].decode(errors="replace")
            if marker in cmdline and (program is None or argv0 == program):
                found.append(int(entry.name))
    return found


def tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and all its descendants (JVMs, Python workers)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        p = int(entry.name)
        parents[p] = int(stat.rsplit(")", 1)[1].split()[1])
        rss[p] = next((int(line.split()[1]) for line in status.splitlines()
                       if line.startswith("VmRSS:")), 0)
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo.extend(c for c, parent in parents.items() if parent == p and c not in tree)
    return sum(rss.get(p, 0) for p in tree) / 1024


def _proc_address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} prints it: 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_addr)
    host = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(host)


def listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on, IPv4-mapped addresses unwrapped."""
    inodes = set()
    for fd in (Path("/proc") / str(pid) / "fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in (Path("/proc") / str(pid) / "net" / table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addr_hex, port_hex = fields[1].split(":")
                addr = _proc_address(addr_hex)
                if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
                    addr = addr.ipv4_mapped
                found.append((str(addr), int(port_hex, 16)))
    return found


# what a process is, by a word of its command line; the first that matches wins
ROLES: tuple[tuple[bytes, str], ...] = (
    (b"PacedProducer", "bench producer"),
    (b"scripts/bench.py", "bench script"),
    (b"kafka.Kafka", "kafka"),
    (b"ThriftServer", "hbase thrift"),
    (b"org.apache.hadoop.hbase", "hbase"),
    (b"pyspark.daemon", "python workers"),
    (b"leakproof.cli", "python driver"),
    (b"org.apache.spark", "spark JVMs"),
)


def _role(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "other"
    return next((role for marker, role in ROLES if marker in cmdline), "other")


class CpuByRole:
    """CPU seconds each kind of process spends between ``start`` and ``stop``.

    Processes come and go during a run (Python workers, executors), so ``sample`` must be
    called every second or so: a process is counted up to its last sample. What no process
    accounts for (kernel threads, interrupts, processes too short to be sampled) is the
    whole machine's figure minus the sum, left to the caller.
    """

    def __init__(self) -> None:
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._roles: dict[int, str] = {}
        self._tick = os.sysconf("SC_CLK_TCK")

    def _cpu(self) -> dict[int, float]:
        found = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / self._tick
        return found

    def start(self) -> None:
        self._first = self._cpu()
        self._last = dict(self._first)

    def sample(self) -> None:
        for pid, cpu in self._cpu().items():
            if pid not in self._roles:
                self._roles[pid] = _role(pid)
            self._last[pid] = cpu

    def stop(self) -> dict[str, float]:
        self.sample()
        spent: dict[str, float] = {}
        for pid, cpu in self._last.items():
            role = self._roles.get(pid, "other")
            spent[role] = spent.get(role, 0.0) + cpu - self._first.get(pid, 0.0)
        return spent
