"""What the job's log says of its batches: the per-batch JSON lines that read records (also
``bench_wide``'s), each batch's slowest task, and how often a task found its Kafka consumer
cached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def cache_hits(log: Path) -> str:
    """The share of tasks after the first batch whose worker still had the partition's
    Kafka consumer (the JSON lines' ``cache``), and the open-session entries read."""
    tasks = consumer = expiring = 0
    for record in batch_records(log)[1:]:
        tasks += record["cache"]["tasks"]
        consumer += record["cache"]["consumer"]
        expiring += record["expiring"]
    if not tasks:
        return "no tasks after the first batch"
    return (f"after the first batch, {consumer}/{tasks} tasks found their consumer cached; "
            f"{expiring} open-session entries read for expiry")


def batch_records(log: Path) -> list[dict[str, Any]]:
    """The job log's per-batch JSON lines that read records (also ``bench_wide``'s)."""
    records = []
    for line in log.read_text(errors="replace").splitlines():
        start = line.find('{"')
        if start >= 0 and '"fold_s"' in line:
            record = json.loads(line[start:])
            if record.get("records"):
                records.append(record)
    return records


def task_times(log: Path) -> list[float]:
    """Per batch with records, its slowest task's read + fold + write (the JSON lines)."""
    times = []
    for record in batch_records(log):
        times.append(record["read_s"] + record["fold_s"] + record["write_s"])
    return times
