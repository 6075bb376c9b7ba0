"""Byte-level test vectors shared by the pure and the native read paths (pure).

Each vector is literal bytes and what the reference makes of them. The tests run every one
through both paths (``tests/unit/test_native.py``) and through the decoder under each
(``test_codec``, ``test_confluent``, ``test_kafka_records``): the native path must give the
reference's result on every good vector and decline every bad one, so the reference names it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any


def uvarint(n: int) -> bytes:
    """``n`` >= 0 as an unsigned LEB128 varint."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n: int) -> bytes:
    """``n`` zigzag-encoded, as Kafka's record fields and Avro's ints and longs are."""
    return uvarint((n << 1) ^ (n >> 63) if n >= 0 else ((-n - 1) << 1) | 1)


def _length_prefixed(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def _raw(body: bytes) -> bytes:
    return varint(len(body)) + body


def record(key: bytes | None, value: bytes | None, ts_delta: int = 0, offset_delta: int = 0,
           headers: Sequence[tuple[bytes, bytes | None]] | None = None,
           header_count: bytes | None = None) -> bytes:
    """One v2 record, its length in front. ``header_count``: those bytes in place of the
    count's own encoding (a non-canonical zero, a negative count)."""
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    body += _length_prefixed(key) + _length_prefixed(value)
    hs = headers or ()
    body += header_count if header_count is not None else varint(len(hs))
    for name, v in hs:
        body += varint(len(name)) + name + _length_prefixed(v)
    return varint(len(body)) + body


@dataclass(frozen=True)
class Area:
    """A record area and the arguments ``read_records`` takes with it."""

    name: str
    buf: bytes
    count: int
    base_offset: int = 100
    first_timestamp: int = 1_700_000_000_000
    append_time: int | None = None
    pos: int = 0
    good: bool = True  # False: the reference raises CorruptBatch (or UnicodeDecodeError)

    def args(self) -> tuple[Any, ...]:
        return (self.buf, self.pos, self.count, self.base_offset, self.first_timestamp,
                self.append_time)


def record_areas() -> list[Area]:
    """Good and bad record areas: every field's null, empty and multi-byte forms."""
    big = bytes(range(256)) * 80  # a 20 480-byte value: three-byte lengths
    several = b"".join(record(b"k%d" % i, b"v" * i, i * 7, i) for i in range(50))
    prefix = b"\xde\xad\xbe\xef"
    one = record(b"k", b"vv")
    return [
        Area("one", one, 1),
        Area("one, broker time", one, 1, append_time=1_700_000_009_999),
        Area("after a prefix", prefix + one, 1, pos=len(prefix)),
        Area("fifty", several, 50),
        Area("null key and value", record(None, None, 2, 1), 1),
        Area("empty key and value", record(b"", b""), 1),
        Area("a long value", record(b"key", big, 300, 200), 1),
        Area("negative deltas", record(b"k", b"v", -5_000, -3), 1),
        Area("a large base offset", record(b"k", b"v", 0, 9), 1, base_offset=2**62),
        Area("headers", record(b"k", b"v", headers=[(b"id", b"\x00\x01"), (b"n", None),
                                                    (b"\xc3\xa9t\xc3\xa9", b"")]), 1),
        Area("a zero header count written long", record(b"k", b"v", header_count=b"\x80\x00"),
             1),
        Area("a key length of -2 (null, as -1)", _raw(b"\x00\x00\x00" + varint(-2) + varint(1)
                                                    + b"v\x00"), 1),
        Area("empty", b"", 0),
        # the bad: the reference raises, the native path must decline
        Area("short by a record", one, 2, good=False),
        Area("cut inside a record", one[:-2], 1, good=False),
        Area("a byte left over", one + b"\x00", 1, good=False),
        Area("length too long", b"\x14" + one[1:] + b"\x00", 1, good=False),
        Area("length too short", b"\x10" + one[1:], 1, good=False),
        Area("a negative header count", record(b"k", b"v", header_count=varint(-2)), 1,
             good=False),
        Area("a header name not UTF-8", record(b"k", b"v", headers=[(b"\xff\xfe", b"x")]), 1,
             good=False),
        Area("an 11-byte varint", b"\x12\x00" + b"\x80" * 10 + b"\x00" + one[4:], 1,
             good=False),
        Area("a key longer than the area", record(b"k", b"v").replace(b"\x02k", b"\x7ek", 1),
             1, good=False),
    ]


@dataclass(frozen=True)
class AvroCase:
    """A flat record schema (as written, logical types and all), a value, and the record
    the reference reads; ``None``: a bad value, which the native reader must decline (the
    reference fails on it, leaves bytes over, or reads it by a rule of its own, as fastavro
    reads a negative enum index from the end of the symbols)."""

    name: str
    schema: dict[str, Any]
    value: bytes
    expected: dict[str, Any] | None
    start: int = 0


def _record(*fields: tuple[str, Any], name: str = "V") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [
        {"name": n, "type": t} for n, t in fields]}


def _s(text: str) -> bytes:
    b = text.encode("utf-8")
    return varint(len(b)) + b


ENUM = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}


def avro_cases() -> Iterator[AvroCase]:
    """Every type and logical type a flat model accepts, good and bad."""
    every = _record(("b", "boolean"), ("i", "int"), ("l", "long"), ("f", "float"),
                    ("d", "double"), ("y", "bytes"), ("s", "string"), ("e", ENUM),
                    ("n", "null"), ("o", ["null", "string"]), ("r", ["string", "null"]),
                    ("u", ["int", "string", "null"]))
    body = (b"\x01" + varint(-7) + varint(2**40) + struct.pack("<f", 1.5)
            + struct.pack("<d", -2.25) + varint(3) + b"\x00\xff\x10" + _s("héllo ✓")
            + varint(2) + varint(1) + _s("opt") + varint(1) + varint(1) + _s("u"))
    good = {"b": True, "i": -7, "l": 2**40, "f": 1.5, "d": -2.25, "y": b"\x00\xff\x10",
            "s": "héllo ✓", "e": "BLUE", "n": None, "o": "opt", "r": None, "u": "u"}
    yield AvroCase("every flat type", every, body, good)
    yield AvroCase("after a 5-byte frame", every, b"\x00\x00\x00\x00\x07" + body, good,
                   start=5)
    extremes = _record(("a", "long"), ("b", "long"), ("c", "int"), ("d", "double"),
                       ("e", "double"), ("f", "float"), ("g", "string"), ("h", "bytes"))
    yield AvroCase("extremes", extremes,
                   varint(2**63 - 1) + varint(-(2**63)) + varint(0) + struct.pack("<d", -0.0)
                   + struct.pack("<d", float("inf")) + struct.pack("<f", 3.4e38) + _s("")
                   + varint(0),
                   {"a": 2**63 - 1, "b": -(2**63), "c": 0, "d": -0.0, "e": float("inf"),
                    "f": struct.unpack("<f", struct.pack("<f", 3.4e38))[0], "g": "",
                    "h": b""})
    logical = _record(("ts", {"type": "long", "logicalType": "timestamp-millis"}),
                      ("us", {"type": "long", "logicalType": "timestamp-micros"}),
                      ("day", {"type": "int", "logicalType": "date"}),
                      ("id", {"type": "string", "logicalType": "uuid"}),
                      ("t", ["null", {"type": "long", "logicalType": "local-timestamp-millis"}]))
    yield AvroCase("logical types, read as their base types", logical,
                   varint(1_767_225_600_000) + varint(1_767_225_600_000_123) + varint(20_454)
                   + _s("0b2c4e0a-5f3e-4a51-9d7e-2c1d6f0e9a11") + varint(1) + varint(5),
                   {"ts": 1_767_225_600_000, "us": 1_767_225_600_000_123, "day": 20_454,
                    "id": "0b2c4e0a-5f3e-4a51-9d7e-2c1d6f0e9a11", "t": 5})
    two = _record(("s", "string"), ("n", "long"))
    ok = _s("abc") + varint(5)
    yield AvroCase("two fields", two, ok, {"s": "abc", "n": 5})
    # the bad: the reference fails or leaves bytes over; the native path must decline
    yield AvroCase("a byte left over", two, ok + b"\x00", None)
    yield AvroCase("cut short", two, ok[:-1], None)
    yield AvroCase("a string past the end", two, varint(50) + b"abc" + varint(5), None)
    yield AvroCase("a negative string length", two, varint(-3) + b"abc" + varint(5), None)
    yield AvroCase("invalid UTF-8", two, varint(2) + b"\xc3\x28" + varint(5), None)
    yield AvroCase("a surrogate in UTF-8", two, varint(3) + b"\xed\xa0\x80" + varint(5), None)
    yield AvroCase("an enum index out of range", _record(("e", ENUM)), varint(3), None)
    yield AvroCase("a negative enum index", _record(("e", ENUM)), varint(-1), None)
    yield AvroCase("a union index out of range", _record(("o", ["null", "string"])),
                   varint(2), None)
    yield AvroCase("empty", two, b"", None)


def flat_schema_cases() -> list[tuple[str, Any, bool]]:
    """Schemas and whether the native reader may take them (else fastavro reads them)."""
    return [
        ("every flat type", next(avro_cases()).schema, True),
        ("a nested record", _record(("r", _record(("x", "int"), name="W"))), False),
        ("an array", _record(("a", {"type": "array", "items": "int"})), False),
        ("a map", _record(("m", {"type": "map", "values": "int"})), False),
        ("a fixed", _record(("f", {"type": "fixed", "name": "F", "size": 2})), False),
        ("a decimal", _record(("d", {"type": "bytes", "logicalType": "decimal",
                                     "precision": 4, "scale": 2})), False),
        ("a union with a record", _record(("u", ["null", _record(("x", "int"), name="W")])), False),
        ("not a record", "string", False),
    ]
