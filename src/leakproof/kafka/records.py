"""The records of a v2 record batch, read in one pass (runs in Spark's Python workers).

kafka-python reads a fetched batch one record at a time through four layers (a
``DefaultRecord`` object, a ``ConsumerRecord`` of 13 fields with sizes and deserializer
calls, then the reader's own tuple), with a function call per varint: about 7 CPU us per
record of the bench topic, against 2.6 for this module, which reads a batch's record area --
whose layout the Kafka protocol fixes -- straight into ``KafkaRecord`` tuples.
``kafka.lean_fetch`` plugs it into kafka-python's fetcher for every batch, so the fetcher's
own rules (read_committed's aborted transactions, control batches, positions) stay the ones
that apply.

Record (inside a batch; all lengths and deltas are zigzag varints):
  length, attributes (int8), timestamp delta, offset delta, key length, key,
  value length, value, header count, [key length, key (UTF-8), value length, value]...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from leakproof.core import native


class KafkaRecord(NamedTuple):
    """One record of a range as the job uses it (a tuple: this is built per record)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int  # ms; the producer's create time or the broker's append time
    headers: Sequence[tuple[str, bytes | None]] = ()  # a registry's schema id may travel here


class CorruptBatch(ValueError):
    """A batch's record area does not hold the records its header promises."""


def _uvarint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """An unsigned varint of any length at ``pos``: (value, position after it)."""
    shift = result = 0
    while True:
        if shift > 63:
            raise CorruptBatch(f"varint longer than 10 bytes at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, position after it)."""
    u, pos = _uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


def read_records(buf: bytes | bytearray, pos: int, count: int, base_offset: int,
                 first_timestamp: int, append_time: int | None = None) -> list[KafkaRecord]:
    """``read_records_pure``'s records, read natively where ``leakproof_native`` is
    installed (``core.native``); a batch the native reader declines is read by the pure
    one, which raises what is wrong with it."""
    fast = native.module()
    if fast is not None:
        try:
            records: list[KafkaRecord] = fast.read_records(
                buf, pos, count, base_offset, first_timestamp, append_time, KafkaRecord,
                tuple.__new__)
            return records
        except (ValueError, OverflowError):  # OverflowError: a count or offset past its type
            pass
    return read_records_pure(buf, pos, count, base_offset, first_timestamp, append_time)


def read_records_pure(buf: bytes | bytearray, pos: int, count: int, base_offset: int,
                      first_timestamp: int, append_time: int | None = None
                      ) -> list[KafkaRecord]:
    """The reference: the ``count`` records from ``pos`` to the end of ``buf`` (a batch's
    uncompressed record area). ``append_time``: the batch's max timestamp when its
    timestamps are the broker's (LogAppendTime), which then stands for every record's.

    Raises CorruptBatch when a record's length disagrees with its fields, or when bytes are
    left over or missing: a short read never passes as fewer records.

    Each varint is read inline when it has one or two bytes (a record's lengths and deltas
    almost always do) and by ``_uvarint`` otherwise; ``(u >> 1) ^ -(u & 1)`` undoes zigzag.
    The five copies of that inline read are on purpose: with a call for every varint past
    one byte, parsing took 1.97-2.07 us a record of the bench topic against 1.60-1.66.
    """
    out: list[KafkaRecord] = []
    keep = out.append
    end = len(buf)
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                u, pos = b, pos + 1
            elif buf[pos + 1] < 0x80:
                u, pos = (b & 0x7F) | buf[pos + 1] << 7, pos + 2
            else:
                u, pos = _uvarint(buf, pos)
            length = (u >> 1) ^ -(u & 1)
            start = pos
            pos += 1  # attributes: unused by any record format so far
            b = buf[pos]
            if b < 0x80:
                u, pos = b, pos + 1
            elif buf[pos + 1] < 0x80:
                u, pos = (b & 0x7F) | buf[pos + 1] << 7, pos + 2
            else:
                u, pos = _uvarint(buf, pos)
            ts_delta = (u >> 1) ^ -(u & 1)
            b = buf[pos]
            if b < 0x80:
                u, pos = b, pos + 1
            elif buf[pos + 1] < 0x80:
                u, pos = (b & 0x7F) | buf[pos + 1] << 7, pos + 2
            else:
                u, pos = _uvarint(buf, pos)
            offset = base_offset + ((u >> 1) ^ -(u & 1))
            b = buf[pos]
            if b < 0x80:
                u, pos = b, pos + 1
            elif buf[pos + 1] < 0x80:
                u, pos = (b & 0x7F) | buf[pos + 1] << 7, pos + 2
            else:
                u, pos = _uvarint(buf, pos)
            key: bytes | None = None
            if not u & 1:  # zigzag: an odd code is negative, a null key
                key = bytes(buf[pos:pos + (u >> 1)])
                pos += u >> 1
            b = buf[pos]
            if b < 0x80:
                u, pos = b, pos + 1
            elif buf[pos + 1] < 0x80:
                u, pos = (b & 0x7F) | buf[pos + 1] << 7, pos + 2
            else:
                u, pos = _uvarint(buf, pos)
            value: bytes | None = None
            if not u & 1:
                value = bytes(buf[pos:pos + (u >> 1)])
                pos += u >> 1
            if buf[pos] == 0:
                headers: Sequence[tuple[str, bytes | None]] = ()
                pos += 1
            else:
                headers, pos = _headers(buf, pos)
            if pos - start != length or pos > end:
                raise CorruptBatch(f"record at offset {offset} has {pos - start} bytes, "
                                   f"its length says {length}")
            keep(KafkaRecord(offset, key, value, first_timestamp + ts_delta
                             if append_time is None else append_time, headers))
    except IndexError:
        raise CorruptBatch(f"batch at offset {base_offset} ends inside record {len(out)} "
                           f"of {count}") from None
    if pos != end:
        raise CorruptBatch(f"batch at offset {base_offset}: {end - pos} bytes left after "
                           f"its {count} records")
    return out


def _headers(buf: bytes | bytearray, pos: int) -> tuple[list[tuple[str, bytes | None]], int]:
    count, pos = _varint(buf, pos)
    if count < 0:
        raise CorruptBatch(f"negative header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        n, pos = _varint(buf, pos)
        if n < 0:
            raise CorruptBatch(f"negative header key length {n}")
        name = bytes(buf[pos:pos + n]).decode("utf-8")
        pos += n
        n, pos = _varint(buf, pos)
        value = None
        if n >= 0:
            value = bytes(buf[pos:pos + n])
            pos += n
        headers.append((name, value))
    return headers, pos
