"""Integration fixtures: the running local stack, a private topic and table prefix per test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import happybase
import pytest
import yaml

from leakproof import config
from leakproof.generator import GeneratorSpec, generate
from leakproof.produce import create_topic, send_events

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ("127.0.0.1", 9092)
THRIFT = ("127.0.0.1", 9090)
SPARK_MASTER = ("127.0.0.1", 7077)


def _open(addr: tuple[str, int]) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(addr) == 0


@pytest.fixture(scope="session", autouse=True)
def stack() -> None:
    """The stack must be up: a missing service fails the run, it never skips tests."""
    down = [name for name, addr in (("kafka", KAFKA), ("hbase thrift", THRIFT)) if not _open(addr)]
    if down:
        pytest.fail(f"local stack not running ({', '.join(down)}): run `make stack-up` or use "
                    f"`make test`, which starts it", pytrace=False)


@dataclass
class Env:
    """One test's private topic, tables and config file."""

    name: str
    path: Path
    cfg: config.Config
    tmp: Path

    def produce(self, spec: GeneratorSpec) -> None:
        send_events(self.cfg.kafka, self.cfg.kafka.topic, generate(spec))

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 240,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """``leakproof run`` in its own process, as users start it."""
        return run_cli("run", "--config", str(self.path), *args, env=env, timeout=timeout,
                       check=check, log=self.tmp / f"run-{time.monotonic_ns()}.log")

    def capped(self, rate: int) -> str:
        """This test's config with ``max_rate_per_partition`` set: a drain of many batches."""
        path = self.tmp / f"capped{rate}.yml"
        path.write_text(self.path.read_text().replace("max_rate_per_partition: 0",
                                                      f"max_rate_per_partition: {rate}"))
        return str(path)

    def start(self, config: str, *args: str, name: str = "job"
              ) -> tuple[subprocess.Popen[bytes], Path]:
        """``leakproof run`` in the background; its output goes to the returned log file."""
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as out:
            job = subprocess.Popen([sys.executable, "-m", "leakproof.cli", "run", "--config",
                                    config, *args], stdout=out, stderr=subprocess.STDOUT)
        return job, log

    def variant(self, label: str, **sections: dict[str, Any]) -> str:
        """This test's config (same topic and tables) with some keys changed."""
        path = self.tmp / f"{label}.yml"
        data = yaml.safe_load(self.path.read_text())
        for key, values in sections.items():
            data.setdefault(key, {}).update(values)
        path.write_text(yaml.safe_dump(data))
        return str(path)

    def run_config(self, path: str, *args: str, env: dict[str, str] | None = None,
                   check: bool = True) -> subprocess.CompletedProcess[str]:
        """``leakproof run`` with another config file (same topic and tables)."""
        return run_cli("run", "--config", path, *args, env=env, check=check,
                       log=self.tmp / f"run-{time.monotonic_ns()}.log")

    def verify(self, *specs: GeneratorSpec) -> str:
        args = [a for s in specs for a in ("--spec", f"{s.seed}:{s.events}:{s.sessions}:"
                                                     f"{s.start_ts}")]
        out = run_cli("verify", "--config", str(self.path), *args, check=False)
        assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
        return out.stdout

    def hbase(self) -> happybase.Connection:
        return happybase.Connection(*THRIFT, table_prefix=self.cfg.hbase.table_prefix)


def records(*specs: GeneratorSpec) -> int:
    """How many records producing ``specs`` sends (events plus the generator's duplicates)."""
    return sum(len(generate(s)) for s in specs)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240,
            check: bool = True, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "leakproof.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})},
                          check=False)
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if check and proc.returncode != 0:
        raise AssertionError(f"leakproof {args[0]} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr[-6000:]}")
    return proc


def wait_for(what: str, check: Callable[[], object], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def write_config(path: Path, name: str, **sections: dict[str, Any]) -> config.Config:
    data: dict[str, Any] = {
        "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": name, "group_id": "it",
                  "max_rate_per_partition": 0, "read_timeout_s": 30},
        "hbase": {"table_prefix": name},
        "job": {"batch_interval_s": 1, "master": "local[2]"},
        "sessions": {"inactivity_gap_s": 600, "grace_s": 30},
    }
    for key, values in sections.items():
        data.setdefault(key, {}).update(values)
    path.write_text(yaml.safe_dump(data))
    return config.load(path)


@pytest.fixture
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """A fresh topic (4 partitions) and table prefix named after the test."""
    base = "".join(c for c in request.node.name if c.isalnum())[:24]
    name = f"{base}{uuid.uuid4().hex[:6]}"
    path = tmp_path / "config.yml"
    cfg = write_config(path, name, **getattr(request, "param", {}))
    create_topic(cfg.kafka, name, 4)
    yield Env(name, path, cfg, tmp_path)
