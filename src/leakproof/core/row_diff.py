"""Two tables' rows compared in one pass over both, each read in row-key order (pure).

``diff_rows`` walks two sorted streams of ``(row key, cells)`` side by side, as a merge join
does: a key only one stream holds is a row only in that table; a key both hold is equal or
differs in named cells (a cell one row lacks differs too). It holds one row of each stream
and the samples at a time, never a whole table, so it compares tables of any size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

Row = tuple[bytes, Mapping[bytes, bytes]]


@dataclass
class RowDiff:
    """What ``diff_rows`` found: counts, cells by how many rows differ in them, a sample of
    each kind of difference (the first ``sample`` in row-key order)."""

    sample: int = 10
    rows_a: int = 0
    rows_b: int = 0
    equal: int = 0
    only_a: int = 0
    only_b: int = 0
    differ: int = 0
    cells: Counter[bytes] = field(default_factory=Counter)
    only_a_sample: list[bytes] = field(default_factory=list)
    only_b_sample: list[bytes] = field(default_factory=list)
    # row -> cell -> (A's value, B's value); None where that row lacks the cell
    differ_sample: list[tuple[bytes, dict[bytes, tuple[bytes | None, bytes | None]]]] = \
        field(default_factory=list)

    @property
    def same(self) -> bool:
        return not (self.only_a or self.only_b or self.differ)


def changed_cells(a: Mapping[bytes, bytes], b: Mapping[bytes, bytes]
                  ) -> dict[bytes, tuple[bytes | None, bytes | None]]:
    """The cells whose values differ, a missing cell differing from any value."""
    return {c: (a.get(c), b.get(c)) for c in sorted(a.keys() | b.keys()) if a.get(c) != b.get(c)}


def diff_rows(a: Iterable[Row], b: Iterable[Row], sample: int = 10) -> RowDiff:
    """Compare two streams of rows, each sorted by row key (as an HBase scan returns them)."""
    out = RowDiff(sample)
    left, right = _sorted(a, "A"), _sorted(b, "B")
    ra, rb = next(left, None), next(right, None)
    while ra is not None or rb is not None:
        if rb is None or (ra is not None and ra[0] < rb[0]):
            assert ra is not None
            _only(out, ra[0], "a")
            ra = next(left, None)
        elif ra is None or rb[0] < ra[0]:
            _only(out, rb[0], "b")
            rb = next(right, None)
        else:
            out.rows_a += 1
            out.rows_b += 1
            changed = changed_cells(ra[1], rb[1])
            if not changed:
                out.equal += 1
            else:
                out.differ += 1
                out.cells.update(changed.keys())
                if len(out.differ_sample) < sample:
                    out.differ_sample.append((ra[0], changed))
            ra, rb = next(left, None), next(right, None)
    return out


def _only(out: RowDiff, key: bytes, side: str) -> None:
    if side == "a":
        out.rows_a += 1
        out.only_a += 1
        if len(out.only_a_sample) < out.sample:
            out.only_a_sample.append(key)
    else:
        out.rows_b += 1
        out.only_b += 1
        if len(out.only_b_sample) < out.sample:
            out.only_b_sample.append(key)


def _sorted(rows: Iterable[Row], side: str) -> Iterator[Row]:
    """The rows as given, refusing any out of order: a merge over unsorted input would
    report rows as missing that are merely elsewhere."""
    last: bytes | None = None
    for key, cells in rows:
        if last is not None and key <= last:
            raise ValueError(f"rows of {side} are not in row-key order: {key!r} after {last!r}")
        last = key
        yield key, cells
