"""In-memory fakes of the driver's ports, for tests of the commit and planning rules.

They keep state the way the real stores do (a lease cell with compare-and-set, one row per
commit, a topic with partitions and log bounds) and can be told to fail, so every rule of
``driver.committing`` and ``driver.planning`` is a unit test with literals. The real
adapters are tested against real Kafka and HBase in tests/integration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from leakproof.errors import KafkaReadError
from leakproof.lease import FIRST_EPOCH, Lease
from leakproof.offsets import CommittedBatch, Gap, HeldTransaction, LogBounds
from leakproof.runs import RUNNING, STOPPED, RunState


@dataclass
class FakeMetadata:
    """A topic: its id, and [log_start, log_end) per partition (with a stable end where a
    transaction is open); ``down`` makes calls fail; ``opened_ms`` says when the transaction
    at each held partition's stable end began, and ``peeks`` counts the look-ups."""

    topic: str
    bounds: dict[int, LogBounds]
    topic_id: str | None = "id-1"
    down: bool = False
    opened_ms: dict[int, int] = field(default_factory=dict)
    peeks: int = 0
    mirrored: list[tuple[str, dict[int, int], str]] = field(default_factory=list)
    mirror_failures: int = 0  # the next N mirror calls fail

    def describe(self, topic: str) -> tuple[str | None, list[int]]:
        self._check(topic)
        return self.topic_id, sorted(self.bounds)

    def log_bounds(self, topic: str, partitions: Iterable[int]) -> dict[int, LogBounds]:
        self._check(topic)
        return {p: self.bounds[p] for p in partitions}

    def open_transactions(self, topic: str, held: Mapping[int, int]
                          ) -> dict[int, HeldTransaction]:
        self._check(topic)
        self.peeks += 1
        return {p: HeldTransaction(p, at, self.opened_ms.get(p)) for p, at in held.items()}

    def mirror_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int],
                             note: str) -> None:
        if self.mirror_failures:
            self.mirror_failures -= 1
            raise KafkaReadError("coordinator not available")
        self.mirrored.append((group, dict(offsets), note))

    def close(self) -> None:
        pass

    def _check(self, topic: str) -> None:
        if self.down:
            raise KafkaReadError("broker down")
        if topic != self.topic:
            raise KafkaReadError(f"topic {topic} does not exist")


@dataclass
class FakeCommitStore:
    """Committed batches kept in a list, newest last (like the HBase store's rows)."""

    name: str = "fake"
    rows: list[CommittedBatch] = field(default_factory=list)
    keeps_history: bool = True

    def latest(self) -> CommittedBatch | None:
        return self.rows[-1] if self.rows else None

    def get(self, batch_ms: int) -> CommittedBatch | None:
        kept = self.rows if self.keeps_history else self.rows[-1:]
        return next((r for r in kept if r.batch_ms == batch_ms), None)

    def put(self, batch_ms: int, offsets: Mapping[int, int], audit: Mapping[str, str]) -> None:
        self.rows.append(CommittedBatch(batch_ms, dict(offsets), dict(audit)))

    def history(self, limit: int) -> list[CommittedBatch]:
        return list(reversed(self.rows))[:limit]

    def close(self) -> None:
        pass


@dataclass
class FakeLeaseStore:
    """One lease cell with compare-and-set, and the gaps recorded.

    ``lose_reply`` makes the next compare-and-set apply its write and then report failure,
    as a call whose reply was lost and which a retry found already done.
    """

    cell: Lease | None = None
    gaps: list[Gap] = field(default_factory=list)
    lose_reply: bool = False
    recorded_topic_id: str | None = None

    def take(self, tag: str) -> Lease:
        self.cell = self.cell.successor(tag) if self.cell else Lease(FIRST_EPOCH, tag)
        return self.cell

    def holder(self) -> Lease | None:
        return self.cell

    def compare_and_set(self, expected: Lease, new: Lease) -> bool:
        if self.cell != expected:
            return False
        self.cell = new
        if self.lose_reply:
            self.lose_reply = False
            return False
        return True

    def record_gap(self, gap: Gap) -> None:
        self.gaps.append(gap)

    def topic_id(self) -> str | None:
        return self.recorded_topic_id

    def record_topic_id(self, topic_id: str) -> None:
        self.recorded_topic_id = topic_id

    def close(self) -> None:
        pass


@dataclass
class FakeRunRecord:
    """The run record in memory, as HBaseRunRecord keeps it; ``down`` makes calls fail."""

    state: RunState | None = None
    down: bool = False
    clock_ms: int = 1_700_000_000_000

    def read(self) -> RunState | None:
        return self.state

    def heartbeat(self, epoch: int, where: str) -> RunState | None:
        if self.down:
            raise OSError("HBase away")
        if self.state is not None and self.state.epoch > epoch:
            return self.state
        kept = self.state.stop_epoch if self.state else 0
        self.state = RunState(epoch, RUNNING, self.clock_ms, stop_epoch=kept, where=where)
        return self.state

    def request_stop(self, epoch: int) -> None:
        assert self.state is not None
        self.state = replace(self.state, stop_epoch=epoch, stop_requested_ms=self.clock_ms)

    def stopped(self, epoch: int, detail: str) -> None:
        if self.state is None or self.state.epoch == epoch:
            self.state = RunState(epoch, STOPPED, self.clock_ms, stopped_ms=self.clock_ms,
                                  detail=detail)
