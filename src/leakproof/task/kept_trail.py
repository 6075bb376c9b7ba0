"""Kept rows shared by the Python workers of a host, through the last few ranges' deltas.

PySpark hands a task to whichever of an executor's Python workers is idle, so a partition's
next range seldom runs in the worker that kept its rows (with one task a batch and two
workers, never: they take turns). Each range therefore also leaves its ``kept_rows.Delta``
in a file named after the token it wrote; a worker whose rows hold under an older token
follows the files back from the partition's token to its own and applies them. A gap in
the trail (a range that crashed after its mark, another partition's bump, a file pruned)
means starting from the oldest delta found -- its rows are right as of its token, and every
later write has its delta -- or, with none, reading.

The files live under Spark's local directories (``SPARK_LOCAL_DIRS``: YARN removes them with
the application; else the temporary directory), one directory per tables, group and driver
epoch, readable by the job's user only; each partition keeps its newest ``DEPTH`` deltas.
Nothing here can make a row wrong: a file missing, unreadable or half written is a trail
that ends there.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import marshal
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from leakproof.core.kept_rows import Delta, KeptRows

log = logging.getLogger(__name__)

DEPTH = 4  # deltas kept per partition: enough for a few workers taking turns


def trail_root(*names: str, epoch: int) -> Path:
    """This run's directory for ``names`` (the tables and group), the directories of the
    same names under other epochs removed (their drivers are gone or fenced)."""
    base = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or tempfile.gettempdir()
    digest = hashlib.sha256("\0".join(names).encode()).hexdigest()[:16]
    parent = Path(base) / "leakproof-kept"
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for old in parent.glob(f"{digest}-*"):
        if old.name != f"{digest}-{epoch}":
            shutil.rmtree(old, ignore_errors=True)
    root = parent / f"{digest}-{epoch}"
    root.mkdir(mode=0o700, exist_ok=True)
    return root


class Trail:
    """The deltas of one run's ranges, one directory per partition."""

    def __init__(self, root: Path, depth: int = DEPTH) -> None:
        self._root = root
        self._depth = depth

    def _dir(self, key: str) -> Path:
        return self._root / key.replace(":", "@")

    @staticmethod
    def _name(token: bytes) -> str:
        return token.decode("ascii").replace("/", ".")

    def publish(self, key: str, delta: Delta) -> None:
        """Write ``delta`` under its token (whole or not at all), then prune the oldest."""
        where = self._dir(key)
        where.mkdir(mode=0o700, exist_ok=True)
        final = where / self._name(delta.token)
        part = where / f".{final.name}.{os.getpid()}"
        part.write_bytes(marshal.dumps(tuple(delta)))
        os.replace(part, final)
        found = []
        for entry in os.scandir(where):
            if not entry.name.startswith("."):
                with contextlib.suppress(FileNotFoundError):
                    found.append((entry.stat().st_mtime_ns, entry.path))
        for _, path in sorted(found)[:-self._depth]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def read(self, key: str, token: bytes) -> Delta | None:
        """The delta that wrote ``token``, if its file is there and whole."""
        try:
            read, wrote, rows = marshal.loads((self._dir(key) / self._name(token)).read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            return None
        return Delta(read, wrote, rows) if wrote == token else None

    def since(self, key: str, token: bytes, held: bytes | None) -> list[Delta]:
        """The deltas from ``held`` (or as far back as the trail goes) up to ``token``,
        oldest first."""
        chain: list[Delta] = []
        while len(chain) < self._depth and token != held:
            delta = self.read(key, token)
            if delta is None:
                break
            chain.append(delta)
            token = delta.read
        return chain[::-1]


class SharedKeptRows(KeptRows):
    """A worker's kept rows, brought up to date from the host's trail when another worker
    wrote the partition since, and each range's delta left on it."""

    def __init__(self, trail: Trail, most: int) -> None:
        super().__init__(most)
        self._trail = trail
        self._warned = False

    def catch_up(self, key: str, token: bytes) -> None:
        held = self.token(key)
        if held != token:  # (``Trail.read`` takes an unreadable file for the trail's end)
            for delta in self._trail.since(key, token, held):
                self.apply(key, delta)

    def keep(self, key: str, read: bytes, token: bytes, rows: Mapping[str, bytes],
             gone: Iterable[str] = ()) -> Delta:
        delta = super().keep(key, read, token, rows, gone)
        try:
            self._trail.publish(key, delta)
        except OSError as exc:
            self._warn(exc)
        return delta

    def _warn(self, exc: OSError) -> None:
        """A trail that cannot be written or read costs reads, never a row: said once."""
        if not self._warned:
            self._warned = True
            log.warning("kept rows are not shared between this host's Python workers (%s): "
                        "a partition's rows are read again whenever another worker wrote it",
                        exc)
