"""The values that travel with one batch, from planning through commit to progress (pure)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from leakproof.core.cell_clock import room, stamps
from leakproof.core.lease import Lease
from leakproof.core.offsets import Gap, HeldTransaction, LogBounds, OffsetRange
from leakproof.core.reports import BatchTotals


@dataclass(frozen=True)
class BatchPlan:
    """What planning decided for one batch time: a range per assigned partition.

    ``gaps`` are offsets skipped at planning because retention deleted them
    (``kafka.on_data_loss: skip``); ``appeared`` holds the partitions this plan saw for the
    first time, with the offset each starts from, so the commit chain can take them in;
    ``held`` the partitions whose ranges an open transaction stops short of the log end;
    ``one_task`` and ``check_keys_in`` what keys moving between partitions ask of its tasks
    (``moved_keys``: run as one task; check keys against that partition count);
    ``owners_in``: the partition count once partitions were ever added -- a session is then
    closed only by the partition its key belongs to, and index entries are checked against
    their rows (``task.process``);
    ``cell_ts`` the HBase timestamp its writes start at (``cell_clock``; 0 until stamped);
    ``last``: a bounded run's last batch, its ranges reaching every partition's bound
    (``driver/bounds.py``); ``idle``: partitions silent for ``sessions.idle_after_s``, each
    with how long (ms, the driver's own clock), whose empty ranges run as tasks so their
    watermarks move on by that silence;
    ``unread_ts`` the timestamp (epoch ms) of each partition's oldest unread record once the
    batch is read, for lag in seconds (absent: nothing unread; None: it could not be read).
    """

    batch_ms: int
    ranges: tuple[OffsetRange, ...]
    bounds: Mapping[int, LogBounds]
    gaps: tuple[Gap, ...] = ()
    appeared: Mapping[int, int] = field(default_factory=dict)
    held: Mapping[int, HeldTransaction] = field(default_factory=dict)
    one_task: bool = False
    check_keys_in: int | None = None
    owners_in: int | None = None
    cell_ts: int = 0
    last: bool = False
    idle: Mapping[int, int] = field(default_factory=dict)
    unread_ts: Mapping[int, int | None] = field(default_factory=dict)

    @property
    def spread(self) -> bool:
        """Whether two of its ranges may share a session row (keys moving: ``moved_keys``),
        so each range writes at a timestamp of its own."""
        return self.one_task or self.check_keys_in is not None

    @property
    def cell_room(self) -> int:
        """How many cell timestamps this batch takes (``cell_clock.room``)."""
        return room(len(self.work), self.spread)

    def stamps(self, again: bool = False) -> dict[int, int]:
        """Each range's cell timestamp; ``again``: the second pass of the held ranges."""
        return stamps(self.cell_ts, [r.partition for r in self.work], self.spread, again)

    @property
    def work(self) -> list[OffsetRange]:
        """The ranges with records to read, and the idle partitions' empty ones: one Spark
        task each."""
        return [r for r in self.ranges if r.count or r.partition in self.idle]

    @property
    def records(self) -> int:
        return sum(r.count for r in self.ranges)

    def lag_by_partition(self) -> dict[int, int]:
        """Offsets left between each range's end and the log end once the batch is done
        (the high watermark: an open transaction's records count, held or not)."""
        return {r.partition: self.bounds[r.partition].log_end - r.until_offset
                for r in self.ranges}

    @property
    def lag(self) -> int:
        return sum(self.lag_by_partition().values())

    def lag_s_by_partition(self, now_ms: int) -> dict[int, float | None]:
        """Seconds each partition is behind once the batch is done: the age of its oldest
        unread record at ``now_ms`` (0: nothing unread; None: its timestamp unknown)."""
        return {r.partition: lag_seconds(self.unread_ts, r.partition, now_ms)
                for r in self.ranges}

    def lag_s(self, now_ms: int) -> float | None:
        """The job's lag in seconds: the oldest unread record's age over all partitions
        (None: some partition is behind and no age is known)."""
        return max_lag_s(self.lag_s_by_partition(now_ms).values())

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.work)


@dataclass(frozen=True)
class Committed:
    """What the commit of one batch did: its totals, every gap it recorded, how long it took.

    ``moved`` is False when no offset advanced: then no offsets row was written;
    ``mirror_failed`` True when the copy to the Kafka group (``mirror_group_offsets``) was
    tried and failed (the commit stands).
    """

    totals: BatchTotals
    gaps: tuple[Gap, ...]
    offsets: Mapping[int, int]
    moved: bool
    commit_s: float = 0.0
    mirror_failed: bool = False


@dataclass(frozen=True)
class BatchOutcome:
    """One finished batch, as the progress listeners see it."""

    plan: BatchPlan
    committed: Committed
    took_s: float
    rate_limit: float | None = None  # the backpressure estimate in force, events/s
    # how long after its batch time the output began (None: not measured)
    scheduling_delay_s: float | None = None


def audit_cells(plan: BatchPlan, totals: BatchTotals, gaps: tuple[Gap, ...], lease: Lease,
                topic_id: str | None, now_ms: int | None = None) -> dict[str, str]:
    """The offsets row's ``audit`` family: the batch's counts, ranges and gaps, who committed
    it (lease epoch) and which topic the offsets belong to (Kafka's topic id)."""
    audit: dict[str, object] = {
        **totals.counts(), "lag": plan.lag,
        "committed_ms": int(time.time() * 1000) if now_ms is None else now_ms,
        "epoch": lease.epoch,
        **({"topic_id": topic_id} if topic_id else {}),
        "ranges": ",".join(f"{r.partition}:{r.from_offset}-{r.until_offset}"
                           for r in plan.ranges),
    }
    if gaps:
        audit["gaps"] = ",".join(f"{g.partition}:{g.stored}-{g.resumed_at}" for g in gaps)
    if totals.withdrawn:  # a replay decoded records its crashed attempt dead-lettered
        audit["withdrawn"] = totals.withdrawn
    if totals.retired:  # closed sessions past the retention deleted
        audit["retired"] = totals.retired
    return {k: str(v) for k, v in audit.items()}


def lag_seconds(unread_ts: Mapping[int, int | None], partition: int, now_ms: int
                ) -> float | None:
    """A partition's lag in seconds from its oldest unread record's timestamp (absent from
    ``unread_ts``: nothing unread, 0). A record stamped ahead of ``now_ms`` counts 0."""
    if partition not in unread_ts:
        return 0.0
    ts = unread_ts[partition]
    return None if ts is None else max(0.0, (now_ms - ts) / 1000)


def max_lag_s(ages: Iterable[float | None]) -> float | None:
    """The largest known age; None only if none is known and some partition is behind."""
    ages = list(ages)
    known = [a for a in ages if a is not None]
    if known:
        return max(known)
    return None if ages else 0.0


def batch_millis(t: datetime) -> int:
    """PySpark hands batch times as local datetimes built from epoch ms; get the ms back."""
    return round(t.timestamp() * 1000)
