"""``output.emit``: live session updates over the in-memory fakes, each summary with its
version and final flag; and ``close`` left as it was. Literal events, literal expectations."""

from __future__ import annotations

import io
import json
import random
from collections import defaultdict
from dataclasses import replace
from typing import Any

import fastavro
import pytest

from leakproof.core import config
from leakproof.core.config.output import EmitEvery
from leakproof.core.errors import ConfigError
from leakproof.core.outbox import Outbox
from leakproof.core.sessions import SessionState
from leakproof.core.summaries import (
    FINAL,
    VERSION,
    avro_summary,
    avro_update,
    json_summary,
    summary_schema,
)
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model
from leakproof.testing.hbase_table import Crash
from leakproof.testing.oracle import summary_problems

from .test_gap_fold import Rig as GapRig
from .test_gap_fold import arrivals, read_through
from .test_process_range import MIN, Rec, Rig, ev, records


# test_process_range's first two ranges, and a third. The fake wire format keys events by
# session and seq for every test module, so each is registered anew where it is used.
def first() -> list[Rec]:
    return records(ev("a", 0, 0), ev("b", 0, 1_000), None, ev("a", 1, 2_000))


def second() -> list[Rec]:
    return records(ev("b", 1, 10 * MIN - 1), ev("c", 0, 10 * MIN), start=4)  # a closes


def third() -> list[Rec]:
    return records(ev("c", 1, 10 * MIN + 1_000), start=6)
# every step the second range makes with updates (lease read first, publish last)
STEPS = ("lease", "pending, outbox", "sessions", "dead letters", "index puts",
         "index deletes", "watermark", "publish", "outbox published")


def live_rig() -> Rig:
    rig = Rig(with_output=True)
    rig.sink.updates = True
    return rig


def topic(rig: Rig) -> list[tuple[str, dict[str, Any] | None, int, bool]]:
    """What a read_committed consumer of the summaries topic sees, in order: key, value
    (None: a tombstone), and the headers' version and final."""
    out = []
    for (_, recs), heads in zip(rig.sink.committed, rig.sink.headers, strict=True):
        for (key, value), head in zip(recs, heads, strict=True):
            h = dict(head)
            out.append((key.decode(), None if value is None else json.loads(value),
                        int(h[VERSION]), {b"true": True, b"false": False}[h[FINAL]]))
    return out


def check(rig: Rig) -> None:
    """The contract of the topic: per key strictly increasing versions (so no key and
    version twice), the value's version and final as the headers', the last record per key
    equal to its row, final exactly when the row is closed."""
    versions: dict[str, list[int]] = defaultdict(list)
    last: dict[str, dict[str, Any] | None] = {}
    for key, value, version, final in topic(rig):
        versions[key].append(version)
        if value is not None:
            assert (value["version"], value["final"]) == (version, final)
            assert final == (value["state"] == "closed")
        last[key] = value
    for key, seen in versions.items():
        assert seen == sorted(set(seen)), key
    rows = rig.sessions.readable()
    assert {k for k, v in last.items() if v is not None} == set(rows)
    for key, value in last.items():
        assert value is not None
        assert {k: v for k, v in value.items()
                if k not in ("session_id", "version", "final")} == rows[key]
    # and verify's check of the topic agrees
    assert summary_problems(sent(rig), rows, updates=True) == []


def sent(rig: Rig | GapRig) -> list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]:
    """The fake topic's records with their headers, in order."""
    return [(*rec, h) for (_, recs), heads in zip(rig.sink.committed, rig.sink.headers,
                                                  strict=True)
            for rec, h in zip(recs, heads, strict=True)]


def test_updates_publish_open_sessions_in_every_batch_that_changed_them() -> None:
    rig = live_rig()
    rig.run(first())
    assert [(k, v is not None and v["state"], ver, fin) for k, v, ver, fin in topic(rig)] == [
        ("a", "open", 1_000, False), ("b", "open", 1_000, False)]
    rig.run(second(), batch_ms=2_000)  # a closes (no event of its own), b and c change
    assert [(k, ver, fin) for k, _, ver, fin in topic(rig)][2:] == [
        ("a", 2_000, True), ("b", 2_000, False), ("c", 2_000, False)]
    rig.run(third(), batch_ms=3_000)  # only c changes: only c goes out
    assert [(k, ver, fin) for k, _, ver, fin in topic(rig)][5:] == [("c", 3_000, False)]
    first_a = topic(rig)[0][1]
    assert first_a is not None and first_a["events"] == "2" and first_a["session_id"] == "a"
    check(rig)


def test_updates_hold_their_contract_across_a_crash_at_every_step_and_the_replay() -> None:
    clean = live_rig()
    for n, make in enumerate((first, second, third)):
        clean.run(make(), batch_ms=1_000 * (n + 1))
    check(clean)
    for step in STEPS:
        rig = live_rig()
        rig.run(first())
        rig.journal.crash_at = step
        with pytest.raises(Crash):
            rig.run(second(), batch_ms=2_000)
        rig.run(second(), batch_ms=3_000)  # the restarted driver replays the range
        rig.run(third(), batch_ms=4_000)
        check(rig)
        assert rig.sessions.readable() == clean.sessions.readable(), step
        # every change went out: each session's last record, and a's closing, once
        assert [k for k, _, _, fin in topic(rig) if fin] == ["a"], step


@pytest.mark.parametrize("fold_late", [False, True])
def test_split_by_the_gap_updates_end_merged_sessions_in_tombstones_across_crashes(
        fold_late: bool) -> None:
    """Visitors' events in random ranges, a fifth stopped at a random write step or torn,
    each replayed: the rows are the oracle's, and the topic verify's check wants -- every
    row's last record equal to it, a merged-away or moved session's key ending in a
    tombstone, versions per key strictly increasing."""
    tombstones = 0
    for seed in range(60):
        rnd = random.Random(seed)
        events = arrivals(rnd, False)
        events.sort(key=lambda e: e.ts + rnd.choice((0, 0, 0, 800, 2_500, 6_000)))
        rig = GapRig(fold_late=fold_late)
        rig.sink.updates = True
        rig.sent = list(events)
        read_through(rig, rnd, 0, longest=6, idle_ticks=True)
        rows = rig.sessions.readable()
        assert rows == rig.expected(), seed
        assert summary_problems(sent(rig), rows, updates=True) == [], seed
        tombstones += sum(value is None for _, value, _ in sent(rig))
    assert tombstones > 0  # sessions were merged away or moved


def test_a_crash_after_the_commit_publishes_nothing_again() -> None:
    rig = live_rig()
    rig.run(first())
    rig.journal.crash_at = "outbox published"
    with pytest.raises(Crash):
        rig.run(second(), batch_ms=2_000)
    rig.run(second(), batch_ms=3_000)
    assert [(k, ver) for k, _, ver, _ in topic(rig)] == [
        ("a", 1_000), ("b", 1_000), ("a", 2_000), ("b", 2_000), ("c", 2_000)]


def test_close_keeps_its_values_and_adds_the_version_and_final_headers() -> None:
    rig = Rig(with_output=True)
    rig.run(first())
    rig.run(second(), batch_ms=2_000)
    [(_, [(key, value)])] = rig.sink.committed
    assert key == b"a"
    row = rig.sessions.read({"a"})["a"]
    assert value == json_summary(compile_model(web_model()))("a", row)
    assert b"version" not in (value or b"")
    assert rig.sink.headers == [[[(VERSION, b"2000"), (FINAL, b"true")]]]


def minimal(**output: Any) -> dict[str, Any]:
    return {"kafka": {"topic": "t", "group_id": "g", "bootstrap_servers": "localhost:9092"},
            "hbase": {"host": "localhost"}, "output": output}


def test_emit_config_reads_close_and_update_and_refuses_the_rest_by_name() -> None:
    assert config.from_dict(minimal()).output.emit == "close"
    assert config.from_dict(minimal(emit="update")).output.emit == "update"
    with pytest.raises(ConfigError, match=r"'output.emit' = 'always' is not valid; use one "
                                          r"of: close \| update \| \{every_s: N\}"):
        config.from_dict(minimal(emit="always"))
    every = config.from_dict(minimal(emit={"every_s": 2.5})).output
    assert (every.emit, every.updates, every.every_ms) == (EmitEvery(2.5), True, 2_500)
    assert config.from_dict(minimal(emit="update")).output.every_ms is None
    assert not config.from_dict(minimal()).output.updates
    with pytest.raises(ConfigError, match=r"'output.emit.every_s' must be > 0, got 0"):
        config.from_dict(minimal(emit={"every_s": 0}))
    with pytest.raises(ConfigError, match=r"output.emit.*every_ms"):
        config.from_dict(minimal(emit={"every_ms": 5}))
    assert config.from_dict(minimal(emit="update", format="avro",
                                    registry={"url": "http://localhost:8081"})).output.emit \
        == "update"


def test_an_avro_update_carries_its_version_and_final_and_the_schema_stays_compatible() -> None:
    model = compile_model(web_model())
    close = summary_schema(model)
    live = summary_schema(model, updates=True)
    assert live["fields"][:-2] == close["fields"]
    assert live["fields"][-2:] == [{"name": "version", "type": "long", "default": -1},
                                   {"name": "final", "type": "boolean", "default": True}]
    s = SessionState("s1", ["u7", 3, 2, 1, 0, 0, 1536, "/a", None, 0], [None] * 10,
                     first_ts=1_000, last_ts=9_000)  # open
    value = avro_update(model, b"\x00\x00\x00\x00\x2b")("s1", s, 4_000)
    assert value[:5] == b"\x00\x00\x00\x00\x2b"
    rec = fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(live), None)
    assert isinstance(rec, dict)
    assert (rec["state"], rec["version"], rec["final"], rec["events"]) == ("open", 4_000,
                                                                           False, 3)
    # a summary written before versions reads under the new schema with the defaults
    old = avro_summary(model, b"\x00" * 5)("s1", s)
    rec = fastavro.schemaless_reader(io.BytesIO(old[5:]), fastavro.parse_schema(close),
                                     fastavro.parse_schema(live))
    assert isinstance(rec, dict)
    assert (rec["state"], rec["version"], rec["final"]) == ("closed", -1, True)


def head(version: int, final: bool) -> list[tuple[str, bytes | None]]:
    return [(VERSION, str(version).encode()), (FINAL, b"true" if final else b"false")]


def value(sid: str, version: int, state: str, events: int) -> bytes:
    return json.dumps({"session_id": sid, "events": str(events), "state": state,
                       "version": version, "final": state == "closed"}).encode()


def test_verify_finds_a_repeated_version_a_stale_last_record_and_a_missing_session() -> None:
    rows = {"a": {"events": "3", "state": "closed"}, "b": {"events": "1", "state": "open"}}
    good = [(b"a", value("a", 5, "open", 2), head(5, False)),
            (b"b", value("b", 5, "open", 1), head(5, False)),
            (b"a", value("a", 7, "closed", 3), head(7, True)),
            (b"m", value("m", 6, "open", 1), head(6, False)),
            (b"m", None, head(7, True))]  # merged away: a tombstone, no row
    assert summary_problems(good, rows, updates=True) == []
    twice = [*good, (b"a", value("a", 7, "closed", 3), head(7, True))]
    assert summary_problems(twice, rows, updates=True) == [
        "summary of a: version 7 after 7"]
    stale = good[:2]  # a's close never went out
    assert summary_problems(stale, rows, updates=True) == [
        "summary of a: final False, the row is closed",
        "summary of a: last {'events': '2', 'state': 'open'} is not its row "
        "{'events': '3', 'state': 'closed'}"]
    assert summary_problems(good[1:], rows, updates=True) == []  # a's last is still right
    assert summary_problems(good[2:], rows, updates=True) == [
        "1 session rows with no summary, e.g. ['b']"]
    assert summary_problems(good[2:], rows, updates=False) == []  # close: open rows owe none
    unheaded: list[tuple[bytes, bytes, list[tuple[str, bytes | None]]]] = [
        (b"a", value("a", 7, "closed", 3), [])]
    assert summary_problems(unheaded, {"a": rows["a"]}, updates=False)[0].startswith(
        "summary of a: no valid leakproof.version")
    assert summary_problems([(b"a", None, head(8, True))], rows, updates=False) == [
        "summary of a: a tombstone last, but the row is there"]
    # a key used again after the retention: its new session open, the old one's summary (or
    # its tombstone) last -- right with close and every_s (the new one goes out at its close
    # or window), wrong with update (its change went out at once)
    again = {"a": {"events": "1", "state": "open"}}
    for old in ([good[2]], [good[2], (b"a", None, head(8, True))]):
        assert summary_problems(old, again, updates=False) == []
        assert summary_problems(old, again, updates=True, held=True) == []
        assert summary_problems(old, again, updates=True) != []


# output.emit: {every_s: N}: the partition's window, the held sessions


def test_a_closed_window_holds_the_open_changes_and_the_next_one_sends_them() -> None:
    first = Outbox().throttled("b1", [], ["a", "b"], 1_000, 3_000)
    assert first is not None
    assert (first.sessions, first.held, first.emitted) == (("a", "b"), (), 1_000)
    done = replace(first, published=first.id)
    held = done.throttled("b2", [], ["a", "c"], 2_000, 3_000)  # within 3 s: held
    assert held is not None and not held.pending  # nothing to send: only the list written
    assert (held.id, held.held, held.emitted) == (first.id, ("a", "c"), 1_000)
    closing = held.throttled("b3", ["c"], ["b"], 3_000, 3_000)  # c closes: out at once
    assert closing is not None and closing.pending
    assert (closing.sessions, closing.held) == (("c",), ("a", "b"))
    assert closing.throttled("b4", [], [], 3_500, 3_000) is not None  # c still owed
    opened = replace(closing, published=closing.id).throttled("b4", [], [], 4_000, 3_000)
    assert opened is not None
    assert (opened.sessions, opened.held, opened.emitted) == (("a", "b"), (), 4_000)
    idle = replace(opened, published=opened.id)
    assert idle.throttled("b5", [], [], 9_000, 3_000) is None  # nothing held, nothing new
    assert Outbox.parse({**opened.encode(), b"w:outbox_published": b"x"}) == replace(
        opened, published="x")
    assert b"w:outbox_held" not in Outbox("b1", ("a",)).encode()  # close, update: as before


def beat(i: int) -> list[Rec]:
    """Batch ``i``: one more event of session p (and of q, every other batch). (The fake
    wire format keys events by session and seq for every test module: names of their own.)"""
    events = [ev("p", i, i * 1_000)] + ([ev("q", i // 2, i * 1_000 + 1)] if i % 2 == 0
                                         else [])
    return records(*events, start=10 * i)


def end() -> list[Rec]:
    return records(ev("z", 0, 10 * MIN), start=1_000)  # p and q close


def every_rig() -> Rig:
    rig = live_rig()
    rig.sink.every_ms = 3_000
    return rig


def test_every_s_sends_an_open_session_at_most_once_per_window_and_its_close_at_once() -> None:
    rig = every_rig()
    for i in range(8):
        rig.run(beat(i), batch_ms=1_000 * (i + 1))
    opened = [(k, ver) for k, _, ver, fin in topic(rig)]
    assert opened == [("p", 1_000), ("q", 1_000), ("p", 4_000), ("q", 4_000),
                      ("p", 7_000), ("q", 7_000)]
    rig.run(end(), batch_ms=9_000)  # p and q close: out at once, with their last changes
    assert [(k, ver, fin) for k, _, ver, fin in topic(rig)][6:] == [
        ("p", 9_000, True), ("q", 9_000, True)]
    check_every(rig)
    assert summary_problems(sent(rig), rig.sessions.readable(), updates=True) == [
        "1 session rows with no summary, e.g. ['z']"]  # z's first change is held


def check_every(rig: Rig) -> None:
    """The topic as verify reads it with every_s, and every closed row's last record."""
    rows = rig.sessions.readable()
    assert summary_problems(sent(rig), rows, updates=True, held=True) == []
    last = {k: v for k, v, _, _ in topic(rig)}
    for sid, row in rows.items():
        if row["state"] == "closed":
            value = last[sid]
            assert value is not None and value["events"] == row["events"], sid


@pytest.mark.parametrize("step", STEPS)
def test_every_s_loses_no_change_across_a_crash_at_any_step(step: str) -> None:
    clean = every_rig()
    for i in range(8):
        clean.run(beat(i), batch_ms=1_000 * (i + 1))
    clean.run(end(), batch_ms=20_000)
    crashes = 0
    for crashed in range(1, 8):
        rig = every_rig()
        batch = 1_000
        for i in range(8):
            rig.journal.crash_at = step if i == crashed else None
            try:
                rig.run(beat(i), batch_ms=batch)
            except Crash:  # the restarted driver replays the range in a later batch
                crashes += 1
                batch += 1_000
                rig.run(beat(i), batch_ms=batch)
            batch += 1_000
        rig.journal.crash_at = None
        rig.run(end(), batch_ms=20_000)
        assert rig.sessions.readable() == clean.sessions.readable(), (step, crashed)
        check_every(rig)
        assert {k for k, _, _, fin in topic(rig) if fin} == {"p", "q"}, (step, crashed)
    assert crashes >= 2, crashes  # the step comes in a window's batch at least
