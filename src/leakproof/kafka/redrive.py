"""The redrive's way back to Kafka: one partition of the source topic, written in
transactions through one transactional id (``leakproof-redrive-<dead-letter table>-<topic>-
<partition>``), read back under read_committed for the copies already there.

The id names the dead letters' table and partition, never a process: a redrive restarted
after a crash, or a second one started beside it, initialises the same id, and the broker
fences every older producer of it and aborts the transaction one left open
(``init_transactions``). kafka-python's transaction calls wait without a deadline: each runs
under ``timeout_s`` here (``closed_sink.within``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from leakproof.core.config import KafkaConfig
from leakproof.core.dead_letter import origin_of
from leakproof.core.errors import LeakproofError, PublishError
from leakproof.core.offsets import LogBounds, OffsetRange
from leakproof.kafka import bootstrapped, producer_settings
from leakproof.kafka.admin import KafkaMetadata
from leakproof.kafka.closed_sink import within
from leakproof.kafka.reader import read_range
from leakproof.ports.redrive import Copy
from leakproof.testing.crashpoints import crash_point

log = logging.getLogger(__name__)

# How long another producer's open transaction may hold the stable end: the broker aborts
# any transaction older than its transaction.max.timeout.ms, 15 minutes by default.
SETTLE_S = 900.0


def transactional_id(dead_letter_table: str, topic: str, partition: int) -> str:
    """The id every redrive of this table's dead letters of ``partition`` shares."""
    return f"leakproof-redrive-{dead_letter_table}-{topic}-{partition}"


class TransactionalPartition:
    """``ports.redrive.RedriveTarget`` over kafka-python."""

    def __init__(self, cfg: KafkaConfig, topic: str, partition: int, txn_id: str,
                 timeout_s: float = 60.0) -> None:
        if cfg.isolation_level != "read_committed":
            raise LeakproofError(
                "a redrive needs kafka.isolation_level: read_committed: a job reading "
                "uncommitted records would count a copy whose transaction was aborted")
        self._cfg, self.topic, self.partition = cfg, topic, partition
        self.txn_id = txn_id
        self._timeout_s = timeout_s
        self._meta = KafkaMetadata(cfg)
        self._producer: Any = None

    def _bounds(self) -> LogBounds:
        return self._meta.log_bounds(self.topic, [self.partition])[self.partition]

    def fence(self) -> int:
        settings = producer_settings(self._cfg)
        settings.update(transactional_id=self.txn_id,
                        transaction_timeout_ms=round(self._timeout_s * 1000))
        self._producer = bootstrapped(KafkaProducer, settings)
        self._call("init_transactions", self._producer.init_transactions)
        end = self._bounds().log_end
        deadline = time.monotonic() + SETTLE_S
        while (b := self._bounds()).readable_end < end:
            if time.monotonic() > deadline:
                raise PublishError(f"{self.topic} partition {self.partition}: an open "
                                   f"transaction holds the stable end at {b.readable_end}, "
                                   f"below {end}, for too long; try again later")
            time.sleep(0.5)  # another producer's transaction, not ours: it ends by itself
        return end

    def copies(self, from_offset: int, until_offset: int) -> dict[str, int]:
        start = self._bounds().log_start
        if start > from_offset:
            raise LeakproofError(
                f"{self.topic} partition {self.partition}: offsets from {from_offset} were "
                f"deleted (log start {start}), so whether an interrupted redrive's copies "
                f"landed there cannot be told; not sending those dead letters again")
        found: dict[str, int] = {}
        for rec in read_range(self._cfg, OffsetRange(self.topic, self.partition, from_offset,
                                                     until_offset)):
            name = origin_of(rec.headers)
            if name is not None:
                found.setdefault(name, rec.offset)
        return found

    def send(self, records: Sequence[Copy]) -> list[int]:
        producer = self._producer
        assert producer is not None, "fence() first"
        try:
            self._call("begin_transaction", producer.begin_transaction)

            def send_all() -> list[int]:
                futures = [producer.send(self.topic, key=key, value=value,
                                         headers=list(headers), partition=self.partition)
                           for key, value, headers in records]
                producer.flush()
                return [f.get(timeout=self._timeout_s).offset for f in futures]

            offsets: list[int] = self._call("send", send_all)
            crash_point("redrive_before_commit")
            self._call("commit_transaction", producer.commit_transaction)
            return offsets
        except BaseException:
            try:
                within(self._timeout_s, "abort_transaction", producer.abort_transaction)
            except BaseException:  # the next fence aborts it anyway
                log.debug("abort of %s failed", self.txn_id, exc_info=True)
            raise

    def _call(self, what: str, call: Any) -> Any:
        try:
            return within(self._timeout_s, f"{what} ({self.txn_id})", call)
        except KafkaError as exc:
            raise PublishError(
                f"redrive of {self.topic} partition {self.partition}: {what} failed "
                f"(transactional id {self.txn_id}; a ProducerFenced error means another "
                f"redrive of this partition took over): {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=0)
            except Exception:
                log.debug("closing producer %s failed", self.txn_id, exc_info=True)
        self._meta.close()


class SourceRecords:
    """Whether a topic still holds a given record at its offset (``commands.redrive.Lanes``):
    the same value and timestamp there, as the re-keying stage tells a record of this topic
    from one of an earlier topic of its name. A partition it lacks, or an offset outside its
    readable log, holds none."""

    def __init__(self, cfg: KafkaConfig, topic: str) -> None:
        self._cfg, self.topic = cfg, topic
        meta = KafkaMetadata(cfg)
        try:
            self._bounds = meta.log_bounds(topic, meta.partitions(topic))
        finally:
            meta.close()

    def holds(self, partition: int, offset: int, value: bytes | None,
              timestamp: int | None) -> bool:
        bounds = self._bounds.get(partition)
        if bounds is None or not bounds.log_start <= offset < bounds.readable_end:
            return False
        found = list(read_range(self._cfg, OffsetRange(self.topic, partition, offset,
                                                       offset + 1)))
        return (len(found) == 1 and found[0].offset == offset and found[0].value == value
                and (timestamp is None or found[0].timestamp == timestamp))

    def close(self) -> None:
        """Nothing held: ``read_range``'s consumers are the worker's, kept for reuse."""
