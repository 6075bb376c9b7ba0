"""The oracle and the fold agree on generated data, whatever the batch boundaries."""

from __future__ import annotations

import argparse
import random
from dataclasses import replace

import pytest

from leakproof import open_index
from leakproof.events import WebEvent
from leakproof.generator import GeneratorSpec, generate
from leakproof.hbase.session_store import from_cells, readable, to_cells
from leakproof.oracle import compare, expected_rows
from leakproof.sessions import OpenSessions, PartitionState, SeqSet, SessionState, fold_range

CLOSE_MS = 600_000


def test_generator_is_deterministic_and_sized() -> None:
    spec = GeneratorSpec(seed=7, events=3000, sessions=300)
    a, b = generate(spec), generate(spec)
    assert a == b
    assert len(set(a)) == 3000  # distinct events; a few are sent twice (producer retries)
    assert 0 < len(a) - 3000 < 30
    assert len({e.session_id for e in a}) == 300
    assert generate(GeneratorSpec(seed=8, events=3000, sessions=300)) != a


def test_generator_sessions_are_realistic() -> None:
    events = generate(GeneratorSpec(seed=3, events=20000, sessions=2000))
    kinds = {e.event_type for e in events}
    assert kinds == {"pageview", "click", "purchase"}
    assert any(e.status >= 500 for e in events)
    seqs: dict[str, list[int]] = {}
    for e in events:
        seqs.setdefault(e.session_id, []).append(e.seq)
    assert all(sorted(set(s)) == list(range(len(set(s)))) for s in seqs.values())
    out_of_order = sum(s != sorted(s) for s in seqs.values())
    assert 0 < out_of_order < len(seqs) / 2  # a few delayed deliveries, as the spec says


def fold_in_batches(events: list[WebEvent], cut_every: int,
                    crash_every: int = 0) -> dict[str, dict[str, str]]:
    """Fold like the job does: batches, rows through the HBase cell encoding, the watermark
    and the open-session index (``open_index``) kept in between as the state table keeps them.

    With ``crash_every`` = n, every n-th batch "crashes" and is replayed from the same start,
    as after a restart. Crashes rotate over the task's write steps: after half its session
    rows; after every session row and the index puts, before the index deletes; after the
    whole index, before the watermark. The index is marked pending while it is written, and
    entries below a crashed range's mark are checked against their rows (as the task does);
    all others are taken at their word.
    """
    width = open_index.bucket_width(CLOSE_MS)
    watermark, since, check_below, pending = PartitionState(), 0, 0, 0
    index: dict[int, dict[str, int]] = {}
    stored: dict[str, dict[bytes, bytes]] = {}
    indexed = list(enumerate(events))
    batch = crashes = 0
    i = 0
    while i < len(indexed):
        chunk = indexed[i:i + cut_every]
        before = open_index.cutoff(max([watermark.watermark, *(e.ts for _, e in chunk)]),
                                   CLOSE_MS)
        found = open_index.expiring([open_index.Entry(b, sid, ts) for b in sorted(index)
                                     if since - open_index.MAX_WIDTH <= b < before
                                     for sid, ts in index[b].items()], before)
        check_below = max(check_below, pending)
        ids = {e.session_id for _, e in chunk}
        rows = {sid: from_cells(sid, stored[sid]) for sid in ids if sid in stored}
        stale = open_index.to_check(found, check_below)
        checked = {sid: from_cells(sid, stored[sid]) for sid in stale if sid in stored}
        known = open_index.known_rows(found, stale, checked, rows)
        state = PartitionState(watermark.watermark, watermark.watermark_offset,
                               OpenSessions(open_index.open_set(found, known)))
        r = fold_range("t:0", CLOSE_MS, state, rows, chunk)
        changes = open_index.changes(width, found, known, r)
        batch += 1
        if crash_every and batch % crash_every == 0:
            crashes += 1
            kind = crashes % 3
            for s in list(r.touched.values())[::2] if kind == 1 else r.touched.values():
                stored[s.session_id] = to_cells(s)
            if kind != 1:
                pending = r.partition.watermark
            if kind == 2:
                open_index.IndexChanges(puts=changes.puts).apply_to(index)
            elif kind == 0:
                for sid in r.closed_untouched:
                    stored[sid][b"s:state"] = b"closed"
                changes.apply_to(index)
            continue  # replay the same range
        for s in r.touched.values():
            stored[s.session_id] = to_cells(s)
        for sid in r.closed_untouched:
            stored[sid][b"s:state"] = b"closed"
        changes.apply_to(index)
        # what the next range's scan skips holds nothing: no entry is left below the cutoff
        assert all(ts >= before for row in index.values() for ts in row.values())
        watermark, since = PartitionState(r.partition.watermark,
                                          r.partition.watermark_offset), max(0, before)
        pending = 0
        i += cut_every
    # the index holds exactly the sessions left open, each in its own last_ts's bucket
    # (stale entries only until their bucket expires)
    live = {sid for row in index.values() for sid in row}
    still_open = {sid for sid, c in stored.items() if c[b"s:state"] == b"open"}
    assert still_open <= live
    for sid in still_open:
        ts = int(stored[sid][b"s:last_ts"])
        assert index[open_index.bucket_of(ts, width)][sid] == ts
    return {sid: readable(c) for sid, c in stored.items()}


def test_fold_matches_oracle_for_any_batching() -> None:
    events = generate(GeneratorSpec(seed=11, events=4000, sessions=400, mean_think_s=120,
                                    late_fraction=0.05, duplicate_fraction=0.03))
    events = [replace(e, event_type="scroll") if i % 97 == 0 else e
              for i, e in enumerate(events)]
    expected = expected_rows({0: events}, CLOSE_MS)
    assert any(r["late_events"] != "0" for r in expected.values())
    assert any(r["duplicates"] != "0" for r in expected.values())
    assert any(r["unknown_types"] != "0" for r in expected.values())
    assert any(r["state"] == "closed" for r in expected.values())
    for cut in (1, 7, 250, 4000, random.Random(1).randrange(2, 900)):
        assert compare(expected, fold_in_batches(events, cut)) == [], cut


def test_replays_after_partial_writes_match_the_oracle() -> None:
    events = generate(GeneratorSpec(seed=12, events=4000, sessions=400, mean_think_s=120,
                                    late_fraction=0.05, duplicate_fraction=0.03))
    expected = expected_rows({0: events}, CLOSE_MS)
    for cut, crash_every in ((50, 2), (333, 3), (700, 2), (17, 2), (120, 1 + 1)):
        assert compare(expected, fold_in_batches(events, cut, crash_every)) == [], cut


def test_compare_reports_each_difference() -> None:
    exp = {"a": {"events": "2", "state": "open"}, "b": {"events": "1"}}
    act = {"a": {"events": "3", "state": "open"}, "c": {"events": "1"}}
    problems = compare(exp, act)
    assert "missing session b" in problems
    assert "unexpected session c" in problems
    assert "a.events: expected '2', HBase has '3'" in problems


def test_cells_round_trip() -> None:
    s = SessionState("a", "ü-user", events=3, bytes=99, first_ts=1, last_ts=5, entry_url="/x",
                     exit_url="/y", max_seq=4, entry_seq=0, out_of_order=1, late_events=2,
                     duplicates=3, unknown_types=1, seqs=SeqSet([(0, 2), (4, 4)]),
                     fences={"t:0": 7, "t:3": 9})
    assert from_cells("a", to_cells(s)) == s
    assert readable(to_cells(s))["user_id"] == "ü-user"


def test_a_short_span_puts_many_sessions_open_at_once() -> None:
    wide = generate(GeneratorSpec(seed=9, events=6000, sessions=2000))
    busy = generate(GeneratorSpec(seed=9, events=6000, sessions=2000, span_s=600))

    def starts(events: list[WebEvent]) -> list[int]:
        first: dict[str, int] = {}
        for e in events:
            first[e.session_id] = min(first.get(e.session_id, e.ts), e.ts)
        return sorted(first.values())

    assert starts(busy)[-1] - starts(busy)[0] < 600_000
    assert starts(wide)[-1] - starts(wide)[0] > 3_000_000  # 2 s per session: about 67 min


def test_verify_specs_take_an_optional_start_and_span() -> None:
    from leakproof.cli import _spec

    assert _spec("7:100:10") == GeneratorSpec(7, 100, 10)
    assert _spec("7:100:10:5:3600") == GeneratorSpec(7, 100, 10, 5, span_s=3600)
    for spec in (GeneratorSpec(7, 100, 10), GeneratorSpec(7, 100, 10, 5, span_s=3600)):
        assert _spec(spec.as_arg()) == spec
    with pytest.raises(argparse.ArgumentTypeError, match="SPAN_S"):
        _spec("7:100:10:5:3600:1")
