"""The open-session index around a step of ranges: loaded before the fold, saved after it.

The rules are ``open_index``'s (pure); this is where they meet the stores, in one place:
an index entry is taken at its word unless it lies below ``check_below`` -- a range that
stopped part way may have left it stale -- and then its session row's last_ts and state
decide. The touched sessions' rows are read whole here too, since both the fold and the
index need them -- or taken from the rows the worker kept from the partition's last range,
while its writer token says no one else wrote since (``task.kept_sessions``).

Several partitions' ranges load and save together (one task's ranges): one call reads their
partition rows, one their touched rows, one the rows their stale entries need; each
partition's index is scanned alone (its rows are its own key range). Each range's ``Loaded``
holds only its own partition's rows and entries.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from leakproof.core import open_index
from leakproof.core.open_index import Entry
from leakproof.core.sessions import (
    NO_WATERMARK,
    FoldResult,
    OpenSessions,
    PartitionState,
    SessionState,
    fence_key,
)
from leakproof.ports.task import PartitionRows, PartitionSave, SessionRows, StoredPartition
from leakproof.task.kept_sessions import KeptSessions, Touched


@dataclass
class Loaded:
    """What the fold starts from, and what saving the index after it needs."""

    stored: StoredPartition  # the partition's row as read (watermark, marks, outbox)
    state: PartitionState  # its watermark and the open sessions that may expire now
    rows: dict[str, SessionState]  # the touched sessions' rows, whole
    width: int
    cutoff: int  # sessions whose last_ts is below this expire in this range
    found: list[Entry]  # the index entries that may expire in it
    before: dict[str, SessionState]  # what is known of every session found or touched
    kept: int = 0  # of ``rows``, those the worker kept from the partition's last range
    # the stored watermarks of the partitions that own sessions found or touched here whose
    # keys moved away (partitions added), read before any of their rows
    owner_watermarks: dict[int, int] = field(default_factory=dict)
    idle_watermark: int = NO_WATERMARK  # an idle tick moves the watermark on to this

    def sessions(self) -> set[str]:
        """Every session whose row this range reads or may write: touched or found (all in
        ``before`` but a stale entry's session that has no row), and owed."""
        return {*self.before, *(e.session_id for e in self.found), *self.stored.outbox.sessions}


@dataclass(frozen=True)
class Wanted:
    """What one range asks of the load: its partition, the sessions its events touch, and
    its newest event time (expiry runs up to it)."""

    partition: int
    touched: frozenset[str]
    newest_ts: int
    idle_ms: int | None = None  # an idle tick: how long the partition has been silent


def load(partitions: PartitionRows, sessions: SessionRows, kept: KeptSessions, topic: str,
         close_after_ms: int, wanted: Sequence[Wanted], *, ts: int, incarnation: str = "",
         owner_of: Callable[[str], int] | None = None) -> list[Loaded]:
    """For each of ``wanted`` (distinct partitions): its partition's state, its touched rows,
    and the open sessions that may expire by its newest event time. (``ts``: the cell
    timestamp of what the read moves, ``PartitionRows.read_partitions``. With
    ``owner_of`` -- the partition a session's key belongs to, once partitions were added --
    every entry found is checked against its row, since it may be a moved session's, and
    the watermarks of the partitions that own the sessions a range found or touched are read
    first: a row read after them holds every event their owner applied before them.)"""
    width = open_index.bucket_width(close_after_ms)
    stored = partitions.read_partitions(topic, [w.partition for w in wanted], width, ts=ts)
    # an index keeps the width its buckets were cut with: were it to follow a changed gap,
    # a session's delete would aim at a bucket its old entry is not in, and the entry left
    # behind would close the session early
    scanned = []  # per range: its cutoff, the entries that may expire, the stale ones
    for w in wanted:
        s = stored[w.partition]
        cutoff = open_index.cutoff(max(s.state.watermark, w.newest_ts, _idle(s, w)),
                                   close_after_ms)
        found = open_index.expiring(partitions.scan_open(topic, w.partition, s.cutoff, cutoff),
                                    cutoff)
        # a row written before its width was kept (0) may hold entries cut with another
        # width, which a changed gap's deletes missed: checked against their rows, once
        stale = ({e.session_id for e in found} if owner_of is not None or not s.width
                 else open_index.to_check(found, s.check_below))
        scanned.append((cutoff, found, stale))
    owners: list[dict[int, int]] = [{} for _ in wanted]
    if owner_of is not None:
        for w, (_, found, _), mine in zip(wanted, scanned, owners, strict=True):
            for sid in (*w.touched, *(e.session_id for e in found)):
                if (home := owner_of(sid)) != w.partition:
                    mine[home] = NO_WATERMARK
        needed = sorted(set().union(*owners))
        if needed:
            marks = partitions.watermarks(topic, needed)
            for mine in owners:
                mine.update((p, marks[p]) for p in mine)
    rows, taken = kept.read_touched([
        Touched(fence_key(topic, w.partition, incarnation), stored[w.partition].writer,
                w.touched)
        for w in wanted])
    checked = sessions.read_expiry(set().union(*(stale for *_, stale in scanned)) - rows.keys())
    loaded = []
    for w, (cutoff, found, stale), mine in zip(wanted, scanned, owners, strict=True):
        s = stored[w.partition]
        own_rows = {sid: rows[sid] for sid in w.touched if sid in rows}
        own_checked = {sid: st for sid in stale
                       if (st := checked.get(sid) or rows.get(sid)) is not None}
        before = open_index.known_rows(found, stale, own_checked, own_rows)
        s.state.open_sessions = OpenSessions(open_index.open_set(found, before))
        loaded.append(Loaded(s, s.state, own_rows, s.width or width, cutoff, found, before,
                             taken[fence_key(topic, w.partition, incarnation)], mine,
                             _idle(s, w)))
    return loaded


def _idle(stored: StoredPartition, wanted: Wanted) -> int:
    """An idle tick's watermark: the one the partition's newest record left, moved on by
    how long the driver has read nothing of it (NO_WATERMARK: not an idle tick, or no
    record read yet). Every tick of a silence moves on from that same watermark, so ticks
    never add up; the record's own timestamp plays no part (``driver.planning._idle``)."""
    if wanted.idle_ms is None or stored.record_ts < 0 or stored.record_wm == NO_WATERMARK:
        return NO_WATERMARK
    return stored.record_wm + wanted.idle_ms


def save(partitions: PartitionRows, topic: str,
         done: Sequence[tuple[int, Loaded, FoldResult, int]], *, ts: int,
         swept: Sequence[tuple[int, Mapping[int, Collection[str]], int]] | None = None
         ) -> None:
    """Each partition's index changes, then its watermark (``PartitionRows.write_partitions``),
    at cell timestamp ``ts``. Each of ``done`` carries its range's newest record timestamp
    (-1: it read none, an idle tick: the partition's record keeps the one it had);
    ``swept``: each one's retention sweep: cut, entries done with, held (``task.sweep``)."""
    swept = swept or [(0, {}, -1)] * len(done)
    partitions.write_partitions(topic, [
        PartitionSave(partition, result.partition,
                      open_index.changes(loaded.width, loaded.found, loaded.before, result),
                      # no entry below the saved cutoff: a deferred one keeps it down
                      min([loaded.cutoff, *result.deferred.values()]),
                      loaded.stored.check_below, loaded.width,
                      *((max(newest, loaded.stored.record_ts), result.partition.watermark)
                        if newest >= 0 else
                        (loaded.stored.record_ts, loaded.stored.record_wm)),
                      swept=cut, forget=forget, held=held)
        for (partition, loaded, result, newest), (cut, forget, held)
        in zip(done, swept, strict=True)],
        ts=ts)
