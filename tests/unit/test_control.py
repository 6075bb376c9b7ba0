"""Run control: stop reasons, the idle clock, plans in flight, signals."""

from __future__ import annotations

import os
import signal

from leakproof.core.offsets import LogBounds, OffsetRange
from leakproof.driver.batch import BatchPlan
from leakproof.driver.control import RunControl, RunLimits


def plan(batch_ms: int, records: int) -> BatchPlan:
    return BatchPlan(batch_ms, (OffsetRange("t", 0, 0, records),), {0: LogBounds(0, records)})


def test_max_batches_counts_at_plan_time_and_stops_planning() -> None:
    c = RunControl(RunLimits(max_batches=2))
    c.hand_over(plan(1, 5))
    c.hand_over(plan(2, 0))  # no records: does not count
    assert c.planning_allowed()
    c.hand_over(plan(3, 5))
    assert not c.planning_allowed() and c.stop_reason == "2 batches planned (--max-batches)"
    assert not c.quiescent()  # plans handed over have not run their output
    for ms in (1, 2, 3):
        assert c.take(ms) is not None
        c.output_done()
    assert c.quiescent()
    assert not c.asked_to_stop  # a run limit, not an operator


def test_idle_only_with_nothing_in_flight() -> None:
    c = RunControl(RunLimits(until_idle_s=0.0))
    c.hand_over(plan(1, 5))
    assert not c.idle()
    assert c.take(1) is not None
    assert not c.idle()  # its output runs
    c.output_done()
    assert not c.idle()  # no round has looked since
    c.hand_over(plan(2, 0))
    assert c.take(2) is not None
    c.output_done()
    assert c.idle()
    assert c.take(1) is None  # a batch is taken once


def test_the_idle_clock_starts_when_planning_first_finds_nothing() -> None:
    c = RunControl(RunLimits(until_idle_s=0.0))
    assert not c.idle()  # a stream slow to start, or a first batch slow to plan, is not idle
    c.hand_over(plan(1, 0))
    c.take(1)
    c.output_done()
    assert c.idle()
    c.not_idle()  # Kafka did not answer: the clock starts again at the next round
    assert not c.idle()


def test_no_idle_stop_without_until_idle() -> None:
    assert not RunControl(RunLimits()).idle()


def test_the_first_failure_wins() -> None:
    c = RunControl(RunLimits())
    c.fail(ValueError("first"))
    c.fail(ValueError("second"))
    assert str(c.failure) == "first" and not c.planning_allowed()


def test_sigterm_asks_for_a_graceful_stop() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    c = RunControl(RunLimits())
    try:
        c.install_signal_handlers()
        os.kill(os.getpid(), signal.SIGTERM)
        assert c.stop_reason == "SIGTERM received" and c.asked_to_stop
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])


def test_backpressure_rate_is_shared() -> None:
    c = RunControl(RunLimits())
    assert c.rate is None
    c.set_rate(123.0)
    assert c.rate == 123.0


def test_after_an_operator_stop_no_plan_runs() -> None:
    c = RunControl(RunLimits())
    c.hand_over(plan(1, 5))
    c.request_stop("SIGTERM received", operator=True)
    assert c.take(1) is None  # dropped
    c.hand_over(plan(2, 5))  # planned in the instant the stop came
    assert c.take(2) is None and c.quiescent()
