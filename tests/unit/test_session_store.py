"""SessionStore sends only the cells that changed, and the row then reads as if written whole."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from leakproof.events import WebEvent
from leakproof.hbase.session_store import SessionStore
from leakproof.session_cells import from_cells, to_cells
from leakproof.sessions import PartitionFolder, PartitionState, fence_key


class MemoryTable:
    """The two happybase.Table calls SessionStore makes, over a dict of rows."""

    def __init__(self) -> None:
        self.rows_by_key: dict[bytes, dict[bytes, bytes]] = {}
        self.puts: list[tuple[bytes, dict[bytes, bytes]]] = []

    def rows(self, keys: list[bytes], columns: list[bytes] | None = None
             ) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """As happybase's: a row with none of ``columns`` is left out."""
        found = [(k, {c: v for c, v in self.rows_by_key[k].items()
                      if columns is None or c in columns})
                 for k in keys if k in self.rows_by_key]
        return [(k, cells) for k, cells in found if cells]

    @contextmanager
    def batch(self, batch_size: int) -> Iterator[Any]:
        table = self

        class Batch:
            def put(self, key: bytes, cells: dict[bytes, bytes]) -> None:
                table.puts.append((key, cells))
                table.rows_by_key.setdefault(key, {}).update(cells)

        yield Batch()


def event(seq: int, kind: str = "click", url: str = "/a") -> WebEvent:
    return WebEvent(session_id="s1", user_id="u1", seq=seq, ts=1_000 + seq * 1_000,
                    event_type=kind, url=url, status=200, bytes=100, referrer=None,
                    user_agent=None)


def fold(table: MemoryTable, offset: int, *events: WebEvent) -> None:
    store = SessionStore(table)
    rows = store.read(["s1"])
    folder = PartitionFolder(fence_key("t", 0), 1_800_000, PartitionState(), rows)
    for i, e in enumerate(events):
        folder.feed(offset + i, e)
    store.write(folder.finish().touched.values())


def test_a_new_row_is_written_whole_and_a_known_one_only_where_it_changed() -> None:
    table = MemoryTable()
    fold(table, 0, event(0, "pageview", "/"))
    first_key, first = table.puts[-1]
    assert first_key == b"s1" and set(first) == set(to_cells(from_cells("s1", first)))

    fold(table, 1, event(1, "click", "/b"))
    _, second = table.puts[-1]
    assert b"s:clicks" in second and b"s:exit_url" in second and b"f:p:t:0" in second
    for unchanged in (b"s:user_id", b"s:entry_url", b"s:first_ts", b"s:pageviews"):
        assert unchanged not in second
    assert len(second) < len(first) / 2

    # what HBase holds equals a whole-row write of the same session
    whole = MemoryTable()
    fold(whole, 0, event(0, "pageview", "/"), event(1, "click", "/b"))
    assert table.rows_by_key[b"s1"] == whole.rows_by_key[b"s1"]


def test_a_replayed_range_that_changes_nothing_writes_nothing() -> None:
    table = MemoryTable()
    fold(table, 0, event(0, "pageview", "/"), event(1))
    puts = len(table.puts)
    fold(table, 0, event(0, "pageview", "/"), event(1))  # the same offsets again: fenced
    assert len(table.puts) == puts


def test_seq_bounds_live_in_f_seqs_and_rows_that_stored_them_apart_keep_them_true() -> None:
    table = MemoryTable()
    fold(table, 0, event(2, "pageview", "/two"), event(3, url="/three"))
    row = table.rows_by_key[b"s1"]
    assert row[b"f:seqs"] == b"2-3"
    assert b"f:entry_seq" not in row and b"f:max_seq" not in row
    again = from_cells("s1", row)
    assert (again.entry_seq, again.max_seq) == (2, 3)

    # a row as older versions wrote it: the bounds in cells of their own, kept up to date
    old = MemoryTable()
    fold(old, 0, event(2, "pageview", "/two"), event(3, url="/three"))
    old.rows_by_key[b"s1"].update({b"f:entry_seq": b"2", b"f:max_seq": b"3"})
    fold(old, 2, event(1, url="/one"), event(5, url="/five"))
    fold(table, 2, event(1, url="/one"), event(5, url="/five"))
    assert old.rows_by_key[b"s1"][b"f:entry_seq"] == b"1"
    assert old.rows_by_key[b"s1"][b"f:max_seq"] == b"5"
    for t in (old, table):
        s = from_cells("s1", t.rows_by_key[b"s1"])
        assert (s.entry_url, s.exit_url, s.out_of_order) == ("/one", "/five", 1)


def test_a_row_from_before_f_seqs_reads_its_bounds_from_their_cells() -> None:
    table = MemoryTable()
    fold(table, 0, event(0, "pageview", "/"), event(1, url="/b"), event(4, url="/e"))
    row = table.rows_by_key[b"s1"]
    del row[b"f:seqs"]
    row.update({b"f:entry_seq": b"0", b"f:max_seq": b"4"})
    fold(table, 3, event(3, url="/d"))  # below the highest seq: out of order, exit stays
    s = from_cells("s1", table.rows_by_key[b"s1"])
    assert (s.entry_seq, s.max_seq, s.exit_url, s.out_of_order) == (0, 4, "/e", 1)
    assert table.rows_by_key[b"s1"][b"f:seqs"] == b"3"  # what this version applied
