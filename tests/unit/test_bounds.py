"""Bounded runs (backfills): the bound per partition, the clamp of every plan, the stop after
the batch that reaches every bound -- over the driver's fakes, with literals."""

from __future__ import annotations

import pytest

from leakproof.cli import build_parser
from leakproof.core.errors import OffsetError
from leakproof.core.offsets import LogBounds, OffsetRange
from leakproof.driver.bounds import bound_offsets, clamp, reached, short_of, shortfall
from leakproof.driver.control import RunControl, RunLimits

from .drivers import rig

BOUNDS = {0: LogBounds(0, 100), 1: LogBounds(10, 50, stable_end=40)}


def test_until_time_bounds_each_partition_at_its_first_record_that_new() -> None:
    # partition 1 has no record that new: its log end at start, past an open transaction
    assert bound_offsets("t", BOUNDS, by_time={0: 70, 1: None}) == {0: 70, 1: 50}


def test_until_offsets_must_name_every_partition_and_stay_in_the_log() -> None:
    assert bound_offsets("t", BOUNDS, until_offsets={0: 5, 1: 50}) == {0: 5, 1: 50}
    with pytest.raises(OffsetError, match=r"no bound for partitions \[1\]"):
        bound_offsets("t", BOUNDS, until_offsets={0: 5})
    with pytest.raises(OffsetError, match=r"names partitions \[7\]"):
        bound_offsets("t", BOUNDS, until_offsets={0: 5, 1: 5, 7: 1})
    with pytest.raises(OffsetError, match="1=51 is past the log end of t partition 1 "
                                          r"\(50\)"):
        bound_offsets("t", BOUNDS, until_offsets={0: 5, 1: 51})


def test_clamp_and_reached() -> None:
    assert clamp({0: 100, 1: 40}, {0: 70, 1: 50}) == {0: 70, 1: 40}
    ranges = [OffsetRange("t", 0, 60, 70), OffsetRange("t", 1, 40, 40)]
    assert not reached(ranges, {0: 70, 1: 50})  # partition 1 waits for its transaction
    assert reached(ranges, {0: 70, 1: 40})


def test_no_range_passes_a_bound_and_the_batch_reaching_every_bound_is_the_last() -> None:
    r = rig({0: (0, 100), 1: (0, 50)}, max_rate_per_partition=20)
    assert r.planner.bound(until_offsets={0: 30, 1: 50}) == {0: 30, 1: 50}
    control = RunControl(RunLimits(until_offsets={0: 30, 1: 50}))
    seen = []
    while control.planning_allowed():
        plan = r.plan()
        control.hand_over(plan)
        r.run(plan)
        seen.append(([(g.from_offset, g.until_offset) for g in plan.ranges], plan.last))
    assert seen == [([(0, 20), (0, 20)], False),
                    ([(20, 30), (20, 40)], False),
                    ([(30, 30), (40, 50)], True)]
    assert control.stop_reason == ("every partition read to its bound (--until-offsets "
                                   "0=30,1=50)")
    assert not control.asked_to_stop  # a run limit: the batches planned commit, exit 0
    latest = r.store.latest()
    assert latest is not None and latest.offsets == {0: 30, 1: 50}


def test_until_time_reads_the_records_before_it() -> None:
    r = rig({0: (0, 4), 1: (0, 2)})
    r.meta.record_ms = {0: [100, 200, 300, 400], 1: [50, 60]}
    assert r.planner.bound(until_time_ms=300) == {0: 2, 1: 2}
    plan = r.plan()
    assert [(g.partition, g.from_offset, g.until_offset) for g in plan.ranges] == [
        (0, 0, 2), (1, 0, 2)]
    assert plan.last
    control = RunControl(RunLimits(until_time_ms=1_767_225_600_000))
    control.hand_over(plan)
    assert control.stop_reason == ("every partition read to its bound (--until-time "
                                   "2026-01-01T00:00:00.000+00:00)")


def test_a_run_starting_past_its_bound_reads_nothing_of_that_partition() -> None:
    r = rig({0: (0, 100), 1: (0, 100)}, stored={0: 60, 1: 10})
    r.planner.bound(until_offsets={0: 40, 1: 20})
    plan = r.plan()
    assert [(g.from_offset, g.until_offset) for g in plan.ranges] == [(60, 60), (10, 20)]
    assert plan.last


def test_a_partition_appearing_under_a_bounded_run_is_bounded_too() -> None:
    r = rig({0: (0, 100)})
    r.planner.bound(until_offsets={0: 100})
    r.meta.bounds[1] = LogBounds(5, 80)  # added while running
    plan = r.plan()
    assert [(g.partition, g.from_offset, g.until_offset) for g in plan.ranges] == [
        (0, 0, 100), (1, 5, 5)]  # --until-offsets named no bound for it: none of it
    assert plan.last
    timed = rig({0: (0, 2)})
    timed.meta.record_ms = {0: [10, 20], 1: [5, 6, 30]}
    timed.planner.bound(until_time_ms=25)
    timed.meta.bounds[1] = LogBounds(0, 3)
    assert [(g.partition, g.until_offset) for g in timed.plan().ranges] == [(0, 2), (1, 2)]


def test_the_command_line_takes_one_bound_with_its_zone() -> None:
    args = build_parser().parse_args(["run", "--config", "c", "--until-time",
                                      "2026-01-01T01:00:00+01:00"])
    assert args.until_time == 1_767_225_600_000 and args.until_offsets is None
    assert build_parser().parse_args(["run", "--config", "c", "--until-time",
                                      "2026-01-01T00:00:00Z"]).until_time == 1_767_225_600_000
    args = build_parser().parse_args(["run", "--config", "c", "--until-offsets", "0=5,1=7"])
    assert args.until_offsets == {0: 5, 1: 7}
    for bad in (["--until-time", "2026-01-01T00:00:00"],  # no zone: refused
                ["--until-offsets", "0=5", "--until-time", "2026-01-01T00:00:00Z"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["run", "--config", "c", *bad])


def test_a_bound_reached_leaves_no_partition_short_of_it() -> None:
    assert short_of({0: 100, 1: 50}, {0: 100, 1: 70}) == {}


def test_the_partitions_short_of_the_bound_say_where_they_got_to() -> None:
    # p1 never committed (a run stopped before its first batch): at 0
    assert short_of({0: 100, 1: 50, 2: 10}, {0: 40, 2: 10}) == {0: (40, 100), 1: (0, 50)}


def test_the_shortfall_is_the_line_a_stopped_backfill_logs() -> None:
    assert shortfall({0: 100, 1: 50}, {0: 40, 1: 50}) == "p0 at 40 of 100"
    assert shortfall({0: 100}, {0: 100}) is None and shortfall(None, {0: 3}) is None
