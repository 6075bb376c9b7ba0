"""``leakproof sessions diff``: two table sets' session rows compared, row by row and cell by
cell -- the live tables and a reprocessed copy under another ``hbase.table_prefix``, before
readers switch over.

Only family ``s`` (the session's cells) is compared. The fences and the job's own cells
(family ``f``: per-partition offsets, applied sequences) say how each copy got its rows, so
two copies that read the same events from different offsets (a reprocess over a rewound
topic, a backfill) hold different ones legitimately.

Both tables are scanned in row-key order, a batch of rows per call, and merged as they come
(``row_diff``): the comparison holds a row of each side and the samples, whatever the size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from leakproof.core.config import Config
from leakproof.core.row_diff import RowDiff, diff_rows
from leakproof.hbase.row_scan import scan

FAMILY = b"s"
NOTE = ("family s only: fences and the job's own cells (family f) differ legitimately "
        "between two table sets")


@dataclass(frozen=True)
class SessionsDiff:
    """The comparison of A's session rows (``--config``) with B's (``--against``)."""

    a: str  # where A's rows are: server and table
    b: str
    rows: RowDiff

    def lines(self) -> list[str]:
        """The report as an operator reads it."""
        d = self.rows
        out = [f"A: {self.a}", f"B: {self.b}", NOTE,
               f"rows: {d.rows_a} in A, {d.rows_b} in B: {d.equal} equal, {d.only_a} only in "
               f"A, {d.only_b} only in B, {d.differ} differ"]
        if d.cells:
            out.append("cells that differ (rows): " + ", ".join(
                f"{c.decode()} {n}" for c, n in sorted(d.cells.items())))
        for label, keys in (("only in A", d.only_a_sample), ("only in B", d.only_b_sample)):
            if keys:
                out.append(f"{label} (first {len(keys)}): "
                           + ", ".join(k.decode(errors="replace") for k in keys))
        if d.differ_sample:
            out.append(f"rows that differ (first {len(d.differ_sample)}):")
            out += [f"  {key.decode(errors='replace')}: " + "; ".join(
                f"{c.decode()} A={_text(va)} B={_text(vb)}" for c, (va, vb) in cells.items())
                for key, cells in d.differ_sample]
        out.append("EQUAL" if d.same else "DIFFERENT")
        return out

    def as_json(self) -> dict[str, Any]:
        d = self.rows
        return {"a": self.a, "b": self.b, "family": FAMILY.decode(), "equal": d.same,
                "rows_a": d.rows_a, "rows_b": d.rows_b, "rows_equal": d.equal,
                "only_a": d.only_a, "only_b": d.only_b, "differ": d.differ,
                "cells": {c.decode(): n for c, n in sorted(d.cells.items())},
                "sample": {
                    "only_a": [k.decode(errors="replace") for k in d.only_a_sample],
                    "only_b": [k.decode(errors="replace") for k in d.only_b_sample],
                    "differ": [{"row": k.decode(errors="replace"),
                                "cells": {c.decode(): [_json(va), _json(vb)]
                                          for c, (va, vb) in cells.items()}}
                               for k, cells in d.differ_sample]}}


def diff_sessions(a: Config, b: Config, sample: int = 10, batch_size: int = 1000
                  ) -> SessionsDiff:
    """Scan both sessions tables side by side and compare their family ``s``."""
    if sample < 0:
        raise ValueError("'sample' must be >= 0")
    def rows_of(cfg: Config) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
        return scan(cfg.hbase, cfg.hbase.sessions_table, columns=[FAMILY],
                    batch_size=batch_size)

    rows = diff_rows(rows_of(a), rows_of(b), sample)
    return SessionsDiff(_where(a), _where(b), rows)


def _where(cfg: Config) -> str:
    return f"{cfg.hbase.full_name(cfg.hbase.sessions_table)} at {cfg.hbase.host}:{cfg.hbase.port}"


def _text(value: bytes | None) -> str:
    return "(none)" if value is None else repr(value.decode(errors="replace"))


def _json(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")
