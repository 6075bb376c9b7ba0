"""Committing: a batch's offsets become durable only after every one of its tasks succeeded.

Owned by the thread that runs batch outputs. It keeps the commit chain (the until offsets
of the last commit) and this driver's lease; nothing else writes them. The steps are
numbered in ``Committer.commit``; any failure raises, and the caller stops the job before a
later batch can commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from leakproof.core.errors import BatchFailed, CommitRefused, CoordinatorNotReady, GroupHasMembers
from leakproof.core.lease import Lease
from leakproof.core.offsets import CommittedBatch, Gap, StartPlan
from leakproof.core.reports import BatchTotals, TaskReport
from leakproof.driver.batch import BatchPlan, Committed, audit_cells
from leakproof.ports.driver import CommitStore, GroupMirror, LeaseStore
from leakproof.testing.crashpoints import crash_point

log = logging.getLogger(__name__)


class Committer:
    """The commit chain and the lease of one driver, for one topic and group."""

    def __init__(self, topic: str, group: str, store: CommitStore, leases: LeaseStore,
                 mirror: GroupMirror | None = None) -> None:
        self.topic, self.group = topic, group
        self._store = store
        self._leases = leases
        self._mirror_to = mirror  # None: no copy to the Kafka group
        self._lease: Lease | None = None
        self._chain: dict[int, int] = {}  # until offsets of the last commit, per partition
        self._topic_id: str | None = None
        self._unmirrored: tuple[int, dict[int, int]] | None = None  # a group copy still owed
        self.mirror_failures = 0  # copies to the group failed in a row (0: the last landed)
        self.last_batch_ms: int | None = None  # the newest batch this driver committed
        # the newest row key of the chain: every commit's key is above it (commit_key)
        self._head_ms: int | None = None
        self._behind_told = False

    @property
    def lease(self) -> Lease:
        if self._lease is None:
            raise RuntimeError("Committer.begin was not called")
        return self._lease

    @property
    def committed(self) -> dict[int, int]:
        """The until offsets of the last commit (where a restart would resume)."""
        return dict(self._chain)

    def begin(self, lease: Lease, latest: CommittedBatch | None, start: StartPlan,
              topic_id: str | None) -> None:
        """Start the chain at the stored row, moved to where this run really starts.

        Partitions no longer assigned keep their stored offsets; new partitions and
        skipped gaps move theirs, and each gap is recorded before anything is read.
        """
        for gap in start.gaps:
            self._record_gap(gap)
        self._lease = lease
        self._chain = {**(latest.offsets if latest else {}), **start.positions}
        self._topic_id = topic_id
        self._head_ms = latest.batch_ms if latest else None

    def commit_key(self, batch_ms: int) -> int:
        """The row key (and lease tag) batch ``batch_ms`` commits under: its batch time, or
        one ms past the chain's newest row when that is not below it.

        A restart, ``offsets show`` and the shell's ``REVERSED => true, LIMIT => 1`` all take
        the newest row by its key, so the key must follow the chain, not a clock: a driver on
        a host whose clock is behind the one that committed before (or behind a rewind made
        on a host ahead) would otherwise write rows below the newest, and the next start
        would resume from the older head and read every range since again.
        """
        head = self._head_ms
        if head is None or batch_ms > head:
            return batch_ms
        if not self._behind_told:
            self._behind_told = True
            log.warning(
                "batch %d is not after the newest commit of %s:%s (%d, %.1f s ahead of this "
                "batch's clock): this driver's rows are keyed one ms past the previous one "
                "until its clock passes that commit, so the newest row stays the chain's "
                "head. Check this host's clock (NTP) and the one that wrote row %d.",
                batch_ms, self.topic, self.group, head, (head - batch_ms) / 1000, head)
        return head + 1

    def commit(self, plan: BatchPlan, reports: Sequence[TaskReport]) -> Committed:
        """Commit one batch whose tasks returned ``reports``:

        1. every range with records has its task's report (a lost task fails the batch);
        2. the chain: each range starts where the last commit ended (no batch skipped);
        3. nothing moved: no row -- but the lease is checked, so an idle driver notices
           that another one took over, and a group copy still owed is retried;
        4. the data-loss gaps (planning's and the tasks') are recorded, before the row
           that passes them;
        5. the lease: compare-and-set from ours to ours-after-this-batch. A retried call
           that finds its own earlier write had its reply lost: not a rival;
        6. the offsets row (or the group / ZooKeeper commit: ``offsets.store``), keyed
           above the chain's newest row (``commit_key``);
        7. the chain and the lease move on; the commit is copied to the Kafka group.
        """
        t0 = time.monotonic()
        lease = self.lease
        # 1. every task reported
        expected = {r.partition for r in plan.work}
        got = {r.partition for r in reports}
        if got != expected:
            raise BatchFailed(f"batch {plan.batch_ms}: reports for partitions {sorted(got)}, "
                              f"expected {sorted(expected)}")
        totals = BatchTotals.of(reports)
        # 2. the chain (also checked before the tasks ran: see check_chain)
        chain = self.check_chain(plan)
        new_offsets = {**chain, **{r.partition: r.until_offset for r in plan.ranges}}
        gaps = plan.gaps + totals.gaps
        self._chain = chain
        # 3. nothing moved
        if new_offsets == chain:
            self._check_lease(lease)
            mirrored = self._unmirrored is None or self._mirror(*self._unmirrored)
            return Committed(totals, gaps, new_offsets, moved=False, mirror_failed=not mirrored)
        # 4. gaps
        for gap in gaps:
            self._record_gap(gap)
        # 5. the lease
        key = self.commit_key(plan.batch_ms)
        new_lease = lease.after(key)
        crash_point("driver_before_commit")
        if not self._leases.compare_and_set(lease, new_lease):
            holder = self._leases.holder()
            if holder != new_lease:
                raise CommitRefused(
                    f"batch {plan.batch_ms}: the lease of {self.topic}:{self.group} moved on "
                    f"(now {holder}); another driver runs this topic and group. This driver "
                    f"stops without committing.")
        crash_point("driver_during_commit")
        # 6. the offsets row
        audit = audit_cells(plan, totals, gaps, lease, self._topic_id)
        if key != plan.batch_ms:  # keyed past the head: the batch's own time kept beside
            audit["batch_time"] = str(plan.batch_ms)
        self._store.put(key, new_offsets, audit)
        crash_point("driver_after_commit")
        # 7. move on
        self._lease, self._chain = new_lease, new_offsets
        self.last_batch_ms = self._head_ms = key
        mirrored = self._mirror(key, new_offsets)
        return Committed(totals, gaps, new_offsets, moved=True, commit_s=time.monotonic() - t0,
                         mirror_failed=not mirrored)

    def check_chain(self, plan: BatchPlan) -> dict[int, int]:
        """Each range starts where the last commit ended; returns the chain with the
        partitions that appeared with this plan (they join where they start).

        Called before a batch's tasks run, too: a task that wrote past a batch that will
        never commit would advance session fences and the watermark over records not yet
        applied, and the replay would then skip them.
        """
        chain = {**plan.appeared, **self._chain}
        skipped = {g.partition for g in plan.gaps}  # moved on past deleted data, recorded
        for r in plan.ranges:
            if r.partition not in skipped and chain.get(r.partition) != r.from_offset:
                raise CommitRefused(
                    f"batch {plan.batch_ms}: partition {r.partition} starts at {r.from_offset} "
                    f"but the last commit ended at {chain.get(r.partition)}; "
                    f"a batch was skipped")
        return chain

    def _check_lease(self, lease: Lease) -> None:
        holder = self._leases.holder()
        if holder is None or holder.epoch != lease.epoch:
            raise CommitRefused(
                f"the lease of {self.topic}:{self.group} is at epoch "
                f"{holder.epoch if holder else None}, this driver's is {lease.epoch}: another "
                f"driver took over. This driver stops.")

    def _record_gap(self, gap: Gap) -> None:
        log.warning("data loss on %s partition %d: offsets [%d, %d) were deleted before being "
                    "read; skipping them (kafka.on_data_loss=skip), gap recorded",
                    self.topic, gap.partition, gap.stored, gap.resumed_at)
        self._leases.record_gap(gap)

    def _mirror(self, batch_ms: int, offsets: Mapping[int, int]) -> bool:
        """Best effort: a Kafka hiccup here must not fail a batch the store already holds.
        Returns False when a copy was attempted and failed (counted by the metrics).

        A copy that failed (on a new broker the group coordinator appears only after the
        first request; a group someone joined refuses it) stays owed and is retried at every
        later batch until it lands. A run of failures is logged once, and its end once.
        """
        if self._mirror_to is None:
            return True
        self._unmirrored = (batch_ms, dict(offsets))
        try:
            self._mirror_to.commit_group_offsets(self.group, self.topic, offsets,
                                                 f"leakproof batch {batch_ms}")
        except CoordinatorNotReady as exc:  # a new broker: normal, not a fault
            log.info("%s; the copy of batch %d to Kafka's consumer group follows at a later "
                     "batch (the commit itself is done)", exc, batch_ms)
            return False
        except Exception as exc:  # noqa: BLE001 - logged; the commit store holds the truth
            self.mirror_failures += 1
            if self.mirror_failures == 1:
                joined = isinstance(exc, GroupHasMembers)
                log.warning(
                    "could not copy batch %d's offsets to Kafka group %s (%s). The commit "
                    "itself is done: %s holds it and the job goes on; Kafka's lag tools see "
                    "the group's older offsets until a copy lands (retried every batch, "
                    "counted in leakproof_group_mirror_failures_total, shown by leakproof "
                    "offsets lag; logged again only when it works).%s", batch_ms, self.group,
                    exc, self._store.name,
                    " Nothing may join that group: stop the consumer that did (or set "
                    "kafka.mirror_group_offsets: false)." if joined else "")
            log.debug("group mirror failure %d: %s", self.mirror_failures, exc)
            return False
        if self.mirror_failures:
            log.info("offsets of batch %d copied to Kafka group %s again, after %d failed "
                     "copies", batch_ms, self.group, self.mirror_failures)
        self.mirror_failures = 0
        self._unmirrored = None
        return True
