"""Sessions split by the gap (``sessions.by: gap``): one partition's range folded (pure).

The session key of an event is a visitor's; the visitor's events split into sessions by
event time, as docs/DESIGN.md ("Sessions split by the gap") says: an event *reaches* a
session when it lies less than the inactivity gap before its first event or after its last
(and, with a maximum duration, the two together would still span less than it). The event
joins what it reaches -- starting a session, extending one, moving its start, or merging two
it bridges -- and a session's row key is ``<visitor>:<first_ts, 13 digits>``: a start that
moves or a merge leaves the old keys to delete (``FoldResult.removed``).

Everything else is ``sessions.PartitionFolder``'s: the watermark, lateness, duplicates,
fences, closing and the open set. How a replay after a crash keeps the same answer:

- A session row keeps, with its fence, the offsets of this partition it took (folded,
  counted late or as duplicates; ``SessionState.took``), those below the first offset of the
  range that wrote it as one span from 0, its *mark*: every range starts at the committed
  offset, so every record below it was folded and its writes landed, whichever rows they
  went to. Nothing is dropped from a row's offsets, a merged row took what its parts took,
  and a range that reads an event again reads the row now holding it: so an event is a
  replay exactly when a row of its visitor took its offset -- in a crash's replay, however
  its ranges are cut, and in every re-read of committed offsets (a rewind, another group
  from the earliest offset). (A fence alone cannot say it: the rows a replay reads may hold
  what the first attempt did after the event -- grown, merged, closed -- and a torn put may
  land a row that took a later offset without one that took an earlier.) A row an attempt
  of the range wrote counts as seen by the range.
  What the replay then decides for the events no landed row took is decided on those rows:
  the same as the first attempt, but where a neighbouring session already shows that
  attempt's later effects (closed by its end, or grown past a maximum duration): then an
  event may be counted late where it was a duplicate, or, with ``max_duration_s``, join
  another session. No event is lost or counted twice either way.
- A merged row lists the keys it absorbed (``SessionState.absorbed``), so a row the first
  attempt merged away but did not get to delete is recognised, ignored and deleted again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from leakproof.core.events import Event
from leakproof.core.sessions import (
    CLOSED,
    OPEN,
    FoldResult,
    MayClose,
    Outcome,
    PartitionFolder,
    PartitionState,
    SeqSet,
    SessionState,
)
from leakproof.model.compiled import CompiledModel


@dataclass(frozen=True)
class GapRule:
    """How a visitor's events split: the inactivity gap, and the longest a session may span
    (None: no limit), both in ms."""

    gap_ms: int
    max_duration_ms: int | None = None


def session_key(visitor: str, first_ts: int) -> str:
    """A gap session's row key: the visitor and its first event time, 13 digits, so a
    visitor's sessions sort by start."""
    return f"{visitor}:{first_ts:013d}"


def visitor_of(session_id: str) -> str:
    """The visitor of a gap session's row key (a visitor may hold colons; the time may not)."""
    return session_id.rpartition(":")[0]


def start_of(session_id: str) -> int:
    """The first event time a gap session's row key names."""
    return int(session_id.rpartition(":")[2])


class GapFolder(PartitionFolder):
    """``PartitionFolder`` for sessions split by the gap: ``sessions`` are the rows of the
    sessions the range's events may reach (``visits``), keyed by row key; ``listed``: the
    keys the visitors' rows list, or None to take every ``absorbed`` key at its word."""

    def __init__(self, model: CompiledModel, fence_key: str, close_after_ms: int,
                 rule: GapRule, state: PartitionState, sessions: Mapping[str, SessionState],
                 may_close: MayClose | None = None, fold_late: bool = False,
                 first_offset: int = 0, retention_ms: int | None = None) -> None:
        """``first_offset``: the range's first offset: every offset below it is committed.
        With ``retention_ms`` an event past the horizon is late (``sessions``); no event
        newer reaches a session that may be deleted (its last_ts is more than the close
        delay, so more than the gap, before the horizon), so no row is forgotten here."""
        super().__init__(model, fence_key, close_after_ms, state, sessions, may_close,
                         fold_late, retention_ms)
        self._gap = rule.gap_ms
        self._max = rule.max_duration_ms
        self._first = first_offset
        self._removed: dict[str, SessionState] = {}
        self._closed_late: set[str] = set()
        absorbed = set().union(*(s.absorbed for s in self._sessions.values()))
        self._visits: dict[str, list[SessionState]] = {}
        for sid, s in self._sessions.items():
            if sid in absorbed:  # merged into another by a range that stopped part way
                self._removed[sid] = s
            else:
                self._visits.setdefault(visitor_of(sid), []).append(s)
        for mine in self._visits.values():
            mine.sort(key=lambda s: s.first_ts)
            for s in mine:  # an attempt of an uncommitted range wrote it: the range sees it
                taken = s.took.get(fence_key)
                if taken and taken.bounds()[1] >= first_offset:
                    self._seen[s.session_id] = s

    def feed(self, offset: int, event: Event, lead: int | None = None,
             redriven: bool = False) -> Outcome:
        visitor, ts, seq, record = event
        watermark_before = self._step(offset, ts, lead)
        if self._retention is not None and self.past_horizon(ts, watermark_before):
            self._counts[Outcome.LATE] += 1
            return Outcome.LATE
        mine = self._visits.setdefault(visitor, [])
        key, gap = self._fence_key, self._gap
        for s in mine:  # the row holding the event spans it (folded) or reached it (late,
            # duplicate) when it took it, and rows only grow: so only such a row is asked,
            # and the answer depends on the tables, not on which rows the range loaded
            taken = s.took.get(key)
            if taken is not None and offset in taken and s.first_ts - gap < ts < s.last_ts + gap:
                return self._count(Outcome.REPLAYED, s, touched=False)
        joined = self._joined(self._reach(mine, ts), ts)
        if not joined:  # no session reaches it: it starts one
            values, orders = self._model.initial()
            s = SessionState(session_key(visitor, ts), values, orders, first_ts=ts, last_ts=ts)
            if seq is not None:
                s.seqs.add(seq)
            self._apply(values, orders, record, ts if seq is None else seq)
            mine.append(s)
            mine.sort(key=lambda x: x.first_ts)
            self._removed.pop(s.session_id, None)
            self._take(s, offset)
            return self._count(Outcome.APPLIED, s)
        # the outcome first, then the fence of the session it would write: that one holds
        # the event if an earlier attempt's write of it landed
        stale = [s for s in joined if s.closed or s.expired(watermark_before, self._close_after_ms)]
        if stale and not (self._fold_late or redriven):  # a re-driven copy folds: a repair
            return self._counted(Outcome.LATE, stale[0], offset)
        holder = next((s for s in joined if seq is not None and seq in s.seqs), None)
        if holder is not None:
            return self._counted(Outcome.DUPLICATE, holder, offset)
        target = self._merge(mine, joined)
        self._next(target, ts, seq, record, ts)
        self._take(target, offset)
        self._rekey(target, session_key(visitor, target.first_ts))
        if stale:  # counted, and folded in: the session it lands in is closed -- unless it
            # joined a live one too: then it stays open until the watermark passes its end
            target.late_events += not redriven  # a re-driven copy: a repair, not late
            if len(stale) < len(joined):
                target.state = OPEN
            else:
                target.state = CLOSED
                self._closed_late.add(target.session_id)
        return self._count(Outcome.LATE if stale and not redriven else Outcome.APPLIED, target)

    def _reach(self, mine: list[SessionState], ts: int) -> list[SessionState]:
        """The visitor's sessions the event reaches, in start order."""
        gap, most = self._gap, self._max
        return [s for s in mine if s.first_ts - gap < ts < s.last_ts + gap and (
            most is None or max(s.last_ts, ts) - min(s.first_ts, ts) < most)]

    def _joined(self, reach: list[SessionState], ts: int) -> list[SessionState]:
        """Those it joins: in start order while, with it, they span less than the maximum."""
        if self._max is None:
            return reach
        joined: list[SessionState] = []
        lo = hi = ts
        for s in reach:
            lo, hi = min(lo, s.first_ts), max(hi, s.last_ts)
            if hi - lo >= self._max:
                break
            joined.append(s)
        return joined

    def _merge(self, mine: list[SessionState], joined: list[SessionState]) -> SessionState:
        """The joined sessions as one (the earliest takes the others in); the others leave
        the visitor's list and their keys are removed."""
        target = joined[0]
        for other in joined[1:]:
            self._model.merge(target.values, target.orders, other.values, other.orders)
            target.first_ts = min(target.first_ts, other.first_ts)
            target.last_ts = max(target.last_ts, other.last_ts)
            target.late_events += other.late_events
            target.duplicates += other.duplicates
            target.out_of_order += other.out_of_order
            target.seqs = SeqSet([*target.seqs.ranges(), *other.seqs.ranges()])
            for k, offset in other.fences.items():
                target.fences[k] = max(offset, target.fences.get(k, -1))
            for k, offsets in other.took.items():
                target.took[k] = target.took.get(k, SeqSet()) | offsets
            target.absorbed = target.absorbed | other.absorbed | {other.session_id}
            mine.remove(other)
            self._remove(other)
        return target

    def _rekey(self, s: SessionState, key: str) -> None:
        """The session under the key its (maybe earlier) start gives; the old one removed."""
        if key == s.session_id:
            return
        self._remove(replace(s))  # as it stands: its state says whether it was published
        s.absorbed = s.absorbed | {s.session_id}
        s.session_id = key
        self._removed.pop(key, None)

    def _remove(self, s: SessionState) -> None:
        self._touched.pop(s.session_id, None)
        self._seen.pop(s.session_id, None)
        self._removed[s.session_id] = s

    def _counted(self, outcome: Outcome, s: SessionState, offset: int) -> Outcome:
        """A late event or a duplicate counted in ``s``."""
        if outcome is Outcome.LATE:
            s.late_events += 1
        else:
            s.duplicates += 1
        self._take(s, offset)
        return self._count(outcome, s)

    def _take(self, s: SessionState, offset: int) -> None:
        """``s`` holds the event at ``offset``: its fence and its offsets say so. Those below
        the range's first are committed, so done: they become the one span from 0 that
        every row the range writes carries (the mark, docs/DESIGN.md: whatever reads them
        again -- a rewind, another group -- finds them there)."""
        key = self._fence_key
        if offset > s.fences.get(key, -1):
            s.fences[key] = offset
        taken = s.took.get(key)
        if taken is None:
            taken = s.took[key] = SeqSet()
        if self._first and not taken.through(self._first - 1):  # once per row and range
            taken = s.took[key] = taken | SeqSet([(0, self._first - 1)])
        taken.add(offset)

    def _count(self, outcome: Outcome, s: SessionState, touched: bool = True) -> Outcome:
        if touched:
            self._touched[s.session_id] = s
        self._seen[s.session_id] = s
        self._counts[outcome] += 1
        return outcome

    def finish(self) -> FoldResult:
        for sid in self._removed:
            self._state.open_sessions.discard(sid)
        result = super().finish()
        result.removed = dict(self._removed)
        # closed by a late event folded in: closed by this range (its index entry goes)
        result.closed_now += sorted(sid for sid in self._closed_late
                                    if sid in result.touched and sid not in result.closed_now)
        return result


def listed_last(last_ts: int, rule: GapRule) -> int:
    """The last_ts a visitor's row lists for a session: its own, rounded up to a multiple of
    eight gaps. A listing only has to be at or above the row's (a range reads the sessions
    whose listing its events may reach), and so changes about once per eight gaps of a
    session's life instead of with every range."""
    step = 8 * max(rule.gap_ms, 1)
    return (last_ts // step + 1) * step


def candidates(listed: Mapping[int, int], times: Iterable[int], rule: GapRule) -> list[int]:
    """Of a visitor's listed sessions (first_ts -> last_ts), the starts of those its events
    at ``times`` may reach: what a range reads."""
    ts = list(times)
    lo, hi = min(ts), max(ts)
    return [start for start, last in listed.items()
            if start - rule.gap_ms < hi and last + rule.gap_ms > lo]

