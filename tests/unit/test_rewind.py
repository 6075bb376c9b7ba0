"""What an operator types for a rewind, and where the rewind lands (over the fakes)."""

from __future__ import annotations

import time

import pytest

from leakproof.cli import build_parser
from leakproof.commands.rewind import (
    RewindPlan,
    RewindTarget,
    parse_offsets,
    plan_moves,
    rewound_offsets,
    write_rewind,
)
from leakproof.core.errors import ForeignOffsets, OffsetError
from leakproof.core.lease import Lease
from leakproof.core.offsets import CommittedBatch, LogBounds
from leakproof.testing.driver_ports import FakeCommitStore, FakeLeaseStore

BOUNDS = {0: LogBounds(0, 100), 1: LogBounds(10, 50, stable_end=40)}


def test_parse_offsets() -> None:
    assert parse_offsets("0=120, 3=7") == {0: 120, 3: 7}
    for bad in ("", "0=x", "a=1", "0:1", "-1=4"):
        with pytest.raises(ValueError):
            parse_offsets(bad)


def test_to_time_is_iso8601_utc_by_default() -> None:
    args = build_parser().parse_args(["offsets", "rewind", "--config", "c.yml", "--to-time",
                                      "2026-01-01T00:00:00"])
    assert args.to_time == 1_767_225_600_000
    args = build_parser().parse_args(["offsets", "rewind", "--config", "c.yml", "--to-time",
                                      "2026-01-01T01:00:00+01:00"])
    assert args.to_time == 1_767_225_600_000


def test_only_one_target() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["offsets", "rewind", "--config", "c", "--to-batch", "1",
                                   "--to-offsets", "0=1"])


def test_describe() -> None:
    assert RewindTarget(to_offsets={1: 5, 0: 2}).describe() == "to-offsets 0=2,1=5"
    assert RewindTarget(to_batch=17).describe() == "to-batch 17"


def test_a_target_is_required_and_offsets_are_parsed_by_argparse() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["offsets", "rewind", "--config", "c"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["offsets", "rewind", "--config", "c", "--to-offsets", "0=x"])
    args = build_parser().parse_args(["offsets", "--config", "c", "rewind", "--to-offsets",
                                      "1=12"])
    assert (args.config, args.to_offsets) == ("c", {1: 12})


def store(*rows: CommittedBatch, history: bool = True) -> FakeCommitStore:
    return FakeCommitStore(rows=list(rows), keeps_history=history)


OLD = CommittedBatch(1_000, {0: 30, 1: 20}, {"epoch": "1"})
NEW = CommittedBatch(3_000, {0: 90, 1: 45}, {"epoch": "1"})


def test_targets() -> None:
    assert rewound_offsets(RewindTarget(to_batch=1_000), store(OLD, NEW), BOUNDS, None,
                           "t:g") == {0: 30, 1: 20}
    assert rewound_offsets(RewindTarget(to_offsets={0: 5}), store(OLD, NEW), BOUNDS, None,
                           "t:g") == {0: 5, 1: 45}
    # no record that new on partition 1: its readable end, short of an open transaction
    assert rewound_offsets(RewindTarget(to_time_ms=9), store(), BOUNDS, {0: 7, 1: None},
                           "t:g") == {0: 7, 1: 40}


def test_refusals_name_the_problem() -> None:
    with pytest.raises(OffsetError, match="no offsets row t:g:0000000000123"):
        rewound_offsets(RewindTarget(to_batch=123), store(OLD), BOUNDS, None, "t:g")
    with pytest.raises(OffsetError, match=r"offsets\.store: fake keeps no history"):
        rewound_offsets(RewindTarget(to_batch=1_000), store(OLD, NEW, history=False), BOUNDS,
                        None, "t:g")
    with pytest.raises(OffsetError, match=r"partition 1: offset 5 is outside the log \[10, 50\]"):
        rewound_offsets(RewindTarget(to_offsets={1: 5}), store(), BOUNDS, None, "t:g")
    with pytest.raises(OffsetError, match="t has no partition 7"):
        rewound_offsets(RewindTarget(to_offsets={7: 0}), store(), BOUNDS, None, "t:g")


def test_the_rewind_is_committed_through_the_store_after_the_epoch_moves() -> None:
    commits = store(OLD, NEW, history=False)  # as the Kafka-group and ZooKeeper stores
    leases = FakeLeaseStore(cell=Lease(4, "driver"))
    batch_ms = write_rewind(RewindTarget(to_offsets={0: 0}), {0: 0, 1: 45}, commits, leases,
                            "TOPIC-ID", now_ms=2_000, settle_s=0)
    assert batch_ms == 3_001  # after the newest commit, though the clock says earlier
    row = commits.latest()
    assert row == CommittedBatch(3_001, {0: 0, 1: 45}, {
        "rewind": "to-offsets 0=0", "rewound_from": "3000", "epoch": "5",
        "committed_ms": "2000", "topic_id": "TOPIC-ID"})
    assert leases.cell is not None and leases.cell.epoch == 5  # the old driver is fenced
    assert leases.recorded_topic_id == "TOPIC-ID"


def test_a_dry_run_is_asked_for_on_the_command_line() -> None:
    args = build_parser().parse_args(["offsets", "rewind", "--config", "c", "--to-offsets",
                                      "0=0", "--dry-run"])
    assert args.dry_run
    assert not build_parser().parse_args(["offsets", "rewind", "--config", "c",
                                          "--to-batch", "1"]).dry_run


def test_the_plan_says_per_partition_what_is_read_again_or_skipped() -> None:
    moves = plan_moves({0: 30, 1: 50, 2: 0}, NEW)
    assert [(m.partition, m.current, m.target, m.read_again, m.skipped) for m in moves] == [
        (0, 90, 30, 60, 0), (1, 45, 50, 0, 5), (2, None, 0, 0, 0)]
    plan = RewindPlan(RewindTarget(to_batch=1_000), "t:g", "hbase", 3_000, moves,
                      running="a run is running (lease epoch 4, driver h:1, heard from 1s ago)")
    lines = plan.table()
    assert lines[0] == "rewind of t:g (offsets.store hbase, newest commit 3000) with to-batch 1000:"
    assert lines[2].split() == ["0", "90", "30", "60", "0"]
    assert lines[4].split() == ["2", "-", "0", "0", "0"]  # a partition never committed
    assert lines[5].split() == ["total", "60", "5"]
    assert "never read" in lines[6] and lines[7].startswith("a run is running")
    assert plan.summary(None) == {
        "batch_ms": None, "dry_run": True, "store": "hbase", "offsets": {0: 30, 1: 50, 2: 0},
        "from": {0: 90, 1: 45, 2: None}, "read_again": {0: 60, 1: 0, 2: 0}}


def test_a_rewind_that_lost_its_race_to_a_drivers_commit_writes_itself_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store without history keeps only the newest write: a driver's commit that passed
    its lease check just before the rewind took the lease lands over the rewind; the rewind
    reads its commit back, writes it again and says so."""
    commits = store(OLD, NEW, history=False)
    leases = FakeLeaseStore(cell=Lease(4, "driver"))
    late = CommittedBatch(3_000 + 500, {0: 99, 1: 99}, {"epoch": "4"})
    monkeypatch.setattr(time, "sleep", lambda s: commits.rows.append(late))
    batch_ms = write_rewind(RewindTarget(to_offsets={0: 0}), {0: 0, 1: 45}, commits, leases,
                            None, now_ms=2_000)
    newest = commits.latest()
    assert newest is not None and (newest.batch_ms, newest.offsets) == (batch_ms, {0: 0, 1: 45})


def test_a_rewind_is_the_way_out_of_offsets_that_are_not_the_jobs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    commits = store(OLD, NEW, history=False)

    def refuse() -> CommittedBatch:
        raise ForeignOffsets("written by someone else")

    monkeypatch.setattr(commits, "latest", refuse)
    leases = FakeLeaseStore(cell=Lease(4, "driver"))
    write_rewind(RewindTarget(to_offsets={0: 0}), {0: 0, 1: 45}, commits, leases, None,
                 now_ms=2_000, settle_s=0)
    assert commits.rows[-1].offsets == {0: 0, 1: 45}
    assert commits.rows[-1].audit["rewound_from"] == "none"
