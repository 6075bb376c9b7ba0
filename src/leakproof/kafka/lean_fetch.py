"""kafka-python's fetcher, reading each v2 batch's records with ``records.read_records``.

The consumer's fetcher builds one ``PartitionRecords`` per fetched partition through an
attribute of the fetcher object, and walks the fetched batches in its ``_unpack_records``.
``lean_fetches`` gives one consumer a subclass whose walk keeps the fetcher's own batch rules
-- the CRC check, read_committed's aborted transactions and markers, control batches, the
next fetch offset -- and only reads a batch's records in one pass, as ``KafkaRecord`` tuples
instead of ``ConsumerRecord`` ones.

This leans on four names inside kafka-python (the fetcher attribute, the unpack method, a
batch's ``_maybe_uncompress``, ``_buffer`` and ``_pos``), so the plug goes in only after
reading batches built by kafka-python itself both ways gives the same records; otherwise
the consumer keeps the stock fetcher and the reader turns its records into ``KafkaRecord``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from typing import Any

from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from leakproof.kafka.records import CorruptBatch, KafkaRecord, read_records

log = logging.getLogger(__name__)

LOG_APPEND_TIME = 1


def batch_records(batch: Any) -> list[KafkaRecord]:
    """A v2 batch's records (decompressed first if need be), in one pass."""
    batch._maybe_uncompress()
    append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None
    try:
        return read_records(batch._buffer, batch._pos, batch.records_count, batch.base_offset,
                            batch.first_timestamp, append_time)
    except (CorruptBatch, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"record batch at offset {batch.base_offset}: {exc}") from None


class LeanPartitionRecords(Fetcher.PartitionRecords):  # type: ignore[misc]
    """One fetched partition's records, each v2 batch read by ``batch_records``."""

    def _unpack_records(self, tp: Any, records: Any, key_deserializer: Any,
                        value_deserializer: Any) -> Iterator[Any]:
        last = None
        try:
            while (batch := records.next_batch()) is not None:
                last = batch
                if self.check_crcs and not batch.validate_crc():
                    raise CorruptRecordError(f"record batch for {self.topic_partition} at "
                                             f"offset {batch.base_offset} failed its CRC check")
                if batch.magic != 2:  # a legacy message set: kafka-python reads it
                    yield from self._legacy(batch)
                    continue
                self.leader_epoch = batch.leader_epoch
                if self._skipped(batch):
                    self.next_fetch_offset = batch.next_offset
                    continue
                self.bytes_read += batch.size_in_bytes
                for record in batch_records(batch):
                    self.records_read += 1
                    self.next_fetch_offset = record.offset + 1
                    yield record
            # a v2 batch keeps its last offset even when compaction removed that record:
            # fetch on from past the batch, never from inside it again
            if last is not None and last.magic == 2:
                self.next_fetch_offset = last.next_offset
            self.drain()
        except StopIteration:  # a generator would swallow it as its own end
            raise RuntimeError("StopIteration while reading a record batch") from None

    def _skipped(self, batch: Any) -> bool:
        """Whether a v2 batch yields nothing: a control batch (a transaction marker), or a
        batch of a transaction whose abort the broker listed in this fetch."""
        if self.isolation_level == IsolationLevel.READ_COMMITTED and batch.has_producer_id():
            self._consume_aborted_transactions_up_to(batch.last_offset)
            if self._contains_abort_marker(batch):
                self.aborted_producer_ids.discard(batch.producer_id)
            elif self._is_batch_aborted(batch):
                return True
        return bool(batch.is_control_batch)

    def _legacy(self, batch: Any) -> Iterator[KafkaRecord]:
        for record in batch:
            if self.check_crcs and not record.validate_crc():
                raise CorruptRecordError(f"record for {self.topic_partition} at offset "
                                         f"{record.offset} failed its CRC check")
            self.records_read += 1
            self.bytes_read += record.size_in_bytes
            self.next_fetch_offset = record.offset + 1
            yield KafkaRecord(record.offset, record.key, record.value, record.timestamp,
                              record.headers or ())


def _sample_batches() -> list[bytes]:
    """Batches built by kafka-python's own builder: headers, null keys and values, a long
    varint, gzip, and broker (LogAppendTime) timestamps."""
    out = []
    for compression, append in ((0, False), (1, False), (0, True)):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression,
                                            is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        for i in range(300):
            builder.append(i, timestamp=1_700_000_000_000 + i * 997,
                           key=None if i % 7 == 0 else b"k%d" % i,
                           value=None if i % 11 == 0 else b"v" * (i % 150),
                           headers=[("id", b"\x00\x01"), ("n", None)] if i % 5 == 0 else [])
        data = bytearray(builder.build())
        if append:  # the broker's time: attribute bit 3 and the max timestamp it sets
            data[22] |= 0x08
        out.append(bytes(data))
    return out


@functools.cache
def plug_fits() -> bool:
    """Whether ``batch_records`` reads kafka-python's own batches exactly as it does."""
    try:
        for data in _sample_batches():
            ours = batch_records(MemoryRecords(data).next_batch())
            theirs = [KafkaRecord(r.offset, r.key, r.value, r.timestamp, r.headers or ())
                      for r in DefaultRecordBatch(data)]
            if ours != theirs or not ours:
                log.warning("kafka-python's record batches read differently here; "
                            "keeping its own record reading")
                return False
        return callable(getattr(Fetcher.PartitionRecords, "_unpack_records", None))
    except Exception:  # any mismatch in the library's internals: the stock path
        log.warning("kafka-python's internals differ; keeping its own record reading",
                    exc_info=True)
        return False


def reads_lean(consumer: Any) -> bool:
    """Whether this consumer's polls return ``KafkaRecord`` tuples (the plug is in)."""
    return getattr(getattr(consumer, "_fetcher", None), "PartitionRecords",
                   None) is LeanPartitionRecords


def lean_fetches(consumer: Any) -> bool:
    """Plug ``LeanPartitionRecords`` into this consumer's fetcher; whether it went in (the
    consumer's records are then ``KafkaRecord`` tuples)."""
    fetcher = getattr(consumer, "_fetcher", None)
    settings = getattr(fetcher, "config", None)
    if (fetcher is None or not isinstance(settings, dict)
            or getattr(fetcher, "PartitionRecords", None) is not Fetcher.PartitionRecords
            or settings.get("key_deserializer") or settings.get("value_deserializer")
            or not plug_fits()):
        return False
    fetcher.PartitionRecords = LeanPartitionRecords
    return True
