"""One contract, two tables: the unit tests' ``FakeTable`` and a real HBase table through
its Thrift server. Every case runs on both and must leave the same visible rows, so the
fakes the unit tests fold over cannot drift from the store they stand for: timestamps,
delete markers, batches that put then delete, families, scans, and the real stores'
late-write cases (``cell_clock``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import happybase
import pytest

from leakproof.core.events import WebEvent
from leakproof.core.open_index import IndexChanges
from leakproof.core.sessions import PartitionFolder, PartitionState, fence_key
from leakproof.hbase.connection import SESSIONS_FAMILIES, STATE_FAMILIES
from leakproof.hbase.partition_store import PartitionStore, short_scan
from leakproof.hbase.session_store import SessionStore
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model
from leakproof.ports.task import Mark, PartitionSave
from leakproof.testing.hbase_table import FakeConnection, FakeTable
from leakproof.testing.task_ports import fake_scan

from .helpers import THRIFT

pytestmark = pytest.mark.integration

WEB = compile_model(web_model())
FAMILIES = {**SESSIONS_FAMILIES, **STATE_FAMILIES}


class Real:
    """A fresh HBase table with every family the job's tables use."""

    def __init__(self) -> None:
        self.conn = happybase.Connection(THRIFT[0], THRIFT[1],
                                         table_prefix=f"contract{uuid.uuid4().hex[:8]}")
        self.conn.create_table("t", FAMILIES)
        self.table = self.conn.table("t")

    def close(self) -> None:
        self.conn.delete_table("t", disable=True)
        self.conn.close()


@pytest.fixture(params=["fake", "hbase"])
def table(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "fake":
        yield FakeTable(b"t")
        return
    real = Real()
    try:
        yield real.table
    finally:
        real.close()


def rows(table: Any) -> dict[bytes, dict[bytes, bytes]]:
    return dict(table.scan())


def test_the_newest_timestamp_shows_whatever_order_the_puts_land_in(table: Any) -> None:
    table.put(b"r", {b"s:a": b"new", b"s:b": b"new"}, timestamp=20)
    table.put(b"r", {b"s:a": b"old", b"s:c": b"old"}, timestamp=10)  # late, older
    assert table.row(b"r") == {b"s:a": b"new", b"s:b": b"new", b"s:c": b"old"}
    table.put(b"r", {b"s:a": b"again"}, timestamp=20)  # equal: the later put shows
    assert table.row(b"r", include_timestamp=True)[b"s:a"] == (b"again", 20)


def test_a_delete_marker_hides_older_puts_that_land_after_it(table: Any) -> None:
    table.put(b"r", {b"o:x": b"1", b"o:y": b"1"}, timestamp=10)
    table.delete(b"r", columns=[b"o:x"], timestamp=15)
    table.put(b"r", {b"o:x": b"late"}, timestamp=12)  # older than the marker: hidden
    table.put(b"r", {b"o:x": b"same"}, timestamp=15)  # the marker's own timestamp: hidden
    assert table.row(b"r") == {b"o:y": b"1"}
    table.put(b"r", {b"o:x": b"newer"}, timestamp=16)
    assert table.row(b"r") == {b"o:x": b"newer", b"o:y": b"1"}


def test_a_family_delete_and_a_batch_that_puts_then_deletes(table: Any) -> None:
    table.put(b"w", {b"o:a": b"1", b"o:b": b"2", b"w:k": b"3"}, timestamp=5)
    table.delete(b"w", columns=[b"o"], timestamp=6)
    assert table.row(b"w") == {b"w:k": b"3"}
    with table.batch(timestamp=9) as batch:
        batch.put(b"x", {b"o:a": b"1", b"o:b": b"2"})
        batch.delete(b"x", columns=[b"o:a"])  # same call, same timestamp: the delete wins
    assert table.row(b"x") == {b"o:b": b"2"}


def test_rows_and_scans_read_what_the_stores_read(table: Any) -> None:
    for key in (b"op:t:0:002", b"op:t:0:001", b"op:t:1:000", b"wm:t:0"):
        table.put(key, {b"o:s": key}, timestamp=1)
    assert [k for k, _ in table.scan(row_start=b"op:t:0:", row_stop=b"op:t:0:002")] == [
        b"op:t:0:001"]
    assert [k for k, _ in table.scan(row_prefix=b"op:")] == [
        b"op:t:0:001", b"op:t:0:002", b"op:t:1:000"]
    assert table.rows([b"wm:t:0", b"none"]) == [(b"wm:t:0", {b"o:s": b"wm:t:0"})]
    assert table.rows([b"wm:t:0"], columns=[b"s:x"]) == []  # no cell asked for: no row


# -- the real stores over both tables -------------------------------------------------


def fold(store: SessionStore, offset: int, events: list[tuple[int, str]]) -> list[Any]:
    """Session "s" read, fed ``events`` (seq, url) from ``offset``: the rows to write."""
    rows_ = store.read(["s"])
    folder = PartitionFolder(WEB, fence_key("t", 0), 600_000, PartitionState(), rows_)
    for i, (seq, url) in enumerate(events):
        folder.feed(offset + i, WebEvent("s", "u", seq, 1_000 + seq, "pageview", url, 200,
                                         10).as_event())
    return list(folder.finish().touched.values())


def session_case(table: Any) -> dict[str, str]:
    """Batch 1's write times out and lands after its retry and batch 2's write."""
    first = SessionStore(table, WEB)
    rows1 = fold(first, 0, [(0, "/a"), (1, "/b")])
    late = SessionStore(table, WEB)
    late._stored = dict(first._stored)
    retry = SessionStore(table, WEB)
    retry.write(rows1, ts=1_000)  # the retry of batch 1
    second = SessionStore(table, WEB)
    second.write(fold(second, 2, [(2, "/c")]), ts=2_000)
    late.write(rows1, ts=1_000)  # the first copy of batch 1, landing now
    return {k.decode(): v.decode() for k, v in table.row(b"s").items()}


def test_a_late_session_row_write_leaves_the_newer_row_on_both(table: Any) -> None:
    row = session_case(table)
    assert (row["s:events"], row["s:exit_url"], row["f:p:t:0"]) == ("3", "/c", "2")


def partition_case(table: Any, scan: Callable[..., Any]) -> dict[bytes, dict[bytes, bytes]]:
    conn = FakeConnection()
    conn.tables["state"] = table
    store = PartitionStore(conn, "state", scan)
    first, second = IndexChanges(), IndexChanges()
    first.put(0, "s", 1_000)
    second.put(56_250, "s", 70_000)
    second.delete(0, "s")
    store.begin_writes("t", [Mark(0, 1_000, None, b"w1")], ts=1_000)
    late = [PartitionSave(0, PartitionState(1_000, 1), first, 0, 0)]
    store.write_partitions("t", late, ts=1_000)
    store.begin_writes("t", [Mark(0, 70_000, None, b"w2")], ts=2_000)
    store.write_partitions("t", [PartitionSave(0, PartitionState(70_000, 2), second, 0, 0)],
                           ts=2_000)
    store.begin_writes("t", [Mark(0, 1_000, None, b"w1")], ts=1_000)  # batch 1 again, late
    store.write_partitions("t", late, ts=1_000)
    return dict(table.scan())


def test_late_index_marks_and_watermarks_leave_the_newer_state_on_both(table: Any) -> None:
    scan = fake_scan if isinstance(table, FakeTable) else short_scan
    found = partition_case(table, scan)
    assert found == {
        b"op:t:0:0000000056250": {b"o:s": b"70000"},
        b"wm:t:0": {b"w:pending": b"0", b"w:writer": b"w2", b"w:watermark": b"70000",
                    b"w:offset": b"2", b"w:cutoff": b"0", b"w:check_below": b"0"}}


def test_a_row_adopted_from_its_image_is_the_row_read_and_writes_the_same(table: Any) -> None:
    """The kept-rows cache's part of the store: the image of a row one store wrote, adopted
    by another store, is what a read gives; and the next write over it leaves the row a
    write over the read row leaves."""
    first = SessionStore(table, WEB)
    first.write(fold(first, 0, [(0, "/a"), (1, "/b")]), ts=1_000)
    image = first.images(["s", "absent"])
    assert image.keys() == {"s"}
    kept, read = SessionStore(table, WEB), SessionStore(table, WEB)
    assert kept.adopt(image) == read.read(["s"])
    folder = PartitionFolder(WEB, fence_key("t", 0), 600_000, PartitionState(),
                             kept.adopt(image))
    folder.feed(2, WebEvent("s", "u", 2, 1_002, "pageview", "/c", 200, 10).as_event())
    kept.write(list(folder.finish().touched.values()), ts=2_000)
    row = {k.decode(): v.decode() for k, v in table.row(b"s").items()}
    assert (row["s:events"], row["s:exit_url"], row["f:p:t:0"]) == ("3", "/c", "2")
    # the image the writer holds after its write is what HBase now holds
    assert SessionStore(table, WEB).adopt(kept.images(["s"])) == \
        SessionStore(table, WEB).read(["s"])
