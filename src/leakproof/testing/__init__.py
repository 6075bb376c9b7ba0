"""In-memory fakes of the driver's ports and of a range's, for tests of their rules.

They keep state the way the real stores do (a lease cell with compare-and-set, one row per
commit, a topic with partitions and log bounds; session rows as HBase cells, a partition's
state row and index rows, Kafka transactions that commit or vanish) and can be told to fail
or to crash at a named step, so every rule of ``driver.committing``, ``driver.planning`` and
``task.process`` is a unit test with literals. The real adapters are tested against real
Kafka and HBase in tests/integration.
"""

from __future__ import annotations

from leakproof.testing.driver_ports import (
    FakeCommitStore,
    FakeLeaseStore,
    FakeMetadata,
    FakeRunRecord,
    FakeTableSet,
)
from leakproof.testing.hbase_table import (
    Crash,
    FakeConnection,
    FakeTable,
    Journal,
    LateWrite,
)
from leakproof.testing.redrive import (
    FakeBroker,
    FakeDeadLetterRows,
    FakeLogRecord,
    FakeRedriveTarget,
)
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
    FakeSummarySink,
    FakeVisits,
    fake_scan,
)

__all__ = ["Crash", "FakeBroker", "FakeCommitStore", "FakeConnection", "FakeDeadLetterRows",
           "FakeDeadLetters", "FakeLeaseCheck", "FakeLeaseStore", "FakeLogRecord", "FakeMetadata",
           "FakePartitionRows", "FakeRedriveTarget", "FakeRunRecord", "FakeSessionRows",
           "FakeSummarySink", "FakeTable", "FakeTableSet", "FakeVisits", "Journal", "LateWrite",
           "fake_scan"]
