"""Read exactly one partition's offset range, in offset order (runs in Spark's Python workers).

The consumer is ``assign``-ed, never subscribed: no group membership, no rebalance, no
auto-commit. One consumer per (servers, topic, partition) is cached in the worker process
and reused by later batches, as Spark's own KafkaRDD caches its consumers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError, OffsetOutOfRangeError

from leakproof.config import KafkaConfig
from leakproof.errors import KafkaReadError
from leakproof.offsets import OffsetRange

log = logging.getLogger(__name__)

_consumers: dict[tuple[str, str, int], KafkaConsumer] = {}


def consumer_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """kafka-python consumer settings: user passthrough first, then what leakproof needs."""
    settings: dict[str, Any] = {
        "max_partition_fetch_bytes": 8 * 1024 * 1024,
        "fetch_max_bytes": 64 * 1024 * 1024,
        "fetch_max_wait_ms": 100,
        "receive_buffer_bytes": 4 * 1024 * 1024,
        # kafka-python backs off up to 30 s between reconnects; after a broker restart that
        # outlasts kafka.read_timeout_s and fails the batch. Retry every 2 s at most.
        "reconnect_backoff_max_ms": 2000,
        **cfg.client_settings(),
    }
    settings.update(
        group_id=None,
        enable_auto_commit=False,
        # Never jump silently: a range whose start was deleted must fail, not reset.
        auto_offset_reset="none",
        isolation_level="read_uncommitted",
    )
    return settings


def _consumer(cfg: KafkaConfig, topic: str, partition: int) -> KafkaConsumer:
    key = (cfg.bootstrap_servers, topic, partition)
    consumer = _consumers.get(key)
    if consumer is None:
        consumer = KafkaConsumer(client_id=f"leakproof-{cfg.group_id}-{partition}",
                                 **consumer_settings(cfg))
        consumer.assign([TopicPartition(topic, partition)])
        _consumers[key] = consumer
    return consumer


def drop_consumer(cfg: KafkaConfig, topic: str, partition: int) -> None:
    """Forget a consumer after an error, so the next attempt starts clean."""
    consumer = _consumers.pop((cfg.bootstrap_servers, topic, partition), None)
    if consumer is not None:
        try:
            consumer.close(autocommit=False)
        except Exception:
            log.debug("closing a broken consumer failed", exc_info=True)


def read_range(cfg: KafkaConfig, rng: OffsetRange
               ) -> Iterator[tuple[int, bytes | None, bytes | None, int]]:
    """Yield (offset, key, value, timestamp ms) for every record in [from, until), in order.

    Offsets missing inside the range (compaction, transaction markers) are simply absent;
    the read ends when the consumer's position reaches ``until`` and never yields past it.
    """
    if rng.count == 0:
        return
    tp = TopicPartition(rng.topic, rng.partition)
    consumer = _consumer(cfg, rng.topic, rng.partition)
    try:
        consumer.seek(tp, rng.from_offset)
        position = rng.from_offset
        stalled_since = time.monotonic()
        while position < rng.until_offset:
            batch = consumer.poll(timeout_ms=500, max_records=5000).get(tp, [])
            for record in batch:
                if record.offset >= rng.until_offset:
                    return
                if record.offset >= position:
                    yield record.offset, record.key, record.value, record.timestamp
            new_position = consumer.position(tp)
            if new_position > position:
                position = new_position
                stalled_since = time.monotonic()
            elif time.monotonic() - stalled_since > cfg.read_timeout_s:
                raise KafkaReadError(
                    f"{rng}: no progress at offset {position} for {cfg.read_timeout_s:.0f}s "
                    f"(kafka.read_timeout_s); is the broker up and the range still in the log?")
    except OffsetOutOfRangeError as exc:
        drop_consumer(cfg, rng.topic, rng.partition)
        raise KafkaReadError(f"{rng}: offset {rng.from_offset} is no longer in the log "
                             f"(retention or a recreated topic): {exc}") from exc
    except KafkaError as exc:
        drop_consumer(cfg, rng.topic, rng.partition)
        raise KafkaReadError(f"{rng}: {exc}") from exc
