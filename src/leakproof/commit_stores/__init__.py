"""Where committed offsets live (``offsets.store``): the one home of the three commit stores.

- ``hbase`` (default, hbase.py): the offsets table of docs/DESIGN.md, one row per batch, with
  history and audit, plus a TTL-free copy of the newest commit in the state table;
- ``kafka`` (kafka_group.py): the consumer group ``kafka.group_id``, so Kafka's own lag tools
  read it directly; one commit per partition, no history;
- ``zookeeper`` (zookeeper.py): ``/consumers/<group>/offsets/<topic>/<partition>``, as Kafka's
  old ZooKeeper consumers kept them; no history.

Each is a ``ports.driver.CommitStore``: the job resumes from ``latest()``, ``put`` commits
(after the batch's tasks and the lease check) and ``offsets rewind`` writes through it. Whatever
else it keeps, every store gives back from ``latest()`` the audit keys in ``REQUIRED_AUDIT``
(``topic_id`` is how a deleted and recreated topic is recognised). The driver lease stays in
HBase whatever the store, beside a copy of the newest commit (``hbase.LastCommit``): a
Kafka-group or ZooKeeper store whose offsets were written by someone else is refused with
ForeignOffsets (``refusals.py``), never taken for the job's own; one whose offsets vanished
(expired, deleted) resumes from that copy instead of starting over.
"""

from __future__ import annotations

from leakproof.core.config import Config
from leakproof.ports.driver import CommitStore


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
