"""The session fold: per-session aggregates, fences, watermark and closing (pure).

One Spark task folds one partition's offset range, in offset order, into the session rows it
read from HBase. The rules, all decided per event so that the result never depends on where
batch boundaries fall (a replay gives the same answer as the first run):

- The partition watermark W is the highest event time seen in the partition so far. Every valid
  event advances it, also one that is skipped as already applied.
- A session expires once W > last_ts + inactivity_gap + grace. An event for an expired (or
  closed) session is *late*: counted in ``late_events``, not folded into the aggregates
  (folded too with ``sessions.late: fold``). A dead letter's re-driven copy is a repair, not a
  late event: folded, closed session or not, and not counted late.
- Each session row carries a fence per ``topic:partition``: the offset of the last event it
  applied. An event at or below the fence was applied before this replay and is skipped.
- With a sequence (``events.sequence``), each session row keeps the set of seqs it applied.
  An event whose (session_id, seq) is already in it is a *duplicate* (a producer retry, a
  copied record): counted in ``duplicates``, not folded, so no event is counted twice even
  when it is sent twice; one whose seq is not above every seq applied before it counts in
  ``out_of_order``.
- What an applied event does to the aggregates is the model's (``model.compiled``): the
  rules above are the same for every model.
- At the end of the range, every open session of the partition that has expired is closed.
  Sessions the range only replayed count too: their rows may be newer than the open set.
- With a retention (``sessions.retention_days``, R): an event at or before W - R (its
  partition's *horizon*) is late and touches no row, not even its session's count; a session
  whose last_ts + close_after is before the horizon is *forgotten*: the job deletes its row
  (``task.process``), and until it does, an event for its key starts a new session over it,
  as it would once the row is gone. So what an event does never depends on whether the
  sweep has run yet.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal

from leakproof.core.events import Event
from leakproof.model.compiled import CompiledModel

NO_WATERMARK = -1
# A session row's s:state (docs/DESIGN.md): open until the watermark passes it, then closed.
SessionStatus = Literal["open", "closed"]
OPEN: SessionStatus = "open"
CLOSED: SessionStatus = "closed"


def fence_source(key: str) -> tuple[str, int]:
    """The (topic, partition) a ``fence_key`` names, whatever its incarnation (a topic name
    has neither a colon nor a tilde)."""
    topic, _, partition = key.rpartition(":")
    return topic.partition("~")[0], int(partition)


def fence_key(topic: str, partition: int, incarnation: str = "") -> str:
    """Names a session row's fence for one Kafka partition: ``<topic>:<partition>``, or
    ``<topic>~<incarnation>:<partition>`` for a topic recreated under the same name.

    A session lives in one partition, but a repartitioned topic (or a second topic) may bring
    its events from another: each source partition keeps its own fence. A recreated topic's
    offsets start again at 0, so its fences are kept apart from the old topic's: an old
    fence must never take the new topic's records for replays.
    """
    return f"{topic}~{incarnation}:{partition}" if incarnation else f"{topic}:{partition}"


def incarnation_of(topic_id: str | None, first_id: str | None) -> str:
    """The fence tag of the topic with Kafka id ``topic_id`` (``fence_key``): none for the
    topic the job first read (``first_id``: fences written before tags existed are its),
    else a short form of its own id. Unknown ids (a broker without topic ids) tag nothing."""
    if not topic_id or not first_id or topic_id == first_id:
        return ""
    return re.sub(r"[^A-Za-z0-9]", "", topic_id)[:12]


class Outcome(Enum):
    """What feeding one event did."""

    APPLIED = "applied"
    REPLAYED = "replayed"  # at or below the session's fence: applied by an earlier attempt
    LATE = "late"
    DUPLICATE = "duplicate"  # its (session_id, seq) was applied before


class SeqSet:
    """The seqs a session applied, as sorted disjoint closed ranges ("0-41,43,45-50").

    Seqs count up from 0 per session, so a session's set is one range or a few: small to keep
    in the row, and exact (unlike a filter), so a duplicate is never mistaken for news.
    """

    __slots__ = ("_hi", "_lo")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []
        for lo, hi in sorted(ranges):  # merge overlapping and touching ranges
            if self._hi and lo <= self._hi[-1] + 1:
                self._hi[-1] = max(self._hi[-1], hi)
            else:
                self._lo.append(lo)
                self._hi.append(hi)

    def __contains__(self, seq: int) -> bool:
        i = bisect_right(self._lo, seq) - 1
        return i >= 0 and seq <= self._hi[i]

    def add(self, seq: int) -> bool:
        """Add ``seq``; False if it was there already."""
        i = bisect_right(self._lo, seq) - 1
        if i >= 0 and seq <= self._hi[i]:
            return False
        joins_left = i >= 0 and self._hi[i] == seq - 1
        joins_right = i + 1 < len(self._lo) and self._lo[i + 1] == seq + 1
        if joins_left and joins_right:
            self._hi[i] = self._hi[i + 1]
            del self._lo[i + 1], self._hi[i + 1]
        elif joins_left:
            self._hi[i] = seq
        elif joins_right:
            self._lo[i + 1] = seq
        else:
            self._lo.insert(i + 1, seq)
            self._hi.insert(i + 1, seq)
        return True

    def bounds(self) -> tuple[int, int]:
        """(lowest, highest) seq in the set; (0, -1) when empty, as a new session starts."""
        return (self._lo[0], self._hi[-1]) if self._lo else (0, -1)

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._lo, self._hi, strict=True))

    def through(self, last: int) -> bool:
        """Whether the set holds every number from 0 to ``last``."""
        return bool(self._lo) and self._lo[0] <= 0 and self._hi[0] >= last

    def __or__(self, other: SeqSet) -> SeqSet:
        return SeqSet([*self.ranges(), *other.ranges()])

    def __bool__(self) -> bool:
        return bool(self._lo)

    def copy(self) -> SeqSet:
        other = SeqSet()
        other._lo, other._hi = list(self._lo), list(self._hi)
        return other

    def to_text(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges())

    @classmethod
    def from_text(cls, text: str) -> SeqSet:
        ranges = []
        for part in filter(None, text.split(",")):
            lo, _, hi = part.partition("-")
            ranges.append((int(lo), int(hi or lo)))
        return cls(ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SeqSet) and self.ranges() == other.ranges()

    def __repr__(self) -> str:
        return f"SeqSet({self.to_text()!r})"


@dataclass(slots=True)
class SessionState:
    """A session row: the model's aggregate values (``model.compiled``), the built-in cells
    every row has, and what folding needs to go on (seqs, fences).

    ``values`` are in the model's order, None where the session has no value yet; ``orders``
    the seq each ``first`` / ``last`` value came from (with a sequence; else None). A row
    read for its expiry only has ``last_ts`` and ``state``.
    """

    session_id: str
    values: list[Any] = field(default_factory=list)
    orders: list[Any] = field(default_factory=list)
    first_ts: int = 0
    last_ts: int = 0
    state: str = OPEN  # a SessionStatus; str, since rows are read back as text
    out_of_order: int = 0
    late_events: int = 0
    duplicates: int = 0
    seqs: SeqSet = field(default_factory=SeqSet)
    fences: dict[str, int] = field(default_factory=dict)
    # split by the gap: the row keys of sessions merged into this one (``gap_fold``), and
    # per fence key the offsets it took, and as one span from 0 every offset committed when
    # it was written (its mark)
    absorbed: frozenset[str] = frozenset()
    took: dict[str, SeqSet] = field(default_factory=dict)
    # with a retention, the newest event time the row counted beyond last_ts (a late event
    # counted, not folded; a duplicate): a re-read finds the row while that time is within
    # the retention
    reach_ts: int = 0

    @property
    def closed(self) -> bool:
        return self.state == CLOSED

    @property
    def reach(self) -> int:
        """The newest event time the row took in any way: what the retention goes by."""
        return self.last_ts if self.reach_ts < self.last_ts else self.reach_ts

    def expired(self, watermark: int, close_after_ms: int) -> bool:
        return watermark > self.last_ts + close_after_ms


MayClose = Callable[[str, int], bool]  # (session, last_ts): may it close here now?


class OpenSessions:
    """A partition's open sessions -> their last_ts, kept in expiry order too, so closing
    what expired costs what closes, not how many sessions are open.

    The order is a heap of (last_ts, session) entries; an entry whose session has moved on
    (a newer last_ts, or closed) is stale and dropped when it reaches the top.
    """

    __slots__ = ("_heap", "_last")

    def __init__(self, items: Mapping[str, int] | None = None) -> None:
        self._last: dict[str, int] = dict(items or {})
        self._heap = [(ts, sid) for sid, ts in self._last.items()]
        heapq.heapify(self._heap)

    def put(self, session_id: str, last_ts: int) -> None:
        if self._last.get(session_id) != last_ts:
            self._last[session_id] = last_ts
            heapq.heappush(self._heap, (last_ts, session_id))
            if len(self._heap) > 2 * len(self._last) + 1024:  # mostly stale: rebuild
                self._heap = [(ts, sid) for sid, ts in self._last.items()]
                heapq.heapify(self._heap)

    def discard(self, session_id: str) -> None:
        self._last.pop(session_id, None)

    def pop_expired(self, watermark: int, close_after_ms: int,
                    may_close: MayClose | None = None,
                    deferred: dict[str, int] | None = None,
                    ends: dict[str, int] | None = None) -> list[str]:
        """Remove and return every session with ``watermark > last_ts + close_after_ms``
        (their last_ts into ``ends``); with ``may_close``, those it refuses stay open and go
        to ``deferred`` (with their last_ts)."""
        gone: list[str] = []
        kept: list[tuple[str, int]] = []
        heap, last = self._heap, self._last
        while heap and watermark > heap[0][0] + close_after_ms:
            ts, sid = heapq.heappop(heap)
            if last.get(sid) == ts:
                del last[sid]
                if may_close is None or may_close(sid, ts):
                    gone.append(sid)
                    if ends is not None:
                        ends[sid] = ts
                else:
                    kept.append((sid, ts))
        for sid, ts in kept:
            self.put(sid, ts)
            if deferred is not None:
                deferred[sid] = ts
        return gone

    def as_dict(self) -> dict[str, int]:
        return dict(self._last)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._last

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OpenSessions):
            return self._last == other._last
        return isinstance(other, Mapping) and self._last == dict(other)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"OpenSessions({len(self._last)} open)"


@dataclass
class PartitionState:
    """What a partition's fold carries between batches (kept in HBase's state table).

    ``open_sessions`` maps each open session to its last_ts, so expiry can be decided without
    reading every session row; ``watermark_offset`` is the last offset W covers.
    """

    watermark: int = NO_WATERMARK
    watermark_offset: int = -1
    open_sessions: OpenSessions = field(default_factory=OpenSessions)

    def copy(self) -> PartitionState:
        return PartitionState(self.watermark, self.watermark_offset,
                              OpenSessions(self.open_sessions.as_dict()))


@dataclass
class FoldResult:
    """What one range's fold leaves to write, and its counts for the progress line."""

    touched: dict[str, SessionState]  # rows to write (aggregate + fence in one put)
    closed_untouched: list[str]  # open sessions that expired without new events: close them
    partition: PartitionState  # the state to store after every session row is written
    closed_now: list[str]  # every session closed by this range (touched or not)
    open_changed: dict[str, int]  # open sessions this range saw: their last_ts, to store
    applied: int = 0
    replayed: int = 0
    late: int = 0
    duplicates: int = 0
    # expired by this partition's watermark, but left open for the partition its key now
    # belongs to (partitions added): session -> last_ts
    deferred: dict[str, int] = field(default_factory=dict)
    # split by the gap: sessions merged into another or whose start moved, as they were
    # last read or folded (their rows are deleted, their index entries too)
    removed: dict[str, SessionState] = field(default_factory=dict)
    # ``closed_untouched``'s last_ts; and the rows of forgotten sessions (past the
    # retention) a new session of the same key replaces: deleted before it is written
    closed_ends: dict[str, int] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)


class PartitionFolder:
    """Folds one partition's events, in offset order, over the session rows read for them.

    The folder takes ``state`` over: ``finish`` updates it in place into the state after the
    range (``FoldResult.partition``), so a partition with many open sessions is never
    copied. A caller that may retry must not reuse ``state`` after a failed range.

    ``fold_late`` (``sessions.late: fold``): a late event is counted in ``late_events`` and
    folded into its session too (a closed row stays closed; its summary goes out again).
    ``may_close`` says whether a session expired here may close (None: every one may).
    Once partitions were added, a session's key may have moved to another partition while
    this one still lists it open: this partition's watermark says nothing of the events the
    new one has for it, so such a session closes only once its owner's watermark has passed
    it too; until then it stays open here (``FoldResult.deferred``).
    """

    def __init__(self, model: CompiledModel, fence_key: str, close_after_ms: int,
                 state: PartitionState, sessions: Mapping[str, SessionState],
                 may_close: MayClose | None = None, fold_late: bool = False,
                 retention_ms: int | None = None) -> None:
        """``retention_ms``: ``sessions.retention_days`` (None: sessions are kept for
        ever)."""
        self._model = model
        self._apply = model.apply
        self._fence_key = fence_key
        self._close_after_ms = close_after_ms
        self._state = state
        self._watermark = state.watermark
        self._last_offset = state.watermark_offset
        self._sessions = {sid: replace(s, fences=dict(s.fences), seqs=s.seqs.copy(),
                                       values=list(s.values), orders=list(s.orders),
                                       took={k: t.copy() for k, t in s.took.items()})
                          for sid, s in sessions.items()}
        self._touched: dict[str, SessionState] = {}  # changed: rows to write
        self._seen: dict[str, SessionState] = {}  # every session the range has events for
        self._counts = {o: 0 for o in Outcome}
        self._may_close = may_close
        self._fold_late = fold_late
        self._retention = retention_ms
        self._replaced: set[str] = set()
        self._sealed: list[str] = []  # closed by a late event folded in

    @property
    def watermark(self) -> int:
        return self._watermark

    def advance(self, watermark: int) -> None:
        """Move the watermark on without an event (an idle partition: the wall clock)."""
        if watermark > self._watermark:
            self._watermark = watermark

    def feed(self, offset: int, event: Event, lead: int | None = None,
             redriven: bool = False) -> Outcome:
        """Fold one event; events must come in increasing offset order.

        ``lead``: the most this event may move the watermark to (its record's Kafka
        timestamp + grace, ``lead_of``); None: its event time. ``redriven``: its record is
        a dead letter's re-driven copy (``dead_letter.ORIGIN_HEADER``): a repair, not a late
        arrival -- folded into its session even when that is closed or expired, whatever
        ``sessions.late`` says, and not counted late (a repair that left its event out would
        leave the session short). A replay or a duplicate all the same.
        """
        sid, ts, seq, record = event
        watermark_before = self._step(offset, ts, lead)
        # per event: the retention's rules cost an attribute test when it is off
        if self._retention is not None and self.past_horizon(ts, watermark_before):
            self._counts[Outcome.LATE] += 1
            return Outcome.LATE
        s = self._sessions.get(sid)
        if s is not None and s.fences.get(self._fence_key, -1) >= offset:
            outcome = Outcome.REPLAYED
        else:
            if s is None or (self._retention is not None
                             and self._forgotten(s, watermark_before)):
                values, orders = self._model.initial()
                fresh = SessionState(sid, values, orders, first_ts=ts, last_ts=ts)
                if s is not None:  # its row is deleted first; its fences stay true
                    fresh.fences = s.fences
                    self._replaced.add(sid)
                s = self._sessions[sid] = fresh
                if seq is not None:
                    s.seqs.add(seq)
                self._apply(values, orders, record, offset if seq is None else seq)
                outcome = Outcome.APPLIED
            elif s.closed or s.expired(watermark_before, self._close_after_ms):
                if (self._fold_late or redriven) and seq is not None and seq in s.seqs:
                    s.duplicates += 1
                    self._reached(s, ts)
                    outcome = Outcome.DUPLICATE
                elif redriven:  # a repair, not a late arrival: folded, a closed row stays so
                    self._next(s, ts, seq, record, offset)
                    outcome = Outcome.APPLIED
                else:
                    s.late_events += 1
                    self._reached(s, ts)
                    if self._fold_late:  # counted, and folded in: closed for good, even
                        # where it moves last_ts past the watermark (as split by the gap),
                        # so whether its row was closed yet decides nothing
                        self._next(s, ts, seq, record, offset)
                        if not s.closed:
                            s.state = CLOSED
                            self._sealed.append(sid)
                    outcome = Outcome.LATE
            elif seq is not None and seq in s.seqs:
                s.duplicates += 1
                self._reached(s, ts)
                outcome = Outcome.DUPLICATE
            else:
                self._next(s, ts, seq, record, offset)
                outcome = Outcome.APPLIED
            s.fences[self._fence_key] = offset
            self._touched[sid] = s
        # A replayed session still counts as seen: its row (written by an attempt that died
        # before the partition state) may be newer than the open set, or even missing from it.
        self._seen[sid] = s
        self._counts[outcome] += 1
        return outcome

    def past_horizon(self, ts: int, watermark: int) -> bool:
        """Whether an event at ``ts`` is older than the retention keeps, at ``watermark``:
        late, whatever it would have joined (that may be deleted already). Callers test
        that a retention is set first."""
        assert self._retention is not None
        return watermark != NO_WATERMARK and ts <= watermark - self._retention

    def _forgotten(self, s: SessionState, watermark: int) -> bool:
        """Whether ``s`` is past the retention: its row is deleted, or about to be."""
        assert self._retention is not None
        return watermark != NO_WATERMARK and \
            s.last_ts + self._close_after_ms < watermark - self._retention

    def _reached(self, s: SessionState, ts: int) -> None:
        """``s`` counted an event at ``ts`` without folding it: with a retention its row
        says so where that is past its last_ts (``SessionState.reach_ts``); without one
        nothing is written (rows stay as they were)."""
        if self._retention is not None and ts > s.reach_ts:
            s.reach_ts = ts

    def _step(self, offset: int, ts: int, lead: int | None) -> int:
        """The watermark before an event; moves it (bounded by ``lead``) and the offset."""
        before = self._watermark
        moved = ts if lead is None or ts <= lead else lead
        if moved > before:
            self._watermark = moved
        if offset > self._last_offset:
            self._last_offset = offset
        return before

    def _next(self, s: SessionState, ts: int, seq: int | None, record: dict[str, Any],
              order: int) -> None:
        """A later event of a session that counts (neither late nor a duplicate); ``order``:
        its order key without a sequence (its offset; split by the gap, its time)."""
        if ts < s.first_ts:
            s.first_ts = ts
        if ts > s.last_ts:
            s.last_ts = ts
        if seq is None:
            self._apply(s.values, s.orders, record, order)
            return
        if seq <= s.seqs.bounds()[1]:
            s.out_of_order += 1  # not greater than the highest seq applied before it
        s.seqs.add(seq)
        self._apply(s.values, s.orders, record, seq)

    def finish(self) -> FoldResult:
        """Close what expired and say what to write; the folder is not fed after this."""
        w, after, may_close = self._watermark, self._close_after_ms, self._may_close
        open_sessions = self._state.open_sessions
        closed_now: list[str] = []
        open_changed: dict[str, int] = {}
        deferred: dict[str, int] = {}
        for sid, s in self._seen.items():
            if not s.closed and s.expired(w, after):
                if may_close is not None and not may_close(sid, s.last_ts):
                    deferred[sid] = s.last_ts
                    open_sessions.put(sid, s.last_ts)
                    open_changed[sid] = s.last_ts
                    continue
                s.state = CLOSED
                closed_now.append(sid)
                self._touched[sid] = s
            if s.closed:
                open_sessions.discard(sid)
            else:
                open_sessions.put(sid, s.last_ts)
                open_changed[sid] = s.last_ts
        closed_now += [sid for sid in dict.fromkeys(self._sealed) if sid not in closed_now]
        # every seen session still open has not expired: what expires now was not seen
        ends: dict[str, int] = {}
        closed_untouched = open_sessions.pop_expired(w, after, may_close, deferred, ends)
        self._state.watermark, self._state.watermark_offset = w, self._last_offset
        return FoldResult(
            touched=self._touched,
            closed_untouched=closed_untouched,
            partition=self._state,
            closed_now=closed_now + closed_untouched,
            open_changed=open_changed,
            applied=self._counts[Outcome.APPLIED],
            replayed=self._counts[Outcome.REPLAYED],
            late=self._counts[Outcome.LATE],
            duplicates=self._counts[Outcome.DUPLICATE],
            deferred=deferred,
            closed_ends=ends,
            replaced=self._replaced,
        )


def lead_of(record_ts: int, grace_ms: int) -> int | None:
    """How far an event whose Kafka record has timestamp ``record_ts`` may move its
    partition's watermark: that timestamp + the grace (None: the record has none).

    An event time ahead of the record's own timestamp is a clock running fast (a web server,
    a producer stamping events): taken at its word it would close every session quiet for
    less than the gap. Bounded by the grace, such an event closes only sessions that have
    been quiet for at least their inactivity gap in the record's time. The event still
    counts in its session with its own time; a replay reads the same timestamp, so it
    decides the same way.
    """
    return record_ts + grace_ms if record_ts >= 0 else None


def fold_range(model: CompiledModel, fence_key: str, close_after_ms: int,
               state: PartitionState, sessions: Mapping[str, SessionState],
               events: Iterable[tuple[int, Event]]) -> FoldResult:
    """Fold a whole range at once (offset, event pairs in offset order)."""
    folder = PartitionFolder(model, fence_key, close_after_ms, state, sessions)
    for offset, event in events:
        folder.feed(offset, event)
    return folder.finish()
