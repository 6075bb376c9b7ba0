"""Committed offsets kept in ZooKeeper (offsets.store: zookeeper), in the layout of Kafka's old
ZooKeeper-based consumers that many Spark users still keep offsets in:
``/consumers/<group>/offsets/<topic>/<partition>`` = the next offset to read, decimal text.

The batch time and epoch of the last commit sit in ``/consumers/<group>/leakproof/<topic>``
(JSON). A commit writes all of them in one ZooKeeper multi-op transaction, so a reader never
sees half a batch. One commit per partition is kept: no history.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from leakproof.commit_stores.hbase import LastCommit
from leakproof.commit_stores.refusals import foreign
from leakproof.core.config import Config
from leakproof.core.errors import StoreError
from leakproof.core.offsets import CommittedBatch

log = logging.getLogger(__name__)


class ZooKeeperCommitStore:
    """Commits as znodes, all of one batch in one multi-op transaction."""

    name = "zookeeper"
    keeps_history = False

    def __init__(self, cfg: Config, timeout_s: float = 15.0) -> None:
        self._topic, self._group = cfg.kafka.topic, cfg.kafka.group_id
        self._hosts = cfg.offsets.zookeeper_hosts
        self._offsets = f"/consumers/{self._group}/offsets/{self._topic}"
        self._meta = f"/consumers/{self._group}/leakproof/{self._topic}"
        self._last = LastCommit(cfg)
        self._zk = KazooClient(hosts=self._hosts, timeout=timeout_s)
        try:
            self._zk.start(timeout=timeout_s)
        except Exception as exc:
            self._zk.close()
            raise StoreError(f"cannot reach ZooKeeper at {self._hosts} "
                             f"(offsets.zookeeper_hosts): {exc}") from exc

    def latest(self) -> CommittedBatch | None:
        """The znodes' offsets, if leakproof wrote them (its batch record holds the same
        offsets; ForeignOffsets otherwise), or the copy of the job's newest commit when they
        vanished after it."""
        where = f"topic {self._topic} in group {self._group}"
        try:
            children = self._zk.get_children(self._offsets)
        except NoNodeError:
            children = []
        offsets = {int(c): int(self._zk.get(f"{self._offsets}/{c}")[0]) for c in children
                   if c.isdigit()}
        if not offsets:
            copy = self._last.read()
            if copy is not None:  # deleted after the job's commits: resume from its copy
                log.warning("%s: no offsets in ZooKeeper, though the job committed batch %d: "
                            "resuming from the copy of it kept in HBase", where, copy.batch_ms)
            return copy
        try:
            meta: dict[str, Any] = json.loads(self._zk.get(self._meta)[0] or b"{}")
        except NoNodeError:
            raise foreign(self.name, where, sorted(offsets),
                          f"no batch record at {self._meta}") from None
        written = {int(p): o for p, o in meta.get("offsets", {}).items()}
        changed = sorted(p for p, o in offsets.items() if written and written.get(p) != o)
        if changed:
            raise foreign(self.name, where, changed,
                          "they differ from the batch leakproof recorded with them")
        return CommittedBatch(int(meta.get("batch_ms", 0)), dict(sorted(offsets.items())),
                              {k: str(v) for k, v in meta.items()
                               if k not in ("batch_ms", "offsets")})

    def put(self, batch_ms: int, offsets: Mapping[int, int], audit: Mapping[str, str]) -> None:
        try:
            for p in offsets:  # idempotent; the values are set in the transaction below
                self._zk.ensure_path(f"{self._offsets}/{p}")
            self._zk.ensure_path(self._meta)
            tx = self._zk.transaction()
            for p, o in offsets.items():
                tx.set_data(f"{self._offsets}/{p}", str(o).encode())
            tx.set_data(self._meta, json.dumps({"batch_ms": batch_ms, **audit,
                                                "offsets": {str(p): o
                                                            for p, o in offsets.items()}}
                                               ).encode())
            results = tx.commit()
        except KazooException as exc:
            raise StoreError(f"ZooKeeper commit of batch {batch_ms} failed: {exc}") from exc
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise StoreError(f"ZooKeeper commit of batch {batch_ms} failed: {failed[0]!r}")
        self._last.write(batch_ms, offsets, audit)

    def get(self, batch_ms: int) -> CommittedBatch | None:
        latest = self.latest()  # one commit is kept: only the newest can be named
        return latest if latest is not None and latest.batch_ms == batch_ms else None

    def history(self, limit: int) -> list[CommittedBatch]:
        latest = self.latest()
        return [latest] if latest else []

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()
        self._last.close()
