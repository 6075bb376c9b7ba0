"""The sessions table: row = session_id, cells as ``session_cells`` lays them out.

A row's changes are written in one put, aggregate and fence together: HBase applies a row's
mutation atomically, so a crash can never leave an aggregate without the fence that says
which offsets it already holds. Only the cells whose value differs from the row as read are
sent: the others already hold the same bytes, so the row reads the same as after a whole-row
put, and HBase and its Thrift server handle half the cells (a session's counts move with each
event; its user, entry url, first_ts and most counters do not).

A row's *image* (``images``, ``adopt``) is its cells as HBase holds them, marshalled: what
the kept-rows cache holds between ranges (``task.kept_sessions``) without knowing the layout.
"""

from __future__ import annotations

import marshal
from collections.abc import Collection, Iterable, Mapping

import happybase

from leakproof.core.session_cells import from_cells, order_cells_of, readable, to_cells
from leakproof.core.sessions import CLOSED, OPEN, SessionState
from leakproof.hbase.wire.gets import get_rows
from leakproof.hbase.wire.puts import row_puts
from leakproof.model.compiled import CompiledModel


class SessionStore:
    """Batched reads and writes of session rows on one happybase table."""

    def __init__(self, table: happybase.Table, model: CompiledModel, batch_size: int = 1000,
                 write_cells: int = 5000) -> None:
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

    def read(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        """The rows that exist among ``session_ids``, whole."""
        found: dict[str, SessionState] = {}
        keys = [sid.encode("utf-8") for sid in session_ids]
        for key, cells in get_rows(self._table, keys, per_call=self._batch_size):
            sid = key.decode("utf-8")
            found[sid] = self._known(sid, cells)
        return found

    def images(self, session_ids: Iterable[str]) -> dict[str, bytes]:
        """The image of each row among ``session_ids`` that this store read or wrote, as
        HBase now holds it."""
        dumps = marshal.dumps
        return {sid: dumps(cells if type(cells) is dict else dict(cells))
                for sid in session_ids if (cells := self._stored.get(sid)) is not None}

    def adopt(self, images: Mapping[str, bytes]) -> dict[str, SessionState]:
        """Rows known from their images (``images`` of a store on the same table) instead
        of read: taken for what HBase holds, so writes send only what differs from them."""
        return {sid: self._known(sid, marshal.loads(image)) for sid, image in images.items()}

    def _known(self, sid: str, cells: dict[bytes, bytes]) -> SessionState:
        """A row as HBase holds it: decoded, and its cells kept for ``write``'s diff."""
        self._stored[sid] = cells
        return from_cells(sid, cells, self._model)

    def read_expiry(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        """What expiry needs of the rows that exist among ``session_ids``: last_ts and
        state only (a session as ``SessionState`` with no other field read)."""
        found: dict[str, SessionState] = {}
        keys = [sid.encode("utf-8") for sid in session_ids]
        for key, cells in get_rows(self._table, keys, [b"s:last_ts", b"s:state"],
                                   self._batch_size):
            if b"s:last_ts" in cells:
                sid = key.decode("utf-8")
                found[sid] = SessionState(sid, last_ts=int(cells[b"s:last_ts"]),
                                          state=cells.get(b"s:state", OPEN.encode()).decode())
        return found

    def write(self, rows: Iterable[SessionState], close: Iterable[str] = (), *, ts: int,
              replaced: Collection[str] = ()) -> None:
        """Put each row's changed cells (all of a row ``read`` did not find), and mark
        sessions closed that expired without new events; every cell at timestamp ``ts``.

        A ``replaced`` row's cells its new session does not write (an old aggregate the new
        one has no value for) are deleted first, a moment before ``ts``. The cells that say
        what the row took -- fences, seqs, state, times -- are always written, so they are
        never among them: a crash between the two leaves a row every replay judges as the
        first attempt did, and replaces again."""
        rows = list(rows)
        if replaced:
            self._strip([s for s in rows if s.session_id in replaced], ts=ts - 1)
        batch = row_puts(self._table, self._write_cells, ts)
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
        batch.send()

    def _strip(self, rows: Iterable[SessionState], *, ts: int) -> None:
        """Delete, at ``ts``, each row's stored cells its new state does not write."""
        with self._table.batch(timestamp=ts) as batch:
            for s in rows:
                stored = self._stored.get(s.session_id)
                if stored is None:
                    continue
                left = sorted(set(stored) - set(to_cells(s, self._model)))
                if left:
                    batch.delete(s.session_id.encode("utf-8"), columns=left)
                # then put whole: a cell the old row held the same bytes in may be older
                # than a late write of another attempt, which must not show through
                del self._stored[s.session_id]

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
