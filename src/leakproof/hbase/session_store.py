"""The sessions table: row = session_id, cells as ``session_cells`` lays them out.

A row's changes are written in one put, aggregate and fence together: HBase applies a row's
mutation atomically, so a crash can never leave an aggregate without the fence that says
which offsets it already holds. Only the cells whose value differs from the row as read are
sent: the others already hold the same bytes, so the row reads the same as after a whole-row
put, and HBase and its Thrift server handle half the cells (a session's counts move with each
event; its user, entry url, first_ts and most counters do not).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import happybase

from leakproof.hbase.wire.gets import get_rows
from leakproof.hbase.wire.puts import row_puts
from leakproof.kept_rows import KeptRows, take_all
from leakproof.model.compiled import CompiledModel
from leakproof.ports.task import Kept, Touched
from leakproof.session_cells import from_cells, order_cells_of, readable, to_cells
from leakproof.sessions import CLOSED, OPEN, SessionState


class SessionStore:
    """Batched reads and writes of session rows on one happybase table."""

    def __init__(self, table: happybase.Table, model: CompiledModel, batch_size: int = 1000,
                 write_cells: int = 5000, kept: KeptRows | None = None) -> None:
        """``batch_size`` rows per getRows; ``write_cells`` cells per mutateRows: each call
        costs the Thrift server and HBase a round of their own: 5 000 cells in place of
        1 000 took the Thrift server 0.8-1.0 CPU s against 1.2-1.9 for the same 60 000 rows
        of 8 cells (idle stack, four runs each)."""
        self._table = table
        self._model = model
        self._batch_size = batch_size
        self._write_cells = write_cells
        # each row's cells as HBase holds them: as read (or taken), then as ``write`` left them
        self._stored: dict[str, Mapping[bytes, bytes]] = {}
        self._kept = kept  # the worker's kept rows (``kept_rows``), if it keeps any

    def _rows(self, session_ids: Iterable[str], columns: list[bytes] | None = None
              ) -> Iterator[tuple[str, dict[bytes, bytes]]]:
        """The rows that exist among ``session_ids`` (getRows, in chunks)."""
        ids = list(session_ids)
        for i in range(0, len(ids), self._batch_size):
            chunk = [sid.encode("utf-8") for sid in ids[i:i + self._batch_size]]
            for key, cells in get_rows(self._table, chunk, columns):
                yield key.decode("utf-8"), cells

    def read(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        """The rows that exist among ``session_ids``, whole."""
        found: dict[str, SessionState] = {}
        for sid, cells in self._rows(session_ids):
            found[sid] = from_cells(sid, cells, self._model)
            self._stored[sid] = cells
        return found

    def read_touched(self, wanted: Sequence[Touched]) -> tuple[dict[str, SessionState],
                                                                 dict[str, int]]:
        """``read`` of each range's touched sessions, but a row this worker kept for the
        range's partition (its token still holds) is taken from there, not read."""
        hits, missing, counts = take_all(self._kept, wanted)
        found = self.read(missing)
        for sid, cells in hits.items():
            found[sid] = from_cells(sid, cells, self._model)
            self._stored[sid] = cells
        return found, counts

    def keep(self, done: Sequence[Kept]) -> None:
        """Each range's keepable rows, as its reads and writes left them, kept for its
        partition's next range."""
        if self._kept is None:
            return
        for d in done:
            rows = {sid: cells for sid in d.session_ids
                    if (cells := self._stored.get(sid)) is not None}
            self._kept.keep(d.key, d.read, d.token, rows, d.forget)

    def read_expiry(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        """What expiry needs of the rows that exist among ``session_ids``: last_ts and
        state only (a session as ``SessionState`` with no other field read)."""
        return {sid: SessionState(sid, last_ts=int(cells[b"s:last_ts"]),
                                  state=cells.get(b"s:state", OPEN.encode()).decode())
                for sid, cells in self._rows(session_ids, [b"s:last_ts", b"s:state"])
                if b"s:last_ts" in cells}

    def write(self, rows: Iterable[SessionState], close: Iterable[str] = (), *, ts: int
              ) -> None:
        """Put each row's changed cells (all of a row ``read`` did not find), and mark
        sessions closed that expired without new events; every cell at timestamp ``ts``."""
        with row_puts(self._table, self._write_cells, ts) as batch:
            for s in rows:
                stored = self._stored.get(s.session_id)
                cells = to_cells(s, self._model,
                                 order_cells_of(stored) if stored is not None else frozenset())
                if stored is not None:
                    cells = {k: v for k, v in cells.items() if stored.get(k) != v}
                    if not cells:
                        continue
                    self._stored[s.session_id] = {**stored, **cells}
                else:
                    self._stored[s.session_id] = cells
                batch.put(s.session_id.encode("utf-8"), cells)
            for sid in close:
                batch.put(sid.encode("utf-8"), {b"s:state": CLOSED.encode()})

    def remove(self, session_ids: Iterable[str], *, ts: int) -> None:
        """Delete whole rows at ``ts``: a delete hides every cell written up to it, so a late
        copy of an older write stays hidden too."""
        ids = sorted(set(session_ids))
        if not ids:
            return
        with self._table.batch(batch_size=self._write_cells, timestamp=ts) as batch:
            for sid in ids:
                batch.delete(sid.encode("utf-8"))
                self._stored.pop(sid, None)


def readable_row(table: happybase.Table, session_id: str) -> dict[str, str] | None:
    """One session row's family ``s`` as text (None: no such row); no model needed."""
    cells = table.row(session_id.encode("utf-8"))
    return readable(cells) if cells else None


def scan_readable(table: happybase.Table, batch_size: int = 5000) -> dict[str, dict[str, str]]:
    """Every session row as text (for verification; a full table scan)."""
    return {k.decode("utf-8"): readable(v)
            for k, v in table.scan(columns=[b"s"], batch_size=batch_size)}
