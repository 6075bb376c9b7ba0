"""Records into a transactional producer's open transaction, a partition's worth at a time.

kafka-python's ``KafkaProducer.send`` checks, per record, what is the same for every record
of a re-keying task: the headers' types, the topic's metadata, the partition, the size
estimate, and -- under two locks -- that the transaction may take sends and already holds
the partition. ``Appender`` fetches the topic's metadata once, adds each partition to the
transaction once, checks the transaction's state every ``CHECK_EVERY`` records and after
the flush, and hands each record straight to the producer's record accumulator (as
``send`` does after its checks): batches, sequence numbers, retries and the transaction's
markers stay kafka-python's. Every record's future is kept and checked before the commit.
A stage task's CPU per record: 44 -> 37 us (40 000 records, in-process).

Where ``leakproof_native`` is installed (``core.native``), records go to the accumulator
in bulk: ``BULK`` of a partition's records at a time are encoded natively into the record
area of the partition's open batch (or of new ones, ``batch_size`` each), exactly the bytes
kafka-python's ``DefaultRecordBatchBuilder.append`` writes for them -- ``bulk_fits``
compares the two on sample records, once per process, before the bulk path is used -- and
the builder's counters set as its ``append`` sets them. Each such batch is acknowledged as
a whole (its final state after the flush) instead of through a future per record. A batch
the broker found too large is split by kafka-python without its records' futures: a split
seen by ``settled`` fails the try, and this process appends record by record from then on.
(A split while the flush waits leaves the flush waiting on the dropped batch until the
transaction's deadline, as kafka-python's own per-record path does: the try fails, nothing
commits.)

A record near the request size limit or with a null header value goes through ``send``
(whose checks refuse it whole), and a kafka-python whose internals differ gets ``send`` for
every record, with a line in the log: slower, never wrong.
``tests/unit/test_library_internals.py`` names the internals used here.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from kafka import TopicPartition

from leakproof.core import native
from leakproof.kafka import acknowledged

log = logging.getLogger(__name__)

CHECK_EVERY = 1000  # records between two checks of the transaction's state
LARGE_ROOM = 64 * 1024  # a record within this of max_request_size goes through send()
BULK = 500  # a partition's records encoded natively at a time
_fallback_noted = False
_split_seen = False  # a bulk batch was split by the broker's size limit: record by record


class Appender:
    """Appends to ``topic`` through ``producer``, which has begun a transaction."""

    def __init__(self, producer: Any, topic: str) -> None:
        self._producer, self._topic = producer, topic
        self._accumulator: Any = getattr(producer, "_accumulator", None)
        self._txn: Any = getattr(producer, "_transaction_manager", None)
        self._sender: Any = getattr(producer, "_sender", None)
        self._large = int(getattr(producer, "config", {}).get("max_request_size", 1 << 20)
                          ) - LARGE_ROOM
        self._tps: dict[int, TopicPartition] = {}
        self._since_check = 0
        self._futures: list[Any] = []  # every record's: acknowledged() before the commit
        self.direct = all(hasattr(o, name) for o, name in (
            (self._accumulator, "append"), (self._txn, "maybe_add_partition_to_transaction"),
            (self._txn, "_fail_if_not_ready_for_send"), (self._sender, "wakeup")))
        if not self.direct:
            _note_fallback()
        self.bulk = (self.direct and not _split_seen and native.module() is not None
                     and all(hasattr(self._accumulator, name) for name in (
                         "_tp_lock", "_batches", "_incomplete", "config")) and bulk_fits())
        self._pending: dict[int, list[tuple[Any, ...]]] = {}  # partition -> records
        self._bulk_batches: dict[int, Any] = {}  # id -> each batch the bulk path filled

    def append(self, partition: int, key: bytes | None, value: bytes | None,
               timestamp_ms: int | None, headers: list[tuple[str, bytes | None]]) -> None:
        """One record to ``partition`` of the topic, in the open transaction."""
        if not self.direct or self._unusual(key, value, headers):
            self._flush_pending(partition)  # the partition's records stay in their order
            self._futures.append(self._producer.send(
                self._topic, key=key, value=value, partition=partition,
                timestamp_ms=timestamp_ms, headers=headers))
            return
        tp = self._tps.get(partition)
        if tp is None:  # first record of the partition: into the transaction, checked
            if not self._tps:  # the sender finds each batch's leader in the producer's
                self._producer.partitions_for(self._topic)  # view of the topic
            tp = self._tps[partition] = TopicPartition(self._topic, partition)
            self._txn.maybe_add_partition_to_transaction(tp)
        self._since_check += 1
        if self._since_check >= CHECK_EVERY:
            self.check()
        if self.bulk:
            pending = self._pending.get(partition)
            if pending is None:
                pending = self._pending[partition] = []
            pending.append((key, value, int(time.time() * 1000) if timestamp_ms is None
                            else timestamp_ms, headers))
            if len(pending) >= BULK:
                self._flush_pending(partition)
            return
        future, full, new_batch, _ = self._accumulator.append(tp, timestamp_ms, key, value,
                                                              headers)
        self._futures.append(future)
        if full or new_batch:
            self._sender.wakeup()

    def _unusual(self, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]]) -> bool:
        """A record ``send`` must judge: near the size limit (refused whole by its check,
        where a batch of one too large would fail the transaction), or with a header of
        null value (kafka-python refuses it before writing anything; its accumulator
        would write the record and then fail)."""
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        for _name, header in headers:
            if header is None:
                return True
            size += len(header)
        return size > self._large

    def _flush_pending(self, partition: int) -> None:
        """The partition's pending records into its batches, in order (module docstring);
        a record the native encoder will not take, and those after it, one at a time."""
        records = self._pending.pop(partition, None)
        if not records:
            return
        tp = self._tps[partition]
        acc = self._accumulator
        now = time.monotonic()
        i = 0
        with acc._tp_lock(tp):
            dq = acc._batches[tp]
            while i < len(records):
                batch: Any = dq[-1] if dq and not dq[-1].records._closed else None
                taken = _fill(batch, records, i) if batch is not None else 0
                if taken == 0:  # no open batch, or it is full: a new one takes at least one
                    batch = _new_batch(acc, tp, now)
                    taken = _fill(batch, records, i)
                    if taken == 0:
                        break  # the encoder refused the record: the reference takes it
                    dq.append(batch)
                    acc._incomplete.add(batch)
                self._bulk_batches[id(batch)] = batch
                batch.last_append = now
                i += taken
        for key, value, ts, headers in records[i:]:
            future, _, _, _ = acc.append(tp, ts, key, value, headers)
            self._futures.append(future)
        self._sender.wakeup()

    def check(self) -> None:
        """Raise what ``send`` would: the transaction failed (a batch was refused, the
        producer fenced) or is no longer open (an epoch bumped under it), so the records
        appended since cannot commit anyway. The transaction's error is the cause, so a
        fence is seen as one (``rekey.lasting``). Pending bulk records go to their
        batches first: ``check`` comes before the flush."""
        self._since_check = 0
        if not self.direct:
            return
        for partition in list(self._pending):
            self._flush_pending(partition)
        from kafka.errors import KafkaError

        try:
            self._txn._fail_if_not_ready_for_send()
        except KafkaError as exc:
            cause = getattr(self._txn, "last_error", None)
            if isinstance(cause, BaseException) and exc.__cause__ is None:
                raise exc from cause
            raise

    def settled(self) -> None:
        """After the flush, before the commit: the transaction still open and every
        record acknowledged (``kafka.acknowledged``)."""
        self.check()
        acknowledged(self._futures)
        _batches_acknowledged(self._accumulator, list(self._bulk_batches.values()))


def _new_batch(acc: Any, tp: TopicPartition, now: float) -> Any:
    from kafka.producer.producer_batch import ProducerBatch
    from kafka.record.memory_records import MemoryRecordsBuilder

    records = MemoryRecordsBuilder(acc.config["message_version"], acc.config["compression_attrs"],
                                   acc.config["batch_size"])
    return ProducerBatch(tp, records, now=now)


def _fill(batch: Any, records: list[tuple[Any, ...]], start: int) -> int:
    """As many of ``records[start:]`` as fit into ``batch``'s open record area, set as
    ``DefaultRecordBatchBuilder.append`` sets its counters; how many (0: none fit, or the
    encoder refused the first)."""
    mem = batch.records
    builder = mem._builder
    fast: Any = native.module()
    try:
        chunk, taken, max_ts, first_ts = fast.encode_records(
            records, start, builder._first_timestamp, mem._next_offset, len(builder._buffer),
            builder._batch_size)
    except (TypeError, ValueError, ArithmeticError, UnicodeError):
        return 0  # the reference (kafka-python's append) takes the record and judges it
    if taken:
        builder._buffer += chunk
        builder._first_timestamp = first_ts
        if builder._max_timestamp is None or max_ts > builder._max_timestamp:
            builder._max_timestamp = max_ts
        builder._num_records += taken
        builder._last_offset = mem._next_offset + taken - 1
        mem._next_offset += taken
    return int(taken)


def _batches_acknowledged(acc: Any, batches: list[Any]) -> None:
    """Raise unless the broker took every batch the bulk path filled (``acknowledged``'s
    rule for a batch without record futures)."""
    global _split_seen
    from kafka.errors import KafkaError, KafkaTimeoutError
    from kafka.producer.producer_batch import FinalState

    for batch in batches:
        if not batch.is_done:
            if batch not in acc._incomplete.all():  # split and dropped by the sender
                _split_seen = True
                log.warning("a re-keyed batch for %s was split for the broker's size limit; "
                            "appending record by record from now on", batch.topic_partition)
                raise KafkaError(f"a batch of {batch.topic_partition} was split for the "
                                 f"broker's message size limit; not committing")
            raise KafkaTimeoutError("a batch of the transaction is still unacknowledged "
                                    "after the flush; not committing")
        if batch.final_state is not FinalState.SUCCEEDED:
            _, _, errors = batch.produce_future.value or (None, None, None)
            cause = errors(0) if callable(errors) else None
            raise KafkaError(f"a batch of the transaction for {batch.topic_partition} was not "
                             f"written ({type(cause).__name__}: {cause}); not "
                             f"committing") from cause


@functools.cache
def bulk_fits() -> bool:
    """Whether the native encoder writes the batches kafka-python's builder writes, byte
    for byte, for sample records (headers, null keys and values, lengths of one, two and
    three varint bytes, timestamps out of order, batches that fill up)."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    if native.module() is None:
        return False
    samples = [(None if i % 7 == 0 else b"k%d" % i,
                None if i % 11 == 0 else b"v" * (i * 37 % 20_000),
                1_700_000_000_000 + (i * 7919) % 5_000 - 2_500,
                [("leakproof.source", b"t:0:%d" % i), ("é", b"")] if i % 3 else [])
               for i in range(400)]
    try:
        for batch_size in (16_384, 512 * 1024):
            theirs, ours = [], []
            builder = MemoryRecordsBuilder(2, 0, batch_size)
            for key, value, ts, headers in samples:
                if builder.append(ts, key, value, headers) is None:
                    theirs.append(builder)
                    builder = MemoryRecordsBuilder(2, 0, batch_size)
                    builder.append(ts, key, value, headers)
            theirs.append(builder)
            i = 0
            while i < len(samples):
                batch = _Probe(MemoryRecordsBuilder(2, 0, batch_size))
                taken = _fill(batch, samples, i)
                if taken == 0:
                    return False
                ours.append(batch.records)
                i += taken
            for b in (*theirs, *ours):
                b.set_producer_state(7, 1, 0, True)
                b.close()
            if [bytes(b.buffer()) for b in theirs] != [bytes(b.buffer()) for b in ours]:
                log.warning("the native record encoder writes other batches than this "
                            "kafka-python; appending record by record")
                return False
        return True
    except Exception:  # internals that differ: the per-record path
        log.warning("kafka-python's batch builder differs; appending record by record",
                    exc_info=True)
        return False


class _Probe:
    """A batch for ``bulk_fits``: only its records builder."""

    def __init__(self, records: Any) -> None:
        self.records = records


def _note_fallback() -> None:
    global _fallback_noted
    if not _fallback_noted:
        _fallback_noted = True
        log.info("this kafka-python's producer lacks the internals leakproof appends through; "
                 "every record goes through KafkaProducer.send (slower, same result)")
