"""Durable stop requests and heartbeats (driver.stopping, runs), over a fake run record."""

from __future__ import annotations

from leakproof.core.runs import RunState, heartbeat_period_s, stale_after_ms
from leakproof.driver.control import RunControl, RunLimits
from leakproof.driver.stopping import STOP_REASON, StopRequests
from leakproof.testing.driver_ports import FakeRunRecord


def driver(record: FakeRunRecord, epoch: int = 3) -> tuple[RunControl, StopRequests]:
    control = RunControl(RunLimits())
    return control, StopRequests(control, record, epoch, period_s=2.0, where="h:1")


def test_a_request_for_this_epoch_stops_the_run_as_an_operator_stop() -> None:
    record = FakeRunRecord()
    control, stops = driver(record)
    stops.poll(now=0.0)
    assert record.state is not None and record.state.where == "h:1"
    record.request_stop(3)
    stops.poll(now=1.0)  # within the period: not read yet
    assert control.stop_reason is None
    stops.poll(now=2.5)
    assert control.stop_reason == STOP_REASON and control.asked_to_stop


def test_a_stale_request_never_stops_a_later_run() -> None:
    record = FakeRunRecord(RunState(2, "stopped", 0, stop_epoch=2))  # asked of the last run
    control, stops = driver(record, epoch=3)
    for t in (0.0, 3.0, 6.0):
        stops.poll(now=t)
    assert control.stop_reason is None
    assert record.state is not None and record.state.epoch == 3


def test_an_older_driver_does_not_take_the_record_back() -> None:
    record = FakeRunRecord(RunState(5, "running", 0))
    _, stops = driver(record, epoch=3)
    stops.poll(now=0.0)
    assert record.state is not None and record.state.epoch == 5


def test_a_missed_heartbeat_is_not_an_error() -> None:
    record = FakeRunRecord(down=True)
    control, stops = driver(record)
    stops.poll(now=0.0)
    assert control.failure is None and control.stop_reason is None


def test_the_end_is_recorded_for_leakproof_stop_wait() -> None:
    record = FakeRunRecord()
    _, stops = driver(record)
    stops.poll(now=0.0)
    stops.ended('{"exit": 0}')
    assert record.state is not None and record.state.state == "stopped"
    assert record.state.detail == '{"exit": 0}'


def test_liveness() -> None:
    state = RunState(1, "running", heartbeat_ms=10_000)
    assert state.alive(now_ms=20_000, stale_after_ms=15_000)
    assert not state.alive(now_ms=30_000, stale_after_ms=15_000)
    assert not RunState(1, "stopped", 10_000).alive(10_000, 15_000)
    assert heartbeat_period_s(0.2) == 1.0 and heartbeat_period_s(2) == 2
    assert heartbeat_period_s(60) == 5.0 and stale_after_ms(2) == 15_000
