"""Writes that land late: a call the client gave up on that the server still applies, a
task attempt that stalled past the lease check and goes on writing. Whatever order they land
in, the rows end as the batches applied in order would leave them (``cell_clock``): over
the real stores on ``FakeTable``, which keeps HBase's newest-timestamp rule."""

from __future__ import annotations

from typing import Any

import pytest

from leakproof.core.cell_clock import CellClock, room, stamps
from leakproof.core.config import JobConfig
from leakproof.core.kept_rows import KeptRows
from leakproof.testing.hbase_table import FakeTable, LateWrite

from .test_process_range import FIRST, SECOND, Rig, ev, records

THIRD = records(ev("b", 2, 11 * 60_000), ev("d", 0, 11 * 60_000), start=6)


def finished(rig: Rig, second_ts: int = 2_000) -> Rig:
    rig.run(SECOND, batch_ms=second_ts)
    rig.run(THIRD, batch_ms=second_ts + 1_000)
    return rig


def expected() -> tuple[object, ...]:
    return finished(clean_first()).state()


def clean_first() -> Rig:
    rig = Rig()
    rig.run(FIRST)
    return rig


def tables(rig: Rig) -> dict[str, FakeTable]:
    return {"sessions": rig.sessions.table, "state": rig.partitions.table,
            "dead letters": rig.dead.table}


@pytest.mark.parametrize("table,passing", [
    ("sessions", 0),  # the session rows' put
    ("state", 0),  # the pending mark and writer token
    ("state", 1),  # the index puts
    ("state", 2),  # the watermark (the first range deletes no index entry)
    ("dead letters", 0),
])
def test_a_write_the_client_gave_up_on_lands_after_newer_batches_and_changes_nothing(
        table: str, passing: int) -> None:
    rig = Rig()
    held = tables(rig)[table]
    held.hold, held.pass_writes = 1, passing
    with pytest.raises(LateWrite):
        rig.run(FIRST)  # batch 1's write times out ...
    rig.run(FIRST)  # ... its retry (same batch, same timestamp) goes through
    finished(rig)  # batches 2 and 3 move the same rows on
    assert held.deliver_late() == 1  # then the server applies the first copy
    assert rig.state() == expected()


def stalled(rig: Rig, recs: Any, batch_ms: int) -> dict[str, Any]:
    """``recs`` run as a task that stalls before its writes: what it would write, kept back."""
    for t in tables(rig).values():
        t.delay = 99
    rig.run(recs, batch_ms=batch_ms)
    kept = {name: t.late for name, t in tables(rig).items()}
    for t in tables(rig).values():
        t.delay, t.late = 0, []
    return kept


def land(rig: Rig, kept: dict[str, Any]) -> None:
    for name, t in tables(rig).items():
        t.late = kept[name]
        t.deliver_late()


def test_a_stalled_attempt_that_read_before_and_writes_after_a_newer_batch_changes_nothing(
        ) -> None:
    """A speculative or zombie copy of batch 2 (same driver epoch: the lease check passes)
    reads the rows batch 1 left, stalls, and writes all of it after batch 3 ran."""
    rig = clean_first()
    kept = stalled(rig, SECOND, 2_000)
    finished(rig)  # the copy that finished first, then batch 3
    land(rig, kept)
    assert rig.state() == expected()


def test_a_replaced_drivers_stalled_task_loses_to_the_new_drivers_replay() -> None:
    """A driver's task stalls past its lease check; a new driver (its timestamps above the
    old one's reservation) replays the batch and goes on; then the old writes land."""
    rig = clean_first()
    kept = stalled(rig, SECOND, 2_000)
    finished(rig, second_ts=70_000)  # the new driver: above what the old one reserved
    land(rig, kept)
    assert rig.state() == expected()


def test_without_growing_timestamps_the_same_late_write_loses_events() -> None:
    """The rule the tests above rest on: with one timestamp for every batch (what a
    server-assigned timestamp is to a write delayed past the next batch), the late copy
    puts the older cells back."""
    rig = Rig()
    rig.sessions.table.hold = 1
    with pytest.raises(LateWrite):
        rig.run(FIRST)
    rig.run(FIRST)
    rig.run(records(ev("a", 2, 3_000), start=4), batch_ms=1_000)  # a moves on, same stamp
    rig.sessions.table.deliver_late()
    assert rig.sessions.readable()["a"]["events"] == "2"  # the third event is gone


def test_a_delete_hides_an_older_put_that_lands_after_it_and_not_a_newer_one() -> None:
    t = FakeTable()
    t.delete(b"r", [b"o:s"], timestamp=10)
    t.put(b"r", {b"o:s": b"1"}, timestamp=9)  # late: hidden by the marker
    assert t.row(b"r") == {}
    t.put(b"r", {b"o:s": b"2"}, timestamp=10)  # a put at the marker's own timestamp too
    assert t.row(b"r") == {}
    t.put(b"r", {b"o:s": b"3"}, timestamp=11)
    assert t.row(b"r") == {b"o:s": b"3"}
    t.put(b"r", {b"o:s": b"4"}, timestamp=11)  # equal timestamps: the later put shows
    t.put(b"r", {b"o:s": b"5"}, timestamp=7)
    assert t.row(b"r", include_timestamp=True) == {b"o:s": (b"4", 11)}


# -- the clock ------------------------------------------------------------------------


def test_the_clock_follows_batch_times_and_reserves_ahead_before_it_hands_one_out() -> None:
    reserved: list[int] = []
    clock = CellClock.start(now_ms=1_000_000, before=0, reserve_ms=60_000)
    assert clock.stamp(1_000_000, 1, reserved.append) == 1_000_000
    assert reserved == [1_060_000]
    assert clock.stamp(1_002_000, 1, reserved.append) == 1_002_000
    assert reserved == [1_060_000]  # within the reservation: no write
    assert clock.stamp(1_061_000, 1, reserved.append) == 1_061_000
    assert reserved == [1_060_000, 1_121_000]


def test_a_new_driver_starts_above_what_the_last_one_reserved_whatever_its_clock() -> None:
    clock = CellClock.start(now_ms=1_000_000, before=1_060_000)  # its clock is behind
    first = clock.stamp(1_000_000, 1, lambda until: None)
    assert first == 1_060_001
    assert clock.stamp(1_001_000, 1, lambda until: None) == 1_060_002  # still above
    assert clock.stamp(1_070_000, 1, lambda until: None) == 1_070_000  # caught up


def test_a_lease_row_without_a_record_is_started_above_with_a_margin_for_server_skew() -> None:
    assert CellClock.bound(reserved=5_000, holder_ts=9_000) == 5_000
    assert CellClock.bound(reserved=None, holder_ts=9_000) == 39_000
    assert CellClock.bound(reserved=None, holder_ts=9_000, predecessor=False) == 9_000


def test_a_batch_that_takes_room_leaves_it_and_a_failed_reservation_hands_nothing_out() -> None:
    clock = CellClock.start(now_ms=1_000, before=0)
    assert clock.stamp(1_000, room(4, spread=True), lambda until: None) == 1_000
    assert clock.stamp(1_001, 1, lambda until: None) == 1_009  # 1 000 .. 1 008 taken

    def refused(until: int) -> None:
        raise RuntimeError("the lease moved on")

    tight = CellClock(next_free=5_000, reserved=5_000)
    with pytest.raises(RuntimeError):
        tight.stamp(5_000, 2, refused)
    assert tight.reserved == 5_000 and tight.next_free == 5_000


def test_ranges_that_may_share_rows_get_timestamps_in_apply_order_the_second_pass_above() -> None:
    assert stamps(100, [3, 1, 2], spread=False) == {3: 100, 1: 100, 2: 100}
    assert stamps(100, [3, 1, 2], spread=True) == {1: 100, 2: 101, 3: 102}
    assert stamps(100, [3, 1, 2], spread=True, again=True) == {1: 103, 2: 104, 3: 105}
    assert room(3, spread=True) == 7 and room(3, spread=False) == 1


def test_kept_rows_dropped_after_a_failed_write_are_read_again() -> None:
    kept = KeptRows(JobConfig().kept_rows)
    kept.keep("t:0", b"", b"tok", {"s": b"row image"})
    kept.drop("t:0")
    assert kept.take("t:0", b"tok", ["s"]) == {}
