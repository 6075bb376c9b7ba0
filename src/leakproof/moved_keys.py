"""Keys that move when partitions are added: when a batch must run in one task (pure).

A producer picks a key's partition from the partition count it knows, so adding partitions
moves most keys, and not all at once: each producer switches when it refreshes its metadata
(``metadata.max.age.ms``, five minutes by default), and records already in an old partition
stay there. Until then one session can have records in two partitions of one batch. Ranges
of one task never load a session row before an earlier range's write of it (``process``),
but two tasks run at once: both would read the row, and the second put would overwrite the
first one's aggregates while both fences stay -- events lost for good. So from the moment
the driver sees partitions added until every partition's ranges start past the records
written before the producers settled, every batch runs as one task.

``KeyMoves`` is that record, kept beside the driver lease so that it survives a restart:
``since_ms``, when partitions were first seen added (pending while set); ``until``, each
partition's log end once ``settle_ms`` had passed after that -- records from there on were
written with the new partition count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KeyMoves:
    """See the module docstring; ``since_ms`` None: settled, ``until`` is the whole rule."""

    since_ms: int | None
    until: Mapping[int, int] = field(default_factory=dict)

    def added(self, now_ms: int) -> KeyMoves:
        """Partitions were (again) seen added at ``now_ms``: pending from the first sight."""
        since = now_ms if self.since_ms is None else min(self.since_ms, now_ms)
        return KeyMoves(since, self.until)

    def settled(self, now_ms: int, settle_ms: int, log_ends: Mapping[int, int]) -> KeyMoves:
        """Once ``settle_ms`` passed since partitions were added: each partition's
        ``log_ends`` now are where keys stopped moving (never lowered: a later growth's
        bound cannot forget an earlier one's)."""
        if self.since_ms is None or now_ms < self.since_ms + settle_ms:
            return self
        until = dict(self.until)
        for p, end in log_ends.items():
            until[p] = max(end, until.get(p, end))
        return KeyMoves(None, until)

    def mixing(self, starts: Mapping[int, int]) -> bool:
        """Whether a batch whose ranges start at ``starts`` may hold one session's records
        in two partitions."""
        return self.since_ms is not None or any(
            start < self.until.get(p, start) for p, start in starts.items())

    def to_text(self) -> tuple[str, str]:
        """The two cells: since (empty when settled), until as ``p=offset,...``."""
        return ("" if self.since_ms is None else str(self.since_ms),
                ",".join(f"{p}={o}" for p, o in sorted(self.until.items())))

    @staticmethod
    def from_text(since: str, until: str) -> KeyMoves:
        pairs = (item.split("=", 1) for item in until.split(",") if item)
        return KeyMoves(int(since) if since else None, {int(p): int(o) for p, o in pairs})


NONE = KeyMoves(None)
