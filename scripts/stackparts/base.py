"""What every part of the stack shares: where the service templates and the run directory
are, the loopback address, the one error a command reports, the ``[stack]`` log line and
filling a template into the run directory."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SERVICES = ROOT / "services"
RUN = Path(os.environ.get("LEAKPROOF_STACK_DIR", ROOT / ".services"))
HOST = "127.0.0.1"


class StackError(RuntimeError):
    """A service did not start, stop or answer; the message names it and its log file."""


def log(msg: str) -> None:
    print(f"[stack] {msg}", flush=True)


def render(template: Path, dest: Path, **values: object) -> None:
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
