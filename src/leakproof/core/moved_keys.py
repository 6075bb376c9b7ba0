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

A first run (no stored offsets) cannot see a growth that happened before it, under the
backlog it reads. There each range's keys are checked against the partition Kafka's default
partitioner gives them (murmur2 of the key, as the Java client and kafka-python place keyed
records) until the records written ``settle_ms`` after the start are reached. A range holding
a key placed elsewhere writes nothing; the driver runs such ranges again once the batch's
other ranges are written, alone in one task, and treats the topic as just grown. A key can be
placed in only one partition, so of two ranges sharing a session at least one is held back.
(A producer with another partitioner -- librdkafka's default among them -- makes every key
look moved: its first backlog then runs as one task, slower but exact.)

``KeyMoves`` is that record, kept beside the driver lease so that it survives a restart:
``since_ms``, when partitions were first seen added (pending while set); ``until``, each
partition's log end once ``settle_ms`` had passed after that -- records from there on were
written with the new partition count; ``check_since_ms`` and ``checked`` the same for a
first run's checks.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class KeyMoves:
    """See the module docstring; ``since_ms`` None: settled, ``until`` is the whole rule."""

    since_ms: int | None
    until: Mapping[int, int] = field(default_factory=dict)
    check_since_ms: int | None = None
    checked: Mapping[int, int] = field(default_factory=dict)

    def added(self, now_ms: int) -> KeyMoves:
        """Partitions were (again) seen added at ``now_ms``: pending from the first sight."""
        return replace(self, since_ms=_first(self.since_ms, now_ms))

    def first_run(self, now_ms: int) -> KeyMoves:
        """A run starts with no stored offsets at ``now_ms``: check keys from here."""
        return replace(self, check_since_ms=_first(self.check_since_ms, now_ms))

    def settled(self, now_ms: int, settle_ms: int, log_ends: Mapping[int, int]) -> KeyMoves:
        """Once ``settle_ms`` passed since partitions were added (or a first run began):
        each partition's ``log_ends`` now are where keys stopped moving (never lowered: a
        later growth's bound cannot forget an earlier one's)."""
        out = self
        if self.since_ms is not None and now_ms >= self.since_ms + settle_ms:
            out = replace(out, since_ms=None, until=_raised(self.until, log_ends))
        if self.check_since_ms is not None and now_ms >= self.check_since_ms + settle_ms:
            out = replace(out, check_since_ms=None, checked=_raised(self.checked, log_ends))
        return out

    @property
    def grown(self) -> bool:
        """Whether partitions were ever seen added: a session's index entry may then sit in
        a partition its key has left (``sessions.PartitionFolder``'s ``may_close``)."""
        return self.since_ms is not None or bool(self.until)

    def mixing(self, starts: Mapping[int, int]) -> bool:
        """Whether a batch whose ranges start at ``starts`` may hold one session's records
        in two partitions: it must run as one task."""
        return _below(self.since_ms, self.until, starts)

    def checking(self, starts: Mapping[int, int]) -> bool:
        """Whether the keys of a batch whose ranges start at ``starts`` must be checked."""
        return _below(self.check_since_ms, self.checked, starts)

    def to_text(self) -> tuple[str, str, str]:
        """The cells: since (empty when settled), until as ``p=offset,...``, and the
        first run's checks as ``since;p=offset,...``."""
        return (_ms_text(self.since_ms), _offsets_text(self.until),
                f"{_ms_text(self.check_since_ms)};{_offsets_text(self.checked)}"
                if self.check_since_ms is not None or self.checked else "")

    @staticmethod
    def from_text(since: str, until: str, checks: str = "") -> KeyMoves:
        check_since, _, checked = checks.partition(";")
        return KeyMoves(int(since) if since else None, _offsets(until),
                        int(check_since) if check_since else None, _offsets(checked))


def placed(key: bytes, partition: int, partitions: int) -> bool:
    """Whether Kafka's default partitioner puts a record keyed ``key`` in ``partition`` of
    ``partitions`` (murmur2, made positive, modulo the count)."""
    return home(key, partitions) == partition


def home(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record keyed ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` (unsigned). kafka-python's ``murmur2`` gives the
    same (tested), byte by byte with a mask after each step: 3.5 us for a 17-byte session
    id against 1.6 us here, four bytes at a time -- a first run checks every key it reads."""
    n = len(data)
    h = 0x9747B28C ^ n
    end = n & ~3
    for (k,) in struct.iter_unpack("<I", data[:end]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    rest = n & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest:
        h = ((h ^ data[end]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def _first(current: int | None, now_ms: int) -> int:
    return now_ms if current is None else min(current, now_ms)


def _raised(bound: Mapping[int, int], log_ends: Mapping[int, int]) -> dict[int, int]:
    out = dict(bound)
    for p, end in log_ends.items():
        out[p] = max(end, out.get(p, end))
    return out


def _below(since_ms: int | None, bound: Mapping[int, int], starts: Mapping[int, int]) -> bool:
    return since_ms is not None or any(start < bound.get(p, start)
                                       for p, start in starts.items())


def _ms_text(ms: int | None) -> str:
    return "" if ms is None else str(ms)


def _offsets_text(offsets: Mapping[int, int]) -> str:
    return ",".join(f"{p}={o}" for p, o in sorted(offsets.items()))


def _offsets(text: str) -> dict[int, int]:
    pairs = (item.split("=", 1) for item in text.split(",") if item)
    return {int(p): int(o) for p, o in pairs}


NONE = KeyMoves(None)
