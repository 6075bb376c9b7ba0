"""The session fold with literal events: aggregates, fences, late events, closing."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any, cast

from leakproof.core import sessions
from leakproof.core.events import WebEvent
from leakproof.core.sessions import (
    FoldResult,
    OpenSessions,
    Outcome,
    PartitionFolder,
    PartitionState,
    SeqSet,
    SessionState,
)
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model

GAP = 1000  # close_after_ms in these tests
K = "t:0"
WEB = compile_model(web_model())


class WebRow(SessionState):
    """A session row whose web-model values read by name (``row.clicks``)."""

    def __getattr__(self, name: str) -> Any:
        if name in WEB.names:
            return self.values[WEB.names.index(name)]
        raise AttributeError(name)


def as_row(s: SessionState) -> WebRow:
    return s if isinstance(s, WebRow) else WebRow(
        **{f.name: getattr(s, f.name) for f in fields(SessionState)})


def stored_row(sid: str, *, events: int, **built_in: Any) -> WebRow:
    """A stored row of ``events`` events (its other counts 0)."""
    values, orders = WEB.initial()
    values[WEB.names.index("events")] = events
    values[WEB.names.index("user_id")], orders[WEB.names.index("user_id")] = "u", 0
    return WebRow(sid, values, orders, **built_in)


class WebFold(FoldResult):
    touched: dict[str, WebRow]  # type: ignore[assignment]  # (what as_row makes of them)


def fold_range(fence: str, gap: int, state: PartitionState, rows: Mapping[str, SessionState],
               events: Iterable[tuple[int, WebEvent]]) -> WebFold:
    r = sessions.fold_range(WEB, fence, gap, state, rows,
                            [(o, e.as_event()) for o, e in events])
    r.touched = {sid: as_row(s) for sid, s in r.touched.items()}
    return cast(WebFold, r)


class Folder:
    """``PartitionFolder`` over the web model, fed WebEvents."""

    def __init__(self, fence: str, gap: int, state: PartitionState,
                 rows: Mapping[str, SessionState]) -> None:
        self.inner = PartitionFolder(WEB, fence, gap, state, rows)

    def feed(self, offset: int, e: WebEvent) -> Outcome:
        return self.inner.feed(offset, e.as_event())

    @property
    def watermark(self) -> int:
        return self.inner.watermark

    def finish(self) -> WebFold:
        r = self.inner.finish()
        r.touched = {sid: as_row(s) for sid, s in r.touched.items()}
        return cast(WebFold, r)


def ev(sid: str, seq: int, ts: int, kind: str = "pageview", status: int = 200,
       size: int = 10, url: str | None = None) -> WebEvent:
    return WebEvent(sid, "u-" + sid, seq, ts, kind, url or f"/{sid}/{seq}", status, size)


def test_aggregates_of_one_session() -> None:
    events = [ev("a", 0, 100), ev("a", 1, 150, "click", 503, 5),
              ev("a", 2, 190, "purchase", 200, 1)]
    r = fold_range(K, GAP, PartitionState(), {}, enumerate(events))
    s = r.touched["a"]
    assert (s.events, s.pageviews, s.clicks, s.purchases, s.errors, s.bytes) == (3, 1, 1, 1, 1, 16)
    assert (s.first_ts, s.last_ts, s.entry_url, s.exit_url) == (100, 190, "/a/0", "/a/2")
    assert (s.user_id, s.state, s.out_of_order, s.late_events) == ("u-a", "open", 0, 0)
    assert s.fences == {K: 2}
    assert r.partition.open_sessions == {"a": 190}
    assert (r.partition.watermark, r.partition.watermark_offset) == (190, 2)


def test_out_of_order_counts_seq_not_above_the_highest_so_far() -> None:
    events = [ev("a", 0, 100), ev("a", 2, 120), ev("a", 1, 110), ev("a", 2, 121),
              ev("a", 3, 130)]
    s = fold_range(K, GAP, PartitionState(), {}, enumerate(events)).touched["a"]
    assert (s.out_of_order, s.duplicates, s.events) == (1, 1, 4)  # seq 1 late; seq 2 again
    assert s.exit_url == "/a/3"
    assert s.entry_url == "/a/0"


def test_a_repeated_seq_is_a_duplicate_not_folded_twice() -> None:
    events = [ev("a", 0, 100), ev("a", 1, 110, "purchase", size=7), ev("a", 1, 110, "purchase",
                                                                        size=7),
              ev("a", 0, 100), ev("a", 2, 120)]
    folder = Folder(K, GAP, PartitionState(), {})
    outcomes = [folder.feed(i, e) for i, e in enumerate(events)]
    assert outcomes == [Outcome.APPLIED, Outcome.APPLIED, Outcome.DUPLICATE, Outcome.DUPLICATE,
                        Outcome.APPLIED]
    r = folder.finish()
    s = r.touched["a"]
    assert (s.events, s.purchases, s.bytes, s.duplicates, s.out_of_order) == (3, 1, 27, 2, 0)
    assert s.seqs.to_text() == "0-2" and r.duplicates == 2


def test_duplicates_are_found_across_batches_through_the_row() -> None:
    first = fold_range(K, GAP, PartitionState(), {}, [(0, ev("a", 0, 100)), (1, ev("a", 1, 110))])
    again = fold_range(K, GAP, first.partition, first.touched, [(2, ev("a", 1, 110))])
    assert again.touched["a"].duplicates == 1 and again.touched["a"].events == 2


def test_unknown_event_type_is_folded_and_counted() -> None:
    r = fold_range(K, GAP, PartitionState(), {}, [(0, ev("a", 0, 100, "scroll"))])
    s = r.touched["a"]
    assert (s.events, s.pageviews, s.clicks, s.purchases, s.unknown_types) == (1, 0, 0, 0, 1)


def test_seq_set_text_round_trip_and_merging() -> None:
    s = SeqSet()
    for seq in (5, 0, 2, 1, 7, 6):
        assert s.add(seq)
    assert not s.add(6)
    assert s.to_text() == "0-2,5-7"
    assert SeqSet.from_text("0-2,5-7") == s and 6 in s and 4 not in s
    assert SeqSet([(3, 4), (0, 2), (6, 6)]).to_text() == "0-4,6"


def test_entry_url_follows_lowest_seq_even_when_it_arrives_late() -> None:
    events = [ev("a", 1, 100), ev("a", 0, 90)]
    s = fold_range(K, GAP, PartitionState(), {}, enumerate(events)).touched["a"]
    assert (s.entry_url, s.exit_url, s.first_ts) == ("/a/0", "/a/1", 90)


def test_session_closes_when_watermark_passes_last_ts_plus_gap_and_grace() -> None:
    events = [ev("a", 0, 100), ev("b", 0, 1100)]  # W = 1100, a's deadline = 1100: not past
    r = fold_range(K, GAP, PartitionState(), {}, enumerate(events))
    assert r.touched["a"].state == "open"
    r2 = fold_range(K, GAP, r.partition, r.touched, [(2, ev("b", 1, 1101))])
    assert r2.closed_untouched == ["a"]  # W = 1101 > 1100
    assert "a" not in r2.partition.open_sessions
    assert r2.closed_now == ["a"]


def test_event_for_an_expired_session_is_late_and_not_folded() -> None:
    events = [ev("a", 0, 100), ev("b", 0, 5000), ev("a", 1, 200)]
    r = fold_range(K, GAP, PartitionState(), {}, enumerate(events))
    a = r.touched["a"]
    assert (a.events, a.late_events, a.last_ts, a.state) == (1, 1, 100, "closed")
    assert a.fences[K] == 2  # a late event is still consumed: a replay must not count it again
    assert r.late == 1


def test_late_decision_does_not_depend_on_batch_boundaries() -> None:
    events = [ev("a", 0, 100), ev("b", 0, 900), ev("c", 0, 1200), ev("a", 1, 1150),
              ev("b", 1, 3000), ev("a", 2, 1300)]
    whole = fold_range(K, GAP, PartitionState(), {}, enumerate(events))
    for cut in range(1, len(events)):
        first = fold_range(K, GAP, PartitionState(), {}, list(enumerate(events))[:cut])
        rows = dict(first.touched)
        second = fold_range(K, GAP, first.partition, rows, list(enumerate(events))[cut:])
        merged = {**rows, **second.touched}
        for sid in ("a", "b", "c"):
            w, m = whole.touched[sid], merged[sid]
            assert (m.events, m.late_events, m.last_ts) == (w.events, w.late_events, w.last_ts)
            closed = m.closed or sid in second.closed_untouched
            assert closed == w.closed, (cut, sid)


def test_replay_skips_what_the_fence_covers_but_advances_the_watermark() -> None:
    events = list(enumerate([ev("a", 0, 100), ev("a", 1, 200), ev("a", 2, 300)]))
    first = fold_range(K, GAP, PartitionState(), {}, events)
    # Crash after the session rows, before the partition state: replay with the old state.
    again = Folder(K, GAP, PartitionState(), first.touched)
    assert [again.feed(o, e) for o, e in events] == [Outcome.REPLAYED] * 3
    assert again.watermark == 300
    r = again.finish()
    assert r.touched == {}
    assert r.replayed == 3
    assert first.touched["a"].events == 3


def test_fences_are_per_partition() -> None:
    row = stored_row("a", events=1, last_ts=100, fences={"t:0": 50})
    r = fold_range("t:1", GAP, PartitionState(), {"a": row}, [(10, ev("a", 1, 110))])
    assert r.touched["a"].events == 2
    assert r.touched["a"].fences == {"t:0": 50, "t:1": 10}


def test_event_for_a_closed_row_is_late() -> None:
    row = stored_row("a", events=4, last_ts=100, state="closed")
    r = fold_range(K, GAP, PartitionState(), {"a": row}, [(7, ev("a", 5, 101))])
    assert r.touched["a"].late_events == 1
    assert r.touched["a"].events == 4


def test_folder_does_not_mutate_rows_it_was_given() -> None:
    row = stored_row("a", events=1, last_ts=100, fences={K: 1})
    fold_range(K, GAP, PartitionState(), {"a": row}, [(2, ev("a", 1, 110))])
    assert row.events == 1 and row.fences == {K: 1}


def test_open_sessions_pops_exactly_what_a_full_walk_would_close() -> None:
    """Random puts (last_ts moving on), discards and expiry walks against a plain dict."""
    rng = random.Random(5)
    heap_kept, plain = OpenSessions(), dict[str, int]()
    watermark = 0
    for step in range(20_000):
        sid = f"s{rng.randrange(500)}"
        roll = rng.random()
        if roll < 0.6:
            ts = watermark + rng.randrange(-50, 200)
            heap_kept.put(sid, ts)
            plain[sid] = ts
        elif roll < 0.7:
            heap_kept.discard(sid)
            plain.pop(sid, None)
        else:
            watermark += rng.randrange(0, 40)
            expect = sorted(s for s, ts in plain.items() if watermark > ts + GAP)
            assert sorted(heap_kept.pop_expired(watermark, GAP)) == expect, step
            for s in expect:
                del plain[s]
        assert heap_kept == plain


def test_finish_closes_untouched_sessions_in_place_without_copying_the_open_set() -> None:
    state = PartitionState(100, 9, OpenSessions({"old": 10, "recent": 500}))
    r = fold_range(K, GAP, state, {}, [(10, ev("new", 0, 100 + GAP))])
    assert r.partition is state  # carried on, not copied
    assert r.closed_untouched == ["old"] and r.closed_now == ["old"]
    assert state.open_sessions == {"recent": 500, "new": 100 + GAP}
    assert (state.watermark, state.watermark_offset) == (100 + GAP, 10)


def test_an_event_ahead_of_its_record_moves_the_watermark_only_to_the_records_time_and_grace(
        ) -> None:
    """A clock running an hour fast: its event counts in its own session, but moves the
    watermark only to its record's timestamp + grace, so ``a`` (quiet for less than the gap)
    stays open and its next event is folded, not late."""
    grace = 100
    folder = PartitionFolder(WEB, K, GAP, PartitionState(), {})
    folder.feed(0, ev("a", 0, 1_000).as_event(), sessions.lead_of(1_000, grace))
    fast = ev("x", 0, 1_000 + 3_600_000).as_event()
    assert folder.feed(1, fast, sessions.lead_of(1_050, grace)) == Outcome.APPLIED
    assert folder.watermark == 1_150
    assert folder.feed(2, ev("a", 1, 1_400).as_event(),
                       sessions.lead_of(1_400, grace)) == Outcome.APPLIED
    r = folder.finish()
    assert r.closed_now == [] and r.touched["x"].last_ts == 3_601_000
    # without a record timestamp (-1: an old message format) the event time is taken
    assert sessions.lead_of(-1, grace) is None


def test_an_event_behind_its_record_moves_the_watermark_to_its_own_time() -> None:
    folder = PartitionFolder(WEB, K, GAP, PartitionState(), {})
    folder.feed(0, ev("a", 0, 500).as_event(), sessions.lead_of(90_000, 100))
    assert folder.watermark == 500


def test_late_fold_counts_a_late_event_and_folds_it_into_its_closed_session() -> None:
    """``sessions.late: fold``: the row stays closed, late_events counts the event, and its
    aggregates hold it; a repeated (session, seq) is still a duplicate, not folded twice."""
    closed = stored_row("a", events=2, first_ts=100, last_ts=200, state="closed")
    closed.seqs.add(0)
    closed.seqs.add(1)
    folder = PartitionFolder(WEB, K, GAP, PartitionState(5_000, 9), {"a": closed},
                             fold_late=True)
    assert folder.feed(10, ev("a", 2, 150).as_event()) == Outcome.LATE
    assert folder.feed(11, ev("a", 2, 150).as_event()) == Outcome.DUPLICATE
    r = folder.finish()
    a = as_row(r.touched["a"])
    assert (a.events, a.late_events, a.duplicates, a.state) == (3, 1, 1, "closed")
    assert (a.first_ts, a.last_ts) == (100, 200) and r.late == 1


def test_late_fold_of_an_expired_open_session_folds_it_and_closes_it() -> None:
    events = [ev("a", 0, 100), ev("b", 0, 5_000), ev("a", 1, 200)]
    count = fold_range(K, GAP, PartitionState(), {}, enumerate(events))
    assert (count.touched["a"].events, count.touched["a"].late_events) == (1, 1)
    folder = PartitionFolder(WEB, K, GAP, PartitionState(), {}, fold_late=True)
    for o, e in enumerate(events):
        folder.feed(o, e.as_event())
    a = as_row(folder.finish().touched["a"])
    assert (a.events, a.late_events, a.last_ts, a.state) == (2, 1, 200, "closed")
