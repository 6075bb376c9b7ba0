"""A session row's cells (pure): how a ``SessionState`` is written to and read from HBase.

Row = session_id; family ``s`` the aggregates as text, ``f`` fences. Family ``f``:
``f:p:<topic>:<partition>`` the fence (last applied offset) per source partition, and
``f:seqs`` the seqs applied. The lowest and highest applied seq (which decide entry_url,
exit_url and out_of_order) are the bounds of ``f:seqs``, so they are not stored again: every
cell costs HBase a memstore insert (its largest cost in ``make bench``). Rows written before
that keep their ``f:entry_seq`` and ``f:max_seq`` cells, which are read first and kept up to
date in those rows, so any version reads them right.
"""

from __future__ import annotations

from collections.abc import Mapping

from leakproof.sessions import SeqSet, SessionState

# family `s`, as docs/DESIGN.md fixes them (decimal text / text), plus the anomaly counts
# late_events, duplicates and unknown_types.
_INT_COLUMNS = ("events", "pageviews", "clicks", "purchases", "errors", "bytes", "first_ts",
                "last_ts", "out_of_order", "late_events", "duplicates", "unknown_types")
_TEXT_COLUMNS = ("user_id", "entry_url", "exit_url", "state")
_FENCE_PREFIX = "f:p:"
ENTRY_SEQ, MAX_SEQ = b"f:entry_seq", b"f:max_seq"  # only in rows from before (see above)


def to_cells(s: SessionState, bound_cells: bool = False) -> dict[bytes, bytes]:
    """The row's cells. The seq bounds get cells of their own only where ``f:seqs`` does
    not say them (a row from before it), or where the row already has them
    (``bound_cells``: a row an earlier version wrote, whose cells must stay true)."""
    cells = {f"s:{c}".encode(): str(getattr(s, c)).encode() for c in _INT_COLUMNS}
    cells.update({f"s:{c}".encode(): getattr(s, c).encode("utf-8") for c in _TEXT_COLUMNS})
    cells[b"f:seqs"] = s.seqs.to_text().encode()
    lowest, highest = s.seqs.bounds()
    if bound_cells or s.entry_seq != lowest:
        cells[ENTRY_SEQ] = str(s.entry_seq).encode()
    if bound_cells or s.max_seq != highest:
        cells[MAX_SEQ] = str(s.max_seq).encode()
    for key, offset in s.fences.items():
        cells[f"{_FENCE_PREFIX}{key}".encode()] = str(offset).encode()
    return cells


def from_cells(session_id: str, cells: Mapping[bytes, bytes]) -> SessionState:
    s = SessionState(session_id=session_id, user_id=cells[b"s:user_id"].decode("utf-8"))
    for c in _INT_COLUMNS:
        setattr(s, c, int(cells.get(f"s:{c}".encode(), b"0")))
    for c in ("entry_url", "exit_url", "state"):
        setattr(s, c, cells.get(f"s:{c}".encode(), b"").decode("utf-8"))
    s.seqs = SeqSet.from_text(cells.get(b"f:seqs", b"").decode())
    lowest, highest = s.seqs.bounds()
    s.entry_seq = int(cells.get(ENTRY_SEQ, lowest))
    s.max_seq = int(cells.get(MAX_SEQ, highest))
    prefix = _FENCE_PREFIX.encode()
    s.fences = {k[len(prefix):].decode(): int(v) for k, v in cells.items() if k.startswith(prefix)}
    return s


def readable(cells: Mapping[bytes, bytes]) -> dict[str, str]:
    """Family ``s`` as {column: text}: what operators and the oracle compare."""
    return {k[2:].decode(): v.decode("utf-8") for k, v in cells.items() if k.startswith(b"s:")}
