"""The closed-session summaries' way to Kafka (runs in executors' Python workers).

Transactional by default (``output.transactional``): one transaction per range, with the
transactional id ``leakproof-<group>-<topic>-<partition>`` (``leakproof-<table prefix>-...``
with an ``hbase.table_prefix``: a reprocessing copy into new tables never fences the job).
The id names the *source* partition, never the driver's epoch, so every task that ever
publishes a partition's summaries -- a retry, a speculative copy, an old driver's executor
-- shares it, and the broker fences all but the newest (``init_transactions`` bumps the
producer epoch). The transaction also commits the range's outbox id as the offset metadata
of the source partition in the group ``<group>.closed-sessions``
(``send_offsets_to_transaction``): the marker a replay reads to tell a published outbox
from a pending one (outbox.py); with a table prefix the group is
``<group>.closed-sessions.<table prefix>``. Every publish reads
the marker first, with a producer that has fenced every older one (and a marker reader made
after that fence: ``drop``): of two attempts of one range running at once (a speculative
copy, a zombie), the second sees the first's transaction committed, or its own init
aborted it (an init completes a transaction whose commit was already asked for instead).

kafka-python's ``commit_transaction``, ``abort_transaction`` and
``send_offsets_to_transaction`` wait without a deadline: each call here runs under
``output.transaction_timeout_s`` and fails naming the broker and the transactional id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from leakproof.core.config import KafkaConfig, OutputConfig
from leakproof.core.errors import PublishError
from leakproof.core.outbox import covers
from leakproof.core.summaries import Encode, EncodeUpdate, Headers
from leakproof.kafka import acknowledged, bootstrapped, close_now, producer_settings
from leakproof.kafka.reader import consumer_settings
from leakproof.testing.crashpoints import crash_point

log = logging.getLogger(__name__)

T = TypeVar("T")

# a range's transaction is made anew with a new producer after a refusal or a deadline
# until this long has passed since its first try: the larger of a minute and four calls'
# deadlines (output.transaction_timeout_s). A broker killed or cut off from its peers moves
# its partitions' leaders and coordinators in 6-40 s on the cluster stack (a cut-off leader
# answers as the leader until the others' metadata reaches the client).
PUBLISH_BUDGET_S = 60.0
PUBLISH_BUDGET_CALLS = 4


def transactional_id(cfg: KafkaConfig, partition: int, scope: str = "") -> str:
    """The id every publisher of ``partition``'s summaries shares; ``scope``: the tables'
    prefix, so jobs writing other tables from the same topic and group never share it."""
    if scope:
        return f"leakproof-{scope}-{cfg.group_id}-{cfg.topic}-{partition}"
    return f"leakproof-{cfg.group_id}-{cfg.topic}-{partition}"


def marker_group(cfg: KafkaConfig, scope: str = "") -> str:
    """The group whose offset metadata marks each published outbox (``scope`` as above)."""
    return f"{cfg.group_id}.closed-sessions" + (f".{scope}" if scope else "")


def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()``, or PublishError once ``seconds`` have passed (the call is left to finish
    or fail in its daemon thread; the caller drops its producer, ``ClosedSink.drop``)."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failed.append(exc)

    worker = threading.Thread(target=run, name=f"leakproof-{what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if failed:
        raise failed[0]
    if not done:
        raise PublishError(f"{what} did not finish within {seconds:.0f}s "
                           f"(output.transaction_timeout_s)")
    return done[0]


class ClosedSink:
    """Publishes one source partition's closed-session summaries to the output topic."""

    def __init__(self, kafka: KafkaConfig, output: OutputConfig, partition: int,
                 encode: Encode | None = None, scope: str = "",
                 encode_update: EncodeUpdate | None = None) -> None:
        """``encode``: a summary's record value (None: JSON), ``encode_update`` the same
        with ``output.emit: update``; ``scope``: the tables' prefix (``transactional_id``)."""
        assert output.closed_sessions_topic is not None
        self.encode = encode
        self.updates = output.updates
        self.every_ms = output.every_ms
        self.encode_update = encode_update
        self._kafka, self._output, self.partition = kafka, output, partition
        self.topic = output.closed_sessions_topic
        self.txn_id = (transactional_id(kafka, partition, scope) if output.transactional
                       else None)
        self._markers_group = marker_group(kafka, scope)
        self._producer: Any = None
        self._markers: Any = None

    def _where(self) -> str:
        return (f"Kafka at {self._kafka.bootstrap_servers}, "
                + (f"transactional id {self.txn_id}" if self.txn_id else "no transactions"))

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return within(self._output.transaction_timeout_s, f"{what} ({self._where()})", call)
        except KafkaError as exc:
            self.drop()
            raise PublishError(f"closed-session summaries for {self._kafka.topic} partition "
                               f"{self.partition}: {what} failed ({self._where()}): "
                               f"{type(exc).__name__}: {exc}") from exc
        except PublishError:
            self.drop()
            raise

    def _bootstrapped(self, make: Callable[..., T], settings: dict[str, Any]) -> T:
        """A new client, or PublishError: a broker restarting under the batch (no server
        answers within the bootstrap timeout) is a failed try that ``publish`` makes again
        within its budget, as it does a transaction that failed, not the task's end."""
        try:
            return bootstrapped(make, settings)
        except KafkaError as exc:
            raise PublishError(f"closed-session summaries for {self._kafka.topic} partition "
                               f"{self.partition}: no Kafka client could be made "
                               f"({self._where()}): {type(exc).__name__}: {exc}") from exc

    def _ready(self) -> Any:
        if self._producer is None:
            settings = producer_settings(self._kafka)
            if self.txn_id:
                settings.update(transactional_id=self.txn_id,
                                transaction_timeout_ms=round(
                                    self._output.transaction_timeout_s * 2000))
            # kept before its init: an init past its deadline is dropped (closed) with it,
            # never left to finish later and fence the next producer of this id
            producer = self._producer = self._bootstrapped(KafkaProducer, settings)
            if self.txn_id:
                # fences every older producer of this id; aborts what one left open (or,
                # if its commit was already asked for, waits for that commit to complete)
                self._call("init_transactions", producer.init_transactions)
        return self._producer

    def published(self, outbox_id: str) -> bool:
        """Whether a committed transaction carried this outbox, or a later range's
        (``outbox.covers``: the marker's metadata).

        Read as a read_committed consumer of the marker group reads its offsets: the
        OffsetFetch asks for stable offsets only, and the broker answers "unstable" (retried
        by the client) while a transaction carrying the marker is still being completed. A
        plain fetch answers with the marker from before that transaction, so right after a
        commit it would say "not published" -- and the outbox would go out twice."""
        if not self.txn_id:
            return False  # no marker without transactions: publish again (at least once)
        # A transaction a dead producer of this id left open would keep the marker unstable
        # until it times out: a producer of our own first (init_transactions aborts it).
        self._ready()
        tp = TopicPartition(self._kafka.topic, self.partition)
        if self._markers is None:
            settings = consumer_settings(self._kafka)
            settings.update(group_id=self._markers_group, isolation_level="read_committed")
            self._markers = self._bootstrapped(KafkaConsumer, settings)
        timeout_ms = round(self._output.transaction_timeout_s * 1000)
        found = self._call("reading the marker",
                           lambda: self._markers.committed(tp, metadata=True,
                                                           timeout_ms=timeout_ms))
        return found is not None and covers(found.metadata, outbox_id)

    def publish(self, records: Sequence[tuple[bytes, bytes | None]], outbox_id: str,
                until_offset: int, headers: Sequence[Headers] = ()) -> None:
        """Send ``records`` (key, value; ``headers``: none, or one list per record) and the
        marker in one transaction, and commit it; on any failure abort (best effort) and
        raise PublishError. Without transactions: send and flush.

        The marker is read first (by a producer that has fenced every older one): an outbox
        a concurrent attempt of the range already published is not sent again. A
        transaction the broker refused, or one a call of which passed its deadline, is made
        again with a new producer (for up to ``PUBLISH_BUDGET_S`` or four deadlines), unless
        the marker then shows the outbox already out. Most often a refusal is a fence: a
        newer producer of this id initialised since ours, because the partition's last range
        ran in another Python worker (or a copy of this task ran, and then it may have
        published this very outbox). A deadline passes when a broker died under the transaction (its
        coordinator's, or the marker group's): kafka-python's producer keeps asking the dead
        node, while a new one finds the coordinator the cluster moved it to. Either way the
        new producer's ``init_transactions`` fences the old one: every later request of the
        old one carries an older epoch and is refused. A transaction it left open is
        aborted; one whose commit it had asked for is completed first -- so the marker,
        read again after the init by a new reader, says which, and the outbox goes out
        again only if it was not committed. (kafka-python reports a fence as
        ProducerFencedError once, then as a KafkaError naming its error state.)
        """
        if not self.txn_id:
            producer = self._ready()
            self._call("send", lambda: self._send(producer, records, headers))
            return
        budget = max(PUBLISH_BUDGET_S, PUBLISH_BUDGET_CALLS * self._output.transaction_timeout_s)
        give_up = time.monotonic() + budget
        attempt = 1
        while True:
            try:
                if self.published(outbox_id):
                    return  # a copy of this range (running beside this one, or an earlier
                    # attempt of this one) published it
                self._transaction(records, outbox_id, until_offset, headers)
                return
            except PublishError as exc:
                if time.monotonic() >= give_up:
                    raise
                self.drop()
                attempt += 1
                # the usual: see above (not a client that could not bootstrap: a broker
                # restarting, whose refusals come fast)
                fenced = isinstance(exc.__cause__, KafkaError) and not isinstance(
                    exc.__cause__, KafkaTimeoutError)
                log.log(logging.INFO if fenced else logging.WARNING,
                        "%s: %s; once more with a new producer (attempt %d, %.0fs left of %.0f)",
                        self.txn_id, exc.__cause__ if fenced else exc, attempt,
                        give_up - time.monotonic(), budget)
                if not fenced:
                    time.sleep(1.0)  # a cluster moving leaders: give its metadata a moment

    def _send(self, producer: Any, records: Sequence[tuple[bytes, bytes | None]],
              headers: Sequence[Headers]) -> None:
        """Each record sent, flushed, and seen to have landed (a commit would flush them
        too, but not say whether each did: ``kafka.acknowledged``)."""
        sent = [producer.send(self.topic, key=key, value=value,
                              headers=headers[i] if headers else None)
                for i, (key, value) in enumerate(records)]
        producer.flush()
        acknowledged(sent)

    def _transaction(self, records: Sequence[tuple[bytes, bytes | None]], outbox_id: str,
                     until_offset: int, headers: Sequence[Headers] = ()) -> None:
        producer = self._ready()
        try:
            self._call("begin_transaction", producer.begin_transaction)

            # a fence reported while sending is a KafkaError like any other: PublishError
            self._call("send", lambda: self._send(producer, records, headers))
            marker = {TopicPartition(self._kafka.topic, self.partition):
                      OffsetAndMetadata(until_offset, outbox_id, -1)}
            self._call("send_offsets_to_transaction", lambda: producer.send_offsets_to_transaction(
                marker, self._markers_group))
            crash_point("task_before_publish_commit")
            self._call("commit_transaction", producer.commit_transaction)
        except BaseException:
            if self._producer is producer:
                try:
                    within(self._output.transaction_timeout_s, "abort_transaction",
                           producer.abort_transaction)
                except BaseException:
                    # the next init_transactions of this id aborts it
                    log.debug("abort of %s failed", self.txn_id, exc_info=True)
                    self.drop()
            raise

    def drop(self) -> None:
        """Forget the producer (fenced, timed out or broken) and the marker reader: the
        next attempt makes both anew. The reader too: kafka-python answers a marker read
        with a fetch still in flight from before, which a timed-out read leaves behind --
        sent before the new producer's init, it may miss a copy's commit since."""
        producer, self._producer = self._producer, None
        if producer is not None:
            close_now(producer, self.txn_id)
        markers, self._markers = self._markers, None
        if markers is not None:
            try:
                markers.close(autocommit=False)
            except Exception:
                log.debug("closing the marker reader of %s failed", self.txn_id,
                          exc_info=True)

    def close(self) -> None:
        self.drop()
