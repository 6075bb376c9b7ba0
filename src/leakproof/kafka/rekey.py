"""The re-keying stage's Kafka work (``input.rekey``; the rules are ``leakproof/core/rekey.py``'s).

``rekey_partition`` runs in an executor's Python worker, once per source partition and batch:

1. a transactional producer of the partition's id (``rekey.transactional_id``) is made and
   ``init_transactions`` called: every older producer of that id -- a crashed driver's task, a
   retry's first attempt, a speculative copy -- is fenced, and the transaction it left open
   is aborted;
2. only then the offset the group ``<group>.rekey`` committed is read (at read_committed, so
   a transaction still being completed is waited for, never read around): where to start;
3. the source records ``[start, until)`` are read in offset order, each decoded just enough
   to find its session key, and sent to the internal topic under it with the header
   ``leakproof.source``;
4. the offset ``until`` is sent to the transaction for the group, and the transaction
   committed: the copies and the offset land together or not at all.

A fresh producer each time costs an ``init_transactions`` round trip per partition and batch;
a producer kept between batches would be fenced whenever the partition's next task ran in
another Python worker, and would read its start without having aborted what a dead copy left
open. kafka-python's transaction calls wait without a deadline: each runs under
``output.transaction_timeout_s`` (``closed_sink.within``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from leakproof.core.config import Config
from leakproof.core.errors import (
    DataLossError,
    DecodeError,
    KafkaReadError,
    OffsetError,
    PublishError,
)
from leakproof.core.offsets import OffsetRange
from leakproof.core.rekey import (
    OUTAGE_S,
    RekeyReport,
    placer,
    rekey_group,
    stage_until,
    transactional_id,
    with_source,
)
from leakproof.kafka import bootstrapped, close_now, producer_settings
from leakproof.kafka.admin import create_topic
from leakproof.kafka.appender import Appender
from leakproof.kafka.closed_sink import within
from leakproof.kafka.reader import consumer_settings, read_range
from leakproof.kafka.registry import decoder_for
from leakproof.testing.crashpoints import crash_point

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 1_048_588  # Kafka's default max.message.bytes
HEADER_ROOM = 4096  # room for the leakproof.source header and a record batch's framing
_decoders: dict[Any, Any] = {}  # (model, input) -> the worker's key-finding decoder
_offset_readers: dict[tuple[str, str], KafkaConsumer] = {}  # (servers, group) -> reader


def rekey_riding_outages(cfg: Config, partition: int, readable_end: int, partitions: int,
                         budget: int | None, refresh: bool = False, outage_s: float = OUTAGE_S,
                         sleep: Callable[[float], None] = time.sleep) -> RekeyReport:
    """``rekey_partition``, tried again after a Kafka failure until ``outage_s`` has passed
    since the first try. A retry copies nothing twice: its ``init_transactions`` fences the
    failed try and aborts what it left open, and it starts from the offset the stage
    committed. Without it, a broker restarting under a batch failed the run (a new producer
    could not bootstrap), where the job's own reads wait for it.

    An error no retry mends (``lasting``) ends the task at once: above all a fence, which
    says a newer attempt of this partition holds the id -- a retry would fence it back.

    A retry copies the slice the failed try took, never the next one: a try whose commit
    landed but whose answer was lost leaves the retry nothing to copy, and the task reports
    the try's copies (the batch's rate cap and its counts hold)."""
    deadline = time.monotonic() + outage_s
    pause = 0.5
    tried: list[RekeyReport] = []  # the slice a try was about to commit, if one got there
    while True:
        try:
            end = min(readable_end, tried[-1].until_offset) if tried else readable_end
            got = rekey_partition(cfg, partition, end, partitions, budget, refresh,
                                  tried.append)
            if tried and got.from_offset == tried[-1].until_offset == got.until_offset:
                return tried[-1]  # that try's commit landed: its copies are the task's
            return got
        except (KafkaError, PublishError, KafkaReadError) as exc:
            if lasting(exc) or time.monotonic() + pause > deadline:
                raise
            log.warning("re-keying %s partition %d failed (%s: %s); trying again in %.1fs, "
                        "for up to %.0fs from the first try", cfg.kafka.topic, partition,
                        type(exc).__name__, exc, pause, outage_s)
            sleep(pause)
            pause = min(2 * pause, 5.0)


def lasting(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from, is one a retry cannot mend: fenced
    by a newer producer of the id, not allowed, or a request or client state that is wrong
    whatever the brokers do."""
    from kafka import errors

    kinds = (errors.ProducerFencedError, errors.InvalidProducerEpochError,
             errors.AuthorizationError, errors.SaslAuthenticationFailedError,
             errors.IllegalStateError, errors.IllegalArgumentError,
             errors.KafkaConfigurationError, errors.MessageSizeTooLargeError,
             errors.UnsupportedVersionError)
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kinds):
            return True
        seen = seen.__cause__
    return False


def rekey_partition(cfg: Config, partition: int, readable_end: int, partitions: int,
                    budget: int | None, refresh: bool = False,
                    committing: Callable[[RekeyReport], None] = lambda _r: None
                    ) -> RekeyReport:
    """Re-key source ``partition`` up to ``readable_end`` (at most ``budget`` offsets) onto
    the internal topic of ``partitions`` partitions, in one transaction (module docstring).
    With nothing to copy, no transaction -- unless ``refresh``: then one that commits the
    same offset again, so the broker never expires it (``rekey.REFRESH_S``).
    ``committing`` is told what the transaction holds just before it is committed."""
    rekey = cfg.input.rekey
    assert rekey is not None
    source = cfg.kafka.topic
    internal = rekey.internal_topic(source)
    txn_id = transactional_id(cfg.kafka.group_id, source, partition)
    seconds = cfg.output.transaction_timeout_s
    tp = TopicPartition(source, partition)
    settings = producer_settings(cfg.kafka)
    # a transaction begun right after the last one's commit is answered "concurrent
    # transactions" while its markers are written, and retried after this backoff: 100 ms
    # (the default) made a 1 000-record task take 0.46 s, 20 ms 0.19 s
    settings.update(transactional_id=txn_id, transaction_timeout_ms=round(seconds * 2000),
                    retry_backoff_ms=20)

    def failed(what: str, exc: BaseException) -> PublishError:
        return PublishError(f"re-keying {source} partition {partition} onto {internal}: {what} "
                            f"failed (Kafka at {cfg.kafka.bootstrap_servers}, transactional id "
                            f"{txn_id}): {type(exc).__name__}: {exc}")

    producer = bootstrapped(KafkaProducer, settings)
    try:
        try:
            # 1. fence every older copy; what it left open is aborted
            within(seconds, f"init_transactions ({txn_id})", producer.init_transactions)
            # 2. where to start, read after the fence
            start, known = _start(cfg, tp, seconds)
        except KafkaError as exc:
            raise failed("starting", exc) from exc
        until = stage_until(start, readable_end, budget)
        if until == start and known and not refresh:
            return RekeyReport(partition, start, start, committed=False)  # no transaction
        decoder = _decoder(cfg)
        records = forwarded = 0
        place = placer(partition, partitions)
        try:
            within(seconds, f"begin_transaction ({txn_id})", producer.begin_transaction)
            out = Appender(producer, internal)
            # 3. each record under its session key, with its source coordinates
            for rec in read_range(cfg.kafka, OffsetRange(source, partition, start, until)):
                try:
                    session_key: str | None = decoder.decode(
                        rec.key, rec.value, topic=source, partition=partition,
                        offset=rec.offset, timestamp=rec.timestamp,
                        headers=rec.headers).session_id
                except DecodeError:
                    session_key, forwarded = None, forwarded + 1
                key, to = place(session_key, rec.key)
                out.append(to, key, rec.value, rec.timestamp if rec.timestamp >= 0 else None,
                           with_source(rec.headers or (), source, partition, rec.offset))
                records += 1
            # on the broker now, in the open transaction (the commit would flush them anyway):
            # a crash here leaves a transaction for the next init_transactions to abort
            out.check()  # not a flush that cannot end: a transaction no longer open
            within(seconds, f"flush ({txn_id})", producer.flush)
            out.settled()  # every copy acknowledged, the transaction still open
            crash_point("rekey_before_commit")
            # 4. the source offset in the same transaction, then commit both
            committing(RekeyReport(partition, start, until, records, forwarded))
            offsets = {tp: OffsetAndMetadata(until, "", -1)}
            within(seconds, f"send_offsets_to_transaction ({txn_id})",
                   lambda: producer.send_offsets_to_transaction(offsets,
                                                                rekey_group(cfg.kafka.group_id)))
            within(seconds, f"commit_transaction ({txn_id})", producer.commit_transaction)
        except KafkaError as exc:
            raise failed("the transaction", exc) from exc
        crash_point("rekey_after_commit")
        return RekeyReport(partition, start, until, records, forwarded)
    finally:
        # an uncommitted transaction is aborted by the next init_transactions of this id
        close_now(producer, txn_id)


def _decoder(cfg: Config) -> Any:
    """The worker's decoder that reads the session key field without checking the record's
    key against it (the key is what this stage makes)."""
    key = (cfg.model, cfg.input)
    found = _decoders.get(key)
    if found is None:
        found = _decoders[key] = decoder_for(cfg.model, cfg.input, key_checked=False)
    return found


def _offsets_consumer(cfg: Config) -> KafkaConsumer:
    """The worker's reader of the stage's committed offsets (it only reads them: kept
    between tasks; never subscribed, so it never joins the group)."""
    key = (cfg.kafka.bootstrap_servers, rekey_group(cfg.kafka.group_id))
    consumer = _offset_readers.get(key)
    if consumer is None:
        settings = consumer_settings(cfg.kafka)
        # read_committed: the committed offset of a transaction still being completed is
        # "unstable" to such a consumer (retried), never the one from before it
        settings.update(group_id=key[1], isolation_level="read_committed")
        consumer = _offset_readers[key] = bootstrapped(KafkaConsumer, settings)
    return consumer


def _drop_offsets_consumer(cfg: Config) -> None:
    consumer = _offset_readers.pop((cfg.kafka.bootstrap_servers,
                                    rekey_group(cfg.kafka.group_id)), None)
    if consumer is not None:
        try:
            consumer.close(autocommit=False)
        except Exception:
            log.debug("closing the re-keying offsets reader failed", exc_info=True)


def _start(cfg: Config, tp: TopicPartition, seconds: float) -> tuple[int, bool]:
    """The offset the stage committed for ``tp``, and True; gone (expired, deleted): the
    offset after its last copy on the internal topic, and False; never committed: the start
    position ``kafka.auto_offset_reset`` gives, and False (then even an empty range commits
    it, so a ``latest`` start is not taken again later, past records written since). Below
    the log start (retention deleted records the stage never copied): ``kafka.on_data_loss``
    decides, as for the job's own ranges."""
    consumer = _offsets_consumer(cfg)
    try:
        found = within(seconds, f"reading {rekey_group(cfg.kafka.group_id)}'s offset",
                       lambda: consumer.committed(tp, timeout_ms=round(seconds * 1000)))
        log_start = int(consumer.beginning_offsets([tp])[tp])
        known = found is not None
        if found is None:
            # expired (the group has no members) or deleted: after the copies already made
            # (not known: the task commits it even with nothing new)
            found = _after_copies(cfg, tp, log_start, int(consumer.end_offsets([tp])[tp]))
            if found is not None:
                log.warning("%s-%d: the re-keying offset of %s is gone (expired by the "
                            "brokers' offsets.retention.minutes, or deleted); resuming after "
                            "its last copy on the internal topic, at %d", tp.topic,
                            tp.partition, rekey_group(cfg.kafka.group_id), found)
        if found is None:
            reset = cfg.kafka.auto_offset_reset
            if reset == "none":
                raise OffsetError(f"{tp.topic} partition {tp.partition} was never re-keyed "
                                  f"(no offset of {rekey_group(cfg.kafka.group_id)}) and "
                                  f"kafka.auto_offset_reset is none")
            return (log_start if reset == "earliest" else int(consumer.end_offsets([tp])[tp]),
                    False)
        if found < log_start:
            if cfg.kafka.on_data_loss != "skip":
                maybe = "" if known else " (or copied, their copies and offset since lost)"
                raise DataLossError(
                    f"data loss on {tp.topic} partition {tp.partition}: offsets [{found}, "
                    f"{log_start}) were deleted before the re-keying stage copied them"
                    f"{maybe}. Set kafka.on_data_loss: skip to go on")
            log.warning("%s-%d: offsets [%d, %d) were deleted before being re-keyed; "
                        "skipping them", tp.topic, tp.partition, found, log_start)
            return log_start, known
        return int(found), known
    except BaseException:
        _drop_offsets_consumer(cfg)  # the next task reads with a fresh one
        raise


def _last_copy(cfg: Config, tp: TopicPartition, chunk: int = 20_000
               ) -> tuple[int, bytes | None, int] | None:
    """The copy of ``tp``'s record with the highest source offset on the internal topic
    (``rekey.last_copy``; None: no copy there), read at read_committed after this task's
    fence: each internal partition from its end back, ``chunk`` offsets at a time, to the
    first chunk that holds a copy of it (a source partition's copies are in order there:
    one transactional id, fenced before it reads). Reading to the log end at
    read_committed waits for the other stage tasks' open transactions, so no copy made
    before them is missed. Raises ``OffsetError`` where retention makes it unsure: an
    internal partition whose oldest records are gone and that holds no copy of ``tp`` left
    may have held its newest. Only a stage whose offset is gone pays for this scan."""
    from leakproof.core.config import session_stage
    from leakproof.core.rekey import last_copy
    from leakproof.kafka.admin import topic_bounds

    internal = session_stage(cfg).kafka
    bounds = topic_bounds(internal)
    found: list[tuple[int, bytes | None, int]] = []
    unsure = []
    for q, b in sorted(bounds.items()):
        until, copy = b.log_end, None
        while until > b.log_start and copy is None:
            since = max(b.log_start, until - chunk)
            rng = OffsetRange(internal.topic, q, since, until)
            copy = last_copy(((r.headers, r.value, r.timestamp)
                              for r in read_range(internal, rng)), tp.topic, tp.partition)
            until = since
        if copy is not None:
            found.append(copy)
        elif b.log_start > 0:
            unsure.append(q)
    if found and unsure:
        raise OffsetError(
            f"the re-keying offset of {tp.topic} partition {tp.partition} is gone (expired "
            f"or deleted), and partitions {unsure} of {internal.topic} lost their oldest "
            f"records to retention with no copy of it left: where its copying stopped "
            f"cannot be told from the copies. Set the offset of group "
            f"{rekey_group(cfg.kafka.group_id)} for it by hand (kafka-consumer-groups "
            f"--reset-offsets --to-offset: the source offset after its last copy), or "
            f"re-key into a new input.rekey.topic with fresh tables")
    return max(found, key=lambda c: c[0]) if found else None


def _after_copies(cfg: Config, tp: TopicPartition, log_start: int, log_end: int
                  ) -> int | None:
    """Where a stage whose offset is gone resumes: after its last copy, if the source still
    holds that record (same value and timestamp) or no longer holds it (deleted: the
    data-loss rule then judges); None when there is no copy, or the copies are of another
    topic of that name (recreated: the record there is not the one copied), and then the
    reset rule decides."""
    copy = _last_copy(cfg, tp)
    if copy is None:
        return None
    offset, value, timestamp = copy
    if offset >= log_end:
        return None  # past the source's end: an earlier topic's copies
    if offset < log_start:
        return offset + 1  # the record is gone from the source: kafka.on_data_loss judges
    here = list(read_range(cfg.kafka, OffsetRange(tp.topic, tp.partition, offset,
                                                  offset + 1)))
    if here and (here[0].offset != offset or here[0].value != value
                 or here[0].timestamp != timestamp):
        return None  # not the record copied: an earlier topic's copies
    return offset + 1


def ensure_internal_topic(cfg: Config, source_partitions: int,
                          source_settings: dict[str, str]) -> bool:
    """Create the internal topic if it does not exist: ``input.rekey.partitions`` partitions
    (default: the source's count), the cluster's default replication, deleted by time and
    size as the source is (a buffer, never compacted: a key's records are many events), and
    room for the source's largest record with its header.
    True if this call created it."""
    rekey = cfg.input.rekey
    assert rekey is not None
    topic = rekey.internal_topic(cfg.kafka.topic)
    configs = {"cleanup.policy": "delete",
               # a source record at the size limit still fits with its source header
               "max.message.bytes": str(int(source_settings.get("max.message.bytes",
                                                                DEFAULT_MAX_MESSAGE_BYTES))
                                        + HEADER_ROOM)}
    for name in ("retention.ms", "retention.bytes"):
        if name in source_settings:
            configs[name] = source_settings[name]
    return create_topic(cfg.kafka, topic, rekey.partitions or source_partitions, configs,
                        replication_factor=-1)
