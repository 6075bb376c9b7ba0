"""The configurable model: bad models stop at start naming the key; ``where`` compiles to
what the oracle's interpreter says; a foreign schema (Avro and JSON) folds exactly as the
oracle computes it, through batch cuts and crash replays."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from leakproof.core import config
from leakproof.core.codec import Decoder
from leakproof.core.errors import ConfigError, DecodeError
from leakproof.core.offsets import OffsetRange
from leakproof.examples.access_log import (
    DATA,
    avro_value,
    json_value,
    model_sections,
    requests,
)
from leakproof.kafka.records import KafkaRecord
from leakproof.model import where
from leakproof.model.compiled import compile_model, float_text
from leakproof.model.spec import Model, read_model
from leakproof.task.process import Stores, process_range
from leakproof.testing.hbase_table import Crash, Journal
from leakproof.testing.oracle import compare, expected_rows, holds
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
    FakeSummarySink,
)

ROOT = Path(__file__).resolve().parents[2]
CLOSE_MS = 600_000


def access_model(**changes: Any) -> Model:
    sections = model_sections()
    sections["events"].update(changes)
    return read_model(sections["events"], sections["aggregates"], DATA)


def model_error(events: dict[str, Any] | None, aggregates: Any) -> str:
    with pytest.raises(ConfigError) as err:
        read_model(events, aggregates, DATA)
    return str(err.value)


BASE_EVENTS = {"schema": "access_log.avsc", "session_key": "visit", "event_time": "at",
               "sequence": "n"}


@pytest.mark.parametrize(("events", "aggregates", "names"), [
    # unknown fn
    ({}, {"hits": {"fn": "median", "field": "size"}}, ["aggregates.hits.fn", "median"]),
    # unknown field
    ({}, {"big": {"fn": "max", "field": "bytes"}},
     ["aggregates.big.field", "no field 'bytes'", "access_log.avsc"]),
    # bad where syntax, with its column
    ({}, {"posts": {"fn": "count", "where": "method = 'POST'"}},
     ["aggregates.posts.where", "column 8"]),
    # a type mismatch in a where
    ({}, {"posts": {"fn": "count", "where": "code == 'POST'"}},
     ["aggregates.posts.where", "cannot compare number with string"]),
    # a type mismatch of fn and field
    ({}, {"total": {"fn": "sum", "field": "path"}}, ["aggregates.total", "string"]),
    # missing session_key
    ({"session_key": None}, {"hits": {"fn": "count"}}, ["events.session_key"]),
    # unloadable Python aggregate
    ({}, {"dwell": {"fn": "nosuchpkg.aggregates:Dwell"}},
     ["aggregates.dwell.fn", "nosuchpkg", "--py-files"]),
    # a name that collides with a built-in cell
    ({}, {"last_ts": {"fn": "max", "field": "at"}}, ["aggregates.last_ts", "built-in"]),
    # a sequence that is not an integer
    ({"sequence": "path"}, {"hits": {"fn": "count"}}, ["events.sequence", "path", "string"]),
    # an event time that is not a time
    ({"event_time": "latency_ms"}, {"hits": {"fn": "count"}}, ["events.event_time", "double"]),
    # an unknown field in a where, with its column
    ({}, {"x": {"fn": "count", "where": "code >= 500 and verb == 'GET'"}},
     ["aggregates.x.where", "unknown field 'verb'", "column 17"]),
    # an unknown key
    ({"sesion_key": "visit"}, {"hits": {"fn": "count"}}, ["events.sesion_key"]),
    # an unknown format
    ({"format": "xml"}, {"hits": {"fn": "count"}}, ["events.format", "avro", "json"]),
    # a missing schema file
    ({"schema": "nope.avsc"}, {"hits": {"fn": "count"}}, ["events.schema", "nope.avsc"]),
    # a field an aggregate cannot use
    ({}, {"f": {"fn": "first"}}, ["aggregates.f.field", "required"]),
])
def test_a_bad_model_stops_at_start_naming_the_key(events: dict[str, Any], aggregates: Any,
                                                    names: list[str]) -> None:
    ev = {**BASE_EVENTS, **events}
    ev = {k: v for k, v in ev.items() if v is not None}
    message = model_error(ev, aggregates)
    for name in names:
        assert name in message, message


def test_a_config_with_a_bad_model_fails_to_load_naming_the_key(tmp_path: Path) -> None:
    text = (ROOT / "config.yml").read_text().replace("{fn: count}", "{fn: cnt}", 1)
    path = tmp_path / "c.yml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"aggregates\.events\.fn"):
        config.load(path)


# ------------------------------------------------------------------------------ where

FIELDS = access_model().fields()
WHERES = [
    "method == 'POST'",
    "code >= 400 and code < 500",
    "not code >= 400",
    "path in ['/api/cart', '/api/pay'] and not code >= 400",
    "account == null",
    "account != null and account != 'acct-3'",
    "account in ['acct-1', null]",
    "account not in ['acct-1', 'acct-2']",
    "cached or latency_ms > 100.5",
    "(code == 429 or code >= 500) and method != 'GET'",
    "cached == false and size <= 1000",
    "not (path == '/' or path == \"/pay\")",
    "latency_ms >= -1.5e1",
    "agent < 'M'",
]


@pytest.mark.parametrize("text", WHERES)
def test_compiled_where_agrees_with_the_interpreter(text: str) -> None:
    tree = where.parse(text)
    where.check(tree, FIELDS)
    nullable = frozenset(n for n, f in FIELDS.items() if f.nullable)
    compiled = eval(f"lambda r: {where.to_python(tree, nullable)}")
    for rec in requests(seed=3, visits=60):
        assert compiled(rec) == holds(tree, rec), (text, rec)


@pytest.mark.parametrize(("text", "column"), [
    ("code >=", 8), ("code == 'a", 9), ("(code == 1", 11), ("code in 5", 9),
    ("code == 1 code", 11), ("code in [1, path]", 13), ("&& code", 1)])
def test_where_syntax_errors_name_the_column(text: str, column: int) -> None:
    with pytest.raises(where.WhereError) as err:
        where.check(where.parse(text), FIELDS)
    assert err.value.pos == column, str(err.value)


def test_the_generated_source_holds_user_text_only_as_literals() -> None:
    model = read_model(BASE_EVENTS, {"x": {"fn": "count",
                                           "where": "path == '\\'); import os; os._exit(1) #'"}},
                       DATA)
    compiled = compile_model(model)
    assert "import os" in compiled.source  # inside a string literal, never run
    values, orders = compiled.initial()
    compiled.apply(values, orders, {"path": "/"}, 0)
    assert values == [0]


def test_floats_are_written_as_the_shortest_text_that_reads_back() -> None:
    for v in (0.1, 1 / 3, 1e16, 2.5e-308, 123.0, -0.0):
        assert float(float_text(v)) == v
    assert float_text(0.1) == "0.1" and float_text(123.0) == "123.0"


# ------------------------------------------------------------------------------ folding

def fold(model: Model, values: Sequence[tuple[bytes, bytes | None]], cut: int,
         crash_every: int = 0, partitions: int = 2) -> tuple[dict[str, dict[str, str]],
                                                             dict[Any, str], dict[int, list[Any]]]:
    """Every record through the real decoder and ``process_range`` over the fakes, in ranges
    of ``cut``; every ``crash_every``-th range dies after half its rows and is replayed.
    Returns the rows, the dead letters, and the decoded events per partition (for the
    oracle)."""
    compiled = compile_model(model)
    journal = Journal()
    sessions = FakeSessionRows(journal, model=compiled)
    dead = FakeDeadLetters(journal)
    stores = Stores(sessions, FakePartitionRows(journal), dead, FakeLeaseCheck(journal))
    decoder = Decoder(model)
    parts: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(partitions)}
    for key, value in values:
        parts[sum(key) % partitions].append((key, value))
    events: dict[int, list[Any]] = {p: [] for p in parts}
    for p, recs in parts.items():
        krecs = [KafkaRecord(i, k, v, 0) for i, (k, v) in enumerate(recs)]
        for k, v in recs:
            with contextlib.suppress(DecodeError):  # dead letters: the oracle sees no event
                events[p].append(decoder.decode(k, v, topic="t", partition=p, offset=0))
        batch = 0
        i = 0
        while i < len(krecs):
            chunk = krecs[i:i + cut]
            rng = OffsetRange("t", p, i, i + len(chunk))
            batch += 1
            if crash_every and batch % crash_every == 0:
                sessions.tear_after = max(1, len({r.key for r in chunk}) // 2)
                with pytest.raises(Crash):
                    process_range(rng, chunk, decoder.decode, stores, compiled,
                                  batch_ms=batch, epoch=1, close_after_ms=CLOSE_MS,
                                  cell_ts=batch)
                sessions.tear_after = None
                batch += 1
            process_range(rng, chunk, decoder.decode, stores, compiled, batch_ms=batch,
                          epoch=1, close_after_ms=CLOSE_MS, cell_ts=batch)
            i += cut
    return sessions.readable(), dead.rows, events


def test_a_foreign_avro_model_folds_as_the_oracle_computes_through_cuts_and_crashes() -> None:
    model = access_model()
    recs = requests(seed=5, visits=300)
    values = [(r["visit"].encode(), avro_value(r)) for r in recs]
    rows, dead, events = fold(model, values, cut=len(values))
    expected = expected_rows(events, CLOSE_MS, model)
    assert not dead
    assert compare(expected, rows) == []
    # the data exercises every rule and every kind of aggregate
    assert any(r["late_events"] != "0" for r in expected.values())
    assert any(r["duplicates"] != "0" for r in expected.values())
    assert any(r["out_of_order"] != "0" for r in expected.values())
    assert any("account" not in r for r in expected.values())  # never logged in: no cell
    assert any(r.get("account") and r["signed_in"] != r["hits"] for r in expected.values())
    assert any(r.get("api_bytes") for r in expected.values())
    assert {r["funnel"] for r in expected.values()} >= {"1", "2"}
    assert all("." in r["slowest_ms"] for r in expected.values())  # a double's text
    for cut, crash_every in ((97, 0), (41, 2), (500, 3), (13, 5)):
        again, _, _ = fold(model, values, cut, crash_every)
        assert compare(expected, again) == [], (cut, crash_every)


def test_the_same_events_as_json_fold_to_the_same_rows() -> None:
    recs = requests(seed=6, visits=150)
    avro_rows, _, _ = fold(access_model(), [(r["visit"].encode(), avro_value(r))
                                            for r in recs], cut=77)
    json_rows, dead, events = fold(access_model(format="json"),
                                   [(r["visit"].encode(), json_value(r)) for r in recs], cut=77)
    assert not dead
    assert json_rows == avro_rows
    assert compare(expected_rows(events, CLOSE_MS, access_model(format="json")), json_rows) == []


def test_json_bad_input_is_dead_lettered_by_kind() -> None:
    model = access_model(format="json")
    good = requests(seed=7, visits=5)[0]
    bad: list[tuple[bytes, bytes | None, str]] = [
        (b"v", b"{not json", "not_json"),
        (b"v", b"[1, 2]", "not_json"),
        (b"v", b'{"visit": "v", "at": 1}', "missing_field"),
        (good["visit"].encode(), json_value({**good, "code": "200"}), "invalid_field"),
        (good["visit"].encode(), json_value({**good, "method": "PATCH"}), "invalid_field"),
        (good["visit"].encode(), json_value({**good, "cached": 1}), "invalid_field"),
        (good["visit"].encode(), json_value({**good, "size": 1.5}), "invalid_field"),
        (good["visit"].encode(), json_value({**good, "n": -1}), "invalid_field"),
        (good["visit"].encode(), b'{"visit": "\xff"}', "invalid_utf8"),
        (b"other", json_value(good), "key_mismatch"),
        (good["visit"].encode(), None, "tombstone"),
        (good["visit"].encode(), b"", "empty_value"),
    ]
    decoder = Decoder(model)
    for offset, (key, value, kind) in enumerate(bad):
        with pytest.raises(DecodeError) as err:
            decoder.decode(key, value, topic="t", partition=3, offset=offset)
        assert err.value.kind == kind, (value, err.value)
        assert (err.value.topic, err.value.partition, err.value.offset) == ("t", 3, offset)
    # a double given as a JSON integer is a double; a missing nullable field its default
    event = decoder.decode(good["visit"].encode(),
                           json_value({**good, "latency_ms": 7, "account": None}),
                           topic="t", partition=0, offset=0)
    assert event.record["latency_ms"] == 7.0 and type(event.record["latency_ms"]) is float
    assert event.record["account"] is None


def test_a_model_without_sequence_keys_on_the_kafka_key_and_orders_by_offset() -> None:
    sections = model_sections()
    events = {**sections["events"], "session_key": "@key"}
    del events["sequence"]
    model = read_model(events, {"hits": {"fn": "count"}, "landing": {"fn": "first",
                                                                      "field": "path"},
                                "leaving": {"fn": "last", "field": "path"}}, DATA)
    recs = requests(seed=8, visits=80)
    values = [(r["visit"].encode(), avro_value(r)) for r in recs]
    rows, dead, decoded = fold(model, values, cut=50, crash_every=3)
    assert not dead
    expected = expected_rows(decoded, CLOSE_MS, model)
    assert compare(expected, rows) == []
    assert all("duplicates" not in r and "out_of_order" not in r for r in rows.values())
    # without a sequence a repeated request counts again: more hits than distinct requests
    distinct = {(r["visit"], r["n"]) for r in recs}
    assert sum(int(r["hits"]) + int(r["late_events"]) for r in rows.values()) == len(recs)
    assert len(recs) > len(distinct)


def test_timestamp_micros_event_time_is_read_as_milliseconds(tmp_path: Path) -> None:
    text = (DATA / "access_log.avsc").read_text().replace("timestamp-millis",
                                                             "timestamp-micros")
    (tmp_path / "micros.avsc").write_text(text)
    model = read_model({**BASE_EVENTS, "schema": "micros.avsc"}, {"hits": {"fn": "count"}},
                       tmp_path)
    rec = {**requests(seed=9, visits=1)[0], "at": 1_767_225_600_123_456}
    event = Decoder(model).decode(rec["visit"].encode(), avro_value(rec), topic="t",
                                  partition=0, offset=0)
    assert event.ts == 1_767_225_600_123


def test_random_batches_of_a_foreign_model_match_whatever_the_cut() -> None:
    model = access_model()
    values = [(r["visit"].encode(), avro_value(r)) for r in requests(seed=10, visits=120)]
    whole, _, events = fold(model, values, cut=len(values))
    cut = random.Random(4).randrange(2, 300)
    assert fold(model, values, cut)[0] == whole
    assert compare(expected_rows(events, CLOSE_MS, model), whole) == []


def test_closed_summaries_carry_the_models_cells() -> None:
    model = access_model()
    compiled = compile_model(model)
    journal = Journal()
    sink = FakeSummarySink(journal)
    stores = Stores(FakeSessionRows(journal, model=compiled), FakePartitionRows(journal),
                    FakeDeadLetters(journal), FakeLeaseCheck(journal), lambda p: sink)
    recs = requests(seed=12, visits=40)
    krecs = [KafkaRecord(i, r["visit"].encode(), avro_value(r), 0) for i, r in enumerate(recs)]
    decoder = Decoder(model)
    events = [decoder.decode(k.key, k.value, topic="t", partition=0, offset=k.offset)
              for k in krecs]
    process_range(OffsetRange("t", 0, 0, len(krecs)), krecs, decoder.decode, stores, compiled,
                  batch_ms=1, epoch=1, close_after_ms=CLOSE_MS, cell_ts=1)
    want = {sid: row for sid, row in expected_rows({0: events}, CLOSE_MS, model).items()
            if row["state"] == "closed"}
    got = {key.decode(): json.loads(value) for _, recs_ in sink.committed
           for key, value in recs_ if value is not None}
    assert want and got.keys() == want.keys()
    for sid, summary in got.items():
        assert summary == {"session_id": sid, **want[sid]}
        assert {"hits", "funnel", "landing", "slowest_ms"} <= summary.keys()
