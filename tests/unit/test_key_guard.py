"""The driver's side of the partitions-added rule, with literal offsets and clocks: when a
batch runs as one task, when its ranges check their keys, what is recorded before any task
runs, and the output thread's news reaching planning through the run control."""

from __future__ import annotations

from leakproof.core.moved_keys import KeyMoves
from leakproof.core.offsets import LogBounds, OffsetRange
from leakproof.driver.batch import BatchPlan
from leakproof.driver.control import RunControl, RunLimits
from leakproof.driver.key_guard import KeyMoveGuard
from leakproof.testing.driver_ports import FakeLeaseStore

SETTLE_S = 300.0  # kafka.partitions_settle_s
T0 = 1_700_000_000_000


def plan(starts: dict[int, int], ends: dict[int, int], appeared: dict[int, int] | None = None
         ) -> BatchPlan:
    ranges = tuple(OffsetRange("t", p, starts[p], ends[p]) for p in sorted(starts))
    return BatchPlan(T0, ranges, {p: LogBounds(0, ends[p]) for p in ends}, (), appeared or {})


def test_a_topic_never_grown_runs_several_tasks_and_records_nothing() -> None:
    store = FakeLeaseStore()
    guard = KeyMoveGuard(store, "t", SETTLE_S)
    guard.start(T0, first_run=False, partitions_added=False)
    out = guard.plan(plan({0: 5, 1: 7}, {0: 9, 1: 9}), T0 + 1_000, None)
    assert (out.one_task, out.check_keys_in, out.owners_in) == (False, None, None)
    assert store.moves == KeyMoves(None)


def test_partitions_that_appear_run_one_task_until_every_range_passes_the_settled_ends() -> None:
    store = FakeLeaseStore()
    guard = KeyMoveGuard(store, "t", SETTLE_S)
    grown = guard.plan(plan({0: 5, 1: 5, 2: 0}, {0: 9, 1: 9, 2: 3}, appeared={2: 0}),
                       T0, None)
    assert grown.one_task and store.moves.since_ms == T0  # recorded before any task
    # settle time passed: the log ends then are the bound; p1 starts below its bound
    settled = guard.plan(plan({0: 40, 1: 30, 2: 3}, {0: 50, 1: 60, 2: 20}),
                         T0 + 300_000, None)
    assert settled.one_task and store.moves.until == {0: 50, 1: 60, 2: 20}
    past = guard.plan(plan({0: 50, 1: 60, 2: 20}, {0: 70, 1: 70, 2: 30}), T0 + 301_000, None)
    assert (past.one_task, past.check_keys_in) == (False, None)
    # a grown topic's sessions close only in their keys' partitions, for good
    assert grown.owners_in == settled.owners_in == past.owners_in == 3


def test_a_first_run_checks_keys_against_the_partition_count_until_it_settles() -> None:
    store = FakeLeaseStore()
    guard = KeyMoveGuard(store, "t", SETTLE_S)
    guard.start(T0, first_run=True, partitions_added=False)
    assert store.moves.check_since_ms == T0
    out = guard.plan(plan({0: 0, 1: 0}, {0: 9, 1: 9}), T0 + 1_000, None)
    assert (out.one_task, out.check_keys_in) == (False, 2)


def test_offsets_lacking_a_partition_at_start_mean_it_was_added_while_down() -> None:
    store = FakeLeaseStore()
    KeyMoveGuard(store, "t", SETTLE_S).start(T0, first_run=False, partitions_added=True)
    assert store.moves.since_ms == T0


def test_a_restarted_driver_keeps_the_recorded_rule() -> None:
    store = FakeLeaseStore(moves=KeyMoves(None, {0: 50, 1: 60}))
    out = KeyMoveGuard(store, "t", SETTLE_S).plan(plan({0: 49, 1: 61}, {0: 90, 1: 90}),
                                                  T0, None)
    assert out.one_task  # p0 starts below the bound the earlier driver recorded


def test_keys_found_moved_by_one_batch_make_the_next_plans_one_task() -> None:
    control = RunControl(RunLimits())
    store = FakeLeaseStore()
    guard = KeyMoveGuard(store, "t", SETTLE_S)
    assert control.take_keys_moved() is None
    control.keys_moved(T0 + 500)  # the output thread, after a batch held ranges back
    out = guard.plan(plan({0: 5, 1: 5}, {0: 9, 1: 9}), T0 + 1_000,
                     control.take_keys_moved())
    assert out.one_task and store.moves.since_ms == T0 + 500
    assert control.take_keys_moved() is None  # taken once
