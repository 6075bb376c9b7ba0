"""The open-session index: what a range reads, and what it writes back (pure, and through
PartitionStore over an in-memory table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leakproof.core import open_index, sessions
from leakproof.core.events import WebEvent
from leakproof.core.open_index import Entry, bucket_of
from leakproof.core.sessions import FoldResult, OpenSessions, PartitionState, SessionState
from leakproof.hbase.partition_store import PartitionStore
from leakproof.ports.task import Mark, PartitionSave
from leakproof.testing.hbase_table import FakeConnection, FakeTable

from .test_session_store import WEB, event

CLOSE = 1_800_000
W = open_index.bucket_width(CLOSE)  # 56 250 ms


def row(sid: str, last_ts: int, state: str = "open") -> SessionState:
    values, orders = WEB.initial()
    return SessionState(sid, values, orders, first_ts=last_ts, last_ts=last_ts, state=state)


def fold_range(fence: str, close: int, state: PartitionState,
               rows: Mapping[str, SessionState], events: list[tuple[int, WebEvent]]
               ) -> FoldResult:
    return sessions.fold_range(WEB, fence, close, state, rows,
                               [(o, e.as_event()) for o, e in events])


def test_bucket_width_follows_close_after_within_bounds() -> None:
    assert W == 56_250
    assert open_index.bucket_width(10_000) == 1_000
    assert open_index.bucket_width(86_400_000) == 300_000
    assert bucket_of(112_499, W) == 56_250 and bucket_of(-5, W) == 0


def test_a_session_that_moves_on_is_put_in_its_new_bucket_and_left_out_of_the_old() -> None:
    before = {"s1": row("s1", 1_000)}
    r = fold_range("t:0", CLOSE, PartitionState(1_000, 0), before,
                   [(1, event(0)), (2, event(100))])  # s1's last_ts moves to 101 000
    changes = open_index.changes(W, [], before, r)
    assert changes.puts == {56_250: {"s1": 101_000}}
    assert changes.deletes == {0: {"s1"}}


def test_found_entries_close_expire_or_are_dropped_as_their_rows_say() -> None:
    found = [Entry(0, "expired", 5_000), Entry(0, "moved", 6_000), Entry(0, "gone", 7_000),
             Entry(0, "closed", 8_000)]
    before = {"expired": row("expired", 5_000), "moved": row("moved", 2_000_000),
              "closed": row("closed", 8_000, state="closed")}
    open_set = open_index.open_set(found, before)
    assert open_set == {"expired": 5_000, "moved": 2_000_000}
    r = fold_range("t:0", CLOSE, PartitionState(1_900_000, 9, OpenSessions(open_set)), before,
                   [(10, event(1_899))])  # s1 at 1 900 000: the watermark
    assert r.closed_untouched == ["expired"]
    changes = open_index.changes(W, found, before, r)
    # the moved session's entry is put where it belongs (the stale one only said to look)
    assert changes.puts == {bucket_of(2_000_000, W): {"moved": 2_000_000},
                            bucket_of(1_900_000, W): {"s1": 1_900_000}}
    assert changes.deletes == {0: {"expired", "moved", "gone", "closed"}}


def table_scan(table: Any, start: bytes, stop: bytes, batch_size: int) -> Any:
    return table.scan(row_start=start, row_stop=stop, batch_size=batch_size)


class StateConnection(FakeConnection):
    """The state table as HBase keeps it (``leakproof.testing.hbase_table.FakeTable``)."""

    @property
    def t(self) -> FakeTable:
        return self.table("state")


def test_the_store_reads_only_buckets_below_the_cutoff_and_writes_the_watermark_last() -> None:
    conn = StateConnection()
    store = PartitionStore(conn, "state", table_scan)
    changes = open_index.IndexChanges()
    for sid, ts in (("a", 10_000), ("b", 60_000), ("c", 500_000)):
        changes.put(bucket_of(ts, W), sid, ts)
    store.write_partitions("t", [PartitionSave(3, PartitionState(600_000, 41), changes,
                                               cutoff=-5, check_below=0)], ts=1)
    assert store.read_partitions("t", [3], W, ts=5)[3][:3] == (PartitionState(600_000, 41), 0, 0)
    assert sorted(e.session_id for e in store.scan_open("t", 3, 0, 60_000)) == ["a", "b"]
    assert open_index.expiring(store.scan_open("t", 3, 0, 60_000), 60_000) == [
        Entry(0, "a", 10_000)]
    assert store.scan_open("t", 3, 0, 0) == [] and store.scan_open("t", 30, 0, 10**12) == []
    # a range that closed below 350 000 left nothing there: the scan starts a widest bucket
    # (5 min) before it, so "a" (bucket 0) is not read again, "b" (bucket 56 250) is
    store.write_partitions("t", [PartitionSave(3, PartitionState(600_000, 42), changes,
                                               cutoff=350_000, check_below=0)], ts=2)
    assert store.read_partitions("t", [3], W, ts=5)[3].cutoff == 350_000
    assert sorted(e.session_id for e in store.scan_open("t", 3, 350_000, 10**12)) == ["b", "c"]


def test_an_open_set_of_the_old_layout_moves_into_the_index() -> None:
    conn = StateConnection()
    conn.t.put(b"wm:t:0", {b"w:watermark": b"90000", b"w:offset": b"7", b"w:version": b"x",
                        b"o:a": b"10000", b"o:b": b"70000"})
    store = PartitionStore(conn, "state", table_scan)
    assert store.read_partitions("t", [0], W, ts=5)[0][:3] == (PartitionState(90_000, 7), 0, 0)
    assert conn.t.visible()[b"wm:t:0"] == {b"w:watermark": b"90000", b"w:offset": b"7"}
    assert sorted(store.scan_open("t", 0, 0, 10**12), key=lambda e: e.session_id) == [
        Entry(0, "a", 10_000), Entry(56_250, "b", 70_000)]


def test_a_range_that_stops_while_writing_the_index_leaves_its_mark_until_one_completes() -> None:
    conn = StateConnection()
    store = PartitionStore(conn, "state", table_scan)
    moved = open_index.IndexChanges()
    moved.put(bucket_of(700_000, W), "a", 700_000)
    # the puts went out, the deletes and the last put did not: w:pending stays
    conn.t.put(b"wm:t:1", {b"w:watermark": b"500000", b"w:offset": b"3"}, timestamp=1)
    conn.t.put(b"wm:t:1", {b"w:pending": b"700000"}, timestamp=1)
    store._put_entries("t", [(1, moved)], ts=1)
    assert store.read_partitions("t", [1], W, ts=5)[1].check_below == 700_000
    # the replay completes: the mark is kept (stale entries may be anywhere below it), the
    # pending cell goes
    store.write_partitions("t", [PartitionSave(1, PartitionState(700_000, 9), moved, cutoff=0,
                                               check_below=700_000)], ts=2)
    assert conn.t.visible()[b"wm:t:1"][b"w:pending"] == b"0"  # a put, not a delete
    assert store.read_partitions("t", [1], W, ts=5)[1][:3] == (
        PartitionState(700_000, 9), 0, 700_000)


def test_several_partitions_are_read_and_written_in_one_call_each_its_own_row() -> None:
    conn = StateConnection()
    store = PartitionStore(conn, "state", table_scan)
    store.begin_writes("t", [Mark(0, 5_000, None, b"w0"), Mark(7, 9_000, None, b"w7")],
                       foreign=[("t", 3)], ts=1)
    foreign = conn.t.visible()[b"wm:t:3"][b"w:foreign"]
    assert conn.t.visible() == {b"wm:t:0": {b"w:pending": b"5000", b"w:writer": b"w0"},
                            b"wm:t:7": {b"w:pending": b"9000", b"w:writer": b"w7"},
                            b"wm:t:3": {b"w:foreign": foreign}}
    # the tokens read back: the writer's, then the other partitions' bump
    tokens = {p: s.writer for p, s in store.read_partitions("t", [0, 3], W, ts=5).items()}
    assert tokens == {0: b"w0/", 3: b"/" + foreign}
    a, b = open_index.IndexChanges(), open_index.IndexChanges()
    a.put(0, "x", 5_000)
    b.put(0, "y", 9_000)
    store.write_partitions("t", [PartitionSave(0, PartitionState(5_000, 3), a, 0, 0),
                                 PartitionSave(7, PartitionState(9_000, 11), b, 0, 0)], ts=2)
    read = store.read_partitions("t", [0, 7, 8], W, ts=5)
    assert [(p, s.state) for p, s in read.items()] == [
        (0, PartitionState(5_000, 3)), (7, PartitionState(9_000, 11)), (8, PartitionState())]
    assert [e.session_id for e in store.scan_open("t", 7, 0, 10**12)] == ["y"]
    assert conn.t.visible()[b"wm:t:0"][b"w:pending"] == b"0"


def test_entries_below_the_mark_are_what_their_rows_say_the_others_what_they_say() -> None:
    found = [Entry(0, "old", 10_000), Entry(0, "gone", 20_000), Entry(56_250, "new", 60_000)]
    assert open_index.to_check(found, 50_000) == {"old", "gone"}
    known = open_index.known_rows(found, {"old", "gone"}, {"old": row("old", 90_000)},
                                  {"touched": row("touched", 5)})
    assert {sid: s.last_ts for sid, s in known.items()} == {"old": 90_000, "new": 60_000,
                                                           "touched": 5}
