"""Integration fixtures: the running local stack, a private topic and table prefix per test,
and a check that no job a test started outlives it. Helpers live in helpers.py."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctools import pids_matching

from . import short_jvms
from .helpers import KAFKA, SPARE_THRIFT, THRIFT, Env, fresh_env, port_open
from .helpers import stack as stack_py


@pytest.fixture(scope="session", autouse=True)
def short_lived_jvms() -> None:
    """Every spark-submit this session runs (directly or under `leakproof run`) starts
    cheaper JVMs (short_jvms.py); a setting a test passes still wins."""
    short_jvms.install()


@pytest.fixture(scope="session", autouse=True)
def stack() -> None:
    """The stack must be up: a missing service fails the run, it never skips tests."""
    down = [name for name, addr in (("kafka", KAFKA), ("hbase thrift", THRIFT))
            if not port_open(addr)]
    if down:
        pytest.fail(f"local stack not running ({', '.join(down)}): run `make stack-up` or use "
                    f"`make test`, which starts it", pytrace=False)


@pytest.fixture(scope="session")
def spare_thrift() -> Iterator[int]:
    """The spare Thrift server's port, started for this worker's session if it is not up (and
    stopped again at its end). Its tests share the xdist group "spare-thrift", so one worker
    runs them one after another while the others keep using the main server."""
    started = not port_open(SPARE_THRIFT)
    stack_py("start", "thrift-spare")  # returns once it answers; a no-op if it already runs
    yield SPARE_THRIFT[1]
    if started:
        stack_py("stop", "thrift-spare")


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """Every process whose command line names this test's files (its configs and logs live
    in tmp_path) must be gone when the test ends: a leftover job would commit into the next
    test's run or hold its cores. Leftovers are killed and the test fails."""
    yield
    mine = str(tmp_path).encode()
    left = [pid for pid in pids_matching(mine) if pid != os.getpid()]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of this test still ran after it: {left}"


@pytest.fixture
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    """A fresh topic (4 partitions) and table prefix named after the test."""
    base = "".join(c for c in request.node.name if c.isalnum())[:24]
    yield fresh_env(tmp_path, f"{base}{uuid.uuid4().hex[:6]}")
