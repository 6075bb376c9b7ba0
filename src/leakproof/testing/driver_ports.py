"""Fakes of the driver's ports (``ports.driver``): a topic's metadata, a commit store, the
state table's driver rows, a table set, the run record -- each keeping state as the real
store does, and told to fail where a test says."""


from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from leakproof.core.errors import KafkaReadError, TablesOwned
from leakproof.core.lease import FIRST_EPOCH, Lease
from leakproof.core.moved_keys import NONE as NO_MOVES
from leakproof.core.moved_keys import KeyMoves
from leakproof.core.offsets import CommittedBatch, Gap, HeldTransaction, LogBounds
from leakproof.core.runs import RUNNING, STOPPED, RunState


@dataclass
class FakeMetadata:
    """A topic: its id, and [log_start, log_end) per partition (with a stable end where a
    transaction is open); ``down`` makes calls fail; ``opened_ms`` says when the transaction
    at each held partition's stable end began, and ``peeks`` counts the look-ups;
    ``record_ms`` the timestamps of a partition's records, from its log start on, and
    ``timestamp_reads`` counts the look-ups of record timestamps."""

    topic: str
    bounds: dict[int, LogBounds]
    topic_id: str | None = "id-1"
    down: bool = False
    opened_ms: dict[int, int] = field(default_factory=dict)
    peeks: int = 0
    mirrored: list[tuple[str, dict[int, int], str]] = field(default_factory=list)
    mirror_failures: int = 0  # the next N mirror calls fail
    settings: dict[str, str] = field(default_factory=dict)  # the topic's own settings
    record_ms: dict[int, list[int]] = field(default_factory=dict)
    timestamp_reads: int = 0

    def describe(self, topic: str) -> tuple[str | None, list[int]]:
        self._check(topic)
        return self.topic_id, sorted(self.bounds)

    def log_bounds(self, topic: str, partitions: Iterable[int]) -> dict[int, LogBounds]:
        self._check(topic)
        return {p: self.bounds[p] for p in partitions}

    def topic_config(self, topic: str) -> dict[str, str]:
        self._check(topic)
        return dict(self.settings)

    def open_transactions(self, topic: str, held: Mapping[int, int]
                          ) -> dict[int, HeldTransaction]:
        self._check(topic)
        self.peeks += 1
        return {p: HeldTransaction(p, at, self.opened_ms.get(p)) for p, at in held.items()}

    def record_timestamps(self, topic: str, offsets: Mapping[int, int]
                          ) -> dict[int, int | None]:
        self._check(topic)
        self.timestamp_reads += 1
        found: dict[int, int | None] = {}
        for p, at in offsets.items():
            times, i = self.record_ms.get(p, []), at - self.bounds[p].log_start
            found[p] = times[i] if 0 <= i < len(times) else None
        return found

    def offsets_for_time(self, topic: str, partitions: Iterable[int],
                         timestamp_ms: int) -> dict[int, int | None]:
        self._check(topic)
        return {p: next((self.bounds[p].log_start + i for i, ms in
                         enumerate(self.record_ms.get(p, [])) if ms >= timestamp_ms), None)
                for p in partitions}

    def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int],
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
    """Committed batches kept in a list in the order they were written; the newest is the
    one with the highest batch time, as the HBase store's reverse scan of its row keys finds."""

    name: str = "fake"
    rows: list[CommittedBatch] = field(default_factory=list)
    keeps_history: bool = True

    def latest(self) -> CommittedBatch | None:
        if not self.keeps_history:  # a group / ZooKeeper commit: the last write
            return self.rows[-1] if self.rows else None
        return max(self.rows, key=lambda r: r.batch_ms, default=None)

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
    first_id: str | None = None
    tables_owner: str | None = None  # topic:group of the job that writes the tables
    tables_owner_running: bool = False
    model_meaning: str | None = None
    moves: KeyMoves = NO_MOVES
    cell_ts_until: int = 0

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

    def cell_ts_bound(self) -> int:
        return self.cell_ts_until

    def reserve_cell_ts(self, epoch: int, until: int) -> bool:
        if self.cell is None or self.cell.epoch != epoch:
            return False
        self.cell_ts_until = until
        return True

    def record_gap(self, gap: Gap) -> None:
        self.gaps.append(gap)

    def topic_id(self) -> str | None:
        return self.recorded_topic_id

    def record_topic_id(self, topic_id: str) -> None:
        self.recorded_topic_id = topic_id

    def recorded_model(self) -> str | None:
        return self.model_meaning

    def record_model(self, meaning: str) -> None:
        self.model_meaning = meaning

    def claim_tables(self, now_ms: int) -> str | None:
        if self.tables_owner_running:
            raise TablesOwned(f"the tables are written by {self.tables_owner}, which runs")
        previous, self.tables_owner = self.tables_owner, "t:g"
        return previous if previous != "t:g" else None

    def owns_tables(self) -> bool:
        return self.tables_owner in (None, "t:g")

    def first_topic_id(self, candidate: str | None) -> str | None:
        if self.first_id is None:
            self.first_id = candidate
        return self.first_id

    def key_moves(self) -> KeyMoves:
        return self.moves

    def record_key_moves(self, moves: KeyMoves) -> None:
        self.moves = moves

    def close(self) -> None:
        pass


@dataclass
class FakeTableSet:
    """Who writes a table set (the lease store's owner cell), the newest commit of each
    topic and group (the state table's ``last:`` copies) and each topic's open sessions."""

    leases: FakeLeaseStore
    heads: dict[tuple[str, str], CommittedBatch] = field(default_factory=dict)
    open: dict[str, int] = field(default_factory=dict)

    def owner(self) -> str | None:
        return self.leases.tables_owner

    def head_of(self, topic: str, group: str) -> CommittedBatch | None:
        return self.heads.get((topic, group))

    def open_sessions(self, topic: str) -> int:
        return self.open.get(topic, 0)

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


# -- a range's ports (task.ports) ---------------------------------------------------------
