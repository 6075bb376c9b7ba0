"""The session rule's seam in a task's steps (``task.process``): which rows a step's events
reach, what its load must complete, the folder that cuts sessions, and what is written
before and after the session rows. One class per rule (the config's ``sessions.by``); a
third rule is a third class here, not a branch in the steps.

- ``ById``: an event's key is its session's row key; a worker may keep the rows it wrote
  for its partition's next range (``task.kept_sessions``).
- ``ByGap``: an event's key is a visitor's, its events split into sessions by the gap
  (``gap_fold``); each visitor's row lists its sessions (``Visits``). The load reads those
  listings first; new sessions are listed before their rows are written, and the rows of
  sessions merged away (or whose start moved) are deleted, then unlisted, after them. Rows
  come and go under new keys, so none is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from leakproof.core.gap_fold import (
    GapFolder,
    GapRule,
    candidates,
    listed_last,
    session_key,
    start_of,
    visitor_of,
)
from leakproof.core.sessions import FoldResult, MayClose, PartitionFolder
from leakproof.model.compiled import CompiledModel
from leakproof.ports.task import SessionRows, Visits
from leakproof.task.index import Loaded
from leakproof.task.read import ReadRange
from leakproof.testing.crashpoints import crash_point


class SessionKeys(Protocol):
    """What the steps ask of a session rule."""

    keeps_rows: bool  # whether a worker may keep the rows a range wrote, for the next one

    def key_of(self, sid: str) -> str:
        """The Kafka key of a session's events (whose default partition owns it)."""

    def reach(self, step: Sequence[ReadRange]) -> list[frozenset[str]]:
        """Each range's sessions its events may reach (the rows its load reads)."""

    def complete(self, reachable: Sequence[frozenset[str]], loaded: Sequence[Loaded]) -> None:
        """Read into ``loaded`` the rows a fold must also see, beyond ``reachable``'s."""

    def folder(self, model: CompiledModel, fence: str, close_after_ms: int, loaded: Loaded,
               may_close: MayClose | None, fold_late: bool, retention_ms: int | None,
               first_offset: int) -> PartitionFolder:
        """The folder of one range's events, over what its load read."""

    def before_rows(self, results: Sequence[FoldResult], ts: int) -> None:
        """What must be written before the session rows."""

    def after_rows(self, reachable: Sequence[frozenset[str]], loaded: Sequence[Loaded],
                   results: Sequence[FoldResult], ts: int) -> None:
        """What is written after the session rows: the rows merged away or swept deleted."""


def keys_for(rule: GapRule | None, sessions: SessionRows, visits: Visits | None
             ) -> SessionKeys:
    """A step's session rule: by id, or split by the gap ``rule``."""
    if rule is None:
        return ById(sessions)
    assert visits is not None  # a gap rule comes with its visitors' store
    return ByGap(rule, sessions, visits)


class ById:
    """Sessions keyed by the event's key."""

    keeps_rows = True

    def __init__(self, sessions: SessionRows) -> None:
        self._sessions = sessions

    def key_of(self, sid: str) -> str:
        return sid

    def reach(self, step: Sequence[ReadRange]) -> list[frozenset[str]]:
        return [r.touched for r in step]

    def complete(self, reachable: Sequence[frozenset[str]], loaded: Sequence[Loaded]) -> None:
        return None

    def folder(self, model: CompiledModel, fence: str, close_after_ms: int, loaded: Loaded,
               may_close: MayClose | None, fold_late: bool, retention_ms: int | None,
               first_offset: int) -> PartitionFolder:
        return PartitionFolder(model, fence, close_after_ms, loaded.state, loaded.rows,
                               may_close, fold_late, retention_ms)

    def before_rows(self, results: Sequence[FoldResult], ts: int) -> None:
        return None

    def after_rows(self, reachable: Sequence[frozenset[str]], loaded: Sequence[Loaded],
                   results: Sequence[FoldResult], ts: int) -> None:
        removed = [sid for result in results for sid in result.removed]
        if removed:  # swept past the retention
            self._sessions.remove(removed, ts=ts)
            crash_point("task_after_session_deletes")


class ByGap:
    """Sessions split by the gap, each visitor's listed in its row. One per step: it keeps
    the listings the step's load read (``listed``), to write only what they lack."""

    keeps_rows = False

    def __init__(self, rule: GapRule, sessions: SessionRows, visits: Visits) -> None:
        self._rule = rule
        self._sessions = sessions
        self._visits = visits
        self.listed: dict[str, dict[int, int]] = {}

    def key_of(self, sid: str) -> str:
        return visitor_of(sid)

    def reach(self, step: Sequence[ReadRange]) -> list[frozenset[str]]:
        """As the visitors' rows list them (one read for the step)."""
        self.listed.update(self._visits.read(
            {e.session_id for r in step for _, e, _ in r.events}))
        out = []
        for r in step:
            times: dict[str, list[int]] = {}
            for _, e, _ in r.events:
                times.setdefault(e.session_id, []).append(e.ts)
            out.append(frozenset(session_key(visitor, start) for visitor, ts in times.items()
                                 for start in candidates(self.listed.get(visitor, {}), ts,
                                                         self._rule)))
        return out

    def complete(self, reachable: Sequence[frozenset[str]], loaded: Sequence[Loaded]) -> None:
        """- A listed session without a row: another attempt of this range (a speculative
          copy, a zombie) may have moved or merged it since the listing was read. It lists
          the session that took it in before deleting the row, so reading the visitor's row
          again finds it.
        - A session a pending outbox owes, or one the index would close after a crash (an
          entry checked against its row): it may be a row a stopped range merged into
          another and did not get to delete; with its visitor's sessions read, the fold sees
          what absorbed it, deletes it and owes its key a tombstone, instead of publishing
          or closing it.
        Repeated while new keys come up (a few rounds at most)."""
        done: set[str] = set().union(*reachable)
        asked: dict[str, tuple[int, list[int]]] = {}  # visitor -> (its range, times near)

        def ask(i: int, sid: str) -> None:
            asked.setdefault(visitor_of(sid), (i, []))[1].append(start_of(sid))

        for i, (sessions, ld) in enumerate(zip(reachable, loaded, strict=True)):
            for sid in sorted(sessions - ld.rows.keys()):
                ask(i, sid)
            for sid in ld.stored.outbox.owed():
                ask(i, sid)
            for e in ld.found:
                if e.session_id not in ld.rows and e.last_ts < ld.stored.check_below:
                    ask(i, e.session_id)
        for _ in range(8):
            if not asked:
                return
            fresh = self._visits.read(asked)
            self.listed.update(fresh)
            wanted = {session_key(visitor, start): i for visitor, (i, times) in asked.items()
                      for start in candidates(fresh.get(visitor, {}), times, self._rule)
                      if session_key(visitor, start) not in done}
            done |= wanted.keys()
            found = self._sessions.read(wanted)
            asked = {}
            for sid, i in sorted(wanted.items()):
                row = found.get(sid)
                if row is None:
                    ask(i, sid)
                else:
                    loaded[i].rows.setdefault(sid, row)
                    loaded[i].before.setdefault(sid, row)

    def folder(self, model: CompiledModel, fence: str, close_after_ms: int, loaded: Loaded,
               may_close: MayClose | None, fold_late: bool, retention_ms: int | None,
               first_offset: int) -> PartitionFolder:
        return GapFolder(model, fence, close_after_ms, self._rule, loaded.state, loaded.rows,
                         may_close, fold_late, first_offset, retention_ms)

    def before_rows(self, results: Sequence[FoldResult], ts: int) -> None:
        """Every row listed before it is written."""
        if listing := _listing(results, self.listed, self._rule):
            self._visits.add(listing, ts=ts)

    def after_rows(self, reachable: Sequence[frozenset[str]], loaded: Sequence[Loaded],
                   results: Sequence[FoldResult], ts: int) -> None:
        """The rows merged away or swept, then their listings."""
        self._sessions.remove([sid for result in results for sid in result.removed], ts=ts)
        crash_point("task_after_session_deletes")
        self._visits.drop(_unlisted(reachable, loaded, results), ts=ts)


def _listing(results: Sequence[FoldResult], listed: Mapping[str, Mapping[int, int]],
             rule: GapRule) -> dict[str, dict[int, int]]:
    """The sessions the ranges write that their visitors' rows do not list yet, or list
    with a last_ts they have passed: each with its last_ts rounded up (``listed_last``), so
    a session's entry is written when it starts and then about once per eight gaps."""
    out: dict[str, dict[int, int]] = {}
    for result in results:
        for s in result.touched.values():
            visitor = visitor_of(s.session_id)
            if listed.get(visitor, {}).get(s.first_ts, -1) < s.last_ts:
                out.setdefault(visitor, {})[s.first_ts] = listed_last(s.last_ts, rule)
    return out


def _unlisted(reachable: Sequence[frozenset[str]], loaded: Sequence[Loaded],
              results: Sequence[FoldResult]) -> dict[str, list[int]]:
    """The listings to drop: sessions removed, and those listed without a row (a range that
    stopped before dropping them) -- unless written again now."""
    written = {sid for result in results for sid in result.touched}
    gone = {sid for result in results for sid in result.removed}
    for sessions, ld in zip(reachable, loaded, strict=True):
        gone |= sessions - ld.rows.keys()
    out: dict[str, list[int]] = {}
    for sid in sorted(gone - written):
        out.setdefault(visitor_of(sid), []).append(start_of(sid))
    return out
