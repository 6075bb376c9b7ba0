"""The commit rules (driver.committing), each with literals over in-memory fakes."""

from __future__ import annotations

import logging

import pytest

from leakproof.core.errors import BatchFailed, CommitRefused, GroupHasMembers
from leakproof.core.lease import Lease
from leakproof.core.offsets import Gap, LogBounds
from leakproof.core.reports import TaskReport

from .drivers import reports, rig


def test_a_batch_commits_one_row_with_every_partition_and_its_audit() -> None:
    r = rig({0: (0, 10), 1: (0, 5)})
    r.run()
    (row,) = r.store.rows
    assert (row.batch_ms, row.offsets) == (2_000, {0: 10, 1: 5})
    assert row.audit["records"] == "15" and row.audit["ranges"] == "0:0-10,1:0-5"
    assert (row.audit["epoch"], row.audit["topic_id"]) == ("1", "id-1")
    assert r.leases.cell == Lease(1, "2000")  # the holder names the newest commit
    assert r.committer.committed == {0: 10, 1: 5}


def test_a_lost_task_fails_the_batch_and_commits_nothing() -> None:
    r = rig({0: (0, 10), 1: (0, 5)})
    plan = r.plan()
    with pytest.raises(BatchFailed, match=r"reports for partitions \[0\], expected \[0, 1\]"):
        r.committer.commit(plan, reports(plan)[:1])
    assert r.store.rows == [] and r.leases.cell == Lease(1, "start:a")


def test_a_batch_that_skips_one_breaks_the_chain() -> None:
    r = rig({0: (0, 100)}, max_rate_per_partition=10)
    first, second = r.plan(), r.plan()  # planned ahead, as Spark generates batches
    with pytest.raises(CommitRefused, match="partition 0 starts at 10 but the last commit "
                                            "ended at 0; a batch was skipped"):
        r.committer.commit(second, reports(second))
    r.run(first)
    r.run(second)
    assert [row.offsets for row in r.store.rows] == [{0: 10}, {0: 20}]


def test_a_second_driver_fences_the_first() -> None:
    r = rig({0: (0, 100)}, max_rate_per_partition=10)
    r.run()
    r.leases.take("start:b")  # another driver starts on the same topic and group
    plan = r.plan()
    with pytest.raises(CommitRefused, match=r"moved on \(now 2:start:b\); another driver"):
        r.committer.commit(plan, reports(plan))
    assert len(r.store.rows) == 1


def test_a_lost_reply_is_not_a_rival() -> None:
    r = rig({0: (0, 10)})
    r.leases.lose_reply = True  # the compare-and-set landed, its answer did not
    r.run()
    assert r.store.rows[-1].offsets == {0: 10}
    assert r.leases.cell == Lease(1, "2000")


def test_an_idle_driver_writes_no_row_but_notices_it_was_replaced() -> None:
    r = rig({0: (5, 5)})
    r.run()
    r.run()
    assert r.store.rows == []  # nothing moved: no empty rows in the history
    r.leases.take("start:b")
    with pytest.raises(CommitRefused, match="at epoch 2, this driver's is 1: another driver "
                                            "took over"):
        r.run()


def test_a_failed_group_mirror_is_retried_until_it_lands() -> None:
    r = rig({0: (0, 10)})
    r.meta.mirror_failures = 2
    r.run()  # committed; the mirror fails
    r.run()  # idle batch: the retry fails again
    assert r.meta.mirrored == []
    r.run()  # idle batch: it lands
    assert r.meta.mirrored == [("g", {0: 10}, "leakproof batch 2000")]
    assert len(r.store.rows) == 1


def test_a_group_someone_joined_refuses_the_mirror_the_batches_go_on_logged_once(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka takes no outside commit while a group has members (KIP-848's coordinator and
    the classic one alike): each batch commits, each copy fails, counted, one warning."""
    r = rig({0: (0, 30)}, max_rate_per_partition=10)
    real = r.meta.commit_group_offsets

    def refuse(*_args: object) -> None:
        raise GroupHasMembers("Kafka refused the commit to group g: the group has members")

    monkeypatch.setattr(r.meta, "commit_group_offsets", refuse)
    with caplog.at_level(logging.INFO, "leakproof.driver.committing"):
        failed = [r.committer.commit(plan, reports(plan)).mirror_failed
                  for plan in (r.plan(), r.plan())]
        assert failed == [True, True] and r.committer.mirror_failures == 2
        assert [row.offsets for row in r.store.rows] == [{0: 10}, {0: 20}]
        monkeypatch.setattr(r.meta, "commit_group_offsets", real)
        plan = r.plan()
        assert not r.committer.commit(plan, reports(plan)).mirror_failed
    assert r.committer.mirror_failures == 0
    assert r.meta.mirrored == [("g", {0: 30}, "leakproof batch 4000")]
    warned = [x.getMessage() for x in caplog.records if x.levelno == logging.WARNING]
    assert len(warned) == 1 and "Nothing may join that group" in warned[0]
    assert any("again, after 2 failed copies" in x.getMessage() for x in caplog.records)


def test_no_mirror_when_the_group_is_not_wanted() -> None:
    r = rig({0: (0, 10)}, mirror=False)
    r.run()
    assert r.meta.mirrored == [] and len(r.store.rows) == 1


def test_a_partition_added_while_running_joins_the_chain_at_its_start() -> None:
    r = rig({0: (0, 10)})
    r.run()
    r.meta.bounds[1] = LogBounds(3, 8)  # partitions added, retention already ran on p1
    plan = r.plan()
    assert plan.appeared == {1: 3}
    assert [str(x) for x in plan.work] == ["t:1[3,8)"]
    r.run(plan)
    assert r.store.rows[-1].offsets == {0: 10, 1: 8}


def test_stored_partitions_no_longer_assigned_keep_their_offsets() -> None:
    r = rig({0: (0, 10), 1: (0, 10)}, stored={0: 2, 1: 4}, partitions=(0,))
    r.run()
    assert r.store.rows[-1].offsets == {0: 10, 1: 4}


def test_gaps_are_recorded_before_the_row_that_passes_them() -> None:
    r = rig({0: (0, 100)}, max_rate_per_partition=10, on_data_loss="skip")
    r.run()
    r.meta.bounds[0] = LogBounds(40, 100)  # retention deleted [10, 40) unread
    plan = r.plan()
    assert plan.gaps == (Gap(0, 10, 40),)
    r.run(plan)
    assert r.leases.gaps == [Gap(0, 10, 40)]
    assert r.store.rows[-1].offsets == {0: 50}
    assert r.store.rows[-1].audit["gaps"] == "0:10-40"


def test_a_gap_found_at_start_is_recorded_before_anything_is_read() -> None:
    r = rig({0: (30, 100)}, stored={0: 10}, on_data_loss="skip")
    assert r.leases.gaps == [Gap(0, 10, 30)] and len(r.store.rows) == 1  # the stored row
    r.run()
    assert r.store.rows[-1].offsets == {0: 100}


def test_a_gap_a_task_met_is_recorded_with_its_batch() -> None:
    r = rig({0: (0, 10)}, on_data_loss="skip")
    plan = r.plan()
    (report,) = reports(plan)
    report.gaps = (Gap(0, 0, 4),)  # deleted after planning, before the task read it
    r.committer.commit(plan, [report])
    assert r.leases.gaps == [Gap(0, 0, 4)]
    assert r.store.rows[-1].audit["gaps"] == "0:0-4"


def test_every_commit_keeps_the_audit_keys_the_start_checks_read() -> None:
    from leakproof.ports.driver import REQUIRED_AUDIT

    r = rig({0: (0, 10)})
    r.run()
    assert set(REQUIRED_AUDIT) <= set(r.store.rows[-1].audit)


def test_totals_are_summed_once_over_the_tasks() -> None:
    r = rig({0: (0, 10), 1: (0, 5)})
    plan = r.plan()
    tasks = [TaskReport(0, 0, 10, records=10, applied=8, late=1, duplicates=1,
                        dead_letter_kinds={"tombstone": 2}, read_s=0.5),
             TaskReport(1, 0, 5, records=5, applied=5, read_s=0.9)]
    done = r.committer.commit(plan, tasks)
    t = done.totals
    assert (t.records, t.applied, t.late, t.dead_letters, t.read_s) == (15, 13, 1, 2, 0.9)
    assert r.store.rows[-1].audit["dead_letters"] == "2"


def test_the_chain_is_checked_before_any_task_runs() -> None:
    """A plan that does not continue the last commit is refused before its tasks write:
    they would move session fences past records the replay then skips."""
    r = rig({0: (0, 100)}, max_rate_per_partition=10)
    r.run()
    r.plan()  # planned, never run (dropped by a stop, say)
    behind_a_gap = r.plan()
    with pytest.raises(CommitRefused, match="starts at 20 but the last commit ended at 10"):
        r.committer.check_chain(behind_a_gap)


def test_a_driver_whose_clock_is_behind_the_newest_commit_keys_its_rows_above_it(
        caplog: pytest.LogCaptureFixture) -> None:
    # a run on a host an hour ahead committed batch 3 600 000; this driver's clock says 2 000
    r = rig({0: (0, 100)}, stored={0: 0}, stored_ms=3_600_000, max_rate_per_partition=10)
    with caplog.at_level(logging.WARNING):
        r.run()
        r.run()
    assert [row.batch_ms for row in r.store.rows] == [3_600_000, 3_600_001, 3_600_002]
    assert [row.audit["batch_time"] for row in r.store.rows[1:]] == ["2000", "3000"]
    latest = r.store.latest()
    assert latest is not None and latest.offsets == {0: 20}  # a restart resumes at the head
    assert r.leases.cell == Lease(1, "3600002")
    assert sum("is not after the newest commit" in m for m in caplog.messages) == 1


def test_a_driver_on_time_keeps_its_batch_times_as_row_keys() -> None:
    r = rig({0: (0, 100)}, stored={0: 0}, max_rate_per_partition=10)
    r.run()
    assert [row.batch_ms for row in r.store.rows] == [500, 2_000]
    assert "batch_time" not in r.store.rows[1].audit
