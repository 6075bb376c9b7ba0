"""Waiting until a started service answers: the deadline, the loop over a probe and the
answer that ends the wait at once."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from stackparts.base import HOST, StackError
from stackparts.process import Service, port_open

READY_TIMEOUT_S = float(os.environ.get("LEAKPROOF_READY_TIMEOUT_S", "240"))


class WillNotStart(StackError):
    """A probe's answer that no wait will change: start-up gives up at once."""


def wait_until(svc: Service, probe_name: str, probe: Callable[[], None]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if svc.pid() is None:
            raise StackError(f"{svc.name} exited during start-up; see {svc.logfile}")
        try:
            probe()
            return
        except WillNotStart:
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure means "not yet"
            last = exc
            time.sleep(1.0)
    raise StackError(f"{svc.name} not ready after {READY_TIMEOUT_S:.0f}s ({probe_name}: {last}); "
                     f"see {svc.logfile}")


def probe_port(port: int, host: str = HOST) -> Callable[[], None]:
    def probe() -> None:
        if not port_open(port, host):
            raise ConnectionError(f"{host}:{port} closed")
    return probe
