"""Expected session rows, computed independently of the fold (pure).

Written from docs/DESIGN.md's definitions, and sharing no code with the compiled fold
(``model.compiled``, ``sessions``): all events of a partition are scanned in order to decide
which are late or repeat a (session, seq) already applied, then each session's aggregates are
computed from the list of its applied events with plain min/max/sum, each ``where`` evaluated
by walking its parse tree. Only the parser (``model.where.parse``) and the loading of Python
aggregates are shared: they say what the model is, not how it folds.
"""

from __future__ import annotations

import heapq
import json
import operator
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from leakproof.core import moved_keys
from leakproof.core.events import Event
from leakproof.model import where
from leakproof.model.schema import Field
from leakproof.model.spec import Aggregate, Model, load_python

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge}


def holds(node: where.Node, record: Mapping[str, Any]) -> bool:
    """The ``where`` tree's truth for one record (nulls as model.where's docstring says)."""
    def value(n: where.Node) -> Any:
        return record[n.args[0]] if n.op == "field" else n.args[0]

    if node.op == "and":
        return holds(node.args[0], record) and holds(node.args[1], record)
    if node.op == "or":
        return holds(node.args[0], record) or holds(node.args[1], record)
    if node.op == "not":
        return not holds(node.args[0], record)
    if node.op == "cmp":
        op, a, b = node.args
        x, y = value(a), value(b)
        if x is None or y is None:
            if op == "==":
                return x is None and y is None
            if op == "!=":
                return (x is None) != (y is None)
            return False
        return _OPS[op](x, y)
    if node.op in ("in", "not_in"):
        x, values = value(node.args[0]), node.args[1]
        if x is None:
            return node.op == "in" and None in values
        return (x in values) == (node.op == "in")
    return value(node) is True


def _text(kind: str, v: Any) -> str:
    if kind == "boolean":
        return "true" if v else "false"
    if kind == "float":
        return repr(float(v))
    return str(v)


# a session whose key moved when the topic grew: open or closed are both right (``_rows``)
EITHER = "open or closed"
# a closed session past the retention: deleted by the first range of its partition that
# starts with the watermark past it, so still there (closed) until that range ran
RETIRED = "closed or deleted"


def expected_rows(partitions: Mapping[int, Iterable[Event]], close_after_ms: int,
                  model: Model, fold_late: bool = False, retention_ms: int | None = None
                  ) -> dict[str, dict[str, str]]:
    """session -> {column: text value} for events given per partition in offset order
    (``fold_late``: ``sessions.late: fold``, a late event counted and folded in;
    ``retention_ms``: ``sessions.retention_days``, see ``_rows``)."""
    return _rows(((p, e, False) for p, events in partitions.items() for e in events),
                 close_after_ms, model, fold_late=fold_late, retention_ms=retention_ms)


def expected_rows_merged(partitions: Mapping[int, Sequence[tuple[int, Event]]],
                         close_after_ms: int, model: Model, owners_in: int | None = None,
                         fold_late: bool = False,
                         redriven: Mapping[int, Collection[int]] | None = None,
                         retention_ms: int | None = None) -> dict[str, dict[str, str]]:
    """As ``expected_rows`` for (record timestamp, event) pairs per partition, where a
    session may have records in several partitions (its key moved when partitions were
    added): the partitions are merged by record timestamp (each keeps its offset order),
    every event is judged late or not by its own partition's watermark, and a session is
    closed by the watermark of the partition of its newest record -- or, once the topic
    grew (``owners_in``: its partition count), once the partition Kafka's default
    partitioner gives its key has passed it, and that partition had events of it or one
    that had has passed it too (the job closes it there, or hands it over from there).
    ``redriven``: per partition, the places in its sequence of the events whose records
    are re-driven dead letters: a repair, such an event is folded in as with ``fold_late``
    even when late, and not counted late."""
    owner = None if owners_in is None else (
        lambda sid: moved_keys.home(sid.encode(), owners_in))
    return _rows(_merged(partitions, redriven), close_after_ms, model, owner, fold_late,
                 retention_ms)


def _merged(partitions: Mapping[int, Sequence[tuple[int, Event]]],
            redriven: Mapping[int, Collection[int]] | None
            ) -> Iterator[tuple[int, Event, bool]]:
    """(partition, event, re-driven) of every partition, merged by record timestamp."""
    flagged = redriven or {}
    merged = heapq.merge(*([(ts, p, e, i in flagged.get(p, ())) for i, (ts, e) in enumerate(seq)]
                           for p, seq in sorted(partitions.items())),
                         key=lambda x: (x[0], x[1]))
    return ((p, e, again) for _, p, e, again in merged)


def _rows(events: Iterable[tuple[int, Event, bool]], close_after_ms: int, model: Model,
          owner: Callable[[str], int] | None = None, fold_late: bool = False,
          retention_ms: int | None = None) -> dict[str, dict[str, str]]:
    """The fold, independently of ``sessions``: (partition, event, re-driven) in the order
    the job meets them within each partition; a watermark per partition. A re-driven
    event that is late is folded in as with ``fold_late``, and not counted late.

    With ``retention_ms`` (R): an event at or before its partition's W - R counts nowhere;
    one for a session whose last + close_after_ms is before it starts the session afresh;
    and a closed session whose events, counted in any way, are all before the sweep's cut
    (``_swept_below``) is ``RETIRED``."""
    fields = model.fields()
    sequenced = model.sequence is not None
    conditions = {a.name: where.parse(a.where) if a.where else None for a in model.aggregates}
    python = {a.name: load_python(a) for a in model.aggregates if a.python}
    applied: dict[str, list[Event]] = defaultdict(list)
    newest: dict[str, int] = {}  # highest time among a session's applied events
    late: dict[str, int] = defaultdict(int)
    dups: dict[str, int] = defaultdict(int)
    applied_keys: set[tuple[str, int | None]] = set()
    watermark: dict[int, int] = defaultdict(lambda: -1)
    last_in: dict[str, int] = {}  # the partition of a session's newest record
    seen_in: dict[str, set[int]] = defaultdict(set)  # the partitions with records of it
    sealed: set[str] = set()  # closed for good: a late event was folded in
    reach: dict[str, int] = {}  # the newest time among the events a session counted
    for p, e, redriven in events:
        if retention_ms is not None and watermark[p] >= 0:
            horizon = watermark[p] - retention_ms
            if e.ts <= horizon:
                continue  # late, and no row counts it
            sid = e.session_id
            if sid in newest and newest[sid] + close_after_ms < horizon:  # forgotten
                del newest[sid], applied[sid]
                late.pop(sid, None)
                dups.pop(sid, None)
                applied_keys = {k for k in applied_keys if k[0] != sid}
                sealed.discard(sid)
                reach.pop(sid, None)
        is_late = e.session_id in newest and (
            e.session_id in sealed or watermark[p] > newest[e.session_id] + close_after_ms)
        if is_late and not (fold_late or redriven):
            late[e.session_id] += 1
        elif sequenced and (e.session_id, e.seq) in applied_keys:
            dups[e.session_id] += 1
        else:
            late[e.session_id] += is_late and not redriven  # folded in as well (late: fold)
            if is_late and not redriven:  # closed for good
                sealed.add(e.session_id)
            applied_keys.add((e.session_id, e.seq))
            applied[e.session_id].append(e)
            newest[e.session_id] = max(newest.get(e.session_id, e.ts), e.ts)
        watermark[p] = max(watermark[p], e.ts)
        reach[e.session_id] = max(reach.get(e.session_id, e.ts), e.ts)  # counted in it
        last_in[e.session_id] = p
        seen_in[e.session_id].add(p)
    rows: dict[str, dict[str, str]] = {}
    for sid, evs in applied.items():
        last_ts = max(e.ts for e in evs)
        deadline = last_ts + close_after_ms
        state = "closed" if sid in sealed or watermark[last_in[sid]] > deadline else "open"
        if owner is not None:
            home = owner(sid)
            by_owner = watermark[home] > deadline and (
                home in seen_in[sid] or any(watermark[p] > deadline for p in seen_in[sid]))
            if (state == "closed") != by_owner:
                # closed by its own partition before the job saw the topic grow, or left for
                # its owner after: the topic alone does not say when that was
                state = EITHER
        if state == "closed" and retention_ms is not None and reach[sid] < _swept_below(
                watermark[last_in[sid]], retention_ms, close_after_ms):
            state = RETIRED
        rows[sid] = _id_row(evs, state, late[sid], dups[sid], model, fields, conditions,
                            python)
    return rows


def _id_row(evs: list[Event], state: str, late: int, dups: int, model: Model,
            fields: Mapping[str, Field], conditions: Mapping[str, where.Node | None],
            python: Mapping[str, Any]) -> dict[str, str]:
    """One session's cells by id, from its applied events in the order they were applied
    (``fields``: the model's; ``conditions``: each aggregate's parsed ``where``;
    ``python``: each Python aggregate's instance)."""
    sequenced = model.sequence is not None
    row = {"first_ts": str(min(e.ts for e in evs)), "last_ts": str(max(e.ts for e in evs)),
           "state": state, "late_events": str(late)}
    if sequenced:
        ooo, highest = 0, None
        for e in evs:
            seq = e.seq or 0
            if highest is not None and seq <= highest:
                ooo += 1
            highest = seq if highest is None else max(highest, seq)
        row["duplicates"], row["out_of_order"] = str(dups), str(ooo)
    for agg in model.aggregates:
        cond = conditions[agg.name]
        chosen = [e for e in evs if cond is None or holds(cond, e.record)]
        text = _aggregate(agg, chosen, fields, sequenced, python.get(agg.name))
        if text is not None:
            row[agg.name] = text
    return row


def expected_gap_rows(partitions: Mapping[int, Iterable[Event]], close_after_ms: int,
                      gap_ms: int, model: Model, *, max_duration_ms: int | None = None,
                      fold_late: bool = False, retention_ms: int | None = None
                      ) -> dict[str, dict[str, str]]:
    """Row key -> {column: text value} with ``sessions.by: gap``, for events given per
    partition in offset order (``Event.session_id``: the visitor).

    Each event, in turn, against the watermark W of its partition (its highest ts so far,
    moved after the event is judged) and its visitor's sessions, each a list of the events
    applied to it:

    - it *reaches* a session S when ``S.first - gap < ts < S.last + gap`` and, with
      ``max_duration_ms`` (M), the two together span less than M; it *joins* the sessions
      it reaches taken in start order while together with it they span less than M;
    - it is *late* when a session it joins is closed or expired (``W > S.last +
      close_after_ms``); with a sequence it is a *duplicate* when a session it joins applied
      its seq. ``late: count`` judges late first and counts it in the first expired session;
      ``late: fold`` judges duplicate first, then folds a late event in like any other, its
      session counting it and closed for good -- unless a session it joins is live (neither
      closed nor expired): then that one's end decides, as any session's. A duplicate counts
      in the first session that holds its seq. Neither is applied (but a folded late event);
    - applied, it and the sessions it joins become one (none: it starts a session, never
      late): the events, ``late_events`` and ``duplicates`` of both together.

    A session is closed if it was marked so, or the watermark of the partition of the last
    event that came to it ends past ``last + close_after_ms``. Rows are keyed
    ``<visitor>:<first ts, 13 digits>``; cells as ``expected_rows``, except that ``first``
    / ``last`` without a sequence go by event time (on a tie ``first`` keeps the earliest
    arrival, ``last`` takes the latest) and ``out_of_order`` counts the events whose seq was not
    above every seq of the sessions they joined when they came (sessions that merge add
    theirs).

    With ``retention_ms`` (R) an event at or before its partition's W - R counts nowhere,
    and a closed session whose last is before the sweep's cut (``_swept_below``) is
    ``RETIRED``.
    """
    return _gap_rows(((p, e, False) for p, events in partitions.items() for e in events),
                     close_after_ms, gap_ms, model, max_duration_ms, fold_late, retention_ms)


def expected_gap_rows_merged(partitions: Mapping[int, Sequence[tuple[int, Event]]],
                             close_after_ms: int, gap_ms: int, model: Model, *,
                             max_duration_ms: int | None = None,
                             fold_late: bool = False,
                             redriven: Mapping[int, Collection[int]] | None = None,
                             retention_ms: int | None = None) -> dict[str, dict[str, str]]:
    """``expected_gap_rows`` for (record timestamp, event) pairs per partition: the
    partitions merged by record timestamp, each in its offset order (a visitor whose key
    moved when partitions were added has events in several); each event judged by its own
    partition's watermark. ``redriven`` as ``expected_rows_merged``'s: a late re-driven
    event is folded in as with ``fold_late``, and not counted late."""
    return _gap_rows(_merged(partitions, redriven), close_after_ms, gap_ms, model,
                     max_duration_ms, fold_late, retention_ms)


class _GapSession:
    """One session of a visitor: its applied events as (arrival, event), what it counted, and
    whether it was closed for good (a late event came to it)."""

    def __init__(self, arrived: list[tuple[int, Event]], partition: int) -> None:
        self.events = arrived
        self.late = 0
        self.dups = 0
        self.ooo = 0
        self.closed = False
        self.partition = partition  # of the last event that came to it

    @property
    def first(self) -> int:
        return min(e.ts for _, e in self.events)

    @property
    def last(self) -> int:
        return max(e.ts for _, e in self.events)


def _gap_rows(events: Iterable[tuple[int, Event, bool]], close_after_ms: int, gap_ms: int,
              model: Model, max_duration_ms: int | None, fold_late: bool,
              retention_ms: int | None = None) -> dict[str, dict[str, str]]:
    """``expected_gap_rows`` over (partition, event, re-driven) in the order the job meets
    them."""
    sequenced = model.sequence is not None
    watermark: dict[int, int] = defaultdict(lambda: -1)
    visitors: dict[str, list[_GapSession]] = defaultdict(list)
    for arrival, (p, e, redriven) in enumerate(events):
        mark, t = watermark[p], e.ts
        if retention_ms is not None and mark >= 0 and t <= mark - retention_ms:
            continue  # older than the retention keeps: late, and no row counts it
        watermark[p] = max(mark, t)
        sessions = visitors[e.session_id]
        reached = sorted((s for s in sessions if s.first - gap_ms < t < s.last + gap_ms
                          and (max_duration_ms is None
                               or max(s.last, t) - min(s.first, t) < max_duration_ms)),
                         key=lambda s: s.first)
        joined: list[_GapSession] = []
        low = high = t
        for s in reached:
            low, high = min(low, s.first), max(high, s.last)
            if max_duration_ms is not None and high - low >= max_duration_ms:
                break
            joined.append(s)
        expired = [s for s in joined if s.closed or mark > s.last + close_after_ms]
        for s in expired:
            s.closed = True  # its range closes it, whatever comes after
        holding = [s for s in joined if sequenced
                   and any(applied.seq == e.seq for _, applied in s.events)]
        if expired and not (fold_late or redriven):
            expired[0].late += 1
            expired[0].partition = p
        elif holding:
            holding[0].dups += 1
            holding[0].partition = p
        else:
            merged = _GapSession([(arrival, e)], p)
            seqs = [applied.seq or 0 for s in joined for _, applied in s.events]
            merged.ooo = int(sequenced and bool(seqs) and (e.seq or 0) <= max(seqs))
            for s in joined:
                merged.ooo += s.ooo
                sessions.remove(s)
                merged.events += s.events
                merged.late += s.late
                merged.dups += s.dups
                merged.closed = merged.closed or s.closed
            merged.events.sort(key=lambda x: x[0])
            if expired:  # closed for good, unless a live session joined it: then it
                merged.late += not redriven  # closes as any other, once past its end
                # (a re-driven copy is a repair, not counted late)
                merged.closed = len(expired) == len(joined)
            sessions.append(merged)
    conditions = {a.name: where.parse(a.where) if a.where else None for a in model.aggregates}
    python = {a.name: load_python(a) for a in model.aggregates if a.python}
    rows: dict[str, dict[str, str]] = {}
    for visitor, sessions in visitors.items():
        for s in sessions:
            closed = s.closed or watermark[s.partition] > s.last + close_after_ms
            row = _gap_row(s, closed, model, conditions, python)
            if closed and retention_ms is not None and s.last < _swept_below(
                    watermark[s.partition], retention_ms, close_after_ms):
                row["state"] = RETIRED
            rows[f"{visitor}:{s.first:013d}"] = row
    return rows


def _swept_below(watermark: int, retention_ms: int, close_after_ms: int) -> int:
    """The retention sweep's cut: the horizon less the close delay, in whole hours of the
    retention index (docs/DESIGN.md, "Retention")."""
    if watermark < 0:
        return 0
    at = max(0, watermark - retention_ms - close_after_ms)
    return at - at % 3_600_000


def _gap_row(s: _GapSession, closed: bool, model: Model,
             conditions: Mapping[str, where.Node | None], python: Mapping[str, Any]
             ) -> dict[str, str]:
    """One session's cells (``conditions``: each aggregate's parsed ``where``, ``python``:
    each Python aggregate's instance)."""
    fields = model.fields()
    sequenced = model.sequence is not None
    applied = [e for _, e in s.events]
    row = {"first_ts": str(s.first), "last_ts": str(s.last),
           "state": "closed" if closed else "open", "late_events": str(s.late)}
    if sequenced:
        row["duplicates"], row["out_of_order"] = str(s.dups), str(s.ooo)
    # without a sequence first / last go by event time: ordered by (ts, arrival), the
    # place in that order is what _aggregate compares
    by_time = sorted(applied, key=lambda e: e.ts)  # stable: arrival order within a ts
    for agg in model.aggregates:
        cond, impl = conditions[agg.name], python.get(agg.name)
        timed = not sequenced and impl is None and agg.fn in ("first", "last")
        chosen = [e for e in (by_time if timed else applied)
                  if cond is None or holds(cond, e.record)]
        text = _aggregate(agg, chosen, fields, sequenced, impl)
        if text is not None:
            row[agg.name] = text
    return row


def _aggregate(agg: Aggregate, chosen: list[Event], fields: Mapping[str, Field],
               sequenced: bool, impl: Any) -> str | None:
    """One aggregate's cell text over a session's applied events that pass its ``where``;
    ``impl``: a Python aggregate's instance."""
    if impl is not None:
        v = impl.initial()
        for e in chosen:
            v = impl.apply(v, e.record)
        text: str | None = impl.to_text(v)
        return text
    name = agg.field
    if name is None:  # count of events: the only built-in without a field
        return str(len(chosen))
    # (order key, value) of each event with a value: the seq, else the place in offset order
    pairs = [((e.seq or 0) if sequenced else i, e.record[name])
             for i, e in enumerate(chosen) if e.record[name] is not None]
    if agg.fn == "count":
        return str(len(pairs))
    if not pairs:
        return None
    values = [v for _, v in pairs]
    kind = fields[name].kind
    if agg.fn == "sum":
        total = values[0]
        for v in values[1:]:
            total = total + v
        return _text(kind, total)
    if agg.fn == "min":
        return _text(kind, min(values))
    if agg.fn == "max":
        return _text(kind, max(values))
    pick = min(pairs, key=lambda p: p[0]) if agg.fn == "first" else max(pairs,
                                                                          key=lambda p: p[0])
    return _text(kind, pick[1])


def compare(expected: Mapping[str, Mapping[str, str]],
            actual: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Every difference, one line each; an empty list means an exact match."""
    problems = [f"missing session {sid}" for sid in sorted(set(expected) - set(actual))
                if expected[sid].get("state") != RETIRED]
    problems += [f"unexpected session {sid}" for sid in sorted(set(actual) - set(expected))]
    for sid in sorted(set(expected) & set(actual)):
        for col in sorted(set(expected[sid]) | set(actual[sid])):
            want, got = expected[sid].get(col), actual[sid].get(col)
            if want != got and not ((want == EITHER and got in ("open", "closed"))
                                    or (want == RETIRED and got == "closed")):
                problems.append(f"{sid}.{col}: expected {want!r}, HBase has {got!r}")
    return problems


def rekey_problems(source: Mapping[tuple[int, int], tuple[bytes | None, bytes | None,
                                                          str | None]],
                   internal: Sequence[tuple[int, bytes | None, bytes | None, str | None]],
                   partitions: int, dead: Collection[str] = ()) -> list[str]:
    """How the internal topic of ``input.rekey`` differs from an exact copy of its source.

    ``source``: (partition, offset) -> (key, value, session key: the re-key field's text,
    None for a record that is not an event) of every source record the stage committed;
    ``internal``: (partition, key, value, ``leakproof.source`` value) of every internal record
    at read_committed. Each source record must be there once, its value unchanged, an event
    under its session key in the partition Kafka's default partitioner gives that key (murmur2,
    positive, modulo the count), any other record under its own key. ``dead``: the sources
    whose copies the job dead-lettered; such a copy may be under its own key even if its
    record decodes now (the stage met it before its schema was known). Empty: exact."""
    problems: list[str] = []
    seen: dict[tuple[int, int], int] = {}
    for partition, key, value, came_from in internal:
        parts = came_from.rsplit(":", 2) if came_from else []
        if len(parts) != 3:
            problems.append(f"a record of internal partition {partition} names no source "
                            f"({came_from!r})")
            continue
        at = (int(parts[1]), int(parts[2]))
        seen[at] = seen.get(at, 0) + 1
        if at not in source:
            problems.append(f"source {came_from} is on the internal topic but not in the "
                            f"source's committed range")
            continue
        src_key, src_value, session = source[at]
        want_key = session.encode() if session is not None else src_key
        if came_from in dead and key == src_key:
            want_key = src_key  # forwarded as not an event, then
        if value != src_value or key != want_key:
            problems.append(f"the copy of {came_from} does not carry its value under key "
                            f"{want_key!r}")
        if want_key is not None and partition != moved_keys.home(want_key, partitions):
            problems.append(f"the copy of {came_from} is in partition {partition}, its key "
                            f"belongs in {moved_keys.home(want_key, partitions)}")
    twice = sorted(at for at, n in seen.items() if n > 1)
    missing = sorted(set(source) - set(seen))
    if twice:
        problems.append(f"{len(twice)} source records copied more than once, e.g. "
                        f"{twice[:5]}")
    if missing:
        problems.append(f"{len(missing)} source records not copied, e.g. {missing[:5]}")
    return problems[:50]


def summary_problems(records: Iterable[tuple[bytes | None, bytes | None,
                                             Sequence[tuple[str, bytes | None]]]],
                     rows: Mapping[str, Mapping[str, str]], *, updates: bool,
                     json_values: bool = True, held: bool = False) -> list[str]:
    """The summaries topic, read at read_committed (``records``: key, value, headers, each
    partition in offset order), against the session rows (DESIGN "Closed-session
    summaries"): per key the ``leakproof.version`` headers strictly increase (so no key and
    version twice); each key's last record equals its row (a tombstone: no row), with
    ``leakproof.final`` true exactly when the row is closed -- for an open row only with
    ``updates`` (``emit: update``): else its summary comes at its close. With ``updates``
    every row has a summary, and each JSON value's ``version`` and ``final`` are its
    headers'; with ``held`` too (``emit: {every_s: N}``) an open row's last change may be
    held back, so only the closed rows are held to that. ``json_values``: the values are
    JSON (else only the headers are checked)."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    last: dict[str, tuple[bytes | None, bool]] = {}
    for key, value, headers in records:
        sid = (key or b"").decode()
        found = {name: v for name, v in headers if v is not None}
        try:
            version = int(found["leakproof.version"])
            final = {b"true": True, b"false": False}[found["leakproof.final"]]
        except (KeyError, ValueError):
            problems.append(f"summary of {sid}: no valid leakproof.version / leakproof.final "
                            f"headers ({headers!r})")
            continue
        if sid in seen and version <= seen[sid]:
            problems.append(f"summary of {sid}: version {version} after {seen[sid]}")
        seen[sid] = version
        if updates and json_values and value is not None:
            doc = json.loads(value)
            if (doc.get("version"), doc.get("final")) != (version, final):
                problems.append(f"summary of {sid}: value says version {doc.get('version')} "
                                f"final {doc.get('final')}, headers {version} {final}")
        last[sid] = (value, final)
    for sid, (value, final) in sorted(last.items()):
        row = rows.get(sid)
        if row is not None and row.get("state") != "closed" and (held or not updates):
            # open: its summary comes at its close (or its window): the last record may
            # still be an earlier session's of the key (used again after the retention)
            continue
        if value is None:
            if row is not None:
                problems.append(f"summary of {sid}: a tombstone last, but the row is there")
            continue
        if row is None:
            problems.append(f"summary of {sid}: no row")
            continue
        if final != (row.get("state") == "closed"):
            problems.append(f"summary of {sid}: final {final}, the row is {row.get('state')}")
        if json_values:
            doc = {k: v for k, v in json.loads(value).items()
                   if k not in ("session_id", "version", "final")}
            if doc != dict(row):
                problems.append(f"summary of {sid}: last {doc} is not its row {dict(row)}")
    if updates:
        missing = sorted(sid for sid, row in rows.items() if sid not in last and (
            not held or row.get("state") == "closed"))
        if missing:
            problems.append(f"{len(missing)} session rows with no summary, e.g. {missing[:5]}")
    return problems[:50]
