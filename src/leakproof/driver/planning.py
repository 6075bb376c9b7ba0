"""Planning: where the run starts, which partitions it reads, each batch's ranges.

Owned by Spark's batch-generator thread once the run has started: ``plan`` is called when a
batch is *generated*, possibly while earlier batches still run, so planning advances its own
positions at plan time. The commit chain is the committer's; what planning learns that the
chain needs (a partition that appeared, a gap skipped) travels with the plan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from leakproof.core.backpressure import split_budgets
from leakproof.core.config import KafkaConfig
from leakproof.core.errors import KafkaReadError, OffsetError
from leakproof.core.offsets import (
    CommittedBatch,
    HeldTransaction,
    LogBounds,
    OffsetRange,
    StartPlan,
    check_position,
    per_partition_budget,
    plan_ranges,
    resolve_start,
)
from leakproof.driver.batch import BatchPlan
from leakproof.driver.bounds import bound_offsets, clamp, reached
from leakproof.ports.driver import Metadata

log = logging.getLogger(__name__)

# How long a running job waits for a partition's log end to come back up to what it has
# already read before it takes the log for a shorter one: a newly elected leader's high
# watermark can trail the old leader's by a fetch round (ISR changes bound it by
# replica.lag.time.max.ms, 30 s by default). Meanwhile the partition gets empty ranges.
BEHIND_S = 120.0


class Planner:
    """Start positions, then one plan per batch time, for one topic."""

    def __init__(self, kafka: KafkaConfig, interval_s: float, metadata: Metadata,
                 idle_after_s: float | None = None) -> None:
        self._cfg = kafka
        self._idle_after_s = idle_after_s  # sessions.idle_after_s
        self._quiet_since: dict[int, float] = {}  # monotonic: when a partition last had records
        self._ticked: dict[int, float] = {}  # monotonic: its last idle tick
        self._interval_s = interval_s
        self._metadata = metadata
        self.topic = kafka.topic
        self.topic_id: str | None = None  # Kafka's id of the topic this run reads
        self._next: dict[int, int] = {}  # next offset to plan, per partition
        # the open transaction last seen holding each partition: looked up once per hold
        self._held: dict[int, HeldTransaction] = {}
        # a bounded run's first offset not to read, per partition (driver/bounds.py)
        self._until: dict[int, int] | None = None
        self._until_time_ms: int | None = None
        # each partition's oldest unread record last looked up: (offset, timestamp ms)
        self._unread: dict[int, tuple[int, int | None]] = {}
        # monotonic: since when each partition's log end has been below what was planned
        self._behind: dict[int, float] = {}

    def assigned(self) -> list[int]:
        """The partitions to read, read fresh (partitions may be added while running).

        The topic id is learnt on the first call; a different id later means the topic was
        deleted and recreated under the run: its offsets mean nothing in the new topic.
        """
        topic_id, existing = self._metadata.describe(self.topic)
        if self.topic_id is None:
            self.topic_id = topic_id
        elif topic_id and topic_id != self.topic_id:
            raise OffsetError(
                f"{self.topic} was deleted and recreated while this job ran (topic id "
                f"{self.topic_id}, now {topic_id}); stopping without reading the new topic. "
                f"Rewind (leakproof offsets rewind) once you know which data to process.")
        wanted = self._cfg.partitions
        if wanted is None:
            return existing
        missing = sorted(set(wanted) - set(existing))
        if missing:
            raise OffsetError(f"kafka.partitions lists {missing}, but {self.topic} has "
                              f"partitions {existing}")
        return list(wanted)

    def start(self, latest: CommittedBatch | None, recorded_id: str | None = None
              ) -> StartPlan:
        """Where each assigned partition starts (every start case of docs/DESIGN.md).

        ``recorded_id`` is the topic id kept beside the lease: it catches a recreated topic
        even when the commit store lost its offsets with the old topic (a Kafka group).
        """
        partitions = self.assigned()
        self._check_cleanup_policy()
        stored_id = latest.audit.get("topic_id") if latest else None
        known = [(stored_id, f"the offsets row {latest.batch_ms} belongs to topic id "
                             f"{stored_id}" if latest else ""),
                 (recorded_id, f"the last run of this group read topic id {recorded_id}")]
        for known_id, said in known:
            if known_id and self.topic_id and known_id != self.topic_id:
                raise OffsetError(
                    f"{self.topic} was deleted and recreated: {said}, the topic now has id "
                    f"{self.topic_id}. Refusing to start: its stored offsets mean nothing in "
                    f"the new topic. Say where to read it from with leakproof offsets rewind "
                    f"(--to-offsets with the new topic's start, or --to-time); the new "
                    f"topic's session fences are then kept apart from the old one's, so none "
                    f"of its records is taken for a replay.")
        bounds = self._metadata.log_bounds(self.topic, partitions)
        start = resolve_start(self.topic, partitions, latest.offsets if latest else None,
                              bounds, auto_offset_reset=self._cfg.auto_offset_reset,
                              on_data_loss=self._cfg.on_data_loss)
        self._next = dict(start.positions)
        return start

    def _check_cleanup_policy(self) -> None:
        """A compacted source topic is refused unless the config accepts its loss: the
        cleaner deletes records the job has not read yet, and the reader must take the holes
        it leaves for compaction (no gap row, no error), so those events would be lost
        without a word."""
        policy = self._metadata.topic_config(self.topic).get("cleanup.policy", "delete")
        if "compact" in policy.split(",") and self._cfg.on_compacted_topic == "refuse":
            raise OffsetError(
                f"{self.topic} has cleanup.policy={policy}: its cleaner deletes records "
                f"before the job reads them (every older record of a key once a newer one "
                f"is written), and those events would be lost without a word. Read from a "
                f"topic with cleanup.policy=delete, or set kafka.on_compacted_topic: accept "
                f"to accept that loss.")

    def bound(self, until_offsets: Mapping[int, int] | None = None,
              until_time_ms: int | None = None) -> dict[int, int] | None:
        """Bound the run (``--until-offsets`` / ``--until-time``), after ``start``: from now
        on no range passes a partition's bound. Returns the bounds (None: unbounded)."""
        if until_offsets is None and until_time_ms is None:
            return None
        partitions = sorted(self._next)
        bounds = self._metadata.log_bounds(self.topic, partitions)
        by_time = (None if until_time_ms is None else
                   self._metadata.offsets_for_time(self.topic, partitions, until_time_ms))
        self._until = bound_offsets(self.topic, bounds, until_offsets, by_time)
        self._until_time_ms = until_time_ms
        log.info("bounded run of %s: stops once it has read %s", self.topic, ", ".join(
            f"p{p} to {o}" + (" (starts past it: none of it)" if self._next[p] > o else "")
            for p, o in self._until.items()))
        return dict(self._until)

    @property
    def until(self) -> dict[int, int] | None:
        """The bounded run's bound per partition (None: unbounded); read once the stream has
        stopped (the planning thread extends it as partitions appear)."""
        return None if self._until is None else dict(self._until)

    def plan(self, batch_ms: int, rate: float | None = None) -> BatchPlan:
        """This batch's ranges: from the last planned position up to the rate caps.

        ``rate`` is the backpressure estimate (events/s, whole job; None: none yet).
        """
        partitions = self.assigned()
        bounds = self._metadata.log_bounds(self.topic, partitions)
        appeared: dict[int, int] = {}
        gaps = []
        positions = {}
        for p in partitions:
            if p not in self._next:
                # Added while running: read it from its start, like a stored row lacking it.
                log.info("partition %d of %s appeared; reading it from offset %d", p,
                         self.topic, bounds[p].log_start)
                self._next[p] = appeared[p] = bounds[p].log_start
            if self._waits_for_log_end(p, bounds[p]):
                positions[p] = self._next[p]  # an empty range: plan_ranges clamps to it
                continue
            positions[p], gap = check_position(self.topic, p, self._next[p], bounds[p],
                                               self._cfg.on_data_loss)
            if gap is not None:
                gaps.append(gap)
        ends = {p: b.readable_end for p, b in bounds.items()}
        if self._until is not None:
            self._bound_appeared(appeared, bounds)
            ends = clamp(ends, self._until)
        ranges = plan_ranges(self.topic, positions, ends, self._budget(positions, ends, rate))
        for r in ranges:
            self._next[r.partition] = r.until_offset
        held = self._holds(bounds)
        return BatchPlan(batch_ms, tuple(ranges), bounds, tuple(gaps), appeared, held,
                         last=self._until is not None and reached(ranges, self._until),
                         idle=self._idle(ranges, bounds),
                         unread_ts=self._oldest_unread(ranges, bounds, held))

    def _waits_for_log_end(self, p: int, bounds: LogBounds) -> bool:
        """Whether partition ``p``'s log end is below what this run already planned, and
        has been for less than ``BEHIND_S``: a new leader's high watermark catching up (the
        topic id, checked in ``assigned``, is the same). Past that, ``check_position``
        refuses the shorter log as it does at the start."""
        if self._next[p] <= bounds.log_end:
            self._behind.pop(p, None)
            return False
        now = time.monotonic()
        since = self._behind.setdefault(p, now)
        if now - since < BEHIND_S:
            if since == now:
                log.warning("%s partition %d: the log end %d is below offset %d, which this "
                            "run already read (a new leader catching up); waiting for it, "
                            "up to %.0fs", self.topic, p, bounds.log_end, self._next[p],
                            BEHIND_S)
            return True
        return False

    def _idle(self, ranges: Sequence[OffsetRange], bounds: Mapping[int, LogBounds]
              ) -> dict[int, int]:
        """The partitions silent for ``sessions.idle_after_s`` whose watermark is due to
        move on (an empty range each: ``task.index``), each at most once per
        ``idle_after_s`` (and per batch interval), with how long each has been silent (ms).

        Silence is measured on this job's own clock: since it last planned records of the
        partition, or since it started for one it has not read. Never from a record's
        timestamp: a mirrored topic, a Connect source or a backfill stamps records with
        their event times, an hour old or more, and that age is the upstream's lag, not
        silence. A partition with records it does not read yet is not silent: one an open
        transaction holds (its records may commit), or a bounded run's partition at its
        bound. A bounded run (a backfill) never ticks: it reads history, where the clock
        says nothing of event time."""
        if self._idle_after_s is None or self._until is not None:
            return {}
        now = time.monotonic()
        every = max(self._idle_after_s, self._interval_s)
        due = {}
        for r in ranges:
            waiting = r.until_offset < bounds[r.partition].log_end
            if r.count or waiting:
                self._quiet_since[r.partition] = now
                continue
            quiet = self._quiet_since.setdefault(r.partition, now)
            if now - quiet >= self._idle_after_s and \
                    now - self._ticked.get(r.partition, quiet) >= every:
                self._ticked[r.partition] = now
                due[r.partition] = round((now - quiet) * 1000)
        return due

    def _bound_appeared(self, appeared: Mapping[int, int], bounds: Mapping[int, LogBounds]
                        ) -> None:
        """A partition that appeared under a bounded run gets its bound as the others did
        (``--until-offsets`` named none for it: nothing of it is read)."""
        assert self._until is not None
        if not appeared:
            return
        by_time = (self._metadata.offsets_for_time(self.topic, appeared, self._until_time_ms)
                   if self._until_time_ms is not None else {})
        for p, at in appeared.items():
            found = by_time.get(p, at)
            self._until[p] = bounds[p].log_end if found is None else max(at, found)
            log.info("partition %d appeared under a bounded run: read to %d", p,
                     self._until[p])

    def _holds(self, bounds: Mapping[int, LogBounds]) -> dict[int, HeldTransaction]:
        """The partitions an open transaction holds back, each looked up once per hold (a
        hold is its partition and stable end: when it moves, another transaction holds)."""
        held = {p: b.readable_end for p, b in bounds.items() if b.held}
        new = {p: at for p, at in held.items()
               if p not in self._held or self._held[p].offset != at}
        if new:
            try:
                self._held.update(self._metadata.open_transactions(self.topic, new))
            except KafkaReadError as exc:  # the hold is still reported, without its age
                log.debug("open transactions on %s not looked up: %s", self.topic, exc)
                self._held.update({p: HeldTransaction(p, at, None) for p, at in new.items()})
        self._held = {p: h for p, h in self._held.items() if p in held}
        return dict(self._held)

    def _oldest_unread(self, ranges: Sequence[OffsetRange], bounds: Mapping[int, LogBounds],
                       held: Mapping[int, HeldTransaction]) -> dict[int, int | None]:
        """For lag in seconds: the timestamp of each partition's oldest unread record once
        this batch is read -- the record at its range's end -- where one is left. Read once
        per partition and offset (a partition waiting on an open transaction takes the
        transaction's first record, already read); None where it could not be read."""
        wanted = {r.partition: r.until_offset for r in ranges
                  if r.until_offset < bounds[r.partition].log_end}
        found: dict[int, int | None] = {}
        ask: dict[int, int] = {}
        for p, at in wanted.items():
            hold, (known_at, known_ts) = held.get(p), self._unread.get(p, (-1, None))
            if hold is not None and hold.offset == at and hold.since_ms is not None:
                found[p] = hold.since_ms
            elif known_at == at and known_ts is not None:
                found[p] = known_ts
            else:
                ask[p] = at
        if ask:
            try:
                read = self._metadata.record_timestamps(self.topic, ask)
            except KafkaReadError as exc:  # lag in seconds unknown this batch
                log.debug("oldest unread records of %s not read: %s", self.topic, exc)
                read = {}
            found.update({p: read.get(p) for p in ask})
        self._unread = {p: (at, found[p]) for p, at in wanted.items()}
        return found

    def _budget(self, positions: Mapping[int, int], ends: Mapping[int, int],
                rate: float | None) -> int | Mapping[int, int | None] | None:
        """Offsets each partition may advance: the rate caps, or backpressure's share of
        what is left before each one's end (``ends``: readable, and bounded)."""
        k = self._cfg
        if not k.backpressure.enabled:
            return per_partition_budget(self._interval_s, k.max_rate_per_partition,
                                        k.min_rate_per_partition)
        lags = {p: max(0, ends[p] - at) for p, at in positions.items()}
        return split_budgets(rate, lags, self._interval_s, k.max_rate_per_partition,
                             k.min_rate_per_partition, k.backpressure.initial_rate)
