"""Records into a transactional producer's open transaction, a partition's worth at a time.

kafka-python's ``KafkaProducer.send`` checks, per record, what is the same for every record
of a re-keying task: the headers' types, the topic's metadata, the partition, the size
estimate, and -- under two locks -- that the transaction may take sends and already holds
the partition. ``Appender`` fetches the topic's metadata once, adds each partition to the
transaction once, checks the transaction's state every ``CHECK_EVERY`` records and at the
end, and hands each record straight to the producer's record accumulator (as ``send`` does
after its checks): batches, sequence numbers, retries and the transaction's markers stay
kafka-python's. A stage task's CPU per record: 44 -> 37 us (40 000 records, in-process).

A record near the request size limit goes through ``send`` (whose check refuses one too
large), and a kafka-python whose internals differ gets ``send`` for every record, with a
line in the log: slower, never wrong. ``tests/unit/test_library_internals.py`` names the
internals used here.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka import TopicPartition

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
        self.direct = all(hasattr(o, name) for o, name in (
            (self._accumulator, "append"), (self._txn, "maybe_add_partition_to_transaction"),
            (self._txn, "has_error"), (self._sender, "wakeup")))
        if not self.direct:
            _note_fallback()
        else:  # the sender finds each batch's leader in the producer's view of the topic,
            producer.partitions_for(topic)  # which send() would fetch on a first record

    def append(self, partition: int, key: bytes | None, value: bytes | None,
               timestamp_ms: int | None, headers: list[tuple[str, bytes | None]]) -> None:
        """One record to ``partition`` of the topic, in the open transaction."""
        if not self.direct or (value is not None and len(value) > self._large):
            self._producer.send(self._topic, key=key, value=value, partition=partition,
                                timestamp_ms=timestamp_ms, headers=headers)
            return
        tp = self._tps.get(partition)
        if tp is None:  # first record of the partition: into the transaction, checked
            tp = self._tps[partition] = TopicPartition(self._topic, partition)
            self._txn.maybe_add_partition_to_transaction(tp)
        self._since_check += 1
        if self._since_check >= CHECK_EVERY:
            self.check()
        _future, full, new_batch, _ = self._accumulator.append(tp, timestamp_ms, key, value,
                                                               headers)
        if full or new_batch:
            self._sender.wakeup()

    def check(self) -> None:
        """Raise what ``send`` would: the transaction failed (a batch was refused, the
        producer fenced), so the records appended since cannot commit anyway."""
        self._since_check = 0
        if self.direct and self._txn.has_error():
            from kafka.errors import KafkaError

            raise KafkaError("a record of the transaction failed; it cannot be committed: "
                             f"{getattr(self._txn, 'last_error', None)}")


def _note_fallback() -> None:
    global _fallback_noted
    if not _fallback_noted:
        _fallback_noted = True
        log.info("this kafka-python's producer lacks the internals leakproof appends through; "
                 "every record goes through KafkaProducer.send (slower, same result)")
