"""Reading a v2 batch's records in one pass, and the fetcher that uses it (no network: the
batches are literal bytes or built by kafka-python's own builder)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c
from kafka.serializer import Deserializer

from leakproof.kafka import lean_fetch
from leakproof.kafka.records import CorruptBatch, KafkaRecord, read_records

pytestmark = pytest.mark.usefixtures("read_path")  # each test on both read paths

TP = TopicPartition("t", 0)
ONE_RECORD = bytes([
    0x12,  # length 9 (zigzag 18)
    0x00,  # attributes
    0x00,  # timestamp delta 0
    0x00,  # offset delta 0
    0x02, 0x6B,  # key: 1 byte, "k"
    0x04, 0x76, 0x76,  # value: 2 bytes, "vv"
    0x00,  # no headers
])


def test_one_literal_record() -> None:
    assert read_records(ONE_RECORD, 0, 1, 100, 5000) == [KafkaRecord(100, b"k", b"vv", 5000)]
    # the broker's append time stands for every record's own
    assert read_records(ONE_RECORD, 0, 1, 100, 5000, 7000)[0].timestamp == 7000


def test_null_key_and_value_and_headers_literal() -> None:
    record = bytes([
        0x00,  # attributes
        0x04,  # timestamp delta 2
        0x02,  # offset delta 1
        0x01,  # key length -1: null
        0x01,  # value length -1: null
        0x04,  # two headers
        0x04, 0x69, 0x64, 0x02, 0x07,  # "id" -> b"\x07"
        0x02, 0x6E, 0x01,  # "n" -> null
    ])
    buf = bytes([len(record) * 2]) + record
    assert read_records(buf, 0, 1, 10, 1000) == [
        KafkaRecord(11, None, None, 1002, [("id", b"\x07"), ("n", None)])]


def test_a_short_or_padded_or_inconsistent_batch_is_corrupt() -> None:
    with pytest.raises(CorruptBatch, match="ends inside record 1 of 2"):
        read_records(ONE_RECORD, 0, 2, 0, 0)
    with pytest.raises(CorruptBatch, match="ends inside record 0"):
        read_records(ONE_RECORD[:-3], 0, 1, 0, 0)
    with pytest.raises(CorruptBatch, match="1 bytes left"):
        read_records(ONE_RECORD + b"\x00", 0, 1, 0, 0)
    with pytest.raises(CorruptBatch, match="its length says 10"):
        read_records(b"\x14" + ONE_RECORD[1:], 0, 1, 0, 0)
    with pytest.raises(CorruptBatch, match="longer than 10 bytes"):
        read_records(b"\xff" * 12, 0, 1, 0, 0)


def _batch(base: int, n: int, *, compression: int = 0, producer_id: int = -1,
           transactional: bool = False, control: int | None = None, big: bool = False) -> bytes:
    """A batch from kafka-python's builder at ``base``; ``control``: a marker batch (0 abort,
    1 commit) of one record; ``big``: long timestamps deltas and values (3-byte varints)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1, batch_size=1 << 24)
    if control is not None:
        builder.append(0, timestamp=1, key=struct.pack(">hh", 0, control),
                       value=b"\x00\x00\x00\x00\x00\x00", headers=[])
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i * (400_000 if big else 3),
                       key=b"s%d" % (i % 13) if i % 9 else None,
                       value=(b"x" * (20_000 if big else 90 + i % 40)) if i % 17 else None,
                       headers=[("h", b"%d" % i)] if i % 6 == 0 else [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    if control is not None:
        data[22] |= 0x20
        struct.pack_into(">I", data, 17, calc_crc32c(memoryview(data)[21:]))
    return bytes(data)



@pytest.mark.parametrize("compression", [0, 1])  # none, gzip
@pytest.mark.parametrize("big", [False, True])
def test_batches_read_as_kafka_python_reads_them(compression: int, big: bool) -> None:
    data = _batch(5000, 500, compression=compression, big=big)
    ours = lean_fetch.batch_records(MemoryRecords(data).next_batch())
    theirs = [KafkaRecord(r.offset, r.key, r.value, r.timestamp, r.headers or ())
              for r in DefaultRecordBatch(data)]
    assert len(ours) == 500 and ours == theirs
    assert ours[0].offset == 5000 and ours[-1].offset == 5499


def test_the_plug_fits_the_pinned_kafka_python() -> None:
    assert lean_fetch.plug_fits()
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 8), group_id=None)
    try:
        assert lean_fetch.lean_fetches(consumer)
        assert consumer._fetcher.PartitionRecords is lean_fetch.LeanPartitionRecords
        # once only: the plug is not stacked on itself
        assert not lean_fetch.lean_fetches(consumer)
    finally:
        consumer.close()
    class Upper(Deserializer):  # type: ignore[misc]
        def deserialize(self, topic: str, headers: Any, data: bytes) -> bytes:
            return data.upper()

    with_deserializer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 8),
                                      group_id=None, value_deserializer=Upper())
    try:  # a deserializer is the stock fetcher's job
        assert not lean_fetch.lean_fetches(with_deserializer)
    finally:
        with_deserializer.close()


def _fetched(cls: type, data: bytes, fetch_offset: int, aborted: list[tuple[int, int]]
             ) -> tuple[list[tuple[int, bytes | None]], int]:
    class Aborted:  # the fetch response's (producer id, first offset) pairs
        def __init__(self, producer_id: int, first_offset: int) -> None:
            self.producer_id, self.first_offset = producer_id, first_offset

    part = cls(fetch_offset, TP, MemoryRecords(data),
               isolation_level=IsolationLevel.READ_COMMITTED,
               aborted_transactions=[Aborted(p, o) for p, o in aborted])
    got = part.take(10_000)
    return [(r.offset, r.value) for r in got], part.next_fetch_offset


def test_read_committed_drops_aborted_transactions_and_markers_as_kafka_python_does() -> None:
    data = b"".join([
        _batch(0, 10),                                          # 0-9 plain
        _batch(10, 5, producer_id=7, transactional=True),       # 10-14 aborted
        _batch(15, 4, producer_id=8, transactional=True),       # 15-18 committed
        _batch(19, 0, producer_id=7, transactional=True, control=0),  # 19 abort marker
        _batch(20, 0, producer_id=8, transactional=True, control=1),  # 20 commit marker
        _batch(21, 3, producer_id=7, transactional=True),       # 21-23 a later, committed one
        _batch(24, 0, producer_id=7, transactional=True, control=1),  # 24 commit marker
    ])
    aborted = [(7, 10)]
    ours, ours_next = _fetched(lean_fetch.LeanPartitionRecords, data, 0, aborted)
    theirs, theirs_next = _fetched(Fetcher.PartitionRecords, data, 0, aborted)
    assert [o for o, _ in ours] == [*range(10), 15, 16, 17, 18, 21, 22, 23]
    assert ours == theirs and ours_next == theirs_next == 25


def test_a_fetch_from_inside_a_batch_starts_at_its_offset() -> None:
    data = _batch(100, 50, compression=1)  # a compressed batch always comes whole
    ours, ours_next = _fetched(lean_fetch.LeanPartitionRecords, data, 130, [])
    assert [o for o, _ in ours] == list(range(130, 150)) and ours_next == 150


def test_a_corrupt_batch_fails_the_fetch_naming_its_offset() -> None:
    data = bytearray(_batch(40, 3))
    data[-2] ^= 0xFF  # inside the last record; the CRC no longer holds
    part = lean_fetch.LeanPartitionRecords(40, TP, MemoryRecords(bytes(data)))
    with pytest.raises(CorruptRecordError, match="offset 40 failed its CRC check"):
        part.take(10)
    # a batch whose CRC holds but whose records do not (a writer's bug)
    bad = bytearray(_batch(40, 3))
    bad[-1] = 0x02  # the last record claims a header it does not have
    struct.pack_into(">I", bad, 17, calc_crc32c(memoryview(bad)[21:]))
    part = lean_fetch.LeanPartitionRecords(40, TP, MemoryRecords(bytes(bad)))
    with pytest.raises(CorruptRecordError, match="record batch at offset 40"):
        part.take(10)


def test_a_legacy_message_set_reads_as_kafka_python_reads_it() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(20):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i if i % 3 else None,
                       value=b"v%d" % i)
    data = bytes(builder.build())
    ours, ours_next = _fetched(lean_fetch.LeanPartitionRecords, data, 5, [])
    theirs, theirs_next = _fetched(Fetcher.PartitionRecords, data, 5, [])
    assert [o for o, _ in ours] == list(range(5, 20))
    assert ours == theirs and ours_next == theirs_next == 20
