"""A driver's planning and committing parts wired to in-memory fakes (no Kafka, no HBase)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leakproof.core.config import KafkaConfig
from leakproof.core.offsets import CommittedBatch, LogBounds
from leakproof.core.reports import TaskReport
from leakproof.driver.batch import BatchPlan
from leakproof.driver.committing import Committer
from leakproof.driver.planning import Planner
from leakproof.driver.startup import start_driver
from leakproof.testing.driver_ports import (
    FakeCommitStore,
    FakeLeaseStore,
    FakeMetadata,
    FakeTableSet,
)


@dataclass
class Rig:
    meta: FakeMetadata
    store: FakeCommitStore
    leases: FakeLeaseStore
    planner: Planner
    committer: Committer
    incarnation: str = ""  # the fence tag start_driver gave the topic
    clock: int = 1_000

    def plan(self) -> BatchPlan:
        """The next batch's plan, one batch interval (1 s) after the last."""
        self.clock += 1000
        return self.planner.plan(self.clock)

    def run(self, plan: BatchPlan | None = None) -> BatchPlan:
        """Plan (unless given), 'run' every task, commit."""
        plan = plan or self.plan()
        self.committer.commit(plan, reports(plan))
        return plan


def reports(plan: BatchPlan) -> list[TaskReport]:
    """What the tasks of ``plan`` would report had every record been applied."""
    return [TaskReport(r.partition, r.from_offset, r.until_offset, records=r.count,
                       applied=r.count, sessions=1) for r in plan.work]


def rig(bounds: dict[int, tuple[int, int] | tuple[int, int, int]],
        stored: dict[int, int] | None = None,
        stored_audit: dict[str, str] | None = None, mirror: bool = True,
        recorded_topic_id: str | None = None, leases: FakeLeaseStore | None = None,
        topic_id: str = "id-1", stored_ms: int = 500, tables: FakeTableSet | None = None,
        **kafka: Any) -> Rig:
    """A started driver over a topic ``t`` with these [log_start, log_end) per partition
    (and a third number, the stable end, where a transaction is open)."""
    meta = FakeMetadata("t", {p: LogBounds(*b) for p, b in bounds.items()}, topic_id)
    store = FakeCommitStore()
    if stored is not None:
        store.rows.append(CommittedBatch(stored_ms, stored, stored_audit or {}))
    leases = leases or FakeLeaseStore(recorded_topic_id=recorded_topic_id)
    planner = Planner(KafkaConfig("127.0.0.1:9092", "t", "g", **kafka), 1.0, meta)
    started = start_driver("t", "g", leases=leases, store=store,
                           tables=tables or FakeTableSet(leases), planner=planner,
                           mirror=meta if mirror else None, holder="start:a", now_ms=1_000)
    return Rig(meta, store, leases, planner, started.committer, started.incarnation)
