"""The driver's optional Prometheus endpoint (``job.metrics_port``), fed once per batch.

prometheus_client does the exposition format and the HTTP server; the registry is the job's
own (not the process-global one), so two jobs in one process never collide.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from leakproof.driver.batch import BatchOutcome
from leakproof.kafka import stalls


class JobMetrics:
    def __init__(self, topic: str, group: str, host: str, port: int) -> None:
        self.registry = CollectorRegistry()
        labels = {"topic": topic, "group": group}
        r = self.registry
        self._batches = Counter("leakproof_batches", "Batches committed (with records)",
                                list(labels), registry=r).labels(**labels)
        self._records = Counter("leakproof_records", "Records read, by outcome",
                                [*labels, "outcome"], registry=r)
        self._dead = Counter("leakproof_dead_letters", "Records dead-lettered, by kind",
                             [*labels, "kind"], registry=r)
        self._lag = Gauge("leakproof_lag_records", "Records behind the log end after the "
                          "batch, per partition", [*labels, "partition"], registry=r)
        self._lag_s = Gauge("leakproof_lag_seconds", "Age of the partition's oldest unread "
                            "record after the batch (0: nothing unread)",
                            [*labels, "partition"], registry=r)
        self._duration = Histogram(
            "leakproof_batch_duration_seconds", "Batch output time: tasks and commit",
            list(labels), buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64), registry=r,
        ).labels(**labels)
        self._rate = Gauge("leakproof_events_per_second", "Records per second of the last batch",
                           list(labels), registry=r).labels(**labels)
        self._limit = Gauge("leakproof_rate_limit_events_per_second", "Backpressure's rate "
                            "estimate (0: none)", list(labels), registry=r).labels(**labels)
        self._held = Gauge("leakproof_held_by_open_transaction", "1 while an open transaction "
                           "holds the partition's readable end (its last stable offset) below "
                           "the log end", [*labels, "partition"], registry=r)
        self._held_age = Gauge("leakproof_open_transaction_age_seconds", "How long the "
                               "transaction holding the partition has been open (0: none)",
                               [*labels, "partition"], registry=r)
        self._committed = Gauge("leakproof_last_commit_batch_time_seconds", "Batch time of the "
                                "newest commit", list(labels), registry=r).labels(**labels)
        self._stalls = Counter("leakproof_client_stalls", "Kafka client calls that held "
                               "the client's IO loop past its warning threshold (1 s), in "
                               "the driver and the batches' tasks", list(labels),
                               registry=r).labels(**labels)
        self._rows = Counter("leakproof_session_rows", "Sessions the batches touched, by "
                             "where their rows came from: read (asked of HBase, new ones "
                             "too) or kept from the partition's last batch",
                             [*labels, "source"], registry=r)
        self._driver_stalls = stalls()
        self._labels = labels
        self.server, _ = start_http_server(port, addr=host, registry=r)

    def batch(self, outcome: BatchOutcome, now_ms: int | None = None) -> None:
        """Feed one committed batch (the typed outcome the progress line is made from)."""
        plan, t = outcome.plan, outcome.committed.totals
        self._batches.inc()
        for name, n in (("applied", t.applied), ("replayed", t.replayed), ("late", t.late),
                        ("duplicates", t.duplicates)):
            self._records.labels(**self._labels, outcome=name).inc(n)
        for kind, n in t.dead_letter_kinds.items():
            self._dead.labels(**self._labels, kind=kind).inc(n)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for p, behind in plan.lag_by_partition().items():
            self._lag.labels(**self._labels, partition=str(p)).set(behind)
            age = plan.lag_s_by_partition(now).get(p)
            if age is not None:
                self._lag_s.labels(**self._labels, partition=str(p)).set(age)
            hold = plan.held.get(p)
            self._held.labels(**self._labels, partition=str(p)).set(1 if hold else 0)
            self._held_age.labels(**self._labels, partition=str(p)).set(
                (hold.age_s(now) or 0) if hold else 0)
        self._rows.labels(**self._labels, source="kept").inc(t.rows_kept)
        self._rows.labels(**self._labels, source="read").inc(max(0, t.sessions - t.rows_kept))
        self._duration.observe(outcome.took_s)
        self._rate.set(t.records / outcome.took_s if outcome.took_s else 0.0)
        self._limit.set(outcome.rate_limit or 0)
        self._committed.set(plan.batch_ms / 1000)
        in_driver = stalls()
        self._stalls.inc(t.client_stalls + in_driver - self._driver_stalls)
        self._driver_stalls = in_driver

    def close(self) -> None:
        self.server.shutdown()
