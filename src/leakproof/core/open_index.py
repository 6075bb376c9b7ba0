"""A partition's open sessions between ranges: an index by last_ts bucket (pure).

The fold closes an open session once the partition's watermark passes its last_ts by
``sessions.close_after``. Kept as one set, every range pays for every open session (a busy
site has hundreds of thousands). So the state table keeps them in rows per bucket of last_ts,
and a range reads only the buckets its watermark has passed. A range's cost so follows its
own sessions: those it touches and those that expire in it.

An entry can be stale: the index is written after the session rows, new entries before old
ones are deleted, so a range that stops between the two leaves an old entry behind (never a
missing one: the replay re-puts the entries of every session it sees). Such a range leaves
its mark (its watermark, above every entry it can leave stale); entries below the mark are
checked against their session rows, which are the truth. All others are exact, and taken at
their word, as the single open-set cell of each session was before the index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from leakproof.core.sessions import FoldResult, SessionState

MAX_BUCKET = 9_999_999_999_999  # 13 digits in the row key
MAX_WIDTH = 300_000


@dataclass(frozen=True)
class Entry:
    """One open session in the index: its bucket (the row) and the last_ts written with it."""

    bucket: int
    session_id: str
    last_ts: int


def bucket_width(close_after_ms: int) -> int:
    """About 32 buckets span close_after: a range reads at most one bucket that has not
    fully expired, and a session moves to a new bucket only every width of event time."""
    return max(1_000, min(MAX_WIDTH, close_after_ms // 32))


def bucket_of(ts: int, width: int) -> int:
    return min(MAX_BUCKET, max(0, ts - ts % width))


def cutoff(watermark: int, close_after_ms: int) -> int:
    """Sessions whose last_ts is below this have expired at ``watermark``."""
    return watermark - close_after_ms


def expiring(entries: Iterable[Entry], before: int) -> list[Entry]:
    """The entries whose last_ts is below ``before`` (a scanned bucket may straddle it)."""
    return [e for e in entries if e.last_ts < before]


def open_set(entries: Iterable[Entry], rows: Mapping[str, SessionState]) -> dict[str, int]:
    """The fold's open set from the entries found: each session as its row says (a stale
    entry's session may have moved on, or closed, or never been written)."""
    found = {}
    for e in entries:
        row = rows.get(e.session_id)
        if row is not None and not row.closed:
            found[e.session_id] = row.last_ts
    return found


def to_check(found: Iterable[Entry], check_below: int) -> set[str]:
    """The sessions whose entries may be stale: a range that stopped part way marked the
    index with its watermark, and none of the entries it left stale is newer."""
    return {e.session_id for e in found if e.last_ts < check_below}


def known_rows(found: Iterable[Entry], stale: set[str], checked: Mapping[str, SessionState],
               rows: Mapping[str, SessionState]) -> dict[str, SessionState]:
    """What ``open_set`` and ``changes`` know of each session found: its row where read
    (``rows``: touched sessions; ``checked``: the last_ts and state of the ``stale`` ones,
    as ``to_check`` names them), else its entry's word; a stale session that has no row is
    left out (its entries are deleted)."""
    known = {e.session_id: SessionState(e.session_id, last_ts=e.last_ts)
             for e in found if e.session_id not in stale}
    known.update(checked)
    known.update(rows)
    return known


@dataclass
class IndexChanges:
    """What to write after a range: the puts go first, then the deletes (see the module)."""

    puts: dict[int, dict[str, int]] = field(default_factory=dict)
    deletes: dict[int, set[str]] = field(default_factory=dict)

    def put(self, bucket: int, session_id: str, last_ts: int) -> None:
        self.puts.setdefault(bucket, {})[session_id] = last_ts

    def delete(self, bucket: int, session_id: str) -> None:
        self.deletes.setdefault(bucket, set()).add(session_id)

    def apply_to(self, index: dict[int, dict[str, int]]) -> None:
        """Apply to an in-memory index (bucket -> session -> last_ts), as HBase would."""
        for b, cells in self.puts.items():
            index.setdefault(b, {}).update(cells)
        for b, sids in self.deletes.items():
            row = index.get(b, {})
            for sid in sids:
                row.pop(sid, None)
            if not row:
                index.pop(b, None)


def changes(width: int, found: Iterable[Entry], before: Mapping[str, SessionState],
            result: FoldResult) -> IndexChanges:
    """The index after a range: one entry per session left open, in its last_ts's bucket.

    ``found`` are the entries the range read, ``before`` the session rows as read (before the
    fold), ``result`` the fold's. Sessions the range saw get their entry put again even if
    unchanged: a replay so restores what a crash left unwritten.
    """
    wanted: dict[str, int | None] = {}  # session -> last_ts of its entry; None: no entry
    for e in found:
        row = before.get(e.session_id)
        wanted[e.session_id] = row.last_ts if row is not None and not row.closed else None
    for sid in (*result.closed_now, *result.removed):  # removed: merged away, its row gone
        wanted[sid] = None
    wanted.update(result.open_changed)

    out = IndexChanges()
    present = {(e.bucket, e.session_id, e.last_ts) for e in found}
    for sid, ts in wanted.items():
        if ts is not None and (sid in result.open_changed
                               or (bucket_of(ts, width), sid, ts) not in present):
            out.put(bucket_of(ts, width), sid, ts)
    known = [(e.bucket, e.session_id) for e in found]
    known += [(bucket_of(row.last_ts, width), sid) for sid, row in before.items()
              if sid in wanted and not row.closed]
    for b, sid in known:
        ts = wanted.get(sid)
        if ts is None or bucket_of(ts, width) != b:
            out.delete(b, sid)
    return out
