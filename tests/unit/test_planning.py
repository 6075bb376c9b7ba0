"""Planning rules (driver.planning): start checks, partitions, ranges, with fakes."""

from __future__ import annotations

import time

import pytest

from leakproof.commands.rewind import RewindTarget, write_rewind
from leakproof.core.config import KafkaConfig
from leakproof.core.errors import KafkaReadError, OffsetError, TablesOwned
from leakproof.core.offsets import CommittedBatch, LogBounds
from leakproof.core.sessions import fence_key, fence_source, incarnation_of
from leakproof.driver.planning import Planner
from leakproof.testing.driver_ports import (
    FakeCommitStore,
    FakeLeaseStore,
    FakeMetadata,
    FakeTableSet,
)

from .drivers import rig


def test_ranges_are_capped_by_the_rate_and_continue_where_the_last_ended() -> None:
    r = rig({0: (0, 25), 1: (0, 3)}, max_rate_per_partition=10)
    assert [str(x) for x in r.plan().work] == ["t:0[0,10)", "t:1[0,3)"]
    assert [str(x) for x in r.plan().work] == ["t:0[10,20)"]
    plan = r.plan()
    assert [str(x) for x in plan.work] == ["t:0[20,25)"] and plan.lag == 0


def test_a_recreated_topic_is_refused_at_start() -> None:
    with pytest.raises(OffsetError, match="offsets row 500 belongs to topic id id-0, the "
                                          "topic now has id id-1"):
        rig({0: (0, 10)}, stored={0: 5}, stored_audit={"topic_id": "id-0"})


def test_a_recreated_topic_is_refused_even_when_the_store_lost_its_offsets() -> None:
    """Deleting a topic deletes its consumer-group offsets: with offsets.store kafka the
    store then looks like a first run. The id kept beside the lease still tells."""
    with pytest.raises(OffsetError, match="the last run of this group read topic id id-0, "
                                          "the topic now has id id-1"):
        rig({0: (0, 10)}, recorded_topic_id="id-0")
    assert [str(x) for x in rig({0: (0, 10)}, recorded_topic_id="id-1").plan().work] == [
        "t:0[0,10)"]


def test_a_recreated_topic_accepted_by_a_rewind_gets_fences_of_its_own() -> None:
    """The first topic's fences carry no tag; once a rewind accepts a recreated topic (it
    records the new id and pins the first), that topic's fences carry its own tag, so an old
    fence never takes its records for replays."""
    leases = FakeLeaseStore(recorded_topic_id="id-0")
    assert rig({0: (0, 10)}, topic_id="id-0", leases=leases).incarnation == ""
    write_rewind(RewindTarget(to_offsets={0: 0}), {0: 0}, FakeCommitStore(), leases,
                 "7f3e9a2c-1b4d-4e5f-8a6b-0c1d2e3f4a5b", now_ms=2_000, settle_s=0)
    again = rig({0: (0, 10)}, topic_id="7f3e9a2c-1b4d-4e5f-8a6b-0c1d2e3f4a5b", leases=leases)
    assert again.incarnation == "7f3e9a2c1b4d"
    assert fence_key("t", 0, again.incarnation) == "t~7f3e9a2c1b4d:0"
    assert fence_source("t~7f3e9a2c1b4d:0") == fence_source("t:0") == ("t", 0)


def test_a_first_run_pins_the_topic_it_reads_as_the_untagged_one() -> None:
    leases = FakeLeaseStore()
    assert rig({0: (0, 10)}, leases=leases).incarnation == ""
    assert leases.first_id == "id-1"
    assert incarnation_of(None, "id-1") == incarnation_of("id-1", None) == ""


def test_a_topic_recreated_while_running_stops_planning() -> None:
    r = rig({0: (0, 10)})
    r.meta.topic_id = "id-2"
    with pytest.raises(OffsetError, match=r"recreated while this job ran \(topic id id-1, "
                                          r"now id-2\)"):
        r.plan()


def test_rows_without_a_topic_id_still_resume() -> None:
    r = rig({0: (0, 10)}, stored={0: 5}, stored_audit={})
    assert [str(x) for x in r.plan().work] == ["t:0[5,10)"]


def test_listed_partitions_must_exist() -> None:
    with pytest.raises(OffsetError, match=r"kafka.partitions lists \[7\], but t has partitions "
                                          r"\[0, 1\]"):
        rig({0: (0, 1), 1: (0, 1)}, partitions=(1, 7))


def test_an_unreachable_broker_is_a_read_error_for_the_glue_to_ride_out() -> None:
    r = rig({0: (0, 10)})
    r.meta.down = True
    with pytest.raises(KafkaReadError):
        r.plan()
    r.meta.down = False
    assert [str(x) for x in r.plan().work] == ["t:0[0,10)"]


def test_backpressure_splits_its_rate_by_lag() -> None:
    from leakproof.core.config import BackpressureConfig

    r = rig({0: (0, 1000), 1: (0, 3000)}, backpressure=BackpressureConfig(enabled=True))
    plan = r.planner.plan(2_000, rate=400.0)  # 400 ev/s for the job, one-second batches
    assert {x.partition: x.count for x in plan.work} == {0: 100, 1: 300}


def test_stored_offset_beyond_the_log_end_is_refused() -> None:
    with pytest.raises(OffsetError, match="beyond the log end 10"):
        rig({0: (0, 10)}, stored={0: 12})
    assert LogBounds(0, 1).log_end == 1


def test_a_second_job_on_the_tables_is_refused_while_the_first_runs() -> None:
    leases = FakeLeaseStore(tables_owner="other:g2", tables_owner_running=True)
    with pytest.raises(TablesOwned, match="other:g2"):
        rig({0: (0, 10)}, leases=leases)
    assert leases.cell is None  # refused before it took any lease
    leases.tables_owner_running = False  # stopped: its tables are taken over
    rig({0: (0, 10)}, leases=leases)
    assert leases.tables_owner == "t:g"


def test_a_new_group_taking_the_tables_over_starts_where_their_last_writer_committed(
) -> None:
    # blue (t:blue) read to 40 / 25 and stopped; more records came; green (t:g) starts with
    # auto_offset_reset latest: it must read from blue's commit, not from the log end
    leases = FakeLeaseStore(tables_owner="t:blue")
    tables = FakeTableSet(leases, heads={("t", "blue"): CommittedBatch(
        900, {0: 40, 1: 25}, {"epoch": "3", "topic_id": "id-1"})})
    r = rig({0: (0, 100), 1: (0, 60)}, leases=leases, tables=tables,
            auto_offset_reset="latest")
    assert r.committer.committed == {0: 40, 1: 25}
    assert [str(x) for x in r.plan().work] == ["t:0[40,100)", "t:1[25,60)"]
    assert leases.tables_owner == "t:g"


def test_a_takeover_does_not_resume_from_the_groups_own_older_offsets() -> None:
    # green ran once (to 10), blue took over and read to 70; green takes them back
    leases = FakeLeaseStore(tables_owner="t:blue")
    tables = FakeTableSet(leases, heads={("t", "blue"): CommittedBatch(
        900, {0: 70}, {"epoch": "2", "topic_id": "id-1"})})
    r = rig({0: (0, 100)}, stored={0: 10}, leases=leases, tables=tables)
    assert r.committer.committed == {0: 70}
    r.run()
    assert [row.offsets for row in r.store.rows] == [{0: 10}, {0: 100}]
    assert r.store.rows[-1].batch_ms > 900  # keyed above the head it started from


def test_a_job_of_another_topic_is_refused_while_the_old_topic_has_open_sessions() -> None:
    leases = FakeLeaseStore(tables_owner="old:g")
    tables = FakeTableSet(leases, open={"old": 12})
    with pytest.raises(TablesOwned, match=r"topic old .* left 12 sessions open; a job of "
                                          r"topic t never closes them"):
        rig({0: (0, 10)}, leases=leases, tables=tables)
    assert leases.cell is None and leases.tables_owner == "old:g"  # nothing taken
    tables.open["old"] = 0  # the old job ran on until they closed
    r = rig({0: (0, 10)}, leases=leases, tables=tables)
    assert r.committer.committed == {0: 0} and leases.tables_owner == "t:g"


def test_a_partition_silent_for_idle_after_gets_an_empty_range_as_a_task() -> None:
    meta = FakeMetadata("t", {0: LogBounds(0, 10), 1: LogBounds(0, 0)})
    planner = Planner(KafkaConfig("127.0.0.1:9092", "t", "g"), 0.01, meta, idle_after_s=0.05)
    planner.start(None)
    first = planner.plan(1_000)
    assert first.idle == {} and [str(r) for r in first.work] == ["t:0[0,10)"]
    time.sleep(0.06)
    meta.bounds[0] = LogBounds(0, 12)  # p0 still gets records: never idle
    later = planner.plan(2_000)
    assert list(later.idle) == [1] and [str(r) for r in later.work] == ["t:0[10,12)",
                                                                        "t:1[0,0)"]
    assert 60 <= later.idle[1] < 1_000  # silent since the start: this process's clock
    assert planner.plan(3_000).idle == {}  # at most once per idle_after_s
    assert Planner(KafkaConfig("127.0.0.1:9092", "t", "g"), 0.01, meta).plan(4_000).idle == {}


def test_silence_is_timed_from_the_last_read_not_from_the_records_timestamps() -> None:
    """A mirrored topic's records carry their event times, an hour old: a partition just
    read is not silent, whatever its records' timestamps say; one read nothing of for
    ``idle_after_s`` is, by that long."""
    meta = FakeMetadata("t", {0: LogBounds(0, 10)})
    meta.record_ms = {0: [int(time.time() * 1000) - 3_600_000] * 10}  # an hour old
    planner = Planner(KafkaConfig("127.0.0.1:9092", "t", "g"), 0.01, meta, idle_after_s=0.05)
    planner.start(None)
    assert planner.plan(1_000).idle == {}  # read now
    assert planner.plan(2_000).idle == {}  # nothing new, but read a moment ago
    time.sleep(0.06)
    due = planner.plan(3_000).idle
    assert list(due) == [0] and 50 <= due[0] < 1_000


def times(at: dict[int, int], length: int) -> list[int]:
    """A partition's record timestamps (FakeMetadata.record_ms): those given, 0 elsewhere."""
    return [at.get(i, 0) for i in range(length)]


def test_lag_in_seconds_is_the_age_of_each_partitions_oldest_unread_record() -> None:
    """The record at each range's end is read once per offset; a partition caught up has
    none; one whose record cannot be read is unknown, not caught up."""
    r = rig({0: (0, 25), 1: (0, 3), 2: (0, 40)}, max_rate_per_partition=10)
    r.meta.record_ms = {0: times({10: 1_000}, 25), 2: times({10: 4_000}, 40)}
    plan = r.plan()
    assert dict(plan.unread_ts) == {0: 1_000, 2: 4_000}
    assert plan.lag_s_by_partition(11_000) == {0: 10.0, 1: 0.0, 2: 7.0}
    assert plan.lag_s(11_000) == 10.0
    assert r.meta.timestamp_reads == 1
    r.meta.record_ms = {0: times({20: 2_000}, 25)}  # partition 2's records cannot be read
    plan = r.plan()
    assert plan.lag_s_by_partition(11_000) == {0: 9.0, 1: 0.0, 2: None}
    assert plan.lag_s(11_000) == 9.0
    r.meta.record_ms[2] = times({30: 5_000}, 40)
    r.meta.bounds[0] = LogBounds(0, 30)  # partition 0 grows: read to its end next
    plan = r.plan()
    assert plan.lag_s_by_partition(11_000) == {0: 0.0, 1: 0.0, 2: 6.0}
    assert r.meta.timestamp_reads == 3


def test_a_partition_held_by_an_open_transaction_is_as_old_as_the_transaction() -> None:
    r = rig({0: (0, 20, 10)})
    r.meta.opened_ms = {0: 3_000}
    plan = r.plan()
    assert plan.lag_s_by_partition(8_000) == {0: 5.0}
    assert r.meta.timestamp_reads == 0  # the transaction's first record was read already
    plan = r.plan()  # still held: nothing read again
    assert plan.lag_s(8_000) == 5.0 and r.meta.timestamp_reads == 0


def test_a_partition_an_open_transaction_holds_is_not_idle() -> None:
    """Its records may yet commit: moving its watermark on would close their sessions."""
    meta = FakeMetadata("t", {0: LogBounds(0, 10, 4)})  # the stable end 4: a transaction open
    planner = Planner(KafkaConfig("127.0.0.1:9092", "t", "g"), 0.01, meta, idle_after_s=0.01)
    planner.start(None)
    planner.plan(1_000)
    time.sleep(0.03)
    assert planner.plan(2_000).idle == {}


def test_a_log_end_behind_what_the_run_read_waits_then_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new leader's high watermark can trail what the run already read: empty ranges
    while it catches up, the reading going on once it has; a log that stays shorter than
    ``BEHIND_S`` is refused as at the start."""
    from leakproof.driver import planning

    r = rig({0: (0, 10)})
    assert [str(x) for x in r.plan().work] == ["t:0[0,10)"]
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    r.meta.bounds[0] = LogBounds(0, 9)  # the new leader, one fetch behind
    plan = r.plan()
    assert [str(x) for x in plan.ranges] == ["t:0[10,10)"] and plan.work == []
    r.meta.bounds[0] = LogBounds(0, 14)  # caught up, and on
    assert [str(x) for x in r.plan().work] == ["t:0[10,14)"]
    r.meta.bounds[0] = LogBounds(0, 9)
    r.plan()
    clock[0] += planning.BEHIND_S - 1
    assert r.plan().work == []
    clock[0] += 2
    with pytest.raises(OffsetError, match="beyond the log end 9"):
        r.plan()
