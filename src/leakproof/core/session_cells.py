"""A session row's cells (pure): how a ``SessionState`` is written to and read from HBase.

Row = session_id. Family ``s``: each aggregate of the model as ``s:<name>`` (decimal text,
the shortest text of a double, UTF-8 text; no cell while the session has no value for it),
and the cells every row has: ``first_ts``, ``last_ts``, ``state``, ``late_events``, and with a
sequence ``duplicates`` and ``out_of_order``. Family ``f``: ``f:p:<topic>:<partition>`` the
fence (last applied offset) per source partition; with a sequence ``f:seqs``, the seqs
applied, and ``f:o:<name>`` the seq a ``first`` / ``last`` value came from -- only where it
is not the lowest / highest seq of ``f:seqs`` (the usual case needs no cell: every cell
costs HBase a memstore insert, its largest cost in ``make bench``), or where the row already
has that cell, which must stay true. Split by the gap without a sequence, ``f:o:<name>``
holds the event time a ``first`` / ``last`` value came from, ``f:absorbed`` the row keys
of the sessions a merged one took in, and ``f:t:<topic>:<partition>`` the offsets it took,
every offset committed when it was written as one span from 0 (its mark, ``gap_fold``).
``f:reach``: the newest event time a row counted beyond its ``last_ts`` (a late event not
folded, a duplicate), which the retention goes by (``task.sweep``).
"""

from __future__ import annotations

from collections.abc import Mapping

from leakproof.core.sessions import SeqSet, SessionState
from leakproof.model.compiled import CompiledModel

_FENCE_PREFIX = "f:p:"
# the row keys a merged session absorbed (``sessions.by: gap``): their rows are its
ABSORBED = b"f:absorbed"
# split by the gap: per source partition, the offsets the row took and, as one span from 0,
# those committed when it was written (a replay or a re-read skips exactly them)
_TOOK_PREFIX = "f:t:"
REACH = b"f:reach"  # SessionState.reach_ts, where it passes last_ts
_TOOK = _TOOK_PREFIX.encode()
_FENCE = _FENCE_PREFIX.encode()


def to_cells(s: SessionState, model: CompiledModel,
             order_cells: frozenset[bytes] = frozenset()) -> dict[bytes, bytes]:
    """The row's cells; ``order_cells``: the ``f:o:`` cells the stored row already has."""
    cells: dict[bytes, bytes] = {}
    to_text, names = model.to_text, model.cell_names
    for i, v in enumerate(s.values):
        text = None if v is None else to_text[i](v)
        if text is not None:
            cells[names[i]] = text.encode("utf-8")
    cells[b"s:first_ts"] = str(s.first_ts).encode()
    cells[b"s:last_ts"] = str(s.last_ts).encode()
    cells[b"s:state"] = s.state.encode()
    cells[b"s:late_events"] = str(s.late_events).encode()
    if model.sequenced:
        cells[b"s:duplicates"] = str(s.duplicates).encode()
        cells[b"s:out_of_order"] = str(s.out_of_order).encode()
        cells[b"f:seqs"] = s.seqs.to_text().encode()
        lowest, highest = s.seqs.bounds()
        for i, fn in model.ordered.items():
            order = s.orders[i]
            if order is None:
                continue
            cell = model.order_cells[i]
            if cell in order_cells or order != (lowest if fn == "first" else highest):
                cells[cell] = str(order).encode()
    elif model.by_time:  # first / last by event time: the time each came from
        for i in model.ordered:
            if s.orders[i] is not None:
                cells[model.order_cells[i]] = str(s.orders[i]).encode()
    for key, offset in s.fences.items():
        cells[f"{_FENCE_PREFIX}{key}".encode()] = str(offset).encode()
    for key, offsets in s.took.items():
        cells[f"{_TOOK_PREFIX}{key}".encode()] = offsets.to_text().encode()
    if s.reach_ts > s.last_ts:
        cells[REACH] = str(s.reach_ts).encode()
    if s.absorbed or ABSORBED in order_cells:  # emptied: the stored list must go too
        cells[ABSORBED] = ",".join(sorted(s.absorbed)).encode("utf-8")
    return cells


def from_cells(session_id: str, cells: Mapping[bytes, bytes],
               model: CompiledModel) -> SessionState:
    values, orders = model.initial()
    from_text = model.from_text
    for i, name in enumerate(model.cell_names):
        raw = cells.get(name)
        if raw is not None:
            values[i] = from_text[i](raw.decode("utf-8"))
    s = SessionState(session_id, values, orders,
                     first_ts=int(cells.get(b"s:first_ts", b"0")),
                     last_ts=int(cells.get(b"s:last_ts", b"0")),
                     state=cells.get(b"s:state", b"open").decode(),
                     late_events=int(cells.get(b"s:late_events", b"0")),
                     duplicates=int(cells.get(b"s:duplicates", b"0")),
                     out_of_order=int(cells.get(b"s:out_of_order", b"0")))
    if model.sequenced:
        s.seqs = SeqSet.from_text(cells.get(b"f:seqs", b"").decode())
        lowest, highest = s.seqs.bounds()
        for i, fn in model.ordered.items():
            if values[i] is not None:
                raw = cells.get(model.order_cells[i])
                orders[i] = int(raw) if raw is not None else (
                    lowest if fn == "first" else highest)
    elif model.by_time:
        for i in model.ordered:
            raw = cells.get(model.order_cells[i])
            if values[i] is not None and raw is not None:
                orders[i] = int(raw)
    s.fences = {k[len(_FENCE):].decode(): int(v) for k, v in cells.items()
                if k.startswith(_FENCE)}
    for k, v in cells.items():
        if k.startswith(_TOOK):
            s.took[k[len(_TOOK):].decode()] = SeqSet.from_text(v.decode())
    s.reach_ts = int(cells.get(REACH, b"0"))
    absorbed = cells.get(ABSORBED)
    if absorbed:
        s.absorbed = frozenset(absorbed.decode("utf-8").split(","))
    return s


def order_cells_of(cells: Mapping[bytes, bytes]) -> frozenset[bytes]:
    """The ``f:o:`` cells a stored row has (and ``f:absorbed``, if it has one)."""
    return frozenset(k for k in cells if k.startswith(b"f:o:") or k == ABSORBED)


def readable(cells: Mapping[bytes, bytes]) -> dict[str, str]:
    """Family ``s`` as {column: text}: what operators and the oracle compare."""
    return {k[2:].decode(): v.decode("utf-8") for k, v in cells.items() if k.startswith(b"s:")}
