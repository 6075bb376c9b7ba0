"""SessionStore sends only the cells that changed, and the row then reads as if written whole."""

from __future__ import annotations

from typing import Any

from leakproof.core.events import WebEvent
from leakproof.core.session_cells import from_cells, readable, to_cells
from leakproof.core.sessions import PartitionFolder, PartitionState, fence_key
from leakproof.hbase.session_store import SessionStore
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model

WEB = compile_model(web_model())


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

    def batch(self, batch_size: int, timestamp: int | None = None) -> Any:
        table = self

        class Batch:  # happybase's: puts, and ``send`` for what is left
            def put(self, key: bytes, cells: dict[bytes, bytes]) -> None:
                table.puts.append((key, cells))
                table.rows_by_key.setdefault(key, {}).update(cells)

            def send(self) -> None:
                pass

        return Batch()


def event(seq: int, kind: str = "click", url: str = "/a") -> WebEvent:
    return WebEvent(session_id="s1", user_id="u1", seq=seq, ts=1_000 + seq * 1_000,
                    event_type=kind, url=url, status=200, bytes=100, referrer=None,
                    user_agent=None)


def fold(table: MemoryTable, offset: int, *events: WebEvent) -> None:
    store = SessionStore(table, WEB)
    rows = store.read(["s1"])
    folder = PartitionFolder(WEB, fence_key("t", 0), 1_800_000, PartitionState(), rows)
    for i, e in enumerate(events):
        folder.feed(offset + i, e.as_event())
    store.write(folder.finish().touched.values(), ts=offset + 1)


def test_a_new_row_is_written_whole_and_a_known_one_only_where_it_changed() -> None:
    table = MemoryTable()
    fold(table, 0, event(0, "pageview", "/"))
    first_key, first = table.puts[-1]
    assert first_key == b"s1" and set(first) == set(to_cells(from_cells("s1", first, WEB), WEB))

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


def test_first_and_last_follow_the_seq_bounds_of_f_seqs_without_cells_of_their_own() -> None:
    table = MemoryTable()
    fold(table, 0, event(2, "pageview", "/two"), event(3, url="/three"))
    row = table.rows_by_key[b"s1"]
    assert row[b"f:seqs"] == b"2-3"
    assert not any(k.startswith(b"f:o:") for k in row)  # url is never null: orders = bounds
    fold(table, 2, event(1, url="/one"), event(5, url="/five"))
    cells = readable(table.rows_by_key[b"s1"])
    assert (cells["entry_url"], cells["exit_url"], cells["out_of_order"]) == ("/one", "/five",
                                                                             "1")
    again = from_cells("s1", table.rows_by_key[b"s1"], WEB)
    assert again.orders[WEB.names.index("entry_url")] == 1
    assert again.orders[WEB.names.index("exit_url")] == 5
