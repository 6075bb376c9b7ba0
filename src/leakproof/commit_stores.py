"""Pick the commit store named by ``offsets.store`` (the one place that knows all three)."""

from __future__ import annotations

from leakproof.config import Config
from leakproof.offsets import CommitStore


def open_store(cfg: Config) -> CommitStore:
    if cfg.offsets.store == "kafka":
        from leakproof.kafka.group_store import KafkaGroupCommitStore

        return KafkaGroupCommitStore(cfg)
    if cfg.offsets.store == "zookeeper":
        from leakproof.zookeeper_store import ZooKeeperCommitStore

        return ZooKeeperCommitStore(cfg)
    from leakproof.hbase.offset_store import HBaseCommitStore

    return HBaseCommitStore(cfg)
