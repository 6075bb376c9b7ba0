"""A closed session's summary as a Kafka record value: JSON (the default) or registry-framed
Avro (``output.format: avro``).

JSON holds the row's family ``s`` as text, as operators read it in HBase. Avro holds typed
values under a schema derived from the session model (``summary_schema``): the session id,
the built-in cells, and one field per aggregate, typed by what the aggregate yields -- a
count a long, a sum a long or a double, min/max/first/last the type of their field, a Python
aggregate its text. Every aggregate field is nullable: a session may have no value yet.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro

from leakproof.model.compiled import CompiledModel
from leakproof.session_cells import readable, to_cells
from leakproof.sessions import CLOSED, SessionState

Encode = Callable[[str, SessionState], bytes]
_AVRO = {"int": "long", "float": "double", "string": "string", "boolean": "boolean"}


def summary_schema(model: CompiledModel) -> dict[str, Any]:
    """The Avro schema of a summary of ``model``'s sessions."""
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


def avro_summary(model: CompiledModel, frame: bytes) -> Encode:
    """``frame`` (the registry's id of ``summary_schema(model)``), then the typed record."""
    parsed = fastavro.parse_schema(summary_schema(model))
    python = model.python
    names = model.names

    def encode(sid: str, s: SessionState) -> bytes:
        rec: dict[str, Any] = {"session_id": sid, "first_ts": s.first_ts,
                               "last_ts": s.last_ts, "state": CLOSED,
                               "late_events": s.late_events, "duplicates": s.duplicates,
                               "out_of_order": s.out_of_order}
        for i, v in enumerate(s.values):
            rec[names[i]] = None if v is None else python[i].to_text(v) if i in python else v
        out = io.BytesIO()
        out.write(frame)
        fastavro.schemaless_writer(out, parsed, rec)
        return out.getvalue()
    return encode
