"""Which ranges of a batch run together in one Spark task (pure).

Every task pays a fixed price before it reads a record (the Python worker's round trip, the
task's closure, its HBase connection and lease read); with one task per partition a wide
topic paid it hundreds of times a batch for a handful of records each. So a batch gets as
many tasks as its records and cores need, no more:

- at most one per core: a second task per core (queued, for a core that finishes early)
  measured worse on two cores in every shape -- each task's ranges share one HBase call per
  step, so fewer, larger tasks cost HBase and the workers less (latency p99 at 32 073 ev/s
  3.31-3.39 s against 3.46-3.76; a 900-partition drain 2.25-2.62 s against 3.28; a 4-partition
  drain the same);
- at most one per ``MIN_TASK_RECORDS`` records (a small batch is one task);
- never more than its ranges (those with records, and an idle partition's empty one).

A task's ranges are a run of partitions in partition order, cut where the records even out,
so a partition stays with its neighbours from batch to batch as long as the rates do. On a
cluster each executor's partitions (``place``) are grouped apart and each group prefers its
executor, so its Python workers keep finding their consumers and state cached. Within a task
the ranges run one after another in partition order, each its own fence, state and report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from leakproof.core.offsets import OffsetRange

MIN_TASK_RECORDS = 4_000
TASKS_PER_CORE = 1

Task = tuple[tuple[OffsetRange, ...], str | None]  # its ranges, the executor it prefers


def task_count(ranges: int, records: int, cores: int) -> int:
    """How many tasks a batch of ``ranges`` non-empty ranges and ``records`` records needs."""
    if ranges == 0:
        return 0
    return max(1, min(ranges, TASKS_PER_CORE * max(1, cores),
                      math.ceil(records / MIN_TASK_RECORDS)))


def split(ranges: Sequence[OffsetRange], parts: int) -> list[tuple[OffsetRange, ...]]:
    """``ranges`` (in partition order) cut into at most ``parts`` runs of about equal
    records; no run is empty."""
    ordered = sorted(ranges, key=lambda r: r.partition)
    parts = min(parts, len(ordered))
    if parts <= 1:
        return [tuple(ordered)] if ordered else []
    total = sum(r.count for r in ordered)
    runs: list[tuple[OffsetRange, ...]] = []
    current: list[OffsetRange] = []
    done = 0
    for i, r in enumerate(ordered):
        current.append(r)
        done += r.count
        left_ranges, left_runs = len(ordered) - i - 1, parts - len(runs) - 1
        # close the run once it reaches its share, or when each later run needs a range
        if left_runs and (done >= total * (len(runs) + 1) / parts or left_ranges == left_runs):
            runs.append(tuple(current))
            current = []
    if current:
        runs.append(tuple(current))
    return runs


def group(ranges: Sequence[OffsetRange], cores: int,
          placement: Mapping[int, str] | None = None) -> list[Task]:
    """The batch's tasks: its ranges (``BatchPlan.work``: those with records, and the idle
    partitions' empty ones) grouped as the module docstring says."""
    work = list(ranges)
    records = sum(r.count for r in work)
    tasks = task_count(len(work), records, cores)
    if not placement:
        return [(run, None) for run in split(work, tasks)]
    by_executor: dict[str, list[OffsetRange]] = {}
    for r in work:
        by_executor.setdefault(placement[r.partition], []).append(r)
    out: list[Task] = []
    for executor in sorted(by_executor):
        mine = by_executor[executor]
        # its share of the tasks by records; a batch of idle ticks alone (no records) by
        # ranges, or it would divide by zero
        weight = (sum(r.count for r in mine) / records if records
                  else len(mine) / len(work))
        out += [(run, executor) for run in split(mine, max(1, round(tasks * weight)))]
    return out
