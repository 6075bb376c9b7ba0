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

A record near the request size limit or with a null header value goes through ``send``
(whose checks refuse it whole), and a kafka-python whose internals differ gets ``send`` for
every record, with a line in the log: slower, never wrong.
``tests/unit/test_library_internals.py`` names the internals used here.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka import TopicPartition

from leakproof.kafka import acknowledged

log = logging.getLogger(__name__)

CHECK_EVERY = 1000  # records between two checks of the transaction's state
LARGE_ROOM = 64 * 1024  # a record within this of max_request_size goes through send()
_fallback_noted = False


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

    def append(self, partition: int, key: bytes | None, value: bytes | None,
               timestamp_ms: int | None, headers: list[tuple[str, bytes | None]]) -> None:
        """One record to ``partition`` of the topic, in the open transaction."""
        if not self.direct or self._unusual(key, value, headers):
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

    def check(self) -> None:
        """Raise what ``send`` would: the transaction failed (a batch was refused, the
        producer fenced) or is no longer open (an epoch bumped under it), so the records
        appended since cannot commit anyway. The transaction's error is the cause, so a
        fence is seen as one (``rekey.lasting``)."""
        self._since_check = 0
        if not self.direct:
            return
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


def _note_fallback() -> None:
    global _fallback_noted
    if not _fallback_noted:
        _fallback_noted = True
        log.info("this kafka-python's producer lacks the internals leakproof appends through; "
                 "every record goes through KafkaProducer.send (slower, same result)")
