"""The oracle and the fold agree on generated data, whatever the batch boundaries."""

from __future__ import annotations

import argparse
import random
from dataclasses import replace

import pytest

from leakproof.core import open_index
from leakproof.core.events import Event, WebEvent
from leakproof.core.offsets import OffsetRange
from leakproof.core.session_cells import from_cells, readable, to_cells
from leakproof.core.sessions import SeqSet, SessionState
from leakproof.kafka.records import KafkaRecord
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model
from leakproof.task.process import Stores, process_range
from leakproof.testing.generator import GeneratorSpec, generate
from leakproof.testing.hbase_table import Crash, Journal
from leakproof.testing.oracle import compare, expected_rows, expected_rows_merged
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
)

CLOSE_MS = 600_000
WEB = compile_model(web_model())


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
    """Fold like the job does: ``process_range`` over the in-memory stores, one range of
    ``cut_every`` records after another.

    With ``crash_every`` = n, every n-th range "crashes" and is replayed from the same start,
    as after a restart. Crashes rotate over the range's write steps: half its session rows
    written; after every session row and the index puts, before the index deletes; after the
    whole index, before the watermark.
    """
    journal = Journal()
    sessions, partitions = FakeSessionRows(journal), FakePartitionRows(journal)
    stores = Stores(sessions, partitions, FakeDeadLetters(journal), FakeLeaseCheck(journal))
    by_value = {str(i).encode(): e for i, e in enumerate(events)}

    def decode(key: bytes | None, value: bytes | None, *, topic: str, partition: int,
               offset: int, timestamp: int, headers: object = ()) -> Event:
        assert value is not None
        return by_value[value].as_event()

    recs = [KafkaRecord(i, e.session_id.encode(), str(i).encode(), e.ts)
            for i, e in enumerate(events)]
    batch = crashes = 0
    i = 0
    while i < len(recs):
        chunk = recs[i:i + cut_every]
        rng = OffsetRange("t", 0, i, i + len(chunk))
        batch += 1
        if crash_every and batch % crash_every == 0:
            crashes += 1
            kind = crashes % 3
            if kind == 1:
                sessions.tear_after = len({r.key for r in chunk}) // 2
            else:
                journal.crash_at = "index deletes" if kind == 2 else "watermark"
            with pytest.raises(Crash):
                process_range(rng, chunk, decode, stores, WEB, batch_ms=batch, epoch=1,
                              close_after_ms=CLOSE_MS, cell_ts=batch)
            continue  # replay the same range
        process_range(rng, chunk, decode, stores, WEB, batch_ms=batch, epoch=1,
                      close_after_ms=CLOSE_MS, cell_ts=batch)
        # what the next range's scan skips holds nothing: no entry is left below the cutoff
        cutoff = int(partitions.state[("t", 0)][b"w:cutoff"])
        assert all(ts >= cutoff for row in partitions.index.get(("t", 0), {}).values()
                   for ts in row.values())
        i += cut_every
    # the index holds exactly the sessions left open, each in its own last_ts's bucket
    # (stale entries only until their bucket expires)
    index = partitions.index.get(("t", 0), {})
    width = open_index.bucket_width(CLOSE_MS)
    live = {sid for row in index.values() for sid in row}
    still_open = {sid for sid, c in sessions.cells.items() if c[b"s:state"] == b"open"}
    assert still_open <= live
    for sid in still_open:
        ts = int(sessions.cells[sid][b"s:last_ts"])
        assert index[open_index.bucket_of(ts, width)][sid] == ts
    return sessions.readable()


def test_fold_matches_oracle_for_any_batching() -> None:
    events = generate(GeneratorSpec(seed=11, events=4000, sessions=400, mean_think_s=120,
                                    late_fraction=0.05, duplicate_fraction=0.03))
    events = [replace(e, event_type="scroll") if i % 97 == 0 else e
              for i, e in enumerate(events)]
    expected = expected_rows({0: [e.as_event() for e in events]}, CLOSE_MS, web_model())
    assert any(r["late_events"] != "0" for r in expected.values())
    assert any(r["duplicates"] != "0" for r in expected.values())
    assert any(r["unknown_types"] != "0" for r in expected.values())
    assert any(r["state"] == "closed" for r in expected.values())
    for cut in (1, 7, 250, 4000, random.Random(1).randrange(2, 900)):
        assert compare(expected, fold_in_batches(events, cut)) == [], cut


def test_replays_after_partial_writes_match_the_oracle() -> None:
    events = generate(GeneratorSpec(seed=12, events=4000, sessions=400, mean_think_s=120,
                                    late_fraction=0.05, duplicate_fraction=0.03))
    expected = expected_rows({0: [e.as_event() for e in events]}, CLOSE_MS, web_model())
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
    values, orders = WEB.initial()
    for name, value, order in (("user_id", "ü-user", 1), ("events", 3, None),
                               ("bytes", 99, None), ("entry_url", "/x", 0),
                               ("exit_url", "/y", 4), ("unknown_types", 1, None)):
        values[WEB.names.index(name)], orders[WEB.names.index(name)] = value, order
    s = SessionState("a", values, orders, first_ts=1, last_ts=5, out_of_order=1,
                     late_events=2, duplicates=3, seqs=SeqSet([(0, 2), (4, 4)]),
                     fences={"t:0": 7, "t:3": 9})
    cells = to_cells(s, WEB)
    assert cells[b"f:o:user_id"] == b"1"  # not the lowest seq: kept in a cell of its own
    assert b"f:o:entry_url" not in cells and b"f:o:exit_url" not in cells
    assert from_cells("a", cells, WEB) == s
    assert readable(cells)["user_id"] == "ü-user"
    assert "clicks" in readable(cells) and readable(cells)["clicks"] == "0"


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


def test_a_session_whose_key_moved_is_folded_across_its_partitions() -> None:
    """x's first events in partition 0, the rest in 2 (partitions added): the oracle merges
    the partitions by record timestamp, judges each event late or not by its own
    partition's watermark (y closes by partition 0's), and lets x's owner close it."""
    def web(sid: str, seq: int, ts: int) -> Event:
        return WebEvent(sid, "u", seq, ts, "pageview", f"/{seq}", 200, 1).as_event()

    stamped = {0: [(100, web("x", 0, 0)), (101, web("y", 0, 5)),
                   (102, web("x", 1, 3_000))],
               2: [(200, web("x", 2, 4_000)), (201, web("x", 3, 4_500))]}
    rows = expected_rows_merged(stamped, 1_000, web_model())
    assert (rows["x"]["events"], rows["x"]["late_events"], rows["x"]["state"]) == (
        "4", "0", "open")
    assert rows["y"]["state"] == "closed"  # partition 0's watermark reached 3 000
    # without moves it is the per-partition fold
    assert expected_rows_merged({0: stamped[0]}, 1_000, web_model()) == expected_rows(
        {0: [e for _, e in stamped[0]]}, 1_000, web_model())


def test_with_late_fold_the_oracle_counts_a_late_event_and_folds_it_in() -> None:
    def web(sid: str, seq: int, ts: int) -> Event:
        return WebEvent(sid, "u", seq, ts, "pageview", f"/{seq}", 200, 1).as_event()

    events = {0: [web("a", 0, 100), web("b", 0, 5_000), web("a", 1, 200), web("a", 1, 200)]}
    counted = expected_rows(events, 1_000, web_model())["a"]
    folded = expected_rows(events, 1_000, web_model(), fold_late=True)["a"]
    assert (counted["events"], counted["late_events"], counted["duplicates"]) == ("1", "2", "0")
    assert (folded["events"], folded["late_events"], folded["duplicates"]) == ("2", "1", "1")
