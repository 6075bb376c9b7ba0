"""What the driver asks Kafka each batch: the topic's partitions and their log bounds."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError

from leakproof.config import KafkaConfig
from leakproof.errors import KafkaReadError
from leakproof.offsets import LogBounds

log = logging.getLogger(__name__)


class KafkaMetadata:
    """A long-lived admin client on the driver; no consumer group is ever joined."""

    def __init__(self, cfg: KafkaConfig) -> None:
        self._cfg = cfg
        try:
            self._admin = KafkaAdminClient(client_id=f"leakproof-driver-{cfg.group_id}",
                                           **admin_settings(cfg))
        except KafkaError as exc:
            raise KafkaReadError(f"cannot reach Kafka at {cfg.bootstrap_servers}: {exc}") from exc

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids, read fresh (partitions may be added while running)."""
        try:
            described = self._admin.describe_topics([topic])
        except KafkaError as exc:
            raise KafkaReadError(f"cannot describe topic {topic}: {exc}") from exc
        for t in described:
            if t["name"] == topic:
                if t["error_code"]:
                    raise KafkaReadError(f"topic {topic} is not available (Kafka error "
                                         f"{t['error_code']}); does it exist?")
                return sorted(p["partition_index"] for p in t["partitions"])
        raise KafkaReadError(f"topic {topic} does not exist")

    def topic_id(self, topic: str) -> str | None:
        """The topic's id: it changes when a topic is deleted and recreated under one name."""
        for t in self._admin.describe_topics([topic]):
            if t["name"] == topic:
                return str(t.get("topic_id")) if t.get("topic_id") else None
        return None

    def log_bounds(self, topic: str, partitions: Iterable[int]) -> dict[int, LogBounds]:
        """[log start, log end) per partition, from two ListOffsets round trips."""
        tps = [TopicPartition(topic, p) for p in partitions]
        try:
            starts = self._admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
            ends = self._admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
        except KafkaError as exc:
            raise KafkaReadError(f"cannot list offsets of {topic}: {exc}") from exc
        return {tp.partition: LogBounds(starts[tp].offset, ends[tp].offset) for tp in tps}

    def close(self) -> None:
        self._admin.close()


def admin_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """The consumer passthrough settings an admin client understands (security, timeouts)."""
    allowed = set(KafkaAdminClient.DEFAULT_CONFIG)
    return {k: v for k, v in cfg.client_settings().items() if k in allowed}
