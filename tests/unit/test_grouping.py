"""How a batch's ranges are grouped into Spark tasks: order, placement, empty ranges."""

from __future__ import annotations

from leakproof.core.offsets import OffsetRange
from leakproof.driver.grouping import group, split, task_count


def r(partition: int, count: int) -> OffsetRange:
    return OffsetRange("t", partition, 100, 100 + count)


def test_tasks_follow_records_and_cores_not_partitions() -> None:
    assert task_count(0, 0, 2) == 0
    assert task_count(240, 45_000, 2) == 2  # one per core
    assert task_count(240, 45_000, 8) == 8
    assert task_count(240, 9_000, 8) == 3  # one per 4 000 records
    assert task_count(240, 10, 2) == 1  # a trickle: one task
    assert task_count(3, 1_000_000, 8) == 3  # never more than the ranges
    assert task_count(4, 1_000_000, 2) == 2


def test_runs_keep_partition_order_and_even_out_the_records() -> None:
    ranges = [r(3, 10), r(0, 10), r(1, 10), r(2, 10), r(5, 40), r(4, 0)]
    assert [[x.partition for x in run] for run in split(ranges, 2)] == [[0, 1, 2, 3], [4, 5]]
    # an empty range given is an idle partition's tick (BatchPlan.work): it runs too
    assert [[x.partition for x in run] for run in split(ranges, 5)] == [
        [0, 1], [2], [3], [4], [5]]
    assert [[x.partition for x in run] for run in split([r(0, 0), r(1, 0)], 3)] == [[0], [1]]
    assert split([], 3) == []


def test_every_later_run_gets_a_range() -> None:
    ranges = [r(0, 1000), r(1, 1), r(2, 1), r(3, 1)]
    assert [[x.partition for x in run] for run in split(ranges, 3)] == [[0], [1], [2, 3]]


def test_on_a_cluster_each_executors_partitions_are_grouped_apart() -> None:
    ranges = [r(p, 5_000) for p in range(6)]
    placement = {0: "executor_h_1", 1: "executor_h_2", 2: "executor_h_1", 3: "executor_h_2",
                 4: "executor_h_1", 5: "executor_h_2"}
    tasks = group(ranges, 4, placement)
    assert [([x.partition for x in rs], where) for rs, where in tasks] == [
        ([0, 2], "executor_h_1"), ([4], "executor_h_1"),
        ([1, 3], "executor_h_2"), ([5], "executor_h_2")]
    two_cores = group(ranges, 2, placement)
    assert [([x.partition for x in rs], where) for rs, where in two_cores] == [
        ([0, 2, 4], "executor_h_1"), ([1, 3, 5], "executor_h_2")]
    assert group(ranges, 4) == [(tuple(ranges[:2]), None), (tuple(ranges[2:3]), None),
                                (tuple(ranges[3:5]), None), (tuple(ranges[5:]), None)]


def test_on_a_cluster_a_batch_of_idle_ticks_alone_runs_on_its_executors() -> None:
    """No records at all (quiet partitions closing sessions by the wall clock): each
    executor's empty ranges still run there (this once divided by zero and failed the job
    under spark-submit)."""
    placement = {0: "executor_h_1", 1: "executor_h_2", 2: "executor_h_1"}
    tasks = group([r(0, 0), r(1, 0), r(2, 0)], 2, placement)
    assert sorted(p.partition for rs, _ in tasks for p in rs) == [0, 1, 2]
    assert {where for rs, where in tasks for p in rs if p.partition in (0, 2)} == {
        "executor_h_1"}
    assert [where for rs, where in tasks if rs[0].partition == 1] == ["executor_h_2"]


def test_a_task_reads_its_ranges_in_waves_of_bounded_records_in_order() -> None:
    from leakproof.task.worker import waves

    rs = [OffsetRange("t", p, 0, n) for p, n in enumerate([30, 30, 50, 200, 10, 0])]
    assert [[r.partition for r in w] for w in waves(rs, most=100)] == [
        [0, 1], [2], [3], [4, 5]]
    assert waves([], most=100) == []
