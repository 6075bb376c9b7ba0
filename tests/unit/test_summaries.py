"""Closed-session summaries as record values: the Avro schema derived from a model, and a
summary written under it reads back to the row's typed values."""

from __future__ import annotations

import io
import json

import fastavro

from leakproof.core.sessions import SessionState
from leakproof.core.summaries import avro_summary, json_summary, summary_schema
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model


def test_the_web_models_summary_schema() -> None:
    schema = summary_schema(compile_model(web_model()))
    assert [(f["name"], f["type"]) for f in schema["fields"]] == [
        ("session_id", "string"), ("user_id", ["null", "string"]),
        ("events", ["null", "long"]), ("pageviews", ["null", "long"]),
        ("clicks", ["null", "long"]), ("purchases", ["null", "long"]),
        ("errors", ["null", "long"]), ("bytes", ["null", "long"]),
        ("entry_url", ["null", "string"]), ("exit_url", ["null", "string"]),
        ("unknown_types", ["null", "long"]), ("first_ts", "long"), ("last_ts", "long"),
        ("state", "string"), ("late_events", "long"), ("duplicates", "long"),
        ("out_of_order", "long")]
    fastavro.parse_schema(schema)  # a valid schema


def test_an_avro_summary_reads_back_to_the_rows_values_and_matches_the_json_one() -> None:
    model = compile_model(web_model())
    s = SessionState("s1", ["u7", 3, 2, 1, 0, 0, 1536, "/a", None, 0], [None] * 10,
                     first_ts=1_000, last_ts=9_000, state="closed", late_events=1)
    value = avro_summary(model, b"\x00\x00\x00\x00\x2a")("s1", s)
    assert value[:5] == b"\x00\x00\x00\x00\x2a"
    rec = fastavro.schemaless_reader(io.BytesIO(value[5:]),
                                     fastavro.parse_schema(summary_schema(model)), None)
    assert rec == {"session_id": "s1", "user_id": "u7", "events": 3, "pageviews": 2,
                   "clicks": 1, "purchases": 0, "errors": 0, "bytes": 1536, "entry_url": "/a",
                   "exit_url": None, "unknown_types": 0, "first_ts": 1_000, "last_ts": 9_000,
                   "state": "closed", "late_events": 1, "duplicates": 0, "out_of_order": 0}
    text = json.loads(json_summary(model)("s1", s))
    assert isinstance(rec, dict)
    assert {k: str(v) for k, v in rec.items() if v is not None} == text
