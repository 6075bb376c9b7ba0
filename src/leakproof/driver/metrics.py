"""The driver's optional Prometheus endpoint (``job.metrics_port``), fed once per batch, and
the file that tells Prometheus where it is (``job.metrics_sd_file``).

By Prometheus's conventions: counters end in ``_total`` and only count up (rates are left to
PromQL's ``rate()``), units stand in the names (``_seconds``, ``_records``), timestamps are
``_timestamp_seconds``, times are histograms whose buckets follow the batch interval, and
``leakproof_build_info`` carries the versions as labels. Every series has the labels
``topic`` and ``group``. prometheus_client does the exposition format and the HTTP server;
the registry is the job's own (not the process-global one), so two jobs in one process never
collide. ``METRICS`` names every series exported (a unit test holds the Grafana dashboard's
queries to it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from leakproof.driver.batch import BatchOutcome, lag_seconds
from leakproof.driver.progress import Progress
from leakproof.kafka import stalls

log = logging.getLogger(__name__)

# every series the endpoint exports (histograms: the family's name), with its type
METRICS: Mapping[str, str] = {
    "leakproof_build_info": "gauge",
    "leakproof_batch_interval_seconds": "gauge",
    "leakproof_batches_total": "counter",
    "leakproof_commits_total": "counter",
    "leakproof_records_read_total": "counter",
    "leakproof_records_total": "counter",
    "leakproof_dead_letters_total": "counter",
    "leakproof_session_rows_total": "counter",
    "leakproof_client_stalls_total": "counter",
    "leakproof_sessions_retired_total": "counter",
    "leakproof_dead_letters_withdrawn_total": "counter",
    "leakproof_group_mirror_failures_total": "counter",
    "leakproof_batch_processing_seconds": "histogram",
    "leakproof_batch_scheduling_delay_seconds": "histogram",
    "leakproof_lag_records": "gauge",
    "leakproof_lag_seconds": "gauge",
    "leakproof_held_by_open_transaction": "gauge",
    "leakproof_open_transaction_age_seconds": "gauge",
    "leakproof_rate_limit_events_per_second": "gauge",
    "leakproof_last_batch_timestamp_seconds": "gauge",
    "leakproof_last_commit_timestamp_seconds": "gauge",
}

# multiples of the batch interval: a batch's time crosses 1.0 when the job falls behind
INTERVAL_MULTIPLES = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0)


def interval_buckets(interval_s: float) -> tuple[float, ...]:
    """Histogram buckets for batch times: multiples of the batch interval."""
    return tuple(round(interval_s * m, 6) for m in INTERVAL_MULTIPLES)


class _LagSeconds(Collector):
    """``leakproof_lag_seconds``, computed at each scrape from the timestamps of the oldest
    unread records, so it keeps growing while no batch runs (a stuck job shows)."""

    def __init__(self, labels: Mapping[str, str], now_ms: Callable[[], int]) -> None:
        self._labels = dict(labels)
        self._now_ms = now_ms
        self.partitions: list[int] = []
        self.unread_ts: Mapping[int, int | None] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "leakproof_lag_seconds", "Age of the partition's oldest unread record (the one "
            "after the newest batch's range; 0: nothing unread), at scrape time",
            labels=[*self._labels, "partition"])
        now = self._now_ms()
        for p in self.partitions:
            age = lag_seconds(self.unread_ts, p, now)
            if age is not None:
                family.add_metric([*self._labels.values(), str(p)], age)
        yield family


class JobMetrics:
    def __init__(self, topic: str, group: str, host: str, port: int, *,
                 interval_s: float = 1.0, versions: Mapping[str, str] | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        # Longer than a function should be, on purpose: one declaration per series, in the
        # order of DESIGN's table of names, with its help text -- a list, not logic.
        # no <counter>_created gauge beside every counter and histogram: a series per
        # series that only says when the process started (process-wide; the driver's own)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        labels = {"topic": topic, "group": group}
        names = list(labels)
        r = self.registry
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        Gauge("leakproof_build_info", "leakproof's, Spark's and Python's versions (always 1)",
              [*names, "version", "spark", "python"], registry=r).labels(
            **labels, **(versions or build_versions())).set(1)
        Gauge("leakproof_batch_interval_seconds", "The configured batch interval", names,
              registry=r).labels(**labels).set(interval_s)
        self._batches = Counter("leakproof_batches", "Batches that read records and committed",
                                names, registry=r).labels(**labels)
        self._commits = Counter("leakproof_commits", "Offsets commits (batches whose offsets "
                                "moved: records read or a gap skipped)", names,
                                registry=r).labels(**labels)
        self._read = Counter("leakproof_records_read", "Records read from Kafka and "
                             "committed, whatever became of them (offsets: rate() of this "
                             "is the job's throughput)", names, registry=r).labels(**labels)
        self._records = Counter("leakproof_records", "Records read and committed, by "
                                "outcome: applied, replayed (applied before a restart), late "
                                "(session already closed), duplicates, dead_letter",
                                [*names, "outcome"], registry=r)
        self._dead = Counter("leakproof_dead_letters", "Records dead-lettered, by kind",
                             [*names, "kind"], registry=r)
        self._rows = Counter("leakproof_session_rows", "Sessions the batches touched, by "
                             "where their rows came from: read (asked of HBase, new ones "
                             "too) or kept from the partition's last batch",
                             [*names, "source"], registry=r)
        self._retired = Counter("leakproof_sessions_retired", "Closed sessions deleted past "
                                "sessions.retention_days, each with a tombstone", names,
                                registry=r).labels(**labels)
        self._withdrawn = Counter("leakproof_dead_letters_withdrawn", "Dead letters a replay "
                                  "withdrew: its records decoded after all", names,
                                  registry=r).labels(**labels)
        self._stalls = Counter("leakproof_client_stalls", "Kafka client calls that held "
                               "the client's IO loop past its warning threshold (1 s), in "
                               "the driver and the batches' tasks", names,
                               registry=r).labels(**labels)
        self._mirror_failures = Counter(
            "leakproof_group_mirror_failures", "Copies of a commit to the Kafka consumer group "
            "(kafka.mirror_group_offsets) that failed; the commit itself stands", names,
            registry=r).labels(**labels)
        buckets = interval_buckets(interval_s)
        self._processing = Histogram(
            "leakproof_batch_processing_seconds", "How long a batch's output took: its tasks "
            "and its commit (every batch, records or not)", names, buckets=buckets,
            registry=r).labels(**labels)
        self._delay = Histogram(
            "leakproof_batch_scheduling_delay_seconds", "How long after its batch time a "
            "batch's output began, planning included (Spark's own scheduling delay starts "
            "after the batch's jobs were generated)", names, buckets=buckets,
            registry=r).labels(**labels)
        self._lag = Gauge("leakproof_lag_records", "Records behind the log end after the "
                          "newest batch, per partition", [*names, "partition"], registry=r)
        self._lag_s = _LagSeconds(labels, self._now_ms)
        r.register(self._lag_s)
        self._held = Gauge("leakproof_held_by_open_transaction", "1 while an open transaction "
                           "holds the partition's readable end (its last stable offset) below "
                           "the log end", [*names, "partition"], registry=r)
        self._held_age = Gauge("leakproof_open_transaction_age_seconds", "How long the "
                               "transaction holding the partition has been open (0: none)",
                               [*names, "partition"], registry=r)
        self._limit = Gauge("leakproof_rate_limit_events_per_second", "Backpressure's rate "
                            "estimate in force, records per second for the whole job (0: "
                            "none)", names, registry=r).labels(**labels)
        self._last_batch = Gauge("leakproof_last_batch_timestamp_seconds", "Batch time of the "
                                 "newest batch whose output finished, records or not (the "
                                 "driver's start until then)", names,
                                 registry=r).labels(**labels)
        self._last_commit = Gauge("leakproof_last_commit_timestamp_seconds", "Batch time of "
                                  "the newest offsets commit (the driver's start until then)",
                                  names, registry=r).labels(**labels)
        # until the first batch, the driver's start: "no batch for N intervals" then counts
        # from the start, not from 1970
        self._last_batch.set(self._now_ms() / 1000)
        self._last_commit.set(self._now_ms() / 1000)
        self._driver_stalls = stalls()
        self._labels = labels
        self.server, _ = start_http_server(port, addr=host, registry=r)

    def every_batch(self, outcome: BatchOutcome) -> None:
        """Every batch whose output finished, records or not: its times and lag."""
        plan = outcome.plan
        self._processing.observe(outcome.took_s)
        if outcome.scheduling_delay_s is not None:
            self._delay.observe(outcome.scheduling_delay_s)
        self._last_batch.set(plan.batch_ms / 1000)
        if outcome.committed.mirror_failed:
            self._mirror_failures.inc()
        if outcome.committed.moved:
            self._commits.inc()
            self._last_commit.set(plan.batch_ms / 1000)
        now = self._now_ms()
        for p, behind in plan.lag_by_partition().items():
            self._lag.labels(**self._labels, partition=str(p)).set(behind)
            hold = plan.held.get(p)
            self._held.labels(**self._labels, partition=str(p)).set(1 if hold else 0)
            self._held_age.labels(**self._labels, partition=str(p)).set(
                (hold.age_s(now) or 0) if hold else 0)
        self._lag_s.partitions = sorted(r.partition for r in plan.ranges)
        self._lag_s.unread_ts = dict(plan.unread_ts)
        self._limit.set(outcome.rate_limit or 0)
        in_driver = stalls()
        self._stalls.inc(outcome.committed.totals.client_stalls + in_driver
                         - self._driver_stalls)
        self._driver_stalls = in_driver

    def batch(self, outcome: BatchOutcome) -> None:
        """A batch that read records (or skipped a gap, or waits on a transaction): its
        counts, from the typed outcome the progress line is made from."""
        t = outcome.committed.totals
        if outcome.plan.work:
            self._batches.inc()
        self._read.inc(t.records)
        for name, n in (("applied", t.applied), ("replayed", t.replayed), ("late", t.late),
                        ("duplicates", t.duplicates), ("dead_letter", t.dead_letters)):
            self._records.labels(**self._labels, outcome=name).inc(n)
        for kind, n in t.dead_letter_kinds.items():
            self._dead.labels(**self._labels, kind=kind).inc(n)
        self._retired.inc(t.retired)
        self._withdrawn.inc(t.withdrawn)
        self._rows.labels(**self._labels, source="kept").inc(t.rows_kept)
        self._rows.labels(**self._labels, source="read").inc(max(0, t.sessions - t.rows_kept))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def build_versions(spark: str | None = None) -> dict[str, str]:
    """The ``leakproof_build_info`` labels: leakproof's version, Spark's, Python's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("leakproof")
    except PackageNotFoundError:  # a source tree on the path (--py-files), not installed
        ours = "unknown"
    return {"version": ours, "spark": spark or "unknown", "python": platform.python_version()}


# ---------------------------------------------------------------- where Prometheus finds it


def scrape_host(metrics_host: str) -> str:
    """The host Prometheus reaches the endpoint at: the bound address, or for a wildcard
    bind this machine's fully qualified name."""
    if metrics_host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return metrics_host


class TargetFile:
    """``job.metrics_sd_file``: a Prometheus file-based service-discovery target for this
    driver (``[{"targets": ["host:port"], "labels": {...}}]``), written at start (atomically:
    Prometheus never reads half a file) and removed at the end, unless another driver (a
    later YARN attempt) has written its own there since. The labels name the driver, never
    ``topic`` or ``group``: the series carry those, and a target label of the same name would
    push the series' own to ``exported_topic``."""

    def __init__(self, path: str, host: str, port: int, labels: Mapping[str, str]) -> None:
        self.path = Path(path)
        self.content = json.dumps([{"targets": [f"{host}:{port}"], "labels": dict(labels)}],
                                  indent=2) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        partial.write_text(self.content)
        partial.replace(self.path)

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.path.read_text() == self.content:
                self.path.unlink()


def start(topic: str, group: str, cfg: Any, progress: Progress, spark_version: str | None,
          app_id: str | None) -> list[Any]:
    """The endpoint (and its target file, if configured), fed by ``progress``; returns what
    to close at the end. ``cfg`` is the job section of the config."""
    metrics = JobMetrics(topic, group, cfg.metrics_host, cfg.metrics_port,
                         interval_s=cfg.batch_interval_s,
                         versions=build_versions(spark_version))
    progress.add_every(metrics.every_batch)
    progress.add(lambda outcome, _record: metrics.batch(outcome))
    log.info("metrics at http://%s:%d/metrics", cfg.metrics_host, cfg.metrics_port)
    closing: list[Any] = [metrics]
    if cfg.metrics_sd_file:
        host = scrape_host(cfg.metrics_host)
        labels = {"leakproof_app_id": app_id or "unknown",
                  "leakproof_driver_host": socket.gethostname()}
        try:
            closing.append(TargetFile(cfg.metrics_sd_file, host, cfg.metrics_port, labels))
            log.info("Prometheus target %s:%d written to %s", host, cfg.metrics_port,
                     cfg.metrics_sd_file)
        except OSError as exc:  # the metrics still serve; only discovery is missing
            log.warning("could not write the Prometheus target file %s (job.metrics_sd_file):"
                        " %s", cfg.metrics_sd_file, exc)
    return closing
