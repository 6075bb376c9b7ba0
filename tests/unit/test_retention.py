"""``sessions.retention_days`` through ``process_ranges`` over the fakes of the real stores:
closed sessions past the retention deleted with a tombstone, events past the horizon late and
in no row, a key seen again after its session was forgotten starting afresh -- in literals,
and in random ranges with crashes checked against the oracle (which shares no code with the
fold or the sweep). Both session modes."""

from __future__ import annotations

import random

import pytest

from leakproof.core import retention
from leakproof.core.config.sessions import read_sessions
from leakproof.core.errors import ConfigError
from leakproof.core.events import Event
from leakproof.model.spec import web_model
from leakproof.testing.oracle import RETIRED, compare, expected_rows

from . import test_gap_fold as gap_rig
from .test_process_range import ev as web_event

HOUR = 3_600_000
CLOSE = 60_000
KEEP = 5 * HOUR  # the retention the tests run with


def test_the_config_key_takes_days_and_refuses_what_is_not_a_positive_number() -> None:
    assert read_sessions({}).retention_ms is None
    assert read_sessions({"retention_days": None}).retention_ms is None
    assert read_sessions({"retention_days": 7}).retention_ms == 7 * 86_400_000
    assert read_sessions({"retention_days": 0.5}).retention_ms == 43_200_000
    for bad in (0, -1, "7d", True):
        with pytest.raises(ConfigError, match=r"'sessions\.retention_days' must be"):
            read_sessions({"retention_days": bad})


def test_the_cut_is_the_horizon_less_the_close_delay_in_whole_hours() -> None:
    assert retention.cut(-1, KEEP, CLOSE) == 0  # no watermark yet
    assert retention.cut(KEEP, KEEP, CLOSE) == 0
    assert retention.cut(KEEP + 3 * HOUR + CLOSE, KEEP, CLOSE) == 3 * HOUR
    assert retention.cut(KEEP + 3 * HOUR + CLOSE - 1, KEEP, CLOSE) == 2 * HOUR


def IdRig(retention_ms: int | None = KEEP, fold_late: bool = False) -> gap_rig.Rig:  # noqa: N802
    """One partition's ranges by session id (the web model), as the job runs them, over the
    fakes; ``expected``: the oracle's rows, the sessions past the retention gone (as once
    a range has started from the last watermark)."""

    class ById(gap_rig.Rig):
        def expected(self) -> dict[str, dict[str, str]]:
            return retired(super().expected())

    return ById(web_model(), fold_late=fold_late, close_after_ms=CLOSE,
                retention_ms=retention_ms, by_gap=False)


def retired(rows: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    return {sid: row for sid, row in rows.items() if row["state"] != RETIRED}


def at(sid: str, seq: int, ts: int) -> Event:
    return web_event(sid, seq, ts).as_event()


def test_closed_sessions_past_the_retention_go_with_a_tombstone_and_nothing_comes_back() -> None:
    rig = IdRig()
    rig.run([at("a", 0, 0), at("a", 1, 1_000), at("b", 0, HOUR)])  # a closes
    assert set(rig.sessions.readable()) == {"a", "b"}
    # far on: b closes; neither goes yet -- the cut is the watermark's as the range began
    report = rig.run([at("c", 0, KEEP + 3 * HOUR + CLOSE)])
    assert (report.closed, report.retired) == (1, 0)
    # a straggler of a's visit: past the horizon, late, and in no row (never a ghost); its
    # range starts past both sessions' cut: a found in the retention index, b too
    late = rig.run([at("a", 2, 2_000)])
    assert (late.late, late.applied, late.retired) == (1, 0, 2)
    assert set(rig.sessions.readable()) == {"c"}
    assert rig.summaries() == {"a": None, "b": None}  # tombstones on the compacted topic
    assert rig.partitions.state[("t", 0)][b"w:swept"] == b"%d" % (3 * HOUR)
    assert rig.sessions.readable() == rig.expected()


def retained(rig: gap_rig.Rig) -> dict[bytes, dict[bytes, bytes]]:
    return {k: v for k, v in rig.partitions.table.visible().items() if k.startswith(b"rt:")}


def test_a_session_closed_within_the_retention_is_swept_by_a_later_range() -> None:
    rig = IdRig()
    rig.run([at("a", 0, 0), at("b", 0, 2 * HOUR)])  # a closes: indexed by its hour
    rig.run([at("c", 0, 4 * HOUR)])  # b closes
    assert retained(rig) == {b"rt:t:0:0000000000000": {b"o:a": b"0"},
                             b"rt:t:0:0000007200000": {b"o:b": b"7200000"}}
    rig.run([at("d", 0, KEEP + 2 * HOUR + CLOSE)])
    rig.run([at("e", 0, KEEP + 5 * HOUR + CLOSE)])  # started past hour 1: a goes, b stays
    assert set(rig.sessions.readable()) == {"b", "c", "d", "e"}
    assert rig.summaries()["a"] is None
    assert b"rt:t:0:0000000000000" not in retained(rig)  # the index row read is gone
    rig.run([], start=len(rig.sent))  # a range with nothing new: b and c go too
    assert set(rig.sessions.readable()) == {"d", "e"}
    assert rig.sessions.readable() == rig.expected()


def test_a_key_seen_again_after_its_session_was_forgotten_starts_a_new_session() -> None:
    """Whether the sweep has deleted the old row yet or not: the answer is the same."""
    for sweep_first in (True, False):
        rig = IdRig()
        rig.run([at("a", 0, 0), at("a", 1, 1_000)])
        if sweep_first:
            rig.run([at("x", 0, KEEP + 3 * HOUR)])  # a closes
            rig.run([at("x", 1, KEEP + 3 * HOUR)])  # and is swept
            assert "a" not in rig.sessions.readable()
        else:
            rig.run([at("x", 0, KEEP + 3 * HOUR), at("x", 1, KEEP + 3 * HOUR)])
            assert "a" in rig.sessions.readable()
        # a's key again, newer than the horizon, its old session past it
        rig.run([at("a", 7, KEEP + 3 * HOUR + 5)])
        row = rig.sessions.readable()["a"]
        assert (row["events"], row["first_ts"], row["state"], row["late_events"]) == (
            "1", str(KEEP + 3 * HOUR + 5), "open", "0"), sweep_first
        assert rig.sessions.readable() == rig.expected(), sweep_first


def test_the_oracle_takes_a_retired_session_there_or_not() -> None:
    sent = [at("a", 0, 0), at("b", 0, KEEP + 3 * HOUR)]
    rows = expected_rows({0: sent}, CLOSE, web_model(), retention_ms=KEEP)
    assert rows["a"]["state"] == RETIRED
    assert compare(rows, {"b": rows["b"]}) == []
    assert compare(rows, {"b": rows["b"], "a": {**rows["a"], "state": "closed"}}) == []
    assert compare(rows, {"b": rows["b"], "a": {**rows["a"], "state": "open"}}) != []


def visits(rnd: random.Random) -> list[Event]:
    """Sessions over twelve hours, some keys used again hours later, and stragglers: most a
    little late, some hours late (past the horizon when they come)."""
    out = []
    for n in range(14):
        sid = f"s{n % 9}"  # keys come back
        t = rnd.randrange(0, 12 * HOUR)
        for seq in range(rnd.randrange(1, 5)):
            t += rnd.choice((1_000, 20_000, 50_000))
            out.append(at(sid, seq, t))
    out.sort(key=lambda e: e.ts + rnd.choice((0, 0, 0, 0, 90_000, 3 * HOUR, 6 * HOUR)))
    return out


@pytest.mark.parametrize("fold_late", [False, True])
def test_random_visits_in_random_ranges_through_crashes_match_the_oracle(fold_late: bool
                                                                         ) -> None:
    steps = ["pending", "sessions", "session deletes", "dead letters", "index puts",
             "retention index deletes", "watermark", "publish", "lease"]
    for seed in range(60):
        rnd = random.Random(seed)
        rig = IdRig(fold_late=fold_late)
        rig.sent = visits(rnd)
        gap_rig.read_through(rig, rnd, 0, longest=5, steps=steps)
        rig.run([], start=len(rig.sent))  # a range from the last watermark: what is past it goes
        assert rig.sessions.readable() == rig.expected(), seed
        # every session the rows no longer hold that the topic saw closed has a tombstone
        published = rig.summaries()
        gone = {e.session_id for e in rig.sent} - set(rig.sessions.readable())
        assert all(published.get(sid, b"") is None for sid in gone if sid in published), seed


def test_without_a_retention_nothing_is_swept() -> None:
    rig = IdRig(retention_ms=None)
    rig.run([at("a", 0, 0)])
    rig.run([at("b", 0, 100 * KEEP)])
    assert set(rig.sessions.readable()) == {"a", "b"}
    assert not any(k.startswith(b"rt:") for k in rig.partitions.table.visible())


# ----------------------------------------------------------------------------- gap mode


def gap_visits(rnd: random.Random) -> list[Event]:
    """A few visitors' bursts over ten hours (gap 1 s), with stragglers up to hours late."""
    out: list[Event] = []
    for visitor in ("a", "b", "c:1"):
        for _ in range(rnd.randrange(2, 5)):
            t = rnd.randrange(0, 10 * HOUR)
            for n in range(rnd.randrange(2, 7)):
                t += rnd.choice((100, 300, 700, 1_200))
                out.append(gap_rig.ev(visitor, t, f"/{n}", size=rnd.randrange(1, 9)))
    out.sort(key=lambda e: e.ts + rnd.choice((0, 0, 0, 2_500, 3 * HOUR, 5 * HOUR)))
    return out


@pytest.mark.parametrize("fold_late", [False, True])
def test_gap_sessions_in_random_ranges_through_crashes_match_the_oracle(fold_late: bool
                                                                        ) -> None:
    for seed in range(60):
        rnd = random.Random(seed)
        rig = gap_rig.Rig(fold_late=fold_late, retention_ms=2 * HOUR)
        rig.sent = gap_visits(rnd)
        gap_rig.read_through(rig, rnd, 0, longest=6)
        rig.run([], start=len(rig.sent))  # a range from the last watermark
        assert rig.sessions.readable() == retired(rig.expected()), seed
        # no listing of a session whose row is gone, none missing
        rows = set(rig.sessions.readable())
        listed = {f"{visitor}:{start:013d}" for visitor, starts in rig.visits.listed.items()
                  for start in starts}
        assert listed == rows, seed


def test_gap_sessions_past_the_retention_go_with_their_listing_and_a_tombstone() -> None:
    rig = gap_rig.Rig(retention_ms=2 * HOUR)
    rig.run([gap_rig.ev("a", 0), gap_rig.ev("a", 500), gap_rig.ev("b", 1_000)])
    rig.run([gap_rig.ev("c", 4 * HOUR)])  # a and b close
    late = rig.run([gap_rig.ev("a", 900)])  # would have joined a's visit: past the horizon
    assert (late.late, late.applied, late.retired) == (1, 0, 2)
    assert set(rig.sessions.readable()) == {"c:" + f"{4 * HOUR:013d}"}
    assert set(rig.visits.listed) == {"c"}
    assert rig.summaries()["a:0000000000000"] is None
    assert rig.summaries()["b:0000000001000"] is None
    assert rig.sessions.readable() == retired(rig.expected())


def test_a_rewind_finds_a_row_that_counted_a_late_event_far_ahead_of_its_end() -> None:
    """A late event counted in a's row (not folded: last_ts stays 0) carries a time far on:
    the row is kept while that time is within the retention, so a rewind that reads the
    event again finds its fence instead of starting a session with it."""
    rig = IdRig()
    late_at = KEEP + 3 * HOUR
    rig.run([at("a", 0, 0), at("b", 0, 120_000), at("a", 1, late_at)])
    rig.run([], start=3)  # b goes; a stays: it counted an event at late_at
    assert set(rig.sessions.readable()) == {"a"}
    assert rig.sessions.cells["a"][b"f:reach"] == str(late_at).encode()
    rig.run(rig.sent, start=0)  # a rewind to 0 over the same tables
    rig.run([], start=3)
    assert rig.sessions.readable() == rig.expected()
    assert rig.sessions.readable()["a"]["late_events"] == "1"


def test_a_zombies_late_write_never_shows_through_a_replaced_row() -> None:
    """A replaced row is put whole: a cell the old row held the same bytes in would keep its
    old timestamp, older than a zombie's late write of a shorter cut of the same range."""
    rig = IdRig()
    rig.sent = [at("a", 0, 0), at("a", 1, 1_000), at("x", 0, KEEP + 3 * HOUR),
                at("a", 0, KEEP + 3 * HOUR + 5), at("a", 1, KEEP + 3 * HOUR + 6)]
    rig.run(rig.sent[0:2], start=0)
    rig.run(rig.sent[2:3], start=2)  # a closes; forgotten from here on
    tables = [rig.sessions.table, rig.partitions.table]
    for t in tables:
        t.delay = 10**6  # a zombie's attempt of offset 3 alone: its writes held
    rig.run(rig.sent[3:4], start=3)
    for t in tables:
        t.delay = 0
    rig.sessions._stored.clear()  # the new driver's attempt: a new store
    rig.run(rig.sent[3:5], start=3)
    for t in tables:
        t.deliver_late()
    rig.run([], start=5)
    assert rig.sessions.readable() == rig.expected()
    assert rig.sessions.readable()["a"]["events"] == "2"


def test_a_raised_retention_deletes_by_the_new_one() -> None:
    for sweep_between in (False, True):
        rig = IdRig(retention_ms=5 * HOUR)
        rig.run([at("c", 0, 25 * HOUR)])
        rig.run([at("c", 1, 25 * HOUR)])  # the cut so far: 19 h
        rig.retention_ms = 50 * HOUR  # raised: a restart with the new config
        rig.run([at("a", 0, 10 * HOUR)])  # far inside 50 h; closes at once
        if sweep_between:
            assert rig.run([], start=len(rig.sent)).retired == 0
        rig.run([at("a", 1, 10 * HOUR + 30_000)])  # a's straggler: late in a, as ever
        assert rig.sessions.readable() == rig.expected(), sweep_between
