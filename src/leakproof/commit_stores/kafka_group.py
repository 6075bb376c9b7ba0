"""Committed offsets kept in the Kafka consumer group ``kafka.group_id`` (offsets.store: kafka).

The group's committed offset per partition is the next offset to read, as in every Kafka
consumer; the commit metadata carries the batch time, the driver epoch and the topic id (the
REQUIRED_AUDIT keys), so ``latest`` gives a CommittedBatch like the HBase store. Kafka keeps
one commit per partition: there is no history (``offsets history`` then shows the newest
only), and the broker expires a group's offsets after ``offsets.retention.minutes`` (7 days
by default) without a commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from leakproof.config import Config
from leakproof.kafka.admin import KafkaMetadata
from leakproof.offsets import CommittedBatch
from leakproof.ports.driver import REQUIRED_AUDIT


class KafkaGroupCommitStore:
    """Commits as consumer-group offsets, through the driver's admin client."""

    name = "kafka"
    keeps_history = False

    def __init__(self, cfg: Config) -> None:
        self._topic, self._group = cfg.kafka.topic, cfg.kafka.group_id
        self._kafka = KafkaMetadata(cfg.kafka)

    def latest(self) -> CommittedBatch | None:
        mine = self._kafka.group_offsets(self._group, self._topic)
        if not mine:
            return None
        meta: dict[str, str] = {}
        for _, text in mine.values():
            try:
                meta = json.loads(text or "{}")
                break
            except ValueError:
                continue
        return CommittedBatch(int(meta.get("batch_ms", 0)),
                              {p: offset for p, (offset, _) in sorted(mine.items())},
                              {k: str(v) for k, v in meta.items() if k != "batch_ms"})

    def put(self, batch_ms: int, offsets: Mapping[int, int], audit: Mapping[str, str]) -> None:
        # the broker caps metadata at offset.metadata.max.bytes (4096): keep it small
        kept = {k: audit[k] for k in REQUIRED_AUDIT if k in audit}
        if "rewind" in audit:  # what an operator asked for, shortened to fit
            kept["rewind"] = audit["rewind"][:200]
        meta = json.dumps({"batch_ms": batch_ms, "writer": "leakproof", **kept},
                          separators=(",", ":"))
        self._kafka.commit_group_offsets(self._group, self._topic, offsets, meta)

    def get(self, batch_ms: int) -> CommittedBatch | None:
        latest = self.latest()  # one commit is kept: only the newest can be named
        return latest if latest is not None and latest.batch_ms == batch_ms else None

    def history(self, limit: int) -> list[CommittedBatch]:
        latest = self.latest()
        return [latest] if latest else []

    def close(self) -> None:
        self._kafka.close()
