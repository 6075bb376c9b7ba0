"""What a task reports to the driver, and a batch's totals summed once (pure).

A ``TaskReport`` crosses Spark's ``collect`` (pickled): one per offset range. The driver sums
them into ``BatchTotals`` once; the progress line, the JSON line, the offsets row's audit and
the metrics all read that one value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from leakproof.core.offsets import Gap


@dataclass(slots=True)
class TaskReport:
    """One range's counts and timings (seconds), from the task that processed it."""

    partition: int
    from_offset: int
    until_offset: int
    records: int = 0
    applied: int = 0
    replayed: int = 0
    late: int = 0
    duplicates: int = 0
    dead_letter_kinds: dict[str, int] = field(default_factory=dict)
    gaps: tuple[Gap, ...] = ()  # deleted by retention after planning, before being read
    sessions: int = 0
    closed: int = 0
    read_s: float = 0.0
    fold_s: float = 0.0
    write_s: float = 0.0
    publish_s: float = 0.0  # of write_s: the closed-session summaries' transaction
    # whether the worker's Kafka consumer for the partition was still there: it is, batch
    # after batch, only if the partition's ranges keep running in the same Python worker
    consumer_cached: bool = False
    expiring: int = 0  # open-session index entries read: sessions that may expire here
    client_stalls: int = 0  # Kafka client IO-loop stalls in the worker during the range
    rows_kept: int = 0  # touched session rows the worker kept from the partition's last range
    # keys Kafka's default partitioner puts in another partition: the range wrote nothing
    moved_keys: int = 0
    # dead letters an earlier attempt of the range wrote whose records it decoded now
    withdrawn: int = 0
    retired: int = 0  # closed sessions past the retention deleted (``task.sweep``)

    @property
    def dead_letters(self) -> int:
        return sum(self.dead_letter_kinds.values())


# The counts summed over tasks, in the order the progress line and the audit show them.
COUNTS = ("records", "applied", "replayed", "late", "duplicates", "dead_letters", "sessions",
          "closed")


@dataclass(frozen=True, slots=True)
class BatchTotals:
    """A batch's counts summed over its tasks; timings are the slowest task's."""

    records: int = 0
    applied: int = 0
    replayed: int = 0
    late: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    sessions: int = 0
    closed: int = 0
    dead_letter_kinds: Mapping[str, int] = field(default_factory=dict)
    gaps: tuple[Gap, ...] = ()
    read_s: float = 0.0
    fold_s: float = 0.0
    write_s: float = 0.0
    publish_s: float = 0.0
    tasks: int = 0
    consumers_cached: int = 0  # tasks whose worker still had the partition's consumer
    expiring: int = 0
    client_stalls: int = 0
    rows_kept: int = 0  # touched rows not read: the worker kept them (of ``sessions``)
    withdrawn: int = 0  # dead letters of records a replay decoded after all, deleted
    retired: int = 0  # closed sessions past the retention deleted

    @classmethod
    def of(cls, reports: Iterable[TaskReport]) -> BatchTotals:
        reports = list(reports)
        kinds: Counter[str] = Counter()
        for r in reports:
            kinds.update(r.dead_letter_kinds)
        counts = {c: sum(getattr(r, c) for r in reports) for c in COUNTS}
        return cls(**counts, dead_letter_kinds=dict(kinds),
                   gaps=tuple(g for r in reports for g in r.gaps),
                   read_s=max((r.read_s for r in reports), default=0.0),
                   fold_s=max((r.fold_s for r in reports), default=0.0),
                   write_s=max((r.write_s for r in reports), default=0.0),
                   publish_s=max((r.publish_s for r in reports), default=0.0),
                   tasks=len(reports),
                   consumers_cached=sum(r.consumer_cached for r in reports),
                   expiring=sum(r.expiring for r in reports),
                   client_stalls=sum(r.client_stalls for r in reports),
                   rows_kept=sum(r.rows_kept for r in reports),
                   withdrawn=sum(r.withdrawn for r in reports),
                   retired=sum(r.retired for r in reports))

    def counts(self) -> dict[str, int]:
        return {c: getattr(self, c) for c in COUNTS}
