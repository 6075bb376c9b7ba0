"""Each visitor's sessions in the state table (``sessions.by: gap``): ``ports.task.Visits``.

Row ``v:<visitor>``, family ``o`` (as the open-session index: a session -> its last_ts):
one cell per session, ``o:<first_ts, 13 digits>`` -> ``<last_ts>``. A range reads the rows of
its events' visitors in one getRows and reads only the session rows its events may reach.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import happybase

_PREFIX = b"o:"


def _row(visitor: str) -> bytes:
    return b"v:" + visitor.encode("utf-8")


class VisitStore:
    """Visitors' rows on one happybase connection."""

    def __init__(self, conn: happybase.Connection, table_name: str, batch_size: int = 1000
                 ) -> None:
        self._table = conn.table(table_name)
        self._batch_size = batch_size

    def read(self, visitors: Iterable[str]) -> dict[str, dict[int, int]]:
        keys = sorted({_row(v) for v in visitors})
        found: dict[str, dict[int, int]] = {}
        for i in range(0, len(keys), self._batch_size):
            for key, cells in self._table.rows(keys[i:i + self._batch_size], columns=[b"o"]):
                listed = {int(k[len(_PREFIX):]): int(v) for k, v in cells.items()
                          if k.startswith(_PREFIX)}
                if listed:
                    found[key[2:].decode("utf-8")] = listed
        return found

    def add(self, sessions: Mapping[str, Mapping[int, int]], *, ts: int) -> None:
        if not any(sessions.values()):
            return
        with self._table.batch(batch_size=self._batch_size, timestamp=ts) as batch:
            for visitor, listed in sorted(sessions.items()):
                if listed:
                    batch.put(_row(visitor), {_PREFIX + b"%013d" % start: str(last).encode()
                                              for start, last in listed.items()})

    def drop(self, sessions: Mapping[str, Iterable[int]], *, ts: int) -> None:
        cells = {visitor: sorted(set(starts)) for visitor, starts in sessions.items()}
        if not any(cells.values()):
            return
        with self._table.batch(batch_size=self._batch_size, timestamp=ts) as batch:
            for visitor, starts in sorted(cells.items()):
                if starts:
                    batch.delete(_row(visitor),
                                 columns=[_PREFIX + b"%013d" % start for start in starts])
