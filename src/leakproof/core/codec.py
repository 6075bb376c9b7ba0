"""Kafka record bytes -> ``Event`` under the model (``events:``): Avro binary or JSON.

``Decoder.decode`` either returns a valid Event or raises a DecodeError carrying topic,
partition, offset, the raw bytes and a short ``kind`` (the progress line counts by kind), so
the caller can dead-letter the record and go on. The rules, in the order they are checked:

- value null (tombstone) -> ``tombstone``; empty -> ``empty_value``;
- ``events.format: avro``: a value starting with C3 01 is Avro single-object encoding: the
  8-byte CRC-64-AVRO fingerprint after it names the writer schema, which must be the reader
  schema or one listed in ``input.writer_schemas`` (else ``unknown_schema``); the record is
  read with schema resolution, so an evolved writer (a field added with a default) decodes.
  Otherwise the value is plain schemaless binary of the reader schema. If it does not decode,
  or leaves bytes over, each ``input.writer_schemas`` entry is tried as the writer, and the
  first that consumes the value exactly wins; if none does -> ``not_avro`` or
  ``trailing_bytes``. A string field that is not UTF-8 -> ``invalid_utf8``;
- ``events.format: confluent``: registry-framed Avro (``leakproof.core.frames``): a frame names
  the writer schema -- in a ``__value_schema_id`` or ``value.schema.version.id`` header, or
  at the start of the value: Confluent's magic byte 0 + 4-byte id or 1 + 16-byte GUID, or
  Cloudera's protocols 0-3 (``events.registry.api: cloudera``). A frame the API does not
  know (another first byte, a short value, a malformed header) -> ``unknown_magic``; a
  schema the registry does not know -> ``unknown_schema_id``. The writer schema is fetched
  once per frame and resolved against the reader schema (read directly when the two are the
  same). A registry that cannot be reached raises RegistryUnavailable: an outage, never a
  dead letter;
- ``events.format: json``: the value must be UTF-8 (``invalid_utf8``) JSON (``not_json``)
  holding an object (``not_json``); each field of the reader schema is taken from it: a
  missing one takes the schema's default, or is ``missing_field``; a value of the wrong type
  (or a symbol an enum lacks) is ``invalid_field``. Keys the schema does not name are ignored;
- the model's fields: a null or empty session key, a null or negative event time or sequence
  -> ``invalid_field``;
- event time more than ``input.max_ahead_s`` after the record's Kafka timestamp ->
  ``future_ts``: one such event would push the partition's watermark ahead and close every
  open session early. The Kafka timestamp is part of the record, so a replay decides the
  same way;
- key null -> ``null_key``; not UTF-8 -> ``key_not_utf8``; with a session key field, a key
  that is not that field's text -> ``key_mismatch`` (the key places the session in its
  partition; a mismatched key could split a session between two partitions' tasks).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import fastavro
import orjson
from fastavro.schema import fingerprint, to_parsing_canonical_form

from leakproof.core.errors import DecodeError, KeyDecodeError, SchemaMismatch, ValueDecodeError
from leakproof.core.events import Event, WebEvent, schema_json
from leakproof.core.frames import FRAME_LENGTHS, FrameError, confluent_frame, describe, frame_of
from leakproof.core.native import flat_reader
from leakproof.model.schema import NO_DEFAULT, Field, without_logical_types
from leakproof.model.spec import KEY, Model, web_model

SINGLE_OBJECT_MAGIC = b"\xc3\x01"


@cache
def parsed_schema() -> Any:
    """fastavro's compiled form of the shipped schema (compiled once per process)."""
    return fastavro.parse_schema(schema_json())


def schema_fingerprint(schema: Any) -> bytes:
    """The 8 bytes that follow C3 01 in single-object encoding (CRC-64-AVRO, little-endian)."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def encode_value(event: WebEvent) -> bytes:
    """The Kafka message value: the record alone, no container header, no registry framing."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed_schema(), event.to_record())
    return out.getvalue()


def encode_single_object(record: dict[str, Any], writer_schema: Any) -> bytes:
    """Avro single-object encoding of ``record`` under ``writer_schema`` (for producers and
    tests of schema evolution)."""
    parsed = fastavro.parse_schema(writer_schema)
    out = io.BytesIO()
    out.write(SINGLE_OBJECT_MAGIC + schema_fingerprint(parsed))
    fastavro.schemaless_writer(out, parsed, record)
    return out.getvalue()


def encode_confluent(record: dict[str, Any], schema_id: int, writer_schema: Any) -> bytes:
    """The Confluent wire format: magic byte 0, the schema's 4-byte big-endian registry id,
    then the record as schemaless Avro of ``writer_schema`` (parsed)."""
    return encode_framed(record, confluent_frame(schema_id), writer_schema)


def encode_framed(record: dict[str, Any], frame: bytes, writer_schema: Any) -> bytes:
    """``frame`` (``leakproof.core.frames``), then the record as schemaless Avro of
    ``writer_schema`` (parsed)."""
    out = io.BytesIO()
    out.write(frame)
    fastavro.schemaless_writer(out, writer_schema, record)
    return out.getvalue()


def encode_key(event: WebEvent) -> bytes:
    return event.session_id.encode("utf-8")


Fault = tuple[type[DecodeError], str, str]
_MISSING = object()


def unreadable(writer: Any, reader: Any) -> list[str]:
    """The reader's top-level fields a record of ``writer`` lacks (by name or alias) and the
    reader gives no default for: Avro's resolution fails on each such record. (A producer
    that removed a field passes the registry's default BACKWARD check, which asks the
    reverse: whether the new schema reads the old records.)"""
    if not isinstance(writer, dict) or not isinstance(reader, dict):
        return []
    written = {f["name"] for f in writer.get("fields", [])}
    return [f["name"] for f in reader.get("fields", [])
            if f["name"] not in written and "default" not in f
            and not written.intersection(f.get("aliases", []))]


def _where(key: bytes | None, value: bytes | None, topic: str, partition: int,
           offset: int) -> dict[str, Any]:
    """A record's error context; its value's presence checked first (tombstone, empty)."""
    where: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset,
                             "key": key, "value": value}
    if value is None:
        raise ValueDecodeError("null value (tombstone)", kind="tombstone", **where)
    if not value:
        raise ValueDecodeError("empty value", kind="empty_value", **where)
    return where


class Decoder:
    """Decodes and validates records; built once per worker from the model and ``input``."""

    def __init__(self, model: Model, writer_schemas: Sequence[str] = (),
                 max_ahead_ms: int = 0,
                 lookup: Callable[[bytes], str | None] | None = None,
                 api: str = "confluent", *, key_checked: bool = True) -> None:
        """``lookup``: the schema text a frame names, or None when the registry has none
        (``events.format: confluent``; ``api`` is ``events.registry.api``);
        ``key_checked`` False: the record key is not compared with the session key field
        (the re-keying stage reads the field to make the key: ``kafka/rekey.py``)."""
        schema = model.schema
        reader = fastavro.parse_schema(without_logical_types(schema))
        self._reader = reader
        self._native = flat_reader(reader)  # None: fastavro reads the fast path too
        self._evolved: list[Any] = []
        self._by_fingerprint: dict[bytes, Any] = {
            schema_fingerprint(fastavro.parse_schema(schema)): None}
        for text in writer_schemas:
            writer = fastavro.parse_schema(without_logical_types(json.loads(text)))
            self._evolved.append(writer)
            self._by_fingerprint.setdefault(schema_fingerprint(writer), writer)
        self._max_ahead_ms = max_ahead_ms
        self._json = model.format == "json"
        self._framed = model.format == "confluent"
        if self._framed and lookup is None:
            raise ValueError("events.format: confluent needs a schema lookup")
        self._lookup = lookup
        self._api = api
        self._frame_lengths = FRAME_LENGTHS[api]
        self._reader_form = to_parsing_canonical_form(reader)
        self._by_frame: dict[bytes, Any] = {}  # frame -> parsed writer (the reader if same)
        self._fields: list[Field] = list(model.fields().values())
        self._by_key = model.session_key == KEY
        self._key_field = model.session_key
        self._key_name = "session key" if self._by_key else model.session_key
        self._key_checked = key_checked
        self._time, self._unit = model.event_time, model.time_unit
        self._seq = model.sequence

    def decode(self, key: bytes | None, value: bytes | None, *, topic: str, partition: int,
               offset: int, timestamp: int | None = None,
               headers: Sequence[tuple[str, bytes | None]] = ()) -> Event:
        """Decode and validate one record; raises KeyDecodeError or ValueDecodeError.

        Almost every Avro record is plain schemaless under the reader schema and passes every
        rule: the fast path takes those and nothing else. Any record it does not take -- one
        that fails a rule, or needs another writer schema -- goes through the checked path,
        which decides it by the rules in the module docstring, in their order, and names what
        failed.
        """
        if self._json:
            return self._from_json(key, value, topic, partition, offset, timestamp)
        if self._framed:
            return self._from_registry(key, value, topic, partition, offset, timestamp,
                                       headers)
        if value and value[:2] != SINGLE_OBJECT_MAGIC:
            event = self._fast(key, value, timestamp)
            if event is not None:
                return event
        return self._checked(key, value, topic, partition, offset, timestamp)

    def _fast(self, key: bytes | None, value: bytes, timestamp: int | None, start: int = 0
              ) -> Event | None:
        """The event if the value (from ``start``: past a registry header) is plain
        schemaless Avro of the reader schema and passes every rule; else None (no error
        context is built on this path). The native reader, where there is one, gives
        fastavro's dict or None; None sends the record to the checked path, as here."""
        rec = (self._native.read(value, start) if self._native is not None
               else self._fastavro(value, start))
        if rec is None:
            return None
        event = self._event(rec, key, timestamp)
        return event if type(event) is Event else None

    def _fastavro(self, value: bytes, start: int) -> dict[str, Any] | None:
        """The record fastavro reads from ``start`` if it is exactly one, else None."""
        buf = io.BytesIO(value)
        buf.seek(start)
        try:
            rec = fastavro.schemaless_reader(buf, self._reader, None)
        except Exception:  # noqa: BLE001 - the checked path reads it again and names it
            return None
        return rec if type(rec) is dict and buf.tell() == len(value) else None

    def _checked(self, key: bytes | None, value: bytes | None, topic: str, partition: int,
                 offset: int, timestamp: int | None) -> Event:
        where = _where(key, value, topic, partition, offset)
        assert value is not None  # _where raised for a tombstone
        if value.startswith(SINGLE_OBJECT_MAGIC):
            rec = self._single_object(value, where)
        else:
            rec = self._schemaless(value, where)
        return self._valid(rec, key, timestamp, where)

    def _valid(self, rec: dict[str, Any], key: bytes | None, timestamp: int | None,
               where: dict[str, Any]) -> Event:
        event = self._event(rec, key, timestamp)
        if isinstance(event, Event):
            return event
        error, kind, reason = event
        raise error(reason, kind=kind, **where)

    def _from_registry(self, key: bytes | None, value: bytes | None, topic: str,
                       partition: int, offset: int, timestamp: int | None,
                       headers: Sequence[tuple[str, bytes | None]]) -> Event:
        """Registry framing: the common case -- a known frame at the start of the value whose
        schema is the reader's -- reads the record straight after the frame."""
        if not headers and value:
            n = self._frame_lengths.get(value[0], 0)
            if n and self._by_frame.get(value[:n]) is self._reader:
                event = self._fast(key, value, timestamp, n)
                if event is not None:
                    return event
        where = _where(key, value, topic, partition, offset)
        assert value is not None  # _where raised for a tombstone
        try:
            frame, start = frame_of(self._api, value, headers)
        except FrameError as exc:
            raise ValueDecodeError(str(exc), kind="unknown_magic", **where) from None
        rec = self._read(value, start, self._writer(frame, where), where)
        return self._valid(rec, key, timestamp, where)

    def _writer(self, frame: bytes, where: dict[str, Any]) -> Any:
        """The parsed writer schema a frame names, fetched once (ids never change)."""
        writer = self._by_frame.get(frame)
        if writer is not None:
            return writer
        assert self._lookup is not None
        text = self._lookup(frame)  # RegistryUnavailable passes up: an outage
        name = describe(self._api, frame)
        if text is None:
            raise ValueDecodeError(f"{name} is not in the registry", kind="unknown_schema_id",
                                   **where)
        try:
            writer = fastavro.parse_schema(without_logical_types(json.loads(text)))
        except Exception as exc:
            raise ValueDecodeError(f"{name}: the registry's schema does not parse: "
                                   f"{type(exc).__name__}: {exc}", kind="not_avro",
                                   **where) from exc
        if to_parsing_canonical_form(writer) == self._reader_form:
            writer = self._reader  # the same schema: read without resolution
        elif missing := unreadable(writer, self._reader):
            subject = f"{where['topic']}-value" if self._api == "confluent" else where["topic"]
            raise SchemaMismatch(
                f"{name} (subject {subject}) has no field {', '.join(missing)}, which the "
                f"reader schema needs and gives no default: none of its records can be read, "
                f"so the range stops instead of setting every one aside. Give the reader a "
                f"default for {missing[0]} (events.schema, or a newer registry version when the "
                f"reader comes from the registry) and restart; the records are read then.")
        self._by_frame[frame] = writer
        return writer

    def _from_json(self, key: bytes | None, value: bytes | None, topic: str, partition: int,
                   offset: int, timestamp: int | None) -> Event:
        """JSON: orjson parses (5.6x the standard library's speed on a 10-field access-log
        record, 0.38 against 2.13 us; msgspec's untyped decoder is as fast, its typed one
        would report a missing and a mistyped field only as message text)."""
        where = _where(key, value, topic, partition, offset)
        assert value is not None  # _where raised for a tombstone
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise ValueDecodeError(f"invalid UTF-8: {bad.reason}", kind="invalid_utf8",
                                       **where) from exc
            raise ValueDecodeError(f"not JSON: {exc}", kind="not_json", **where) from exc
        if type(obj) is not dict:
            raise ValueDecodeError(f"not a JSON object: a {type(obj).__name__}",
                                   kind="not_json", **where)
        rec: dict[str, Any] = {}
        for f in self._fields:
            v = obj.get(f.name, _MISSING)
            if v is _MISSING:
                if f.default is NO_DEFAULT:
                    raise ValueDecodeError(f"field {f.name!r} is missing and the schema gives "
                                           f"it no default", kind="missing_field", **where)
                v = f.default
            elif v is None:
                if not f.nullable:
                    raise ValueDecodeError(f"field {f.name!r} is null; the schema's type is "
                                           f"{f.avro}", kind="invalid_field", **where)
            else:
                v = _json_value(f, v)
                if v is _MISSING:
                    raise ValueDecodeError(f"field {f.name!r} holds {obj[f.name]!r}; the "
                                           f"schema's type is {f.avro}", kind="invalid_field",
                                           **where)
            rec[f.name] = v
        return self._valid(rec, key, timestamp, where)

    def _single_object(self, value: bytes, where: dict[str, Any]) -> dict[str, Any]:
        fp = value[2:10]
        if len(fp) < 8 or fp not in self._by_fingerprint:
            raise ValueDecodeError(
                f"single-object encoding with unknown writer schema fingerprint {fp.hex()}; "
                f"list its schema in input.writer_schemas", kind="unknown_schema", **where)
        writer = self._by_fingerprint[fp]
        return self._read(value, 10, writer or self._reader, where)

    def _schemaless(self, value: bytes, where: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._read(value, 0, self._reader, where)
        except ValueDecodeError as first:
            if first.kind == "invalid_utf8":
                raise
            for writer in self._evolved:
                try:
                    return self._read(value, 0, writer, where)
                except ValueDecodeError:
                    continue
            raise

    def _read(self, value: bytes, start: int, writer: Any, where: dict[str, Any]
              ) -> dict[str, Any]:
        buf = io.BytesIO(value)
        buf.seek(start)
        try:
            rec = fastavro.schemaless_reader(buf, writer, None)
        except UnicodeDecodeError as exc:
            raise ValueDecodeError(f"invalid UTF-8 in a string field: {exc.reason}",
                                   kind="invalid_utf8", **where) from exc
        except Exception as exc:
            raise ValueDecodeError(f"not a record of the schema: {type(exc).__name__}: {exc}",
                                   kind="not_avro", **where) from exc
        if buf.tell() != len(value):
            raise ValueDecodeError(f"not a record of the schema: {len(value) - buf.tell()} "
                                   f"bytes left over after the record", kind="trailing_bytes",
                                   **where)
        if not isinstance(rec, dict):
            raise ValueDecodeError("not a record", kind="not_avro", **where)
        if writer is not self._reader:
            # Resolution skips the writer's extra fields by seeking, which never fails on a
            # short buffer; so the plain read above checked the bytes, this one resolves.
            buf.seek(start)
            try:
                resolved = fastavro.schemaless_reader(buf, writer, self._reader)
            except Exception as exc:
                raise ValueDecodeError(f"cannot resolve the writer schema to the reader "
                                       f"schema: {type(exc).__name__}: {exc}", kind="not_avro",
                                       **where) from exc
            assert isinstance(resolved, dict)  # the reader schema is a record
            return resolved
        return rec

    def _event(self, rec: dict[str, Any], key: bytes | None, timestamp: int | None
               ) -> Event | Fault:
        """The event, or the first rule ``rec`` and its key break as (error, kind, reason).
        The rules in one place: the fast path asks, the checked paths raise."""
        if self._by_key:
            key_sid = self._key_text(key)
            if isinstance(key_sid, tuple):
                return key_sid
            if not key_sid:
                return KeyDecodeError, "invalid_field", "empty key; the key is the session key"
            sid = key_sid
        else:
            sid = rec[self._key_field]
            if sid is None or sid == "":
                return ValueDecodeError, "invalid_field", f"empty {self._key_field}"
            if type(sid) is not str:
                sid = str(sid)
        seq = None
        if self._seq is not None:
            seq = rec[self._seq]
            if seq is None or seq < 0:
                return ValueDecodeError, "invalid_field", f"{self._seq} must be >= 0, got {seq}"
        ts = rec[self._time]
        if ts is None or ts < 0:
            return (ValueDecodeError, "invalid_field",
                    f"{self._time} must be >= 0 (epoch time), got {ts}")
        if self._unit != 1:
            ts //= self._unit
        if self._max_ahead_ms and timestamp is not None and timestamp >= 0 \
                and ts > timestamp + self._max_ahead_ms:
            return ValueDecodeError, "future_ts", (
                f"{self._time} {ts} is {(ts - timestamp) / 1000:.0f} s after the record's "
                f"Kafka timestamp {timestamp}; input.max_ahead_s allows "
                f"{self._max_ahead_ms / 1000:.0f} s")
        if not self._by_key and self._key_checked:
            key_text = self._key_text(key)
            if isinstance(key_text, tuple):
                return key_text
            if key_text != sid:
                return KeyDecodeError, "key_mismatch", (f"key {key_text!r} differs from "
                                                        f"{self._key_field} {sid!r}")
        return Event(sid, ts, seq, rec)

    def _key_text(self, key: bytes | None) -> str | Fault:
        """The record key as text, or why it cannot be the session's."""
        if key is None:
            return KeyDecodeError, "null_key", f"null key; the key must be the {self._key_name}"
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return KeyDecodeError, "key_not_utf8", "key is not UTF-8"


def _json_value(f: Field, v: Any) -> Any:
    """``v`` as the field's type wants it, or _MISSING if it is not of that type."""
    t = type(v)
    if f.kind == "string":
        if t is not str or (f.symbols is not None and v not in f.symbols):
            return _MISSING
    elif f.kind == "int":
        if t is not int:
            return _MISSING
    elif f.kind == "float":
        if t is float:
            return v
        return float(v) if t is int else _MISSING
    elif f.kind == "boolean":
        if t is not bool:
            return _MISSING
    elif f.kind == "bytes" and t is not str:
        return _MISSING
    return v


@cache
def _default_decoder() -> Decoder:
    return Decoder(web_model())


def decode(key: bytes | None, value: bytes | None, *, topic: str, partition: int,
           offset: int) -> Event:
    """Decode with the web model only and no timestamp check (tools and tests)."""
    return _default_decoder().decode(key, value, topic=topic, partition=partition,
                                     offset=offset)


__all__ = ["DecodeError", "Decoder", "decode", "encode_key", "encode_single_object",
           "encode_value", "parsed_schema", "schema_fingerprint"]
