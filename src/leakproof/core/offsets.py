"""Offset ranges, start positions and per-batch range planning (pure: no Kafka, no HBase).

One vocabulary everywhere: an OffsetRange is [from_offset, until_offset) -- from inclusive,
until exclusive -- and a stored offset is the *next* offset to read, i.e. the until_offset of
the last range applied. A partition whose stored offset equals its log end is fully read.

A range may hold fewer records than ``until - from``: transaction markers and the records of
aborted transactions (skipped under ``read_committed``) and compaction leave holes. Nothing
here counts records by subtracting offsets; a range is done when the reader's position
reaches ``until``, whatever lay between.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from leakproof.core.errors import DataLossError, OffsetError


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records [from_offset, until_offset) of one topic partition: one Spark task's work."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        if not 0 <= self.from_offset <= self.until_offset:
            raise ValueError(f"bad range for partition {self.partition}: "
                             f"[{self.from_offset}, {self.until_offset})")

    @property
    def count(self) -> int:
        """How many offsets the range spans: its records, plus any holes (transaction
        markers, aborted or compacted records). Zero means there is nothing to read."""
        return self.until_offset - self.from_offset

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}[{self.from_offset},{self.until_offset})"


def named(ranges: Sequence[OffsetRange]) -> str:
    """A task's ranges in a message: the range, or how many from the first."""
    return str(ranges[0]) if len(ranges) == 1 else f"{len(ranges)} ranges from {ranges[0]}"


@dataclass(frozen=True, slots=True)
class LogBounds:
    """A partition's log as the broker reports it: [log_start, log_end), and how far of it
    may be read.

    ``log_end`` is the high watermark. ``stable_end`` is the last stable offset (LSO) under
    ``read_committed``: the first offset of the oldest transaction still open, or the high
    watermark when none is. Records from it on may yet be aborted, so no range passes it.
    None means no transaction is waited for (``read_uncommitted``).
    """

    log_start: int
    log_end: int
    stable_end: int | None = None

    @property
    def readable_end(self) -> int:
        """Where this batch's ranges end at the latest."""
        return self.log_end if self.stable_end is None else min(self.stable_end, self.log_end)

    @property
    def held(self) -> bool:
        """An open transaction holds the readable end back from the log end."""
        return self.readable_end < self.log_end


@dataclass(frozen=True, slots=True)
class HeldTransaction:
    """A partition whose readable end an open transaction holds back from its log end.

    ``offset`` is the stable end (the open transaction's first record); ``since_ms`` that
    record's timestamp, i.e. about when the transaction began (None: it could not be read).
    Kafka aborts a transaction left open longer than the producer's ``transaction.timeout.ms``
    (60 s unless set, at most the broker's ``transaction.max.timeout.ms``, 15 min by default),
    so a hold that grows past that is a producer the broker cannot reach, not a slow job.
    """

    partition: int
    offset: int
    since_ms: int | None

    def age_s(self, now_ms: int) -> float | None:
        return None if self.since_ms is None else max(0.0, (now_ms - self.since_ms) / 1000)


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets [stored, resumed_at) that retention deleted before they were read."""

    partition: int
    stored: int
    resumed_at: int


@dataclass(frozen=True)
class StartPlan:
    """Where each assigned partition starts, why, and which gaps were skipped to get there."""

    positions: dict[int, int]
    reasons: dict[int, str]
    gaps: tuple[Gap, ...] = ()


def check_position(topic: str, partition: int, position: int, bounds: LogBounds,
                   on_data_loss: str) -> tuple[int, Gap | None]:
    """Validate a position to read from against the log; returns it (moved if allowed).

    Below log start: retention deleted unread records -- fail, or skip ahead and report a Gap.
    Above log end: the log is shorter than what was already read, so the topic was deleted and
    recreated (or truncated); reading on would silently skip or re-read other data.
    """
    if position < bounds.log_start:
        if on_data_loss == "skip":
            return bounds.log_start, Gap(partition, position, bounds.log_start)
        raise DataLossError(
            f"data loss on {topic} partition {partition}: stored offset {position} is below the "
            f"earliest available offset {bounds.log_start} ({bounds.log_start - position} records "
            f"deleted by retention before they were read). Set kafka.on_data_loss: skip to go on "
            f"from {bounds.log_start} (the gap is recorded), or rewind the offsets.")
    if position > bounds.log_end:
        raise OffsetError(
            f"{topic} partition {partition}: stored offset {position} is beyond the log end "
            f"{bounds.log_end}; the topic was probably deleted and recreated. Refusing to start: "
            f"rewind the offsets (leakproof offsets rewind) once you know which data to process.")
    return position, None


def resolve_start(topic: str, assigned: Iterable[int], stored: Mapping[int, int] | None,
                  bounds: Mapping[int, LogBounds], *, auto_offset_reset: str,
                  on_data_loss: str) -> StartPlan:
    """Start positions for the assigned partitions (every case of docs/DESIGN.md's list).

    - no stored row: ``auto_offset_reset`` earliest | latest, or none = refuse;
    - stored offset for a partition: resume there (checked against the log, see check_position);
    - partition missing from the stored row (added since): its earliest offset.
    """
    positions: dict[int, int] = {}
    reasons: dict[int, str] = {}
    gaps: list[Gap] = []
    for p in sorted(assigned):
        b = bounds[p]
        if stored is None:
            if auto_offset_reset == "none":
                raise OffsetError(
                    f"no committed offsets for {topic} and kafka.auto_offset_reset is 'none'; "
                    f"refusing to start. Use earliest or latest, or write an offsets row.")
            # latest is the stable end: records of a transaction still open may yet commit
            positions[p] = b.log_start if auto_offset_reset == "earliest" else b.readable_end
            reasons[p] = f"no stored offsets: {auto_offset_reset}"
        elif p in stored:
            positions[p], gap = check_position(topic, p, stored[p], b, on_data_loss)
            reasons[p] = "stored" if gap is None else "stored, skipped data loss"
            if gap is not None:
                gaps.append(gap)
        else:
            positions[p] = b.log_start
            reasons[p] = "new partition: earliest"
    return StartPlan(positions, reasons, tuple(gaps))


def per_partition_budget(interval_s: float, max_rate: int, min_rate: int = 0,
                         estimated_rate: float | None = None) -> int | None:
    """How many offsets one partition may advance in one batch; None = no cap.

    ``max_rate`` (events/s, 0 = none) caps; an estimated rate (backpressure) is floored by
    ``min_rate`` so a slow estimate never starves a partition, and still capped by max_rate.
    """
    rate: float | None = float(max_rate) if max_rate else None
    if estimated_rate is not None:
        rate = max(float(min_rate), estimated_rate)
        if max_rate:
            rate = min(rate, float(max_rate))
    if rate is None:
        return None
    return max(1, math.floor(rate * interval_s))


def plan_ranges(topic: str, positions: Mapping[int, int], log_ends: Mapping[int, int],
                budget: int | Mapping[int, int | None] | None) -> list[OffsetRange]:
    """This batch's range per partition: [position, min(end, position + budget)).

    ``log_ends`` are the readable ends (``LogBounds.readable_end``): a position past one (a
    run that read uncommitted records before) gives an empty range until the end passes it.
    ``budget`` is one cap for every partition, or a cap per partition (backpressure).
    """
    ranges = []
    for p in sorted(positions):
        start = positions[p]
        cap = budget.get(p) if isinstance(budget, Mapping) else budget
        until = log_ends[p] if cap is None else min(log_ends[p], start + cap)
        ranges.append(OffsetRange(topic, p, start, max(start, until)))
    return ranges


@dataclass(frozen=True)
class CommittedBatch:
    """One committed batch: its batch time, every partition's next offset, its audit."""

    batch_ms: int
    offsets: dict[int, int]
    audit: dict[str, str]
