"""The driver's optional Prometheus endpoint (``job.metrics_port``), fed once per batch.

prometheus_client does the exposition format and the HTTP server; the registry is the job's
own (not the process-global one), so two jobs in one process never collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

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
        self._driver_stalls = stalls()
        self._labels = labels
        self.server, _ = start_http_server(port, addr=host, registry=r)

    def batch(self, progress: Mapping[str, Any], lag: Mapping[int, int]) -> None:
        self._batches.inc()
        for outcome in ("applied", "replayed", "late", "duplicates"):
            self._records.labels(**self._labels, outcome=outcome).inc(progress[outcome])
        for kind, n in progress["dead_letter_kinds"].items():
            self._dead.labels(**self._labels, kind=kind).inc(n)
        held = {h["partition"]: h for h in progress.get("held", ())}
        for p, behind in lag.items():
            self._lag.labels(**self._labels, partition=str(p)).set(behind)
            hold = held.get(p)
            self._held.labels(**self._labels, partition=str(p)).set(1 if hold else 0)
            self._held_age.labels(**self._labels, partition=str(p)).set(
                (hold["age_s"] or 0) if hold else 0)
        self._duration.observe(progress["total_s"])
        self._rate.set(progress["events_per_s"])
        self._limit.set(progress.get("rate_limit") or 0)
        self._committed.set(progress["batch_ms"] / 1000)
        now = stalls()
        self._stalls.inc(progress.get("client_stalls", 0) + now - self._driver_stalls)
        self._driver_stalls = now

    def close(self) -> None:
        self.server.shutdown()
