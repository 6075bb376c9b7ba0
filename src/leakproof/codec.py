"""Kafka record bytes <-> WebEvent: schemaless Avro binary, key = session_id (UTF-8).

``decode`` either returns a valid WebEvent or raises a DecodeError carrying topic, partition,
offset and the raw bytes, so the caller can dead-letter the record and go on. The rules:

- value null (tombstone), empty, not a WebEvent, or with bytes left over -> ValueDecodeError;
- a string field that is not UTF-8, an empty session_id, seq < 0 or ts < 0 -> ValueDecodeError;
- key null, not UTF-8, or not equal to the payload's session_id -> KeyDecodeError (the key
  places the session in its partition; a mismatched key could split a session).
"""

from __future__ import annotations

import io
from functools import cache
from typing import Any

import fastavro

from leakproof.errors import KeyDecodeError, ValueDecodeError
from leakproof.events import WebEvent, schema_json


@cache
def parsed_schema() -> Any:
    """fastavro's compiled form of the shipped schema (compiled once per process)."""
    return fastavro.parse_schema(schema_json())


def encode_value(event: WebEvent) -> bytes:
    """The Kafka message value: the record alone, no container header, no registry framing."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed_schema(), event.to_record())
    return out.getvalue()


def encode_key(event: WebEvent) -> bytes:
    return event.session_id.encode("utf-8")


def decode(key: bytes | None, value: bytes | None, *, topic: str, partition: int,
           offset: int) -> WebEvent:
    """Decode and validate one record; raises KeyDecodeError or ValueDecodeError."""
    where: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset,
                             "key": key, "value": value}
    if value is None:
        raise ValueDecodeError("null value (tombstone)", **where)
    if not value:
        raise ValueDecodeError("empty value", **where)
    buf = io.BytesIO(value)
    try:
        rec = fastavro.schemaless_reader(buf, parsed_schema(), None)
    except UnicodeDecodeError as exc:
        raise ValueDecodeError(f"invalid UTF-8 in a string field: {exc.reason}", **where) from exc
    except Exception as exc:
        raise ValueDecodeError(f"not a WebEvent: {type(exc).__name__}: {exc}", **where) from exc
    if buf.tell() != len(value):
        raise ValueDecodeError(f"not a WebEvent: {len(value) - buf.tell()} bytes left over after "
                               f"the record", **where)
    if not isinstance(rec, dict):
        raise ValueDecodeError("not a WebEvent record", **where)
    event = WebEvent(**rec)
    if not event.session_id:
        raise ValueDecodeError("empty session_id", **where)
    if event.seq < 0:
        raise ValueDecodeError(f"seq must be >= 0, got {event.seq}", **where)
    if event.ts < 0:
        raise ValueDecodeError(f"ts must be >= 0 (epoch ms), got {event.ts}", **where)
    if key is None:
        raise KeyDecodeError("null key; the key must be the session_id", **where)
    try:
        key_text = key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KeyDecodeError("key is not UTF-8", **where) from exc
    if key_text != event.session_id:
        raise KeyDecodeError(f"key {key_text!r} differs from session_id {event.session_id!r}",
                             **where)
    return event
