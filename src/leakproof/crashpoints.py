"""Named places where fault tests kill the process as a crash would (SIGKILL, no cleanup).

``LEAKPROOF_CRASH_AT=<name>[@<n>]`` kills the process the n-th time (default 1st) it passes
the named point. Unset, a crash point is one dictionary lookup. Used only by tests; documented
so that no one is surprised to find it.
"""

from __future__ import annotations

import os
import signal

ENV = "LEAKPROOF_CRASH_AT"
_passes: dict[str, int] = {}


def crash_point(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
