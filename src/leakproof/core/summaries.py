"""A closed session's summary as a Kafka record value: JSON (the default) or registry-framed
Avro (``output.format: avro``).

JSON holds the row's family ``s`` as text, as operators read it in HBase. Avro holds typed
values under a schema derived from the session model (``summary_schema``): the session id,
the built-in cells, and one field per aggregate, typed by what the aggregate yields -- a
count a long, a sum a long or a double, min/max/first/last the type of their field, a Python
aggregate its text. Every aggregate field is nullable: a session may have no value yet.

Every summary record (and tombstone) carries two headers: ``leakproof.version`` (decimal
text: the cell timestamp of the range that published it, ``task.publish``) and
``leakproof.final`` (``true`` once the session is closed). With ``output.emit: update`` the
value holds them too (``json_update``, ``avro_update``); with ``close`` the value stays as it
always was.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro

from leakproof.core.session_cells import readable, to_cells
from leakproof.core.sessions import CLOSED, SessionState
from leakproof.model.compiled import CompiledModel

Encode = Callable[[str, SessionState], bytes]
EncodeUpdate = Callable[[str, SessionState, int], bytes]  # ... and the summary's version
Headers = list[tuple[str, bytes]]
VERSION = "leakproof.version"
FINAL = "leakproof.final"
_AVRO = {"int": "long", "float": "double", "string": "string", "boolean": "boolean"}


def summary_schema(model: CompiledModel, updates: bool = False) -> dict[str, Any]:
    """The Avro schema of a summary of ``model``'s sessions; with ``updates``
    (``output.emit: update``) also ``version`` and ``final``, with defaults (what a summary
    written before them was: no version, closed) so the registry takes it as a compatible
    change of the subject."""
    fields: list[dict[str, Any]] = [{"name": "session_id", "type": "string"}]
    kinds = model.model.fields()
    for i, a in enumerate(model.model.aggregates):
        if i in model.python:
            avro = "string"
        elif a.fn == "count":
            avro = "long"
        else:
            assert a.field is not None  # spec.check: every built-in but count names a field
            avro = _AVRO[kinds[a.field].kind]
        fields.append({"name": a.name, "type": ["null", avro], "default": None})
    fields += [{"name": n, "type": t} for n, t in (
        ("first_ts", "long"), ("last_ts", "long"), ("state", "string"),
        ("late_events", "long"))]
    if model.sequenced:
        fields += [{"name": "duplicates", "type": "long"},
                   {"name": "out_of_order", "type": "long"}]
    if updates:
        fields += [{"name": "version", "type": "long", "default": -1},
                   {"name": "final", "type": "boolean", "default": True}]
    return {"type": "record", "name": "SessionSummary", "namespace": "leakproof",
            "doc": f"A closed session of the model over {model.model.schema_file}",
            "fields": fields}


def json_summary(model: CompiledModel) -> Encode:
    """The row's family ``s`` as JSON text, state closed."""
    def encode(sid: str, s: SessionState) -> bytes:
        summary = readable(to_cells(s, model))
        summary["state"] = CLOSED
        return json.dumps({"session_id": sid, **summary}).encode()
    return encode


def json_update(model: CompiledModel) -> EncodeUpdate:
    """The row's family ``s`` as JSON text (its state as it stands: open or closed), with
    ``version`` and ``final``: what ``output.emit: update`` publishes."""
    def encode(sid: str, s: SessionState, version: int) -> bytes:
        summary = readable(to_cells(s, model))
        return json.dumps({"session_id": sid, **summary, "version": version,
                           "final": s.closed}).encode()
    return encode


def headers(version: int, final: bool) -> Headers:
    """The headers of every summary record: its version and whether the session is closed
    (a tombstone's: final)."""
    return [(VERSION, str(version).encode()), (FINAL, b"true" if final else b"false")]


def avro_summary(model: CompiledModel, frame: bytes) -> Encode:
    """``frame`` (the registry's id of ``summary_schema(model)``), then the typed record."""
    parsed = fastavro.parse_schema(summary_schema(model))
    record = _avro_record(model)

    def encode(sid: str, s: SessionState) -> bytes:
        rec = record(sid, s)
        rec["state"] = CLOSED
        out = io.BytesIO()
        out.write(frame)
        fastavro.schemaless_writer(out, parsed, rec)
        return out.getvalue()
    return encode


def avro_update(model: CompiledModel, frame: bytes) -> EncodeUpdate:
    """``frame`` (the registry's id of ``summary_schema(model, updates=True)``), then the
    typed record, its state as it stands, with ``version`` and ``final``."""
    parsed = fastavro.parse_schema(summary_schema(model, updates=True))
    record = _avro_record(model)

    def encode(sid: str, s: SessionState, version: int) -> bytes:
        rec = record(sid, s)
        rec["version"], rec["final"] = version, s.closed
        out = io.BytesIO()
        out.write(frame)
        fastavro.schemaless_writer(out, parsed, rec)
        return out.getvalue()
    return encode


def _avro_record(model: CompiledModel) -> Callable[[str, SessionState], dict[str, Any]]:
    python = model.python
    names = model.names

    def record(sid: str, s: SessionState) -> dict[str, Any]:
        rec: dict[str, Any] = {"session_id": sid, "first_ts": s.first_ts,
                               "last_ts": s.last_ts, "state": s.state,
                               "late_events": s.late_events, "duplicates": s.duplicates,
                               "out_of_order": s.out_of_order}
        for i, v in enumerate(s.values):
            rec[names[i]] = None if v is None else python[i].to_text(v) if i in python else v
        return rec
    return record
