"""The HBase timestamp of the cells a batch writes (pure): it grows with batch and epoch.

HBase shows, of a cell's versions, the one with the newest timestamp, whatever order they
arrived in. So when every cell a range writes carries its batch's timestamp, a write that
lands late -- a Thrift server still retrying a put after the task gave up on it, a task
attempt that passed the lease check and stalled, a speculative copy -- can only hide
writes older than itself, never a later batch's or a newer driver's.

The timestamps are milliseconds near the batch time, so the HBase shell shows them as the
batch's date and a family TTL still means an age. They must grow across drivers too,
whatever their clocks say: each driver records in the lease row (``l:cell_ts_until``,
written by check-and-put on its own holder value) how far its timestamps may go before
it hands one out, and a driver taking the lease starts above what its predecessor
recorded. Retries of a batch reuse its timestamp (the values they write are the same).

Within a batch whose ranges may share session rows (keys moving after partitions were
added: ``moved_keys``), each range gets a timestamp of its own, growing in the order the
ranges are applied, and the ranges run again after the others get timestamps above all
of the first pass: a range applied later must never be hidden by an earlier one's late
write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# How far ahead of its newest timestamp a driver records that it may go: a driver started
# within this time of its predecessor's last record stamps ahead of its clock until its
# batch times catch up (each batch gains an interval). Short, so restarts in a crash loop
# cannot pile it up; one check-and-put per this much time is nothing to the driver.
RESERVE_MS = 10_000
# The first driver on a lease row without a record (tables written before timestamps):
# above the holder cell's timestamp by this, for the region servers' clock skew (HBase
# refuses a server more than 30 s off: hbase.master.maxclockskew).
UPGRADE_MARGIN_MS = 30_000


def room(ranges: int, spread: bool) -> int:
    """How many timestamps a batch of ``ranges`` ranges takes: one, or with ``spread``
    (ranges that may share rows) one per range, twice (a second pass), and one spare."""
    return 2 * ranges + 1 if spread else 1


def stamps(base: int, partitions: Sequence[int], spread: bool, again: bool = False
           ) -> dict[int, int]:
    """Each partition's cell timestamp in a batch stamped ``base``: all the same, or with
    ``spread`` growing in partition order, a second pass (``again``) above the first."""
    if not spread:
        return dict.fromkeys(partitions, base)
    first = base + (len(partitions) if again else 0)
    return {p: first + i for i, p in enumerate(sorted(partitions))}


@dataclass
class CellClock:
    """One driver's clock: ``next_free`` is the lowest timestamp it may still hand out,
    ``reserved`` the highest its lease row allows (recorded before use)."""

    next_free: int
    reserved: int
    reserve_ms: int = RESERVE_MS

    @classmethod
    def start(cls, now_ms: int, before: int, reserve_ms: int = RESERVE_MS) -> CellClock:
        """A driver that just took the lease: above ``before`` (every timestamp its
        predecessors may have used) and not behind its own clock."""
        first = max(now_ms, before + 1)
        return cls(first, first - 1, reserve_ms)

    @staticmethod
    def bound(reserved: int | None, holder_ts: int, predecessor: bool = True) -> int:
        """What a new driver starts above: its predecessors' record; or, with none, the
        lease cell's own timestamp -- and a margin when a driver held the lease before
        (its cells carry the region servers' clocks: tables written before timestamps)."""
        if reserved is not None:
            return reserved
        return holder_ts + (UPGRADE_MARGIN_MS if predecessor else 0)

    def stamp(self, batch_ms: int, room: int, reserve: Callable[[int], None]) -> int:
        """The timestamp of batch ``batch_ms``, which takes ``room`` of them. When it would
        pass the reservation, ``reserve(until)`` records a new one first (and raises if this
        driver no longer holds the lease)."""
        ts = max(batch_ms, self.next_free)
        last = ts + room - 1
        if last > self.reserved:
            until = last + self.reserve_ms
            reserve(until)
            self.reserved = until
        self.next_free = last + 1
        return ts
