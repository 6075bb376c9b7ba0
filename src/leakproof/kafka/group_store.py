"""Committed offsets kept in the Kafka consumer group ``kafka.group_id`` (offsets.store: kafka).

The group's committed offset per partition is the next offset to read, as in every Kafka
consumer; the commit metadata carries the batch time and the driver epoch, so ``latest``
gives a CommittedBatch like the HBase store. Kafka keeps one commit per partition: there is
no history (``offsets history`` then shows the newest only), and the broker expires a group's
offsets after ``offsets.retention.minutes`` (7 days by default) without a commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from kafka import KafkaAdminClient, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from leakproof.config import Config
from leakproof.errors import KafkaReadError
from leakproof.kafka.admin import admin_settings
from leakproof.offsets import CommittedBatch


class KafkaGroupCommitStore:
    name = "kafka"

    def __init__(self, cfg: Config) -> None:
        self._topic, self._group = cfg.kafka.topic, cfg.kafka.group_id
        try:
            self._admin = KafkaAdminClient(client_id=f"leakproof-offsets-{self._group}",
                                           **admin_settings(cfg.kafka))
        except KafkaError as exc:
            raise KafkaReadError(f"cannot reach Kafka for group offsets: {exc}") from exc

    def latest(self) -> CommittedBatch | None:
        try:
            groups = self._admin.list_group_offsets({self._group: None})
            committed = groups.get(self._group, {})
        except KafkaError as exc:
            raise KafkaReadError(f"cannot read the offsets of group {self._group}: "
                                 f"{exc}") from exc
        mine = {tp.partition: om for tp, om in committed.items()
                if tp.topic == self._topic and om.offset >= 0}
        if not mine:
            return None
        meta: dict[str, str] = {}
        for om in mine.values():
            try:
                meta = json.loads(om.metadata or "{}")
                break
            except ValueError:
                continue
        return CommittedBatch(int(meta.get("batch_ms", 0)),
                              {p: om.offset for p, om in sorted(mine.items())},
                              {k: str(v) for k, v in meta.items() if k != "batch_ms"})

    def put(self, batch_ms: int, offsets: Mapping[int, int], audit: Mapping[str, str]) -> None:
        # the broker caps metadata at offset.metadata.max.bytes (4096): keep it small
        meta = json.dumps({"batch_ms": batch_ms, "epoch": audit.get("epoch", ""),
                           "writer": "leakproof"}, separators=(",", ":"))
        try:
            result = self._admin.alter_group_offsets(
                self._group, {TopicPartition(self._topic, p): OffsetAndMetadata(o, meta, -1)
                              for p, o in offsets.items()})
        except KafkaError as exc:
            raise KafkaReadError(f"cannot commit offsets to group {self._group}: {exc}") from exc
        failed = {tp.partition: err for tp, err in result.items() if getattr(err, "errno", 0)}
        if failed:
            raise KafkaReadError(f"group {self._group} refused offsets for {failed}")

    def history(self, limit: int) -> list[CommittedBatch]:
        latest = self.latest()
        return [latest] if latest else []

    def close(self) -> None:
        self._admin.close()
