"""Transactional topics: ranges stop at the stable end, and holes are no loss (fakes only).

Under read_committed a partition's readable end is its last stable offset (LSO); between a
range's from and until lie transaction markers and aborted records that no task reads.
"""

from __future__ import annotations

import pytest

from leakproof.commands.lag import partition_state
from leakproof.core.config import from_dict
from leakproof.core.errors import ConfigError, OffsetError
from leakproof.core.offsets import HeldTransaction, LogBounds, plan_ranges, resolve_start
from leakproof.core.reports import BatchTotals, TaskReport
from leakproof.driver.batch import BatchOutcome, Committed
from leakproof.driver.progress import progress_record, text_line

from .drivers import rig


def test_the_readable_end_is_the_stable_end_and_never_past_the_log_end() -> None:
    assert LogBounds(0, 10).readable_end == 10 and not LogBounds(0, 10).held
    assert LogBounds(0, 10, 4).readable_end == 4 and LogBounds(0, 10, 4).held
    assert LogBounds(0, 10, 10).readable_end == 10 and not LogBounds(0, 10, 10).held


def test_a_range_stops_at_the_open_transactions_first_offset() -> None:
    ranges = plan_ranges("t", {0: 2, 1: 0}, {0: LogBounds(0, 10, 6).readable_end,
                                             1: LogBounds(0, 5).readable_end}, None)
    assert [str(r) for r in ranges] == ["t:0[2,6)", "t:1[0,5)"]


def test_a_position_past_the_stable_end_waits_with_an_empty_range() -> None:
    """A run that read uncommitted records before may have committed past today's LSO: it
    waits there (nothing re-read, nothing refused) until the transaction ends."""
    r = rig({0: (0, 10, 4)}, stored={0: 7})
    plan = r.plan()
    assert [str(x) for x in plan.ranges] == ["t:0[7,7)"] and plan.work == []
    r.meta.bounds[0] = LogBounds(0, 12, 12)
    assert [str(x) for x in r.plan().work] == ["t:0[7,12)"]


def test_past_the_high_watermark_is_still_a_recreated_topic() -> None:
    with pytest.raises(OffsetError, match="beyond the log end 10"):
        rig({0: (0, 10, 4)}, stored={0: 11})


def test_latest_starts_at_the_stable_end_so_an_open_transaction_is_not_skipped() -> None:
    start = resolve_start("t", [0], None, {0: LogBounds(0, 10, 6)}, auto_offset_reset="latest",
                          on_data_loss="fail")
    assert start.positions == {0: 6}


def test_a_held_range_catches_up_when_the_transaction_ends_and_the_lag_reaches_zero() -> None:
    r = rig({0: (0, 10, 6), 1: (0, 5)})
    first = r.run()
    assert [str(x) for x in first.work] == ["t:0[0,6)", "t:1[0,5)"]
    assert first.lag_by_partition() == {0: 4, 1: 0} and set(first.held) == {0}
    # the transaction commits: its marker is the log's last offset, and the range covers it
    r.meta.bounds[0] = LogBounds(0, 11, 11)
    second = r.run()
    assert [str(x) for x in second.work] == ["t:0[6,11)"] and second.lag == 0
    assert second.held == {}
    assert r.store.rows[-1].offsets == {0: 11, 1: 5}


def test_a_range_with_holes_commits_its_until_offset_and_counts_only_records() -> None:
    """[0, 10) held 3 committed records, 3 aborted ones and markers: 3 records, until 10."""
    r = rig({0: (0, 10, 10)})
    plan = r.plan()
    r.committer.commit(plan, [TaskReport(0, 0, 10, records=3, applied=3, sessions=1)])
    (row,) = r.store.rows
    assert row.offsets == {0: 10} and row.audit["records"] == "3" and row.audit["lag"] == "0"
    assert r.meta.mirrored[-1][1] == {0: 10}  # the group copy reaches the log end too


def test_an_open_transaction_is_looked_up_once_per_hold() -> None:
    r = rig({0: (0, 10, 6)})
    r.meta.opened_ms = {0: 1_700_000_000_000}
    held = [r.plan().held[0], r.plan().held[0]]
    assert held == [HeldTransaction(0, 6, 1_700_000_000_000)] * 2 and r.meta.peeks == 1
    r.meta.bounds[0] = LogBounds(0, 14, 11)  # that one ended; another one holds now
    assert r.plan().held[0].offset == 11 and r.meta.peeks == 2
    r.meta.bounds[0] = LogBounds(0, 14, 14)
    assert r.plan().held == {} and r.meta.peeks == 2


def test_a_held_partition_shows_in_the_progress_line_with_its_age() -> None:
    r = rig({0: (0, 10, 6)})
    r.meta.opened_ms = {0: 1_000}
    plan = r.plan()
    outcome = BatchOutcome(plan, Committed(BatchTotals(), (), {}, moved=False), 0.1)
    record = progress_record(outcome)
    record["held"][0]["age_s"] = 42.0  # the age depends on the wall clock
    assert record["held"] == [{"partition": 0, "at": 6, "age_s": 42.0}]
    assert text_line(record).endswith("| held by open transaction: p0@6 (42s)")


def test_the_lag_says_whether_the_job_or_a_transaction_holds_it() -> None:
    assert partition_state(0, 10, 10) == "caught up"
    assert partition_state(4, 6, 6) == "held by open transaction"
    assert partition_state(4, 2, 6) == "behind"
    assert partition_state(4, None, 6) == "behind"


def test_isolation_level_defaults_to_read_committed_and_is_checked() -> None:
    base = {"kafka": {"bootstrap_servers": "h:9092", "topic": "t", "group_id": "g"}}
    assert from_dict(base).kafka.isolation_level == "read_committed"
    unsafe = {"kafka": {**base["kafka"], "isolation_level": "read_uncommitted"}}
    assert from_dict(unsafe).kafka.isolation_level == "read_uncommitted"
    with pytest.raises(ConfigError, match=r"'kafka.isolation_level' = 'dirty' is not valid; "
                                          r"use one of: read_committed \| read_uncommitted"):
        from_dict({"kafka": {**base["kafka"], "isolation_level": "dirty"}})
    with pytest.raises(ConfigError, match=r"set 'kafka\.isolation_level'"):
        from_dict({"kafka": {**base["kafka"], "consumer": {"isolation_level": "x"}}})
