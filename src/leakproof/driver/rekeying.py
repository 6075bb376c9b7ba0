"""The re-keying stage in each batch (``input.rekey``): before the batch's session ranges are
planned, every source partition is re-keyed onto the internal topic by one Spark task
(``kafka.rekey.rekey_partition``), so the ranges planned next over the internal topic already
hold what the stage copied.

In the run, not a command of its own: one process to deploy, stop and watch, the stage's pace
held to the job's (the same rate cap per partition and batch), and a stopped job stops both
halves. Each half is exact alone (the stage by its transactions, the job by its fences), so
the stage running ahead of the job's commits, or a batch failing after the stage committed,
loses and doubles nothing: what the stage committed is on the internal topic for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from leakproof.core.config import Config
from leakproof.core.errors import BatchFailed, ConfigError, KafkaReadError, LeakproofError
from leakproof.core.offsets import per_partition_budget
from leakproof.core.rekey import RekeyReport, rekey_group, stage_work, totals
from leakproof.driver.control import RunControl, describe
from leakproof.kafka.admin import KafkaMetadata

log = logging.getLogger(__name__)


class RekeyStage:
    """The driver's half of the stage: which source partitions, how far, one task each."""

    def __init__(self, cfg: Config, meta: KafkaMetadata) -> None:
        """``cfg``: the job's config as written (``kafka.topic`` the source); ``meta``: a
        client only the planning thread uses."""
        assert cfg.input.rekey is not None
        self.cfg, self._meta = cfg, meta
        self.source = cfg.kafka.topic
        self.internal = cfg.input.rekey.internal_topic(self.source)
        # source partition -> when this driver's stage last committed its offset (monotonic)
        self._committed: dict[int, float] = {}

    def before_batch(self, sc: Any, batch_ms: int, control: RunControl) -> bool:
        """The stage's tasks for the batch ``batch_ms``, run before its ranges are planned;
        False: it failed, and ``control`` says so (the job stops). Kafka's metadata away:
        nothing re-keyed this batch, the job goes on."""
        try:
            with control.in_flight():
                if self.run(sc, batch_ms):
                    control.not_idle()
        except KafkaReadError as exc:
            log.warning("batch %d: Kafka metadata of %s unavailable (%s); re-keying "
                        "nothing this batch", batch_ms, self.source, exc)
        except Exception as exc:  # noqa: BLE001 - a failed stage stops the job, named
            control.fail(exc if isinstance(exc, LeakproofError) else BatchFailed(
                f"batch {batch_ms}: re-keying {self.source} failed: {describe(exc)}"))
            return False
        return True

    def prepare(self) -> None:
        """Create the internal topic when it is missing (``kafka.rekey``)."""
        from leakproof.kafka.rekey import ensure_internal_topic

        parts = self._meta.partitions(self.source)
        if not parts:
            raise KafkaReadError(f"the topic {self.source} (kafka.topic, re-keyed by "
                                 f"input.rekey) does not exist")
        self._alone()
        if ensure_internal_topic(self.cfg, len(parts), self._meta.topic_config(self.source)):
            log.info("created the re-keying topic %s", self.internal)

    def _alone(self) -> None:
        """Refuse to share the default internal topic with another group's stage: two
        groups re-keying one source into one topic would copy each record twice, and each
        job would count it twice. Another group's stage is a group ``<other>.rekey`` with
        offsets of the source; its own topic may be named otherwise, so the refusal names
        the way out (a topic of our own), never the other job's fault."""
        assert self.cfg.input.rekey is not None
        if self.cfg.input.rekey.topic is not None:
            return
        ours = rekey_group(self.cfg.kafka.group_id)
        for group in self._meta.group_ids():
            if group != ours and group.endswith(".rekey") and \
                    self._meta.group_offsets(group, self.source):
                raise ConfigError(
                    f"the group {group} also re-keys {self.source}, maybe into the default "
                    f"topic {self.internal} this job would write too: each record would be "
                    f"copied there twice and counted twice; give 'input.rekey.topic' a name "
                    f"of this job's own (e.g. {self.source}.{self.cfg.kafka.group_id}"
                    f".leakproof-rekey)")

    def run(self, sc: Any, batch_ms: int) -> int:
        """Re-key every source partition up to its readable end now (at most the rate cap's
        offsets), one Spark task each; how many source offsets the stage moved on.

        A partition whose offset the stage committed is at its readable end already gets no
        task: committed offsets, read without waiting for transactions (the Kafka admin
        client), are never ahead of the stage's own, so a partition found caught up is."""
        parts = list(self.cfg.kafka.partitions or self._meta.partitions(self.source))
        ends = {p: b.readable_end for p, b in self._meta.log_bounds(self.source, parts).items()}
        done = {p: o for p, (o, _note) in self._meta.group_offsets(
            rekey_group(self.cfg.kafka.group_id), self.source).items()}
        # ... and those caught up whose offset wants committing again (rekey.REFRESH_S)
        work = stage_work(parts, ends, done, self._committed, time.monotonic())
        if not work:
            return 0
        partitions = len(self._meta.partitions(self.internal))
        k = self.cfg.kafka
        budget = per_partition_budget(self.cfg.job.batch_interval_s, k.max_rate_per_partition)
        cfg = self.cfg

        def task(items: Iterator[tuple[int, int, bool]]) -> Iterator[RekeyReport]:
            from leakproof.kafka.rekey import rekey_riding_outages

            for partition, end, refresh in items:
                yield rekey_riding_outages(cfg, partition, end, partitions, budget, refresh)

        started = time.monotonic()
        try:
            sc.setJobDescription(f"leakproof batch {batch_ms}: re-keying {self.source} onto "
                                 f"{self.internal}")
        except Exception:
            log.debug("could not set the job description", exc_info=True)
        reports: list[RekeyReport] = sc.parallelize(work, len(work)).mapPartitions(
            task).collect()
        now = time.monotonic()
        self._committed.update((r.partition, now) for r in reports if r.committed)
        counted = totals(reports)
        if counted["offsets"]:
            log.info("batch %d: re-keyed %d records of %s onto %s (%d not events, forwarded "
                     "as they were) in %.2fs", batch_ms, counted["records"], self.source,
                     self.internal, counted["forwarded"], time.monotonic() - started)
        return counted["offsets"]
