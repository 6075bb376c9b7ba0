"""The Prometheus endpoint (driver/metrics.py): every series by Prometheus's conventions,
parsed back with prometheus_client's own parser; lag in seconds at scrape time; the
service-discovery target file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from leakproof.core.offsets import HeldTransaction, LogBounds, OffsetRange
from leakproof.core.reports import BatchTotals, TaskReport
from leakproof.driver.batch import BatchOutcome, BatchPlan, Committed
from leakproof.driver.metrics import METRICS, JobMetrics, TargetFile, interval_buckets
from leakproof.driver.progress import Progress

NOW = 1_700_000_010_000


def outcome(batch_ms: int = 1_700_000_000_000, moved: bool = True) -> BatchOutcome:
    plan = BatchPlan(batch_ms, (OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)),
                     {0: LogBounds(0, 15), 1: LogBounds(0, 8, 5)},
                     held={1: HeldTransaction(1, 5, NOW - 4_000)},
                     unread_ts={0: NOW - 12_000, 1: NOW - 4_000})
    report = TaskReport(0, 0, 10, records=10, applied=7, late=1, duplicates=1,
                        dead_letter_kinds={"tombstone": 1}, sessions=3,
                        closed=1, rows_kept=2, client_stalls=2, withdrawn=1, retired=3)
    totals = BatchTotals.of([report])
    return BatchOutcome(plan, Committed(totals, (), {0: 10, 1: 5}, moved, 0.01), 0.6, None,
                        0.25)


@pytest.fixture
def metrics() -> Iterator[JobMetrics]:
    clock = {"now": NOW}
    m = JobMetrics("t", "g", "127.0.0.1", 0, interval_s=2.0,
                   versions={"version": "9.9", "spark": "4.0.0", "python": "3.11.7"},
                   now_ms=lambda: clock["now"])
    m.clock = clock  # type: ignore[attr-defined]
    try:
        yield m
    finally:
        m.close()


def scrape(m: JobMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """name (as exposed: with _total, _bucket...) -> labels -> value."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items()
                                  if k not in ("topic", "group")))
            out.setdefault(s.name, {})[labels] = s.value
    return out


def test_every_series_is_exported_by_the_conventions(metrics: JobMetrics) -> None:
    progress = Progress()
    progress.add_every(metrics.every_batch)
    progress.add(lambda o, _r: metrics.batch(o))
    progress.batch(outcome())
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(metrics.registry).decode())}
    # the parser names counters without _total; METRICS names what a query names
    exposed = {(n + "_total" if f.type == "counter" else n): f.type for n, f in families.items()}
    assert exposed == dict(METRICS)
    for name, family in families.items():
        assert name.startswith("leakproof_")
        for sample in family.samples:
            assert sample.labels["topic"] == "t" and sample.labels["group"] == "g", sample
            if family.type == "counter":
                assert sample.name.endswith("_total"), sample.name
    assert "leakproof_events_per_second" not in exposed  # a rate is PromQL's to compute


def test_one_batchs_figures(metrics: JobMetrics) -> None:
    metrics.every_batch(outcome())
    metrics.batch(outcome())
    got = scrape(metrics)
    assert got["leakproof_build_info"] == {
        (("python", "3.11.7"), ("spark", "4.0.0"), ("version", "9.9")): 1.0}
    assert got["leakproof_batch_interval_seconds"] == {(): 2.0}
    assert got["leakproof_batches_total"] == {(): 1.0}
    assert got["leakproof_commits_total"] == {(): 1.0}
    assert got["leakproof_records_read_total"] == {(): 10.0}
    assert got["leakproof_records_total"] == {
        (("outcome", "applied"),): 7.0, (("outcome", "replayed"),): 0.0,
        (("outcome", "late"),): 1.0, (("outcome", "duplicates"),): 1.0,
        (("outcome", "dead_letter"),): 1.0}
    assert got["leakproof_dead_letters_total"] == {(("kind", "tombstone"),): 1.0}
    assert got["leakproof_client_stalls_total"] == {(): 2.0}
    assert got["leakproof_sessions_retired_total"] == {(): 3.0}
    assert got["leakproof_dead_letters_withdrawn_total"] == {(): 1.0}
    assert got["leakproof_lag_records"] == {(("partition", "0"),): 5.0,
                                            (("partition", "1"),): 3.0}
    assert got["leakproof_lag_seconds"] == {(("partition", "0"),): 12.0,
                                            (("partition", "1"),): 4.0}
    assert got["leakproof_held_by_open_transaction"] == {(("partition", "0"),): 0.0,
                                                         (("partition", "1"),): 1.0}
    assert got["leakproof_open_transaction_age_seconds"][(("partition", "1"),)] == 4.0
    assert got["leakproof_last_commit_timestamp_seconds"] == {(): 1_700_000_000.0}
    assert got["leakproof_last_batch_timestamp_seconds"] == {(): 1_700_000_000.0}
    assert got["leakproof_batch_scheduling_delay_seconds_count"] == {(): 1.0}
    assert got["leakproof_batch_scheduling_delay_seconds_sum"] == {(): 0.25}
    assert got["leakproof_batch_processing_seconds_bucket"][(("le", "1.0"),)] == 1.0
    assert got["leakproof_batch_processing_seconds_bucket"][(("le", "0.5"),)] == 0.0


def test_lag_in_seconds_grows_between_batches_and_a_batch_without_a_commit_counts_none(
        metrics: JobMetrics) -> None:
    metrics.every_batch(outcome())
    metrics.clock["now"] += 30_000  # type: ignore[attr-defined]
    got = scrape(metrics)  # no batch for 30 s: the oldest unread records are 30 s older
    assert got["leakproof_lag_seconds"][(("partition", "0"),)] == 42.0
    metrics.every_batch(outcome(1_700_000_002_000, moved=False))
    got = scrape(metrics)
    assert got["leakproof_commits_total"] == {(): 1.0}
    assert got["leakproof_last_batch_timestamp_seconds"] == {(): 1_700_000_002.0}
    assert got["leakproof_last_commit_timestamp_seconds"] == {(): 1_700_000_000.0}


def test_histogram_buckets_follow_the_batch_interval() -> None:
    buckets = interval_buckets(2.0)
    assert 2.0 in buckets and buckets[0] == 0.1 and buckets[-1] == 64.0
    assert list(buckets) == sorted(buckets)


def test_the_target_file_is_written_whole_and_removed_only_if_still_ours(
        tmp_path: Path) -> None:
    path = tmp_path / "sd" / "leakproof.json"
    ours = TargetFile(str(path), "node7.example", 9400, {"leakproof_app_id": "app-1"})
    assert json.loads(path.read_text()) == [
        {"targets": ["node7.example:9400"], "labels": {"leakproof_app_id": "app-1"}}]
    assert [p.name for p in path.parent.iterdir()] == ["leakproof.json"]
    ours.close()
    assert not path.exists()
    ours = TargetFile(str(path), "node7.example", 9400, {})
    TargetFile(str(path), "node8.example", 9400, {})  # the next YARN attempt's driver
    ours.close()
    assert "node8.example:9400" in path.read_text()


def test_before_the_first_batch_the_newest_batch_and_commit_are_the_drivers_start(
        metrics: JobMetrics) -> None:
    got = scrape(metrics)
    assert got["leakproof_last_batch_timestamp_seconds"] == {(): NOW / 1000}
    assert got["leakproof_last_commit_timestamp_seconds"] == {(): NOW / 1000}


def test_a_target_file_needs_the_endpoint() -> None:
    from leakproof.core import config
    from leakproof.core.errors import ConfigError

    base = {"kafka": {"bootstrap_servers": "k:9092", "topic": "t", "group_id": "g"}}
    cfg = config.from_dict({**base, "job": {"metrics_port": 9400,
                                            "metrics_sd_file": "/srv/sd/lp.json"}})
    assert cfg.job.metrics_sd_file == "/srv/sd/lp.json"
    assert config.from_dict(base).job.metrics_sd_file is None
    with pytest.raises(ConfigError, match=r"'job\.metrics_sd_file' names the endpoint of "
                                          r"'job\.metrics_port', which is 0"):
        config.from_dict({**base, "job": {"metrics_sd_file": "/srv/sd/lp.json"}})
