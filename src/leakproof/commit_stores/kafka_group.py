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
import logging
from collections.abc import Mapping
from typing import Any

from leakproof.commit_stores.hbase import LastCommit
from leakproof.commit_stores.refusals import foreign
from leakproof.core.config import Config
from leakproof.core.offsets import CommittedBatch
from leakproof.kafka.admin import KafkaMetadata
from leakproof.ports.driver import REQUIRED_AUDIT

log = logging.getLogger(__name__)


class KafkaGroupCommitStore:
    """Commits as consumer-group offsets, through the driver's admin client."""

    name = "kafka"
    keeps_history = False

    def __init__(self, cfg: Config) -> None:
        self._topic, self._group = cfg.kafka.topic, cfg.kafka.group_id
        self._kafka = KafkaMetadata(cfg.kafka)
        self._last = LastCommit(cfg)

    def latest(self) -> CommittedBatch | None:
        """The group's offsets, if leakproof wrote them all (every partition's commit
        metadata names it: ForeignOffsets otherwise), or the copy of the job's newest commit
        when they vanished after it (expired or deleted)."""
        mine = self._kafka.group_offsets(self._group, self._topic)
        where = f"topic {self._topic} in group {self._group}"
        if not mine:
            copy = self._last.read()
            if copy is None:
                return None
            # Gone after commits of the job's own: expired (a topic quiet for longer than
            # offsets.retention.minutes: a batch that moved nothing commits nothing) or
            # deleted. The copy is the job's newest commit: resume from it, as the HBase
            # store does past its TTL. (A recreated topic, which drops its groups' offsets
            # too, is then refused at start by the id the copy keeps.)
            log.warning("%s: no offsets in the group (expired or deleted), though the job "
                        "committed batch %d: resuming from the copy of it kept in HBase",
                        where, copy.batch_ms)
            return copy
        metas = {p: _meta(text) for p, (_, text) in mine.items()}
        others = sorted(p for p, m in metas.items() if m.get("writer") != "leakproof")
        if others:
            raise foreign(self.name, where, others, "their commit metadata does not name it")
        # partitions of one commit that failed part way name an older batch: each offset is
        # still one the job applied up to, so the newest batch stands for them all
        meta = max(metas.values(), key=lambda m: int(m.get("batch_ms", 0)))
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
        self._last.write(batch_ms, offsets, audit)

    def get(self, batch_ms: int) -> CommittedBatch | None:
        latest = self.latest()  # one commit is kept: only the newest can be named
        return latest if latest is not None and latest.batch_ms == batch_ms else None

    def history(self, limit: int) -> list[CommittedBatch]:
        latest = self.latest()
        return [latest] if latest else []

    def close(self) -> None:
        self._kafka.close()
        self._last.close()


def _meta(text: str | None) -> dict[str, Any]:
    try:
        found = json.loads(text or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
