"""Codec: round trips in the fixed field order, and decode errors with their coordinates."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from leakproof.core import codec
from leakproof.core.errors import DecodeError, KeyDecodeError, ValueDecodeError
from leakproof.core.events import WebEvent, schema_json
from leakproof.model.spec import web_model

pytestmark = pytest.mark.usefixtures("read_path")  # each test on both read paths

EVENT = WebEvent("s1", "u1", 3, 1_700_000_000_123, "click", "https://x/a", 200, 512,
                 referrer=None, user_agent="curl/8")
WHERE: dict[str, Any] = {"topic": "t", "partition": 2, "offset": 41}
WEB = web_model()


def test_schema_field_order_is_the_contract() -> None:
    names = [f["name"] for f in schema_json()["fields"]]
    assert names == ["session_id", "user_id", "seq", "ts", "event_type", "url", "status",
                     "bytes", "referrer", "user_agent"]


def test_round_trip() -> None:
    value = codec.encode_value(EVENT)
    assert codec.decode(b"s1", value, **WHERE) == EVENT.as_event()


def test_value_is_schemaless_binary_readable_by_plain_fastavro() -> None:
    value = codec.encode_value(EVENT)
    assert not value.startswith(b"Obj\x01")  # no container header
    record = fastavro.schemaless_reader(io.BytesIO(value), fastavro.parse_schema(schema_json()),
                                        None)
    assert record == EVENT.to_record()


def good() -> bytes:
    return codec.encode_value(EVENT)


@pytest.mark.parametrize(
    ("key", "value", "cls", "kind", "reason"),
    [
        (b"s1", None, ValueDecodeError, "tombstone", "null value"),
        (b"s1", b"", ValueDecodeError, "empty_value", "empty value"),
        (b"s1", good()[:7], ValueDecodeError, "not_avro", "not a record"),
        (b"s1", good() + b"\x00\x01", ValueDecodeError, "trailing_bytes", "bytes left over"),
        (b"s1", b"\xff" * 40, ValueDecodeError, "not_avro", "not a record"),
        (b"s1", b"\xc3\x01" + b"\x00" * 8 + good(), ValueDecodeError, "unknown_schema",
         "fingerprint 0000000000000000"),
        (b"s1", b"\xc3\x01\x07", ValueDecodeError, "unknown_schema", "fingerprint 07"),
        (None, good(), KeyDecodeError, "null_key", "null key"),
        (b"\xff\xfe", good(), KeyDecodeError, "key_not_utf8", "not UTF-8"),
        (b"other", good(), KeyDecodeError, "key_mismatch", "differs from session_id"),
    ],
)

def test_decode_errors_carry_coordinates_and_bytes(key: bytes | None, value: bytes | None,
                                                   cls: type[DecodeError], kind: str,
                                                   reason: str) -> None:
    with pytest.raises(cls) as err:
        codec.decode(key, value, **WHERE)
    e = err.value
    assert reason in e.reason
    assert e.kind == kind
    assert (e.topic, e.partition, e.offset, e.key, e.value) == ("t", 2, 41, key, value)
    assert str(e).startswith("t:2:41: ")


def test_invalid_utf8_in_a_string_field_is_a_value_error() -> None:
    # session_id "s1" -> zigzag length 2, then two bytes; make the user_id invalid UTF-8.
    raw = codec.encode_value(EVENT)
    broken = raw.replace(b"u1", b"\xc3\x28", 1)
    with pytest.raises(ValueDecodeError, match="UTF-8") as err:
        codec.decode(b"s1", broken, **WHERE)
    assert err.value.kind == "invalid_utf8"


@pytest.mark.parametrize(("field", "value", "reason"),
                         [("seq", -1, "seq must be >= 0"), ("ts", -5, "ts must be >= 0"),
                          ("session_id", "", "empty session_id")])
def test_invalid_field_values(field: str, value: object, reason: str) -> None:
    record = {**EVENT.to_record(), field: value}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema_json()), record)
    with pytest.raises(ValueDecodeError, match=reason):
        codec.decode(str(record["session_id"]).encode(), out.getvalue(), **WHERE)


# -- schema evolution: a writer that added a field with a default, and an unknown event type

EVOLVED = {**schema_json(), "fields": [*schema_json()["fields"],
                                       {"name": "country", "type": "string", "default": "??"}]}


def evolved_record() -> dict[str, Any]:
    return {**EVENT.to_record(), "country": "NL"}


def _rabin64(data: bytes) -> int:
    """The Avro spec's CRC-64-AVRO, written out from the spec's pseudo-code."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def test_single_object_fingerprint_matches_the_avro_spec() -> None:
    canonical = fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(schema_json()))
    want = _rabin64(canonical.encode()).to_bytes(8, "little")
    assert codec.schema_fingerprint(codec.parsed_schema()) == want
    value = codec.encode_single_object(EVENT.to_record(), schema_json())
    assert value[:10] == b"\xc3\x01" + want


def test_single_object_of_the_shipped_schema_decodes_without_config() -> None:
    value = codec.encode_single_object(EVENT.to_record(), schema_json())
    assert codec.decode(b"s1", value, **WHERE) == EVENT.as_event()


def test_evolved_single_object_needs_its_schema_listed_then_decodes() -> None:
    value = codec.encode_single_object(evolved_record(), EVOLVED)
    with pytest.raises(ValueDecodeError) as err:
        codec.decode(b"s1", value, **WHERE)
    assert err.value.kind == "unknown_schema"
    decoder = codec.Decoder(WEB, [json.dumps(EVOLVED)])
    assert decoder.decode(b"s1", value, **WHERE) == EVENT.as_event()  # the added field is dropped


def test_evolved_schemaless_decodes_with_a_listed_writer_schema() -> None:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(EVOLVED), evolved_record())
    value = out.getvalue()
    with pytest.raises(ValueDecodeError) as err:
        codec.decode(b"s1", value, **WHERE)
    assert err.value.kind == "trailing_bytes"  # without the schema: the extra field is left
    decoder = codec.Decoder(WEB, [json.dumps(EVOLVED)])
    assert decoder.decode(b"s1", value, **WHERE) == EVENT.as_event()
    # the old writer still decodes
    assert decoder.decode(b"s1", good(), **WHERE) == EVENT.as_event()
    with pytest.raises(ValueDecodeError) as err:  # garbage after a record is still garbage,
        decoder.decode(b"s1", good() + b"trailing", **WHERE)  # though "country" could skip it
    assert err.value.kind == "trailing_bytes"


def test_future_ts_is_judged_against_the_kafka_timestamp() -> None:
    decoder = codec.Decoder(WEB, max_ahead_ms=60_000)
    at = EVENT.ts - 60_000
    assert decoder.decode(b"s1", good(), **WHERE, timestamp=at) == EVENT.as_event()  # at the limit
    with pytest.raises(ValueDecodeError) as err:
        decoder.decode(b"s1", good(), **WHERE, timestamp=at - 1)
    assert err.value.kind == "future_ts" and "input.max_ahead_s" in err.value.reason
    assert decoder.decode(b"s1", good(), **WHERE, timestamp=-1) == EVENT.as_event()  # no timestamp
    check_off = codec.Decoder(WEB)
    assert check_off.decode(b"s1", good(), **WHERE, timestamp=0) == EVENT.as_event()


def test_unknown_event_type_decodes() -> None:
    odd = WebEvent(**{**EVENT.to_record(), "event_type": "scroll"})
    assert codec.decode(b"s1", codec.encode_value(odd), **WHERE) == odd.as_event()


def test_near_max_size_record_decodes() -> None:
    big = WebEvent(**{**EVENT.to_record(), "url": "https://x/" + "a" * 1_000_000})
    assert codec.decode(b"s1", codec.encode_value(big), **WHERE) == big.as_event()


# -- the fast path takes only what the checked path accepts, and gives the same event

def test_webevent_fields_keep_the_schema_order() -> None:
    """The fast path builds a WebEvent from the decoded record's values, in order."""
    from dataclasses import fields
    assert [f.name for f in fields(WebEvent)] == [f["name"] for f in schema_json()["fields"]]


def _mutations(value: bytes) -> list[bytes]:
    """Truncations, extensions and single-byte changes of ``value``."""
    out = [value[:n] for n in range(len(value))] + [value + b"\x00", value + b"\x02x"]
    for i in range(len(value)):
        for b in (0x00, 0x01, 0x7F, 0x80, 0xFF, value[i] ^ 0x40):
            out.append(value[:i] + bytes([b]) + value[i + 1:])
    return out


@pytest.mark.parametrize("writer_schemas", [(), (json.dumps(EVOLVED),)])
@pytest.mark.parametrize("key", [b"s1", b"s2", None, b"\xff"])
def test_fast_and_checked_paths_agree_on_every_mutated_record(
        writer_schemas: tuple[str, ...], key: bytes | None) -> None:
    decoder = codec.Decoder(WEB, writer_schemas, max_ahead_ms=60_000)
    for value in _mutations(good()):
        for ts in (None, -1, EVENT.ts, EVENT.ts - 60_001):
            try:
                want: object = decoder._checked(key, value, "t", 2, 41, ts)
            except DecodeError as err:
                want = err.kind
            fast = decoder._fast(key, value, ts) if value else None
            assert fast is None or fast == want, (value, ts)
            try:
                got: object = decoder.decode(key, value, **WHERE, timestamp=ts)
            except DecodeError as err:
                got = err.kind
            assert got == want, (value, ts)
