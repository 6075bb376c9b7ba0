"""The driver lease: which driver may commit offsets for one topic and group (pure).

The state table keeps one holder cell per topic and group, ``<epoch>:<tag>``. A driver takes
the lease at start by bumping the epoch; from then on every commit is a compare-and-set from
the holder it knows to ``<epoch>:<batch ms>``. A second driver (or a rewind) bumps the epoch
again, so the first one's next compare-and-set fails and it stops: only one driver commits.
Tasks carry the epoch too and refuse to write once the holder's epoch has moved on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Lease:
    """One holder value. ``tag`` says what last wrote it: ``start:<id>``, ``rewind`` or the
    batch time of the newest commit."""

    epoch: int
    tag: str

    @classmethod
    def parse(cls, raw: bytes) -> Lease:
        """The cell's bytes -> Lease; ValueError names the bytes when they are not a lease."""
        epoch, sep, tag = raw.decode("ascii", errors="replace").partition(":")
        if not sep or not epoch.isdigit():
            raise ValueError(f"not a lease holder value (want <epoch>:<tag>): {raw!r}")
        return cls(int(epoch), tag)

    def encode(self) -> bytes:
        return f"{self.epoch}:{self.tag}".encode()

    def successor(self, tag: str) -> Lease:
        """The lease a new driver (or a rewind) takes over this one with."""
        return Lease(self.epoch + 1, tag)

    def after(self, batch_ms: int) -> Lease:
        """The holder value once this driver has committed batch ``batch_ms``."""
        return Lease(self.epoch, str(batch_ms))

    def __str__(self) -> str:
        return self.encode().decode()


FIRST_EPOCH = 1
