"""A happybase table kept by HBase's rules (``FakeTable``), and the journal a test crashes
the stores at: the real HBase stores run over it unchanged and write what they write to
HBase (``tests/integration/test_store_contract.py`` holds it to a real table)."""


from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


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
