"""In-memory fakes of the driver's ports and of a range's, for tests of their rules.

They keep state the way the real stores do (a lease cell with compare-and-set, one row per
commit, a topic with partitions and log bounds; session rows as HBase cells, a partition's
state row and index rows, Kafka transactions that commit or vanish) and can be told to fail
or to crash at a named step, so every rule of ``driver.committing``, ``driver.planning`` and
``task.process`` is a unit test with literals. The real adapters are tested against real
Kafka and HBase in tests/integration.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leakproof.dead_letter import ALL, DeadLetter, RedriveMark, Selection, origin_of
from leakproof.errors import DecodeError, KafkaReadError, PublishError, TablesOwned
from leakproof.hbase.dead_letters import DeadLetterStore
from leakproof.hbase.partition_store import PartitionStore
from leakproof.hbase.session_store import SessionStore
from leakproof.hbase.visit_store import VisitStore
from leakproof.lease import FIRST_EPOCH, Lease
from leakproof.model.compiled import CompiledModel, compile_model
from leakproof.model.spec import web_model
from leakproof.moved_keys import NONE as NO_MOVES
from leakproof.moved_keys import KeyMoves
from leakproof.offsets import CommittedBatch, Gap, HeldTransaction, LogBounds
from leakproof.open_index import IndexChanges
from leakproof.outbox import covers
from leakproof.ports.task import Mark, PartitionSave
from leakproof.runs import RUNNING, STOPPED, RunState
from leakproof.session_cells import readable
from leakproof.sessions import SessionState
from leakproof.summaries import Encode, EncodeUpdate, Headers


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


class LateWrite(TimeoutError):
    """A write the client gave up on (a read timeout), though the server still holds it:
    ``FakeTable.deliver_late`` applies it later, as a Thrift server still retrying does."""


class FakeTable:
    """A happybase ``Table`` over rows kept by HBase's rules for families of one version,
    so the real stores (``hbase.session_store`` and the rest) run over it unchanged and
    write exactly what they write to HBase.

    - A put writes each cell at its timestamp (the call's, else the table's clock); a read
      sees per cell the version of the newest timestamp, of equal ones the later put.
    - A delete at timestamp t hides every version up to t, also a put that arrives later
      with an older timestamp (HBase keeps the marker until a major compaction).
    - A batch (happybase's ``Batch``, Thrift's ``mutateRowsTs``) applies its puts, then its
      deletes, each row's atomically.

    Faults: ``tear_after`` = n: the next batch applies its first n rows' puts, then raises
    Crash (the process died). ``hold`` = n: the next n calls that write (after ``pass_writes``
    more go through) are kept and raise ``LateWrite`` as a timed-out call does; ``delay`` = n:
    the next n are kept and return as if done (a stalled task that goes on: a zombie);
    ``deliver_late`` applies what was kept when a test says.
    ``tests/integration/test_store_contract.py`` holds these rules to a real HBase.
    """

    def __init__(self, name: bytes = b"t") -> None:
        self.name = name
        self.clock_ms = 1_700_000_000_000  # the server's clock, for writes without one
        self._cells: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}
        self._deleted: dict[bytes, dict[bytes, int]] = {}  # column or b"family:" -> ts
        self.tear_after: int | None = None
        self.hold = 0
        self.pass_writes = 0
        self.delay = 0
        self.late: list[Callable[[], None]] = []

    # -- reads ---------------------------------------------------------------------------

    def row(self, row: bytes, columns: Sequence[bytes] | None = None,
            include_timestamp: bool = False) -> dict[bytes, Any]:
        cells = self._cells.get(row, {})
        return {c: ((v, ts) if include_timestamp else v) for c, (ts, v) in cells.items()
                if _wanted(c, columns)}

    def rows(self, rows: Sequence[bytes], columns: Sequence[bytes] | None = None
             ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        found = [(r, self.row(r, columns)) for r in rows]
        return [(r, cells) for r, cells in found if cells]

    def scan(self, row_start: bytes | None = None, row_stop: bytes | None = None,
             row_prefix: bytes | None = None, columns: Sequence[bytes] | None = None,
             batch_size: int = 1000) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
        for key in sorted(self._cells):
            if row_prefix is not None and not key.startswith(row_prefix):
                continue
            if (row_start is not None and key < row_start) or (
                    row_stop is not None and key >= row_stop):
                continue
            cells = self.row(key, columns)
            if cells:
                yield key, cells

    def visible(self) -> dict[bytes, dict[bytes, bytes]]:
        """Every row as a read sees it."""
        return {k: cells for k, cells in self.scan()}

    # -- writes --------------------------------------------------------------------------

    def put(self, row: bytes, data: Mapping[bytes, bytes], timestamp: int | None = None
            ) -> None:
        self._write(lambda: self._put(row, data, timestamp))

    def delete(self, row: bytes, columns: Sequence[bytes] | None = None,
               timestamp: int | None = None) -> None:
        self._write(lambda: self._delete(row, columns, timestamp))

    def batch(self, batch_size: int | None = None, timestamp: int | None = None
              ) -> _FakeBatch:
        return _FakeBatch(self, timestamp)

    def _write(self, apply: Callable[[], None]) -> None:
        if self.delay:
            self.delay -= 1
            self.late.append(apply)
            return
        if self.hold:
            if self.pass_writes:
                self.pass_writes -= 1
            else:
                self.hold -= 1
                self.late.append(apply)
                raise LateWrite("timed out")
        apply()

    def deliver_late(self) -> int:
        """Apply the writes held so far, in the order they were made; returns how many."""
        late, self.late = self.late, []
        for apply in late:
            apply()
        return len(late)

    def _put(self, row: bytes, data: Mapping[bytes, bytes], ts: int | None) -> None:
        ts = self.clock_ms if ts is None else ts
        cells = self._cells.setdefault(row, {})
        gone = self._deleted.get(row, {})
        for column, value in data.items():
            family = column.split(b":", 1)[0] + b":"
            if max(gone.get(column, -1), gone.get(family, -1)) >= ts:
                continue  # hidden by a delete marker at or after its timestamp
            held = cells.get(column)
            if held is None or held[0] <= ts:
                cells[column] = (ts, bytes(value))
        if not cells:
            del self._cells[row]

    def _delete(self, row: bytes, columns: Sequence[bytes] | None, ts: int | None) -> None:
        ts = self.clock_ms if ts is None else ts
        cells = self._cells.get(row, {})
        names = [c if b":" in c else c + b":" for c in columns] if columns else sorted(
            {c.split(b":", 1)[0] + b":" for c in cells})
        gone = self._deleted.setdefault(row, {})
        for name in names:
            gone[name] = max(gone.get(name, -1), ts)
            for column in [c for c in cells if _wanted(c, [name])]:
                if cells[column][0] <= ts:
                    del cells[column]
        if not cells:
            self._cells.pop(row, None)


def _wanted(column: bytes, columns: Sequence[bytes] | None) -> bool:
    """Whether ``column`` is among ``columns`` (a name, or a family as ``f`` or ``f:``)."""
    if not columns:
        return True
    family = column.split(b":", 1)[0]
    return any(c == column or c in (family, family + b":") for c in columns)


class _FakeBatch:
    """happybase's ``Batch`` over a FakeTable: sent whole at the end of the block."""

    def __init__(self, table: FakeTable, ts: int | None) -> None:
        self._table, self._ts = table, ts
        self._puts: dict[bytes, dict[bytes, bytes]] = {}
        self._deletes: dict[bytes, list[bytes]] = {}

    def put(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        self._puts.setdefault(row, {}).update(data)

    def delete(self, row: bytes, columns: Sequence[bytes] | None = None) -> None:
        self._deletes.setdefault(row, []).extend(columns or [])

    def send(self) -> None:
        table, ts = self._table, self._ts
        puts, deletes = dict(self._puts), dict(self._deletes)
        self._puts, self._deletes = {}, {}
        if not puts and not deletes:
            return
        tear, table.tear_after = table.tear_after, None

        def apply() -> None:
            for n, (row, data) in enumerate(puts.items()):
                if tear is not None and n == tear:
                    raise Crash("a batch of puts, part way")
                table._put(row, data, ts)
            for row, columns in deletes.items():
                table._delete(row, columns or None, ts)

        table._write(apply)

    def __enter__(self) -> _FakeBatch:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.send()


class FakeConnection:
    """The happybase ``Connection`` calls the stores make: one FakeTable per name."""

    def __init__(self) -> None:
        self.tables: dict[str, FakeTable] = {}

    def table(self, name: str) -> FakeTable:
        found = self.tables.get(name)
        if found is None:
            found = self.tables[name] = FakeTable(name.encode())
        return found


class FakeSessionRows(SessionStore):
    """The real ``SessionStore`` over a FakeTable, each write a journal step;
    ``tear_after`` = n: the next write puts n rows, then the process dies."""

    def __init__(self, journal: Journal, table: FakeTable | None = None, *,
                 model: CompiledModel | None = None) -> None:
        self.journal = journal
        self.table = table if table is not None else FakeTable(b"web_sessions")
        self.tear_after: int | None = None
        super().__init__(self.table, model or compile_model(web_model()))

    def write(self, rows: Iterable[SessionState], close: Iterable[str] = (), *, ts: int,
              replaced: Collection[str] = ()) -> None:
        self.journal.step("sessions")
        self.table.tear_after, self.tear_after = self.tear_after, None
        try:
            super().write(rows, close, ts=ts, replaced=replaced)
        except BaseException:
            self._stored.clear()  # as a new store per attempt: nothing known of the rows
            raise

    def remove(self, session_ids: Iterable[str], *, ts: int) -> None:
        self.journal.step("session deletes")
        super().remove(session_ids, ts=ts)

    @property
    def cells(self) -> dict[str, dict[bytes, bytes]]:
        """Every row as HBase now shows it."""
        return {k.decode(): v for k, v in self.table.visible().items()}

    def readable(self) -> dict[str, dict[str, str]]:
        """Family ``s`` of every row, as operators and the oracle read it."""
        return {sid: readable(c) for sid, c in self.cells.items() if readable(c)}


class FakePartitionRows(PartitionStore):
    """The real ``PartitionStore`` over a FakeTable (the state table), each write a
    journal step; its index writes and its watermarks each a step of their own."""

    def __init__(self, journal: Journal, table: FakeTable | None = None) -> None:
        self.journal = journal
        self.conn = FakeConnection()
        if table is not None:
            self.conn.tables["leakproof_state"] = table
        self.table = self.conn.table("leakproof_state")
        super().__init__(self.conn, "leakproof_state", fake_scan)

    def write_partitions(self, topic: str, saves: Sequence[PartitionSave], *, ts: int
                         ) -> None:
        """As the real store: all puts, then all deletes, then all watermarks."""
        changes = [(s.partition, s.changes) for s in saves]
        self.journal.step("index puts")
        self._put_entries(topic, changes, ts=ts)
        self.journal.step("index deletes")
        self._delete_entries(topic, changes, ts=ts)
        if any(s.forget for s in saves):
            self.journal.step("retention index deletes")
            self._forget_swept(topic, saves, ts=ts)
        self.journal.step("watermark")
        self._write_watermarks(topic, saves, ts=ts)

    def begin_writes(self, topic: str, marks: Sequence[Mark],
                     foreign: Sequence[tuple[str, int]] = (), *, ts: int) -> None:
        with_outbox = any(m.outbox is not None for m in marks)
        self.journal.step("pending, outbox" if with_outbox else "pending")
        super().begin_writes(topic, marks, foreign, ts=ts)

    def outbox_published(self, topic: str, partition: int, outbox_id: str, *, ts: int
                         ) -> None:
        self.journal.step("outbox published")
        super().outbox_published(topic, partition, outbox_id, ts=ts)

    def hand_over(self, topic: str, changes: Sequence[tuple[int, IndexChanges]], *, ts: int
                  ) -> None:
        self.journal.step("hand over")
        super().hand_over(topic, changes, ts=ts)

    @property
    def state(self) -> dict[tuple[str, int], dict[bytes, bytes]]:
        """Each partition's ``wm:`` row as HBase now shows it."""
        out = {}
        for key, cells in self.table.scan(row_prefix=b"wm:"):
            _, topic, partition = key.decode().rsplit(":", 2)
            out[(topic, int(partition))] = cells
        return out

    @property
    def index(self) -> dict[tuple[str, int], dict[int, dict[str, int]]]:
        """Each partition's open-session index: bucket -> session -> last_ts."""
        out: dict[tuple[str, int], dict[int, dict[str, int]]] = {}
        for key, cells in self.table.scan(row_prefix=b"op:"):
            _, topic, partition, bucket = key.decode().rsplit(":", 3)
            out.setdefault((topic, int(partition)), {})[int(bucket)] = {
                c[2:].decode(): int(v) for c, v in cells.items()}
        return out


class FakeVisits(VisitStore):
    """The real ``VisitStore`` over the state table's FakeTable, each write a journal step."""

    def __init__(self, journal: Journal, partitions: FakePartitionRows) -> None:
        self.journal = journal
        self.table = partitions.table
        super().__init__(partitions.conn, "leakproof_state")

    def add(self, sessions: Mapping[str, Mapping[int, int]], *, ts: int) -> None:
        self.journal.step("visits add")
        super().add(sessions, ts=ts)

    def drop(self, sessions: Mapping[str, Iterable[int]], *, ts: int) -> None:
        self.journal.step("visits drop")
        super().drop(sessions, ts=ts)

    @property
    def listed(self) -> dict[str, dict[int, int]]:
        """Every visitor's row as HBase now shows it."""
        return {key[2:].decode(): {int(c[2:]): int(v) for c, v in cells.items()}
                for key, cells in self.table.scan(row_prefix=b"v:")}


def fake_scan(table: Any, start: bytes, stop: bytes, batch_size: int
               ) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
    return iter(table.scan(row_start=start, row_stop=stop, batch_size=batch_size))


@dataclass
class FakeLeaseCheck:
    journal: Journal
    held_by: int | None = 1

    def epoch(self) -> int | None:
        self.journal.step("lease")
        return self.held_by


class FakeDeadLetters(DeadLetterStore):
    """The real ``DeadLetterStore`` over a FakeTable, each write a journal step."""

    def __init__(self, journal: Journal, table: FakeTable | None = None) -> None:
        self.journal = journal
        self.table = table if table is not None else FakeTable(b"web_events_dead_letter")
        super().__init__(self.table)

    def write(self, errors: Iterable[DecodeError], batch_ms: int, *, ts: int,
              incarnation: str = "") -> None:
        self.journal.step("dead letters")
        super().write(errors, batch_ms, ts=ts, incarnation=incarnation)

    def withdraw(self, topic: str, partition: int, offsets: Collection[int], *, ts: int
                 ) -> int:
        self.journal.step("dead letters withdrawn")
        return super().withdraw(topic, partition, offsets, ts=ts)

    @property
    def rows(self) -> dict[tuple[str, int, int], str]:
        """(topic, partition, offset) -> the dead letter's kind."""
        out = {}
        for key, cells in self.table.scan():
            topic, partition, offset = key.decode().rsplit(":", 2)
            out[(topic, int(partition), int(offset))] = cells[b"d:kind"].decode()
        return out


@dataclass
class FakeSummarySink:
    """Kafka transactions of one source partition: ``committed`` holds what a read_committed
    consumer sees, (outbox id, records) per transaction. A crash at "publish" leaves nothing
    (the broker aborts the transaction a dead producer left open)."""

    journal: Journal
    committed: list[tuple[str, list[tuple[bytes, bytes | None]]]] = field(default_factory=list)
    encode: Encode | None = None  # None: JSON
    updates: bool = False  # output.emit: update
    encode_update: EncodeUpdate | None = None  # None: JSON
    every_ms: int | None = None  # output.emit: {every_s: N}, in ms (then updates too)
    # each committed transaction's records' headers, as ``committed`` holds their records
    headers: list[list[Headers]] = field(default_factory=list)

    def published(self, outbox_id: str) -> bool:
        """As the marker tells it: the newest committed transaction's id covers it."""
        return bool(self.committed) and covers(self.committed[-1][0], outbox_id)

    def publish(self, records: Sequence[tuple[bytes, bytes | None]], outbox_id: str,
                until_offset: int, headers: Sequence[Headers] = ()) -> None:
        """As ``ClosedSink.publish``: the marker is read first; a covered outbox is not
        sent again."""
        self.journal.step("publish")
        if self.published(outbox_id):
            return
        self.committed.append((outbox_id, list(records)))
        self.headers.append(list(headers) or [[] for _ in records])


# --------------------------------------------------------------------------- redrive


class FakeDeadLetterRows:
    """``ports.redrive.DeadLetterRows``: the dead-letter rows as values, in row-key order;
    ``mark`` is a compare-and-set on the row's mark, as the checkAndPut is."""

    def __init__(self, letters: Iterable[DeadLetter]) -> None:
        self.rows = {(d.topic, d.partition, d.offset): d for d in letters}

    def letters(self, topic: str, selection: Selection = ALL, brief: bool = False
                ) -> Iterator[DeadLetter]:
        keys = sorted((k for k in self.rows if k[0] == topic), key=lambda k: (str(k[1]), k[2]))
        return selection.pick(self.rows[k] for k in keys)

    def mark(self, letter: DeadLetter, new: RedriveMark) -> bool:
        key = (letter.topic, letter.partition, letter.offset)
        if self.rows[key].mark != letter.mark:
            return False
        self.rows[key] = replace(self.rows[key], mark=new)
        return True


@dataclass
class FakeLogRecord:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    txn: str
    state: str  # open | committed | aborted


@dataclass
class FakeBroker:
    """Partitions of one topic written in transactions, the broker's way: a producer's init
    bumps its id's epoch, fencing older producers, and aborts what the id left open; a
    read_committed reader sees committed records only."""

    logs: dict[int, list[FakeLogRecord]] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)

    def committed(self, partition: int) -> list[tuple[int, FakeLogRecord]]:
        return [(o, r) for o, r in enumerate(self.logs.get(partition, []))
                if r.state == "committed"]


class FakeRedriveTarget:
    """``ports.redrive.RedriveTarget`` on a FakeBroker. ``crash``, called with
    "redrive_before_commit" between the sends and the commit, may raise to play a process
    killed there: its transaction then stays open until the next fence of its id."""

    def __init__(self, broker: FakeBroker, partition: int, txn_id: str,
                 crash: Callable[[str], None] = lambda _: None) -> None:
        self.broker, self.partition, self.txn_id = broker, partition, txn_id
        self._crash = crash
        self._epoch: int | None = None

    def fence(self) -> int:
        self._epoch = self.broker.epochs.get(self.txn_id, 0) + 1
        self.broker.epochs[self.txn_id] = self._epoch
        log = self.broker.logs.setdefault(self.partition, [])
        for rec in log:
            if rec.txn == self.txn_id and rec.state == "open":
                rec.state = "aborted"
        return len(log)

    def copies(self, from_offset: int, until_offset: int) -> dict[str, int]:
        found: dict[str, int] = {}
        for offset, rec in self.broker.committed(self.partition):
            name = origin_of(rec.headers)
            if from_offset <= offset < until_offset and name is not None:
                found.setdefault(name, offset)
        return found

    def send(self, records: Sequence[tuple[bytes | None, bytes | None,
                                           Sequence[tuple[str, bytes | None]]]]) -> list[int]:
        if self.broker.epochs.get(self.txn_id) != self._epoch:
            raise PublishError(f"{self.txn_id}: fenced by a newer producer")
        log = self.broker.logs.setdefault(self.partition, [])
        sent = [FakeLogRecord(k, v, tuple(h), self.txn_id, "open") for k, v, h in records]
        first = len(log)
        log.extend(sent)
        self._crash("redrive_before_commit")
        if self.broker.epochs.get(self.txn_id) != self._epoch:  # fenced while sending
            raise PublishError(f"{self.txn_id}: fenced by a newer producer")
        for rec in sent:
            rec.state = "committed"
        return list(range(first, first + len(sent)))

    def close(self) -> None:
        pass
