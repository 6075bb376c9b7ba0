"""Codec: round trips in the fixed field order, and decode errors with their coordinates."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from leakproof import codec
from leakproof.errors import DecodeError, KeyDecodeError, ValueDecodeError
from leakproof.events import WebEvent, schema_json

EVENT = WebEvent("s1", "u1", 3, 1_700_000_000_123, "click", "https://x/a", 200, 512,
                 referrer=None, user_agent="curl/8")
WHERE: dict[str, Any] = {"topic": "t", "partition": 2, "offset": 41}


def test_schema_field_order_is_the_contract() -> None:
    names = [f["name"] for f in schema_json()["fields"]]
    assert names == ["session_id", "user_id", "seq", "ts", "event_type", "url", "status",
                     "bytes", "referrer", "user_agent"]


def test_round_trip() -> None:
    value = codec.encode_value(EVENT)
    assert codec.decode(b"s1", value, **WHERE) == EVENT


def test_value_is_schemaless_binary_readable_by_plain_fastavro() -> None:
    value = codec.encode_value(EVENT)
    assert not value.startswith(b"Obj\x01")  # no container header
    record = fastavro.schemaless_reader(io.BytesIO(value), fastavro.parse_schema(schema_json()),
                                        None)
    assert record == EVENT.to_record()


def good() -> bytes:
    return codec.encode_value(EVENT)


@pytest.mark.parametrize(
    ("key", "value", "kind", "reason"),
    [
        (b"s1", None, ValueDecodeError, "null value"),
        (b"s1", b"", ValueDecodeError, "empty value"),
        (b"s1", good()[:7], ValueDecodeError, "not a WebEvent"),
        (b"s1", good() + b"\x00\x01", ValueDecodeError, "bytes left over"),
        (b"s1", b"\xff" * 40, ValueDecodeError, "not a WebEvent"),
        (None, good(), KeyDecodeError, "null key"),
        (b"\xff\xfe", good(), KeyDecodeError, "not UTF-8"),
        (b"other", good(), KeyDecodeError, "differs from session_id"),
    ],
)
def test_decode_errors_carry_coordinates_and_bytes(key: bytes | None, value: bytes | None,
                                                   kind: type[DecodeError], reason: str) -> None:
    with pytest.raises(kind) as err:
        codec.decode(key, value, **WHERE)
    e = err.value
    assert reason in e.reason
    assert (e.topic, e.partition, e.offset, e.key, e.value) == ("t", 2, 41, key, value)
    assert str(e).startswith("t:2:41: ")


def test_invalid_utf8_in_a_string_field_is_a_value_error() -> None:
    # session_id "s1" -> zigzag length 2, then two bytes; make the user_id invalid UTF-8.
    raw = codec.encode_value(EVENT)
    broken = raw.replace(b"u1", b"\xc3\x28", 1)
    with pytest.raises(ValueDecodeError, match="UTF-8"):
        codec.decode(b"s1", broken, **WHERE)


@pytest.mark.parametrize(("field", "value", "reason"),
                         [("seq", -1, "seq must be >= 0"), ("ts", -5, "ts must be >= 0"),
                          ("session_id", "", "empty session_id")])
def test_invalid_field_values(field: str, value: object, reason: str) -> None:
    record = {**EVENT.to_record(), field: value}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema_json()), record)
    with pytest.raises(ValueDecodeError, match=reason):
        codec.decode(str(record["session_id"]).encode(), out.getvalue(), **WHERE)
