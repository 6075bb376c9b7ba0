"""The native read path against the pure-Python reference, on the shared byte vectors and
on seeded mutations of them (no network): the same result, or a decline the reference
then decides."""

from __future__ import annotations

import collections
import io
import logging
import random
import struct
import sys
import types
from typing import Any

import fastavro
import pytest
from kafka.record.memory_records import MemoryRecords

from leakproof.core import native
from leakproof.hbase.wire.puts import encode_mutate_rows
from leakproof.kafka import lean_fetch
from leakproof.kafka.records import CorruptBatch, KafkaRecord, read_records, read_records_pure
from leakproof.model.schema import without_logical_types
from leakproof.testing.vectors import avro_cases, flat_schema_cases, record_areas
from tests.unit.conftest import native_or_skip


@pytest.fixture
def fast() -> Any:
    return native_or_skip()


def _native_records(fast: Any, args: tuple[Any, ...]) -> list[KafkaRecord] | None:
    try:
        out: list[KafkaRecord] = fast.read_records(*args, KafkaRecord, tuple.__new__)
    except (ValueError, OverflowError):
        return None
    return out


def _reference_records(args: tuple[Any, ...]) -> list[KafkaRecord] | None:
    try:
        return read_records_pure(*args)
    except (CorruptBatch, UnicodeDecodeError):
        return None


@pytest.mark.parametrize("area", record_areas(), ids=lambda a: a.name)
def test_record_areas_read_as_the_reference_reads_them(fast: Any, area: Any) -> None:
    ours = _native_records(fast, area.args())
    reference = _reference_records(area.args())
    if area.good:
        assert reference is not None and ours == reference
        assert all(type(r) is KafkaRecord for r in ours)
        # the headers' type too: () when none are written, a list otherwise
        assert [type(r.headers) for r in ours] == [type(r.headers) for r in reference]
    else:
        assert reference is None and ours is None


def test_a_count_past_its_type_is_declined_and_read_by_the_reference(fast: Any) -> None:
    """A batch header's record count is a signed int32: a negative one cannot be the native
    reader's count, and the reference reads what it makes of it."""
    assert _native_records(fast, (b"", 0, -1, 0, 0, None)) is None
    assert read_records(b"", 0, -1, 0, 0) == read_records_pure(b"", 0, -1, 0, 0) == []
    with pytest.raises(CorruptBatch):
        read_records(b"\x00", 0, -1, 0, 0)


def test_kafka_pythons_own_batches_read_the_same(fast: Any) -> None:
    for data in lean_fetch._sample_batches():
        batch = MemoryRecords(data).next_batch()
        batch._maybe_uncompress()
        args = (bytearray(batch._buffer), batch._pos, batch.records_count, batch.base_offset,
                batch.first_timestamp, batch.max_timestamp if batch.timestamp_type else None)
        assert _native_records(fast, args) == read_records_pure(*args)


def test_mutated_areas_read_the_same_or_are_declined(fast: Any) -> None:
    """Flipped, cut and inserted bytes: wherever the native path reads a record area, it
    reads what the reference reads; wherever the reference refuses one, it declines."""
    rng = random.Random(20261202)
    good = [a for a in record_areas() if a.good and a.buf]
    same = declined = 0
    for _ in range(4000):
        area = rng.choice(good)
        buf = bytearray(area.buf)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(buf))
            how = rng.random()
            if how < 0.6:
                buf[at] = rng.randrange(256)
            elif how < 0.8:
                del buf[at]
            else:
                buf.insert(at, rng.randrange(256))
        args = (bytes(buf), 0, area.count, area.base_offset, area.first_timestamp,
                area.append_time)
        ours, reference = _native_records(fast, args), _reference_records(args)
        if ours is None:
            declined += 1
        else:
            assert ours == reference, bytes(buf).hex()
            same += 1
    assert same and declined  # both sides of the rule were exercised


def _reference_avro(reader: Any, value: bytes, start: int) -> dict[str, Any] | None:
    buf = io.BytesIO(value)
    buf.seek(start)
    try:
        rec = fastavro.schemaless_reader(buf, reader, None)
    except Exception:  # noqa: BLE001 - any failure is a record the reference refuses
        return None
    return rec if isinstance(rec, dict) and buf.tell() == len(value) else None


def _bits(rec: dict[str, Any] | None) -> Any:
    """A record with each float as its bits: a NaN equals itself only so."""
    if rec is None:
        return None
    return {k: struct.pack("<d", v) if type(v) is float else v for k, v in rec.items()}


def _reader(schema: Any) -> tuple[Any, Any]:
    parsed = fastavro.parse_schema(without_logical_types(schema))
    program = native.flat_program(parsed)
    assert program is not None
    return parsed, program


@pytest.mark.parametrize("case", list(avro_cases()), ids=lambda c: c.name)
def test_avro_values_read_as_fastavro_reads_them(fast: Any, case: Any) -> None:
    parsed, program = _reader(case.schema)
    ours = fast.FlatRecordReader(program).read(case.value, case.start)
    if case.expected is not None:
        assert ours == _reference_avro(parsed, case.value, case.start) == case.expected
        assert [type(v) for v in ours.values()] == [type(v) for v in case.expected.values()]
        assert list(ours) == [f["name"] for f in case.schema["fields"]]
    else:
        assert ours is None


def test_mutated_avro_values_read_the_same_or_are_declined(fast: Any) -> None:
    rng = random.Random(7)
    case = next(avro_cases())
    parsed, program = _reader(case.schema)
    reader = fast.FlatRecordReader(program)
    same = declined = 0
    for _ in range(4000):
        buf = bytearray(case.value)
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(len(buf))
            if rng.random() < 0.7:
                buf[at] = rng.randrange(256)
            else:
                del buf[at]
        value = bytes(buf)
        ours = reader.read(value, 0)
        if ours is None:
            declined += 1
            continue
        same += 1
        assert _bits(ours) == _bits(_reference_avro(parsed, value, 0)), value.hex()
    assert same and declined


@pytest.mark.parametrize("name,schema,flat", flat_schema_cases(), ids=lambda v: str(v)[:30])
def test_only_flat_schemas_go_native(name: str, schema: Any, flat: bool) -> None:
    parsed = fastavro.parse_schema(schema) if isinstance(schema, dict) else schema
    assert (native.flat_program(parsed) is not None) is flat, name


def test_a_bytearray_or_other_buffer_is_read_or_declined(fast: Any) -> None:
    area = record_areas()[0]
    args = list(area.args())
    args[0] = memoryview(area.buf)
    assert _native_records(fast, tuple(args)) is None  # the reference reads it instead
    _, program = _reader(next(avro_cases()).schema)
    assert fast.FlatRecordReader(program).read(bytearray(next(avro_cases()).value), 0) is None


def _random_rows(rng: random.Random) -> dict[bytes, dict[bytes, bytes]]:
    def text() -> bytes:
        return rng.choice([b"", rng.randbytes(rng.randrange(1, 40)),
                           "sessión-ü".encode() * rng.randrange(1, 4), b"x" * 70_000])
    return {text(): {text(): text() for _ in range(rng.randrange(0, 20))}
            for _ in range(rng.randrange(0, 30))}


class _Bytes(bytes):
    """A bytes subclass, which may answer ``len()`` as it likes: declined, not read."""


def test_mutate_rows_requests_are_the_references_to_the_byte(fast: Any) -> None:
    rng = random.Random(5)
    for _ in range(300):
        rows = _random_rows(rng)
        ts = rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(2**41)])
        seqid = rng.choice([0, 2**31 - 1, -(2**31), rng.randrange(1000)])
        table = rng.randbytes(rng.randrange(0, 30))
        assert fast.encode_mutate_rows(table, rows, ts, seqid) == encode_mutate_rows(
            table, rows, ts, seqid)


@pytest.mark.parametrize("table,rows,ts,seqid", [
    (b"t", {b"r": {b"s:a": bytearray(b"1")}}, 0, 0),  # a value not bytes
    (b"t", {memoryview(b"r"): {b"s:a": b"1"}}, 0, 0),  # a row key not bytes
    (b"t", {b"r": types.MappingProxyType({b"s:a": b"1"})}, 0, 0),  # cells not a dict
    (b"t", types.MappingProxyType({b"r": {b"s:a": b"1"}}), 0, 0),  # rows not a dict
    ("t", {b"r": {b"s:a": b"1"}}, 0, 0),  # the table a str
    (b"t", collections.OrderedDict({b"r": {b"s:a": b"1"}}), 0, 0),  # a dict subclass
    (b"t", {b"r": {_Bytes(b"s:a"): b"1"}}, 0, 0),  # a bytes subclass
    (b"t", {b"r": {b"s:a": b"1"}}, 2**63, 0),  # past i64
    (b"t", {b"r": {b"s:a": b"1"}}, 0, 2**31),  # past i32
], ids=["value", "row", "cells", "rows", "table", "dict subclass", "bytes subclass", "ts",
        "seqid"])
def test_a_request_the_native_encoder_cannot_write_is_declined(
        fast: Any, table: Any, rows: Any, ts: int, seqid: int) -> None:
    with pytest.raises((ValueError, OverflowError, TypeError)):
        fast.encode_mutate_rows(table, rows, ts, seqid)


@pytest.fixture
def fresh_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    native.module.cache_clear()
    yield monkeypatch
    native.module.cache_clear()


def test_turned_off_the_reference_runs_with_a_line(fresh_module: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    fresh_module.setenv(native.ENV, "0")
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.module() is None
    assert "pure-Python path" in caplog.text
    assert native.describe() == "pure Python"


def test_absent_or_of_another_layout_the_reference_runs(fresh_module: Any,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    fresh_module.delenv(native.ENV, raising=False)
    fresh_module.setitem(sys.modules, "leakproof_native", None)  # import fails
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.module() is None
    assert "not installed" in caplog.text
    native.module.cache_clear()
    fresh_module.setitem(sys.modules, "leakproof_native", types.SimpleNamespace(ABI=99))
    with caplog.at_level(logging.INFO, logger=native.__name__):
        assert native.module() is None
    assert "layout 99" in caplog.text
