"""A range's ports (``ports.task``) as the real HBase stores over ``FakeTable``, each write
a journal step a test can crash at; the lease check and a summaries sink of Kafka
transactions that commit or vanish."""


from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from leakproof.core.errors import DecodeError
from leakproof.core.open_index import IndexChanges
from leakproof.core.outbox import covers
from leakproof.core.session_cells import readable
from leakproof.core.sessions import SessionState
from leakproof.core.summaries import Encode, EncodeUpdate, Headers
from leakproof.hbase.dead_letters import DeadLetterStore
from leakproof.hbase.partition_store import PartitionStore
from leakproof.hbase.session_store import SessionStore
from leakproof.hbase.visit_store import VisitStore
from leakproof.model.compiled import CompiledModel, compile_model
from leakproof.model.spec import web_model
from leakproof.ports.task import Mark, PartitionSave
from leakproof.testing.hbase_table import FakeConnection, FakeTable, Journal


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
