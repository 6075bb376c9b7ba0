"""A batch's tasks sent to Spark: each Spark partition a run of ranges, run in order on an
executor (``task.worker.run_ranges``); ranges that held back keys written under another
partition run again, alone, once the others are written (``moved_keys``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from leakproof.core.config import Config
from leakproof.core.offsets import OffsetRange
from leakproof.core.reports import TaskReport
from leakproof.driver.batch import BatchPlan

log = logging.getLogger(__name__)


def run_tasks(cfg: Config, plan: BatchPlan, rdd: Any, epoch: int, incarnation: str,
              keys_moved: Callable[[int], None]) -> list[TaskReport]:
    """Every range's report; ``keys_moved`` hears when ranges were held back (the planning
    thread then runs later batches as one task: ``key_guard``)."""
    if not plan.work:
        return []
    batch_ms, owners_in, idle = plan.batch_ms, plan.owners_in, dict(plan.idle)

    def tasks(check: int | None, cell_ts: dict[int, int]
              ) -> Callable[[Iterator[tuple[OffsetRange, ...]]], Iterator[TaskReport]]:
        def task(runs: Iterator[tuple[OffsetRange, ...]]) -> Iterator[TaskReport]:
            from leakproof.task.worker import run_ranges

            for ranges in runs:  # in partition order, each its own fence and report
                yield from run_ranges(cfg, batch_ms, ranges, epoch, check, cell_ts=cell_ts,
                                      incarnation=incarnation, owners_in=owners_in,
                                      idle=idle)
        return task

    try:  # the Spark UI's job list then says which ranges each batch read
        rdd.context.setJobDescription(f"leakproof batch {batch_ms}: {plan.describe()}")
    except Exception:
        log.debug("could not set the job description", exc_info=True)
    reports: list[TaskReport] = rdd.mapPartitions(
        tasks(plan.check_keys_in, plan.stamps())).collect()
    held = [r for r in reports if r.moved_keys]
    if not held:
        return reports
    # Ranges holding keys written under another partition count wrote nothing; now that the
    # others are written they run alone, and later batches run as one task.
    keys_moved(int(time.time() * 1000))
    log.warning("batch %d: %d keys sit in partitions Kafka's default partitioner does not "
                "give them (partitions added under the backlog, or another partitioner): "
                "partitions %s run again in one task, and batches run as one task for a while",
                batch_ms, sum(r.moved_keys for r in held),
                ",".join(str(r.partition) for r in held))
    again = {r.partition for r in held}
    rerun = tuple(r for r in plan.work if r.partition in again)
    # above every timestamp of the first pass: a late write of it cannot hide these
    redone: list[TaskReport] = rdd.context.parallelize([rerun], 1).mapPartitions(
        tasks(None, plan.stamps(again=True))).collect()
    return [r for r in reports if not r.moved_keys] + redone
