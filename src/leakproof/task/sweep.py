"""The retention sweep of a step's ranges (``sessions.retention_days``, ``retention``).

After the fold, before any write, each range's cut: its partition's watermark *as the range
started*, less the retention and the close delay, in whole index buckets. Every event this
range or any later one judges -- a replay's too: the stored watermark never goes back --
finds a session below it forgotten (``sessions.PartitionFolder``), so deleting its row
changes no answer. The sweep deletes the closed sessions the retention index lists below
the cut, as their rows now say, if each row holds no event of an offset not yet committed
(its fence is below the range's first offset, which is the committed one): a replay reads
those events again, and must find the fence that says they counted. A row another
partition's fence is on (its key moved when partitions were added) is kept: that
partition's offsets are not known here.

The sessions swept go into the fold's ``removed``, so the writes delete their rows (and,
split by the gap, their listings) and the outbox owes their keys a tombstone, as for a
session merged away. Every session the range leaves closed is indexed for a later sweep in
its pending mark -- before its row, so no crash leaves a closed row no sweep finds -- at
the bucket of its last_ts. A bucket below the cut that still lists a session kept (its
events not committed yet) is the partition's ``held``: the next range looks from there.
The index entries done with are deleted after the rows they list, before the watermark;
a crash anywhere replays to the same end (a row already deleted is not found, and its
listing and tombstone are owed again).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from leakproof.core import retention
from leakproof.core.open_index import Entry
from leakproof.core.sessions import CLOSED, FoldResult, SessionState, fence_source
from leakproof.ports.task import PartitionRows, SessionRows
from leakproof.task.index import Loaded


@dataclass
class Swept:
    """What one range's sweep leaves to write."""

    retain: dict[int, dict[str, int]] = field(default_factory=dict)  # bucket -> sid -> last
    forget: dict[int, set[str]] = field(default_factory=dict)  # index entries done with
    cut: int = 0  # the new ``w:swept`` (0: unchanged)
    held: int = -1  # the lowest bucket below it still listing a session kept (-1: none)
    count: int = 0  # sessions deleted


@dataclass(frozen=True)
class SweptRange:
    """One range as the sweep sees it: its partition, fence key and first offset, what its
    load and fold left, and the watermark it started from."""

    partition: int
    fence: str
    first_offset: int
    loaded: Loaded
    result: FoldResult
    started: int


def sweep(partitions: PartitionRows, sessions: SessionRows, topic: str,
          ranges: Sequence[SweptRange], retention_ms: int, close_after_ms: int,
          deleting: bool = True) -> list[Swept]:
    """Each range's sweep, its fold's result changed in place (see the module).
    ``deleting`` False (a topic that grew, whose keys' sessions other partitions may still
    hold events of): nothing is deleted; the sessions closed are indexed all the same."""
    cuts = [retention.cut(r.started, retention_ms, close_after_ms) for r in ranges]
    scanned = []
    for r, cut in zip(ranges, cuts, strict=True):
        stored = r.loaded.stored
        since = stored.swept if stored.held < 0 else min(stored.held, stored.swept)
        upto = max(cut, stored.swept)  # a raised retention scans no less, deletes less
        scanned.append(partitions.scan_retained(topic, r.partition, since, upto)
                       if deleting and upto > since else [])
    wanted = {e.session_id for r, found in zip(ranges, scanned, strict=True) for e in found
              if e.session_id not in r.result.touched}
    rows = sessions.read(wanted) if wanted else {}
    return [_one(r, found, cut, rows) for r, found, cut in zip(ranges, scanned, cuts,
                                                                strict=True)]


def _one(r: SweptRange, found: Sequence[Entry], cut: int, rows: dict[str, SessionState]
         ) -> Swept:
    result, stored = r.result, r.loaded.stored
    upto = max(cut, stored.swept)
    gone: dict[str, SessionState] = {}
    retain: dict[int, dict[str, int]] = {}
    for s in result.touched.values():
        if s.closed:
            retain.setdefault(retention.bucket_of(s.reach), {})[s.session_id] = s.reach
    for sid in result.closed_untouched:
        if (end := result.closed_ends.get(sid)) is not None:
            retain.setdefault(retention.bucket_of(end), {})[sid] = end
    held = {b for b in retain if b < upto}  # closed by writes not committed yet
    forget: dict[int, set[str]] = {}
    for e in found:
        if e.session_id in result.touched:
            if e.session_id not in retain.get(e.bucket, {}):
                forget.setdefault(e.bucket, set()).add(e.session_id)
            continue
        row = rows.get(e.session_id)
        if row is None:  # a sweep that stopped after its deletes: its listing (split by the
            # gap) and tombstone may be owed still
            gone[e.session_id] = SessionState(e.session_id, last_ts=e.last_ts, state=CLOSED)
        elif not row.closed or retention.bucket_of(row.reach) != e.bucket:
            pass  # open again (its key's session forgotten, a new one begun: indexed when
            # it closes), or moved on (its newer entry is in another bucket)
        elif not _own(row, r):
            pass  # another partition's fence on it: kept (docs/DESIGN.md)
        elif row.reach < cut and _committed(row, r):
            gone[e.session_id] = row
        else:  # kept until its events are committed, or the retention (raised) passes it
            held.add(e.bucket)
            continue
        forget.setdefault(e.bucket, set()).add(e.session_id)
    for sid, s in gone.items():
        result.removed.setdefault(sid, s)
    if not found and stored.held >= 0:  # not looked at again: still held
        held.add(stored.held)
    return Swept(retain, forget, upto if upto > stored.swept else 0, min(held, default=-1),
                 len(gone))


def _own(row: SessionState, r: SweptRange) -> bool:
    """Whether only the range's partition has fences on ``row`` (a recreated topic's older
    fences of it are done with)."""
    mine = fence_source(r.fence)
    return all(fence_source(key) == mine for key in row.fences)


def _committed(row: SessionState, r: SweptRange) -> bool:
    """Whether every event ``row`` holds is of an offset committed: its fence for the
    range's partition below the range's first offset."""
    return row.fences.get(r.fence, -1) < r.first_offset
