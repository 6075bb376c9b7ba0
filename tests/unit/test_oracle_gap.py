"""The oracle of ``sessions.by: gap``: each case's rows worked out by hand from the rules in
docs/DESIGN.md (gap 1 s, closing 1.5 s after a session's last event)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from leakproof.core.events import Event
from leakproof.examples.access_log import DATA, SCHEMA
from leakproof.model.spec import Model, read_model
from leakproof.testing.oracle import expected_gap_rows, expected_gap_rows_merged

GAP = 1_000
CLOSE = 1_500
AGGREGATES = {"hits": {"fn": "count"}, "size": {"fn": "sum", "field": "size"},
              "low": {"fn": "min", "field": "code"}, "high": {"fn": "max", "field": "code"},
              "landing": {"fn": "first", "field": "path"},
              "leaving": {"fn": "last", "field": "path"},
              "errors": {"fn": "count", "where": "code >= 500"}}


def model(sequenced: bool) -> Model:
    events: dict[str, Any] = {"schema": str(SCHEMA), "session_key": "visit", "event_time": "at"}
    if sequenced:
        events["sequence"] = "n"
    return read_model(events, AGGREGATES, DATA)


PLAIN, SEQUENCED = model(False), model(True)


def ev(visit: str, at: int, path: str, *, n: int = 0, code: int = 200, size: int = 1,
       sequenced: bool = False) -> Event:
    record = {"visit": visit, "at": at, "n": n, "method": "GET", "path": path, "code": code,
              "size": size, "latency_ms": 1.0, "cached": False, "account": None, "agent": None}
    return Event(visit, at, n if sequenced else None, record)


def sq(visit: str, n: int, at: int, path: str, **kw: Any) -> Event:
    return ev(visit, at, path, n=n, sequenced=True, **kw)


def row(first: int, last: int, state: str, *, hits: int, size: int, low: int, high: int,
        landing: str, leaving: str, errors: int = 0, late: int = 0,
        dups: int | None = None, ooo: int | None = None) -> dict[str, str]:
    cells = {"first_ts": str(first), "last_ts": str(last), "state": state,
             "late_events": str(late), "hits": str(hits), "size": str(size), "low": str(low),
             "high": str(high), "landing": landing, "leaving": leaving, "errors": str(errors)}
    if dups is not None:
        cells["duplicates"], cells["out_of_order"] = str(dups), str(ooo)
    return cells


def test_a_visitors_events_split_where_the_gap_is_reached() -> None:
    events = {0: [ev("v", 0, "/a", size=1), ev("v", 500, "/b", size=2, code=201),
                  ev("v", 1_400, "/c", size=3, code=202),
                  ev("v", 2_400, "/d", size=4, code=500),  # a whole gap after /c: a new one
                  ev("w", 3_000, "/w")],  # past 1 400 + 1 500, not 2 400 + 1 500
              1: [ev("x", 9_000, "/x")]}  # another partition's watermark closes nothing here
    assert expected_gap_rows(events, CLOSE, GAP, PLAIN) == {
        "v:0000000000000": row(0, 1_400, "closed", hits=3, size=6, low=200, high=202,
                               landing="/a", leaving="/c"),
        "v:0000000002400": row(2_400, 2_400, "open", hits=1, size=4, low=500, high=500,
                               landing="/d", leaving="/d", errors=1),
        "w:0000000003000": row(3_000, 3_000, "open", hits=1, size=1, low=200, high=200,
                               landing="/w", leaving="/w"),
        "x:0000000009000": row(9_000, 9_000, "open", hits=1, size=1, low=200, high=200,
                               landing="/x", leaving="/x")}


def test_an_event_bridging_two_sessions_merges_them() -> None:
    events = [ev("v", 0, "/a", size=1), ev("v", 1_500, "/c", size=3),
              ev("v", 800, "/b", size=2)]  # under a gap from both (and 0 + 1 500 not passed)
    assert set(expected_gap_rows({0: events[:2]}, CLOSE, GAP, PLAIN)) == {
        "v:0000000000000", "v:0000000001500"}
    assert expected_gap_rows({0: events}, CLOSE, GAP, PLAIN) == {
        "v:0000000000000": row(0, 1_500, "open", hits=3, size=6, low=200, high=200,
                               landing="/a", leaving="/c")}


def test_an_earlier_event_moves_the_start_and_the_key() -> None:
    events = [ev("v", 1_000, "/b"), ev("v", 1_500, "/c"), ev("v", 300, "/a")]
    assert set(expected_gap_rows({0: events[:2]}, CLOSE, GAP, PLAIN)) == {"v:0000000001000"}
    assert expected_gap_rows({0: events}, CLOSE, GAP, PLAIN) == {
        "v:0000000000300": row(300, 1_500, "open", hits=3, size=3, low=200, high=200,
                               landing="/a", leaving="/c")}


def test_max_duration_cuts_a_session() -> None:
    in_order = [ev("v", 0, "/a"), ev("v", 700, "/b"), ev("v", 1_400, "/c"),
                ev("v", 2_000, "/d"),  # under a gap from /c, but 2 000 from the start
                ev("v", 2_600, "/e")]
    # u: 400 arrives after 1 200 .. 2 800 was cut: it reaches nothing (2 800 - 400 >= M),
    # starts a session of its own, not late although far behind, closed by the watermark
    earlier = [ev("u", 1_200, "/b"), ev("u", 2_000, "/c"), ev("u", 2_800, "/d"),
               ev("u", 400, "/a")]
    rows = expected_gap_rows({0: in_order, 1: earlier}, CLOSE, GAP, PLAIN,
                             max_duration_ms=2_000)
    assert rows == {
        "v:0000000000000": row(0, 1_400, "open", hits=3, size=3, low=200, high=200,
                               landing="/a", leaving="/c"),
        "v:0000000002000": row(2_000, 2_600, "open", hits=2, size=2, low=200, high=200,
                               landing="/d", leaving="/e"),
        "u:0000000000400": row(400, 400, "closed", hits=1, size=1, low=200, high=200,
                               landing="/a", leaving="/a"),
        "u:0000000001200": row(1_200, 2_800, "open", hits=3, size=3, low=200, high=200,
                               landing="/b", leaving="/d")}
    assert expected_gap_rows({0: in_order}, CLOSE, GAP, PLAIN) == {
        "v:0000000000000": row(0, 2_600, "open", hits=5, size=5, low=200, high=200,
                               landing="/a", leaving="/e")}


LATE = [ev("v", 0, "/a", size=1), ev("v", 1_800, "/c", size=3),
        ev("x", 5_000, "/x"),  # the watermark passes both of v's sessions: they close
        ev("v", 900, "/b", size=2, code=500),  # reaches both: late
        ev("v", 3_400, "/e")]  # reaches none: a session of its own, never late
X = row(5_000, 5_000, "open", hits=1, size=1, low=200, high=200, landing="/x", leaving="/x")
E = row(3_400, 3_400, "closed", hits=1, size=1, low=200, high=200, landing="/e",
        leaving="/e")


def test_late_count_counts_in_the_first_closed_session_and_folds_nothing() -> None:
    assert expected_gap_rows({0: LATE}, CLOSE, GAP, PLAIN) == {
        "v:0000000000000": row(0, 0, "closed", hits=1, size=1, low=200, high=200,
                               landing="/a", leaving="/a", late=1),
        "v:0000000001800": row(1_800, 1_800, "closed", hits=1, size=3, low=200, high=200,
                               landing="/c", leaving="/c"),
        "v:0000000003400": E, "x:0000000005000": X}


def test_late_fold_merges_two_closed_sessions_into_one_closed_row() -> None:
    assert expected_gap_rows({0: LATE}, CLOSE, GAP, PLAIN, fold_late=True) == {
        "v:0000000000000": row(0, 1_800, "closed", hits=3, size=6, low=200, high=500,
                               landing="/a", leaving="/c", errors=1, late=1),
        "v:0000000003400": E, "x:0000000005000": X}


def test_duplicates_with_a_sequence_count_where_the_seq_was_applied_and_add_up() -> None:
    events = [sq("v", 0, 0, "/a", size=1), sq("v", 1, 400, "/b", size=2),
              sq("v", 1, 400, "/b", size=2),  # a duplicate in v:0
              sq("v", 3, 1_500, "/d", size=4),  # a gap after 400: v:1500
              sq("v", 3, 1_500, "/d", size=4),  # a duplicate in v:1500
              sq("v", 2, 1_000, "/c", size=3),  # bridges both; after seq 3: out of order
              sq("v", 0, 9_000, "/z")]  # seq 0 again, but in a session of its own
    assert expected_gap_rows({0: events}, CLOSE, GAP, SEQUENCED) == {
        "v:0000000000000": row(0, 1_500, "closed", hits=4, size=10, low=200, high=200,
                               landing="/a", leaving="/d", dups=2, ooo=1),
        "v:0000000009000": row(9_000, 9_000, "open", hits=1, size=1, low=200, high=200,
                               landing="/z", leaving="/z", dups=0, ooo=0)}


@pytest.mark.parametrize("fold", [False, True])
def test_a_late_repeat_is_late_when_counting_and_a_duplicate_when_folding(fold: bool) -> None:
    events = [sq("w", 0, 0, "/p"), sq("x", 0, 5_000, "/x"),  # w:0 expires
              sq("w", 0, 0, "/p"),  # late (count) or a duplicate (fold)
              sq("w", 1, 100, "/q")]  # late either way
    x = row(5_000, 5_000, "open", hits=1, size=1, low=200, high=200, landing="/x",
            leaving="/x", dups=0, ooo=0)
    w = (row(0, 100, "closed", hits=2, size=2, low=200, high=200, landing="/p",
             leaving="/q", late=1, dups=1, ooo=0) if fold else
         row(0, 0, "closed", hits=1, size=1, low=200, high=200, landing="/p", leaving="/p",
             late=2, dups=0, ooo=0))
    assert expected_gap_rows({0: events}, CLOSE, GAP, SEQUENCED, fold_late=fold) == {
        "w:0000000000000": w, "x:0000000005000": x}


def test_first_and_last_go_by_event_time_without_a_sequence() -> None:
    paths = [(500, "/b"), (0, "/a"), (900, "/c1"), (900, "/c2"), (0, "/a2")]
    plain = [ev("v", at, path) for at, path in paths]
    # lowest ts, the earliest arrival of it; highest ts, the latest arrival of it
    assert expected_gap_rows({0: plain}, CLOSE, GAP, PLAIN) == {
        "v:0000000000000": row(0, 900, "open", hits=5, size=5, low=200, high=200,
                               landing="/a", leaving="/c2")}
    # with a sequence: by seq, whatever the times
    numbered = [sq("v", n, at, path) for n, (at, path) in enumerate(paths)]
    assert expected_gap_rows({0: numbered}, CLOSE, GAP, SEQUENCED) == {
        "v:0000000000000": row(0, 900, "open", hits=5, size=5, low=200, high=200,
                               landing="/b", leaving="/a2", dups=0, ooo=0)}


def visits(rng: random.Random, sequenced: bool) -> list[Event]:
    """Three visitors' events in time order, distinct times, gaps above and below ``GAP``;
    with a sequence a few sent twice."""
    out: list[Event] = []
    for visitor in ("a", "b", "c"):
        at = rng.randrange(1_000)
        for n in range(14):
            at += rng.choice((100, 400, 900, 1_100, 2_500))
            e = ev(visitor, at, f"/{visitor}{n}", n=n, code=rng.choice((200, 404, 500)),
                   size=rng.randrange(1, 100), sequenced=sequenced)
            out += [e, e] if sequenced and rng.random() < 0.2 else [e]
    return out


@pytest.mark.parametrize("sequenced", [False, True])
def test_with_late_fold_the_rows_do_not_depend_on_arrival_order(sequenced: bool) -> None:
    rng = random.Random(20240611)
    the_model = SEQUENCED if sequenced else PLAIN
    events = visits(rng, sequenced)
    split = {0: [e for e in events if e.session_id != "c"],
             1: [e for e in events if e.session_id == "c"]}
    order_dependent = ("late_events", "out_of_order", "state")

    def cells(parts: dict[int, list[Event]]) -> dict[str, dict[str, str]]:
        rows = expected_gap_rows(parts, CLOSE, GAP, the_model, fold_late=True)
        return {k: {c: v for c, v in r.items() if c not in order_dependent}
                for k, r in rows.items()}

    in_order = cells(split)
    assert len(in_order) > 6  # several sessions per visitor
    late = 0
    for _ in range(8):
        shuffled = {p: rng.sample(evs, len(evs)) for p, evs in split.items()}
        assert cells(shuffled) == in_order
        late += sum(int(r["late_events"]) for r in expected_gap_rows(
            shuffled, CLOSE, GAP, the_model, fold_late=True).values())
    assert late > 0  # the shuffles did fold late events


def test_the_merged_form_merges_partitions_by_record_timestamp() -> None:
    events = [ev("v", 0, "/a"), ev("v", 700, "/b")]
    assert expected_gap_rows_merged({0: [(10, events[0]), (11, events[1])]}, CLOSE, GAP,
                                    PLAIN) == expected_gap_rows({0: events}, CLOSE, GAP, PLAIN)
    # the visitor's key moved to partition 1: /b is met before /a, each with its partition
    moved = {0: [(20, events[0])], 1: [(10, events[1])]}
    assert expected_gap_rows_merged(moved, CLOSE, GAP, PLAIN) == {
        "v:0000000000000": row(0, 700, "open", hits=2, size=2, low=200, high=200,
                               landing="/a", leaving="/b")}
