"""In-memory fakes of the driver's ports and of a range's, for tests of their rules.

They keep state the way the real stores do (a lease cell with compare-and-set, one row per
commit, a topic with partitions and log bounds; session rows as HBase cells, a partition's
state row and index rows, Kafka transactions that commit or vanish) and can be told to fail
or to crash at a named step, so every rule of ``driver.committing``, ``driver.planning`` and
``task.process`` is a unit test with literals. The real adapters are tested against real
Kafka and HBase in tests/integration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from leakproof.errors import DecodeError, KafkaReadError
from leakproof.kept_rows import KeptRows, new_token, take_all
from leakproof.lease import FIRST_EPOCH, Lease
from leakproof.model.compiled import CompiledModel, compile_model
from leakproof.model.spec import web_model
from leakproof.moved_keys import NONE as NO_MOVES
from leakproof.moved_keys import KeyMoves
from leakproof.offsets import CommittedBatch, Gap, HeldTransaction, LogBounds
from leakproof.open_index import MAX_WIDTH, Entry, IndexChanges
from leakproof.outbox import PUBLISHED
from leakproof.runs import RUNNING, STOPPED, RunState
from leakproof.session_cells import from_cells, order_cells_of, to_cells
from leakproof.sessions import SessionState
from leakproof.summaries import Encode
from leakproof.task.ports import Kept, Mark, PartitionSave, StoredPartition, Touched


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
    moves: KeyMoves = NO_MOVES

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

    def key_moves(self) -> KeyMoves:
        return self.moves

    def record_key_moves(self, moves: KeyMoves) -> None:
        self.moves = moves

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


class Crash(Exception):
    """The process died here: raised by a fake at the step a ``Journal`` names."""


@dataclass
class Journal:
    """The writes of a range's fakes in the order they were made; ``crash_at`` names a step
    at which the next call raises Crash before writing anything (once)."""

    steps: list[str] = field(default_factory=list)
    crash_at: str | None = None

    def step(self, name: str) -> None:
        if name == self.crash_at:
            self.crash_at = None
            raise Crash(name)
        self.steps.append(name)


@dataclass
class FakeSessionRows:
    """Session rows as HBase cells; ``tear_after`` = n: the next write puts n rows, then the
    process dies (a batch of puts cut short)."""

    journal: Journal
    cells: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    tear_after: int | None = None
    model: CompiledModel = field(default_factory=lambda: compile_model(web_model()))
    kept: KeptRows | None = None  # a worker's kept rows; several fakes may share ``cells``

    def read(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        return {sid: from_cells(sid, self.cells[sid], self.model) for sid in session_ids
                if sid in self.cells}

    def read_touched(self, wanted: Sequence[Touched]) -> tuple[dict[str, SessionState],
                                                                 dict[str, int]]:
        hits, missing, counts = take_all(self.kept, wanted)
        found = self.read(missing)
        found.update((sid, from_cells(sid, c, self.model)) for sid, c in hits.items())
        return found, counts

    def keep(self, done: Sequence[Kept]) -> None:
        if self.kept is not None:
            for d in done:
                self.kept.keep(d.key, d.read, d.token,
                               {sid: dict(self.cells[sid]) for sid in d.session_ids
                                if sid in self.cells}, d.forget)

    def read_expiry(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        return {sid: SessionState(sid, last_ts=int(c[b"s:last_ts"]),
                                  state=c.get(b"s:state", b"open").decode())
                for sid in session_ids if (c := self.cells.get(sid)) is not None}

    def write(self, rows: Iterable[SessionState], close: Iterable[str] = ()) -> None:
        self.journal.step("sessions")
        for n, s in enumerate(rows):
            if self.tear_after is not None and n == self.tear_after:
                self.tear_after = None
                raise Crash("sessions, part way")
            row = self.cells.setdefault(s.session_id, {})
            row.update(to_cells(s, self.model, order_cells_of(row)))
        for sid in close:
            self.cells.setdefault(sid, {})[b"s:state"] = b"closed"

    def readable(self) -> dict[str, dict[str, str]]:
        """Family ``s`` of every row, as operators and the oracle read it."""
        return {sid: {k[2:].decode(): v.decode() for k, v in c.items() if k.startswith(b"s:")}
                for sid, c in self.cells.items()}


@dataclass
class FakePartitionRows:
    """Each partition's state row (cells as in HBase's ``wm:`` row) and index rows."""

    journal: Journal
    state: dict[tuple[str, int], dict[bytes, bytes]] = field(default_factory=dict)
    index: dict[tuple[str, int], dict[int, dict[str, int]]] = field(default_factory=dict)

    def read_partitions(self, topic: str, partitions: Sequence[int], width: int
                        ) -> dict[int, StoredPartition]:
        return {p: StoredPartition.of_cells(self.state.get((topic, p), {})) for p in partitions}

    def scan_open(self, topic: str, partition: int, since: int, before: int) -> list[Entry]:
        rows = self.index.get((topic, partition), {})
        return [Entry(b, sid, ts) for b in sorted(rows) if since - MAX_WIDTH <= b < before
                for sid, ts in sorted(rows[b].items())] if before > 0 else []

    def write_partitions(self, topic: str, saves: Sequence[PartitionSave]) -> None:
        """As the real store: all puts, then all deletes, then all watermarks."""
        self.journal.step("index puts")
        for s in saves:
            IndexChanges(puts=s.changes.puts).apply_to(self.index.setdefault((topic, s.partition),
                                                                           {}))
        self.journal.step("index deletes")
        for s in saves:
            IndexChanges(deletes=s.changes.deletes).apply_to(self.index[(topic, s.partition)])
        self.journal.step("watermark")
        for s in saves:
            row = self.state.setdefault((topic, s.partition), {})
            row.update(s.watermark_cells())
            row.pop(b"w:pending", None)

    def begin_writes(self, topic: str, marks: Sequence[Mark],
                     foreign: Sequence[tuple[str, int]] = ()) -> None:
        with_outbox = any(m.outbox is not None for m in marks)
        self.journal.step("pending, outbox" if with_outbox else "pending")
        for partition, pending, outbox, writer in marks:
            row = self.state.setdefault((topic, partition), {})
            row[b"w:pending"] = str(pending).encode()
            row[b"w:writer"] = writer
            if outbox is not None:
                row.update(outbox.encode())
        for other, partition in foreign:
            self.state.setdefault((other, partition), {})[b"w:foreign"] = new_token()

    def outbox_published(self, topic: str, partition: int, outbox_id: str) -> None:
        self.journal.step("outbox published")
        self.state.setdefault((topic, partition), {})[PUBLISHED] = outbox_id.encode()


@dataclass
class FakeLeaseCheck:
    journal: Journal
    held_by: int | None = 1

    def epoch(self) -> int | None:
        self.journal.step("lease")
        return self.held_by


@dataclass
class FakeDeadLetters:
    journal: Journal
    rows: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def write(self, errors: Iterable[DecodeError], batch_ms: int) -> None:
        self.journal.step("dead letters")
        for err in errors:
            self.rows[(err.topic, err.partition, err.offset)] = err.kind


@dataclass
class FakeSummarySink:
    """Kafka transactions of one source partition: ``committed`` holds what a read_committed
    consumer sees, (outbox id, records) per transaction. A crash at "publish" leaves nothing
    (the broker aborts the transaction a dead producer left open)."""

    journal: Journal
    committed: list[tuple[str, list[tuple[bytes, bytes]]]] = field(default_factory=list)
    encode: Encode | None = None  # None: JSON

    def published(self, outbox_id: str) -> bool:
        return any(i == outbox_id for i, _ in self.committed)

    def publish(self, records: Sequence[tuple[bytes, bytes]], outbox_id: str,
                until_offset: int) -> None:
        self.journal.step("publish")
        self.committed.append((outbox_id, list(records)))
