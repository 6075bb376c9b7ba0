"""Where committed offsets live (``offsets.store``): the one home of the three commit stores.

- ``hbase`` (default, hbase.py): the offsets table of docs/DESIGN.md, one row per batch, with
  history and audit, plus a TTL-free copy of the newest commit in the state table;
- ``kafka`` (kafka_group.py): the consumer group ``kafka.group_id``, so Kafka's own lag tools
  read it directly; one commit per partition, no history;
- ``zookeeper`` (zookeeper.py): ``/consumers/<group>/offsets/<topic>/<partition>``, as Kafka's
  old ZooKeeper consumers kept them; no history.

The job resumes from ``latest()`` and calls ``put`` only after the batch's tasks succeeded and
the lease check passed. Whatever else it keeps, every store must give back from ``latest()``
the audit keys in ``REQUIRED_AUDIT``: the start-up checks read them (``topic_id`` is how a
deleted and recreated topic is recognised). The driver lease stays in HBase whatever the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from leakproof.config import Config
from leakproof.offsets import CommittedBatch

# epoch: the lease epoch of the driver that committed; topic_id: Kafka's id of the topic the
# offsets belong to (absent only where the broker has no topic ids).
REQUIRED_AUDIT = ("epoch", "topic_id")


class CommitStore(Protocol):
    """Committed batches for one topic and group."""

    name: str

    def latest(self) -> CommittedBatch | None: ...

    def put(self, batch_ms: int, offsets: Mapping[int, int],
            audit: Mapping[str, str]) -> None: ...

    def history(self, limit: int) -> list[CommittedBatch]: ...

    def close(self) -> None: ...


def open_store(cfg: Config) -> CommitStore:
    """The store ``offsets.store`` names (each imports its client library only when chosen)."""
    if cfg.offsets.store == "kafka":
        from leakproof.commit_stores.kafka_group import KafkaGroupCommitStore

        return KafkaGroupCommitStore(cfg)
    if cfg.offsets.store == "zookeeper":
        from leakproof.commit_stores.zookeeper import ZooKeeperCommitStore

        return ZooKeeperCommitStore(cfg)
    from leakproof.commit_stores.hbase import HBaseCommitStore

    return HBaseCommitStore(cfg)
