"""The per-batch progress record: sums over tasks, slowest task's timings, lag."""

from __future__ import annotations

import json

from leakproof.offsets import Gap, LogBounds, OffsetRange
from leakproof.stream import BatchPlan, batch_millis, progress_record


def report(p: int, records: int, read_s: float, **kinds: int) -> dict[str, object]:
    return {"partition": p, "records": records, "applied": records - 1, "replayed": 0,
            "late": 1, "duplicates": 1, "unknown_types": 0,
            "dead_letters": sum(kinds.values()), "dead_letter_kinds": kinds,
            "sessions": 3, "closed": 1, "read_s": read_s, "fold_s": 0.1, "write_s": 0.2}


def test_progress_record() -> None:
    plan = BatchPlan(1_700_000_000_000,
                     [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)],
                     {0: LogBounds(0, 15), 1: LogBounds(0, 5)}, [Gap(1, 2, 5)])
    rec = progress_record(plan, [report(0, 10, 0.5, tombstone=1, key_mismatch=1),
                                 report(1, 0, 0.9)], took=2.0, commit_s=0.01)
    assert rec["ranges"] == [{"partition": 0, "from": 0, "until": 10}]
    assert (rec["records"], rec["applied"], rec["late"], rec["dead_letters"]) == (10, 8, 2, 2)
    assert rec["dead_letter_kinds"] == {"tombstone": 1, "key_mismatch": 1}
    assert rec["duplicates"] == 2
    assert rec["lag"] == 5
    assert rec["read_s"] == 0.9 and rec["events_per_s"] == 5.0
    assert rec["gaps"] == [{"partition": 1, "from": 2, "to": 5}]
    json.dumps(rec)  # one JSON object per batch with --log-format json


def test_batch_millis_round_trips_pyspark_times() -> None:
    from datetime import datetime

    for ms in (1_700_000_000_000, 1_795_306_756_001, 1_795_306_756_999):
        assert batch_millis(datetime.fromtimestamp(ms / 1000.0)) == ms
