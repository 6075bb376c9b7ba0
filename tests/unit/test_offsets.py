"""Offset planning: every start case of docs/DESIGN.md, rate caps, ranges."""

from __future__ import annotations

import pytest

from leakproof.core.errors import DataLossError, OffsetError
from leakproof.core.offsets import (
    Gap,
    LogBounds,
    OffsetRange,
    check_position,
    per_partition_budget,
    plan_ranges,
    resolve_start,
)

B = {0: LogBounds(10, 100), 1: LogBounds(0, 50)}


def start(stored: dict[int, int] | None, reset: str = "earliest", loss: str = "fail",
          assigned: tuple[int, ...] = (0, 1)) -> dict[int, int]:
    return resolve_start("t", assigned, stored, B, auto_offset_reset=reset,
                         on_data_loss=loss).positions


def test_range_is_from_inclusive_until_exclusive() -> None:
    r = OffsetRange("t", 0, 5, 9)
    assert r.count == 4
    assert str(r) == "t:0[5,9)"
    with pytest.raises(ValueError):
        OffsetRange("t", 0, 9, 5)


def test_first_run_earliest_and_latest() -> None:
    assert start(None, "earliest") == {0: 10, 1: 0}
    assert start(None, "latest") == {0: 100, 1: 50}


def test_first_run_none_refuses() -> None:
    with pytest.raises(OffsetError, match="auto_offset_reset is 'none'"):
        start(None, "none")


def test_resume_at_stored_offsets() -> None:
    assert start({0: 42, 1: 50}) == {0: 42, 1: 50}


def test_added_partition_starts_at_its_earliest() -> None:
    plan = resolve_start("t", (0, 1), {0: 42}, B, auto_offset_reset="latest",
                         on_data_loss="fail")
    assert plan.positions == {0: 42, 1: 0}
    assert plan.reasons[1] == "new partition: earliest"


def test_below_log_start_fails_by_default_naming_everything() -> None:
    with pytest.raises(DataLossError) as err:
        start({0: 3, 1: 0})
    msg = str(err.value)
    for part in ("t partition 0", "stored offset 3", "earliest available offset 10"):
        assert part in msg


def test_below_log_start_skip_records_the_gap() -> None:
    plan = resolve_start("t", (0, 1), {0: 3, 1: 0}, B, auto_offset_reset="earliest",
                         on_data_loss="skip")
    assert plan.positions == {0: 10, 1: 0}
    assert plan.gaps == (Gap(0, 3, 10),)


def test_above_log_end_refuses() -> None:
    with pytest.raises(OffsetError, match="beyond the log end 50"):
        start({0: 42, 1: 51})


def test_position_at_log_end_is_fine() -> None:
    assert check_position("t", 1, 50, B[1], "fail") == (50, None)


def test_budget() -> None:
    assert per_partition_budget(2.0, 0) is None
    assert per_partition_budget(2.0, 100) == 200
    assert per_partition_budget(0.5, 1) == 1  # never zero: a partition always moves
    # backpressure estimate: floored by min rate, capped by max rate
    assert per_partition_budget(1.0, 1000, 50, estimated_rate=10) == 50
    assert per_partition_budget(1.0, 1000, 50, estimated_rate=5000) == 1000
    assert per_partition_budget(1.0, 0, 50, estimated_rate=70.9) == 70


def test_plan_ranges_caps_each_partition() -> None:
    ranges = plan_ranges("t", {0: 10, 1: 45}, {0: 100, 1: 50}, budget=20)
    assert ranges == [OffsetRange("t", 0, 10, 30), OffsetRange("t", 1, 45, 50)]
    assert plan_ranges("t", {0: 10}, {0: 100}, budget=None) == [OffsetRange("t", 0, 10, 100)]
    assert plan_ranges("t", {0: 100}, {0: 100}, budget=5) == [OffsetRange("t", 0, 100, 100)]
