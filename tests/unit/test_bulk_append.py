"""The appender's bulk path (``leakproof_native`` installed): records encoded natively into
kafka-python's own accumulator's batches, read back by kafka-python's batch reader, byte
for byte what its builder writes, in order across both paths; each batch acknowledged as a
whole (no network: the accumulator and batches are kafka-python's, the producer's other
parts the fakes of ``test_appender``)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError, NotLeaderForPartitionError
from kafka.producer.record_accumulator import RecordAccumulator
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecordsBuilder

from leakproof.kafka import appender
from leakproof.kafka.appender import Appender
from tests.unit.conftest import native_or_skip
from tests.unit.test_appender import Sender, Txn


@pytest.fixture(autouse=True)
def _native() -> None:
    native_or_skip()


class Producer:
    """kafka-python's real RecordAccumulator behind the test's transaction and sender."""

    def __init__(self, batch_size: int = 16_384) -> None:
        self.config = {"max_request_size": 70_000}  # a value over 4 464 bytes is "unusual"
        self._accumulator = RecordAccumulator(batch_size=batch_size, compression_attrs=0,
                                              message_version=2, linger_ms=0,
                                              transaction_manager=None)
        self._transaction_manager, self._sender = Txn(), Sender()
        self.sent: list[Any] = []

    def partitions_for(self, topic: str) -> set[int]:
        return {0, 1}

    def send(self, topic: str, **kw: Any) -> Any:  # the unusual records' way in
        future, _, _, _ = self._accumulator.append(
            TopicPartition(topic, kw["partition"]), kw["timestamp_ms"], kw["key"], kw["value"],
            kw["headers"])
        self.sent.append(kw["value"])
        return future

    def batches(self, partition: int) -> list[Any]:
        return list(self._accumulator._batches[TopicPartition("t.internal", partition)])


def _records(n: int, longest: int = 3000) -> list[tuple[Any, ...]]:
    return [(None if i % 9 == 0 else b"s%d" % (i % 13), b"v" * (i * 31 % longest),
             1_767_225_600_000 + (i * 104_729) % 9_000 - 4_500,
             [("leakproof.source", b"src:0:%d" % i)]) for i in range(n)]


def _read(batches: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for batch in batches:
        batch.records.set_producer_state(3, 0, 0, True)
        batch.records.close()
        for r in DefaultRecordBatch(bytes(batch.records.buffer())):
            out.append((r.key, r.value, r.timestamp, r.headers))
    return out


def test_bulk_records_read_back_in_order_across_batches() -> None:
    p = Producer()
    out = Appender(p, "t.internal")
    assert out.bulk
    records = _records(1_300)
    for key, value, ts, headers in records:
        out.append(1, key, value, ts, headers)
    out.check()  # the pending records go to their batches before the flush
    batches = p.batches(1)
    assert len(batches) > 3  # 16 KiB each: filled up, then new ones
    assert _read(batches) == [(k, v, ts, h) for k, v, ts, h in records]
    assert not out._futures  # acknowledged a batch at a time


def test_bulk_batches_are_the_bytes_kafka_pythons_builder_writes() -> None:
    assert appender.bulk_fits()
    p = Producer()
    out = Appender(p, "t.internal")
    records = _records(700)
    for key, value, ts, headers in records:
        out.append(0, key, value, ts, headers)
    out.check()
    theirs, builder = [], MemoryRecordsBuilder(2, 0, 16_384)
    for key, value, ts, headers in records:
        if builder.append(ts, key, value, headers) is None:
            theirs.append(builder)
            builder = MemoryRecordsBuilder(2, 0, 16_384)
            builder.append(ts, key, value, headers)
    theirs.append(builder)
    for b in theirs:
        b.set_producer_state(3, 0, 0, True)
        b.close()
    ours = p.batches(0)
    _read(ours)  # closes them with the same producer state
    assert [bytes(b.records.buffer()) for b in ours] == [bytes(b.buffer()) for b in theirs]


def test_a_record_send_must_judge_keeps_its_place() -> None:
    """A record near the size limit goes through send(): the records before it, still
    pending, go to their batch first, so the partition's order holds."""
    p = Producer()
    out = Appender(p, "t.internal")
    big = b"3" * 5_000
    out.append(0, b"a", b"1", 1000, [])
    out.append(0, b"b", b"2", 1001, [])
    out.append(0, b"c", big, 1002, [])  # through send()
    out.append(0, b"d", b"4", 1003, [])
    out.check()
    assert p.sent == [big]
    assert [r[1] for r in _read(p.batches(0))] == [b"1", b"2", big, b"4"]


def _appended() -> tuple[Producer, Appender]:
    """200 small records appended to partition 0 and handed to their batch (one)."""
    p = Producer()
    out = Appender(p, "t.internal")
    for key, value, ts, headers in _records(200, longest=40):
        out.append(0, key, value, ts, headers)
    out.check()
    return p, out


def test_each_bulk_batch_is_acknowledged_before_the_commit() -> None:
    p, out = _appended()
    (batch,) = p.batches(0)
    with pytest.raises(KafkaTimeoutError, match="unacknowledged"):
        out.settled()  # not yet answered
    batch.complete_exceptionally(NotLeaderForPartitionError("gone"), lambda _i: KafkaError("x"))
    with pytest.raises(KafkaError, match="was not written"):
        out.settled()


def test_an_answered_batch_settles() -> None:
    p, out = _appended()
    for batch in p.batches(0):
        batch.complete(0, -1)
    out.settled()


def test_a_split_batch_fails_the_try_and_the_process_goes_record_by_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appender, "_split_seen", False)
    p, out = _appended()
    (batch,) = p.batches(0)
    p._accumulator.deallocate(batch)  # what the sender does with a batch it split
    with pytest.raises(KafkaError, match="split"):
        out.settled()
    assert not Appender(Producer(), "t.internal").bulk
