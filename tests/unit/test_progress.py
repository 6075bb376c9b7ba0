"""The per-batch progress record: sums over tasks, slowest task's timings, lag."""

from __future__ import annotations

import json
import logging
from datetime import datetime

import pytest

from leakproof.core.lease import Lease
from leakproof.core.logs import JsonFormatter
from leakproof.core.offsets import Gap, LogBounds, OffsetRange
from leakproof.core.reports import BatchTotals, TaskReport
from leakproof.driver.batch import BatchOutcome, BatchPlan, Committed, audit_cells, batch_millis
from leakproof.driver.progress import Progress, log_line, progress_record, ranges_text
from leakproof.driver.progress import text_line as log_text


def report(p: int, records: int, read_s: float, **kinds: int) -> TaskReport:
    return TaskReport(p, 0, records, records=records, applied=records - 1, late=1,
                      duplicates=1, dead_letter_kinds=kinds, sessions=3, closed=1,
                      read_s=read_s, fold_s=0.1, write_s=0.2, rows_kept=2)


def outcome() -> BatchOutcome:
    plan = BatchPlan(1_700_000_000_000,
                     (OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)),
                     {0: LogBounds(0, 15), 1: LogBounds(0, 5)}, (Gap(1, 2, 5),),
                     unread_ts={0: 1_699_999_990_000})  # 10 s before the batch time
    totals = BatchTotals.of([report(0, 10, 0.5, tombstone=1, key_mismatch=1),
                             report(1, 0, 0.9)])
    return BatchOutcome(plan, Committed(totals, plan.gaps, {0: 10, 1: 5}, True, 0.01), 2.0)


def test_progress_record() -> None:
    rec = progress_record(outcome(), now_ms=1_700_000_000_000)
    assert rec["ranges"] == [{"partition": 0, "from": 0, "until": 10}]
    assert (rec["records"], rec["applied"], rec["late"], rec["dead_letters"]) == (10, 8, 2, 2)
    assert rec["dead_letter_kinds"] == {"tombstone": 1, "key_mismatch": 1}
    assert rec["duplicates"] == 2
    assert rec["lag"] == 5
    assert rec["lag_s"] == 10.0 and rec["lag_s_by_partition"] == {"0": 10.0}
    assert rec["read_s"] == 0.9 and rec["events_per_s"] == 5.0
    assert rec["gaps"] == [{"partition": 1, "from": 2, "to": 5}]
    assert rec["cache"] == {"tasks": 2, "consumer": 0, "rows": 4}
    assert rec["rate_limit"] is None
    json.dumps(rec)  # one JSON object per batch with --log-format json


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_line_goes_to_the_logger_operators_filter_on(
        fmt: str, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[dict[str, object]] = []
    progress = Progress(log_line(fmt), lambda _o, rec: seen.append(rec))
    with caplog.at_level(logging.INFO, logger="leakproof.stream"):
        progress.batch(outcome())
    (line,) = [r for r in caplog.records if r.name == "leakproof.stream"]
    text = line.getMessage()
    if fmt == "json":
        obj = json.loads(JsonFormatter().format(line))
        assert (obj["logger"], obj["level"], obj["records"]) == ("leakproof.stream", "INFO", 10)
        assert obj["message"] == "batch 1700000000000" and "time" in obj
    else:
        assert text.startswith("batch 1700000000000 | p0:0->10 | records 10 (applied 8, ")
        assert 'dead 2 {"key_mismatch": 1, "tombstone": 1})' in text
        assert "| cached consumer 0/2 rows 4/6" in text
        assert "| lag 5 (" in text and "s) |" in text
    assert seen and seen[0]["batch_ms"] == 1_700_000_000_000


def test_batch_millis_round_trips_pyspark_times() -> None:
    for ms in (1_700_000_000_000, 1_795_306_756_001, 1_795_306_756_999):
        assert batch_millis(datetime.fromtimestamp(ms / 1000.0)) == ms


def test_a_wide_batchs_line_summarises_its_ranges() -> None:
    few = [{"partition": p, "from": 10, "until": 20} for p in (0, 3)]
    assert ranges_text(few) == "p0:10->20 p3:10->20"
    wide = [{"partition": p, "from": 0, "until": 1 + p % 9} for p in range(240)]
    assert ranges_text(wide) == "240 partitions p0..p239, 1-9 records each"


def test_dead_letters_a_replay_withdrew_are_counted_in_the_line_and_the_audit() -> None:
    plan = outcome().plan
    totals = BatchTotals.of([TaskReport(0, 0, 10, records=10, applied=10, withdrawn=3),
                             TaskReport(1, 5, 5, withdrawn=1)])
    done = BatchOutcome(plan, Committed(totals, (), {0: 10, 1: 5}, True, 0.01), 1.0)
    rec = progress_record(done, now_ms=1_700_000_000_000)
    assert rec["withdrawn"] == 4
    assert "dead 0, withdrawn 4) |" in log_text(rec)
    assert audit_cells(plan, totals, (), Lease(1, "x"), None, now_ms=1)["withdrawn"] == "4"
    quiet = BatchTotals.of([TaskReport(0, 0, 10, records=10, applied=10)])
    assert "withdrawn" not in audit_cells(plan, quiet, (), Lease(1, "x"), None, now_ms=1)
