"""Planning rules (driver.planning): start checks, partitions, ranges, with fakes."""

from __future__ import annotations

import pytest

from leakproof.errors import KafkaReadError, OffsetError
from leakproof.offsets import LogBounds

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
    from leakproof.config import BackpressureConfig

    r = rig({0: (0, 1000), 1: (0, 3000)}, backpressure=BackpressureConfig(enabled=True))
    plan = r.planner.plan(2_000, rate=400.0)  # 400 ev/s for the job, one-second batches
    assert {x.partition: x.count for x in plan.work} == {0: 100, 1: 300}


def test_stored_offset_beyond_the_log_end_is_refused() -> None:
    with pytest.raises(OffsetError, match="beyond the log end 10"):
        rig({0: (0, 10)}, stored={0: 12})
    assert LogBounds(0, 1).log_end == 1


def test_lag_in_seconds_is_the_age_of_each_partitions_oldest_unread_record() -> None:
    """The record at each range's end is read once per offset; a partition caught up has
    none; one whose record cannot be read is unknown, not caught up."""
    r = rig({0: (0, 25), 1: (0, 3), 2: (0, 40)}, max_rate_per_partition=10)
    r.meta.record_ms = {(0, 10): 1_000, (2, 10): 4_000}
    plan = r.plan()
    assert dict(plan.unread_ts) == {0: 1_000, 2: 4_000}
    assert plan.lag_s_by_partition(11_000) == {0: 10.0, 1: 0.0, 2: 7.0}
    assert plan.lag_s(11_000) == 10.0
    assert r.meta.timestamp_reads == 1
    r.meta.record_ms = {(0, 20): 2_000}  # partition 2's record at 20 cannot be read
    plan = r.plan()
    assert plan.lag_s_by_partition(11_000) == {0: 9.0, 1: 0.0, 2: None}
    assert plan.lag_s(11_000) == 9.0
    r.meta.record_ms[(2, 30)] = 5_000
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
