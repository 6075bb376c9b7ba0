"""Run control: the one object Spark's threads share -- stop reasons, the idle clock, the
batches in flight, the backpressure rate.

Three threads meet here: Spark's batch generator (hands plans over), the thread that runs
batch outputs (takes them, reports the failure or the rate) and the main thread (signals,
the idle check, stopping the StreamingContext). Everything is behind one lock and every
method is short; no other driver state is shared.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType

from leakproof.driver.batch import BatchPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunLimits:
    """When ``leakproof run`` stops by itself (besides SIGTERM / SIGINT)."""

    until_idle_s: float | None = None
    max_batches: int | None = None  # batches with records; later ones are not planned
    log_format: str = "text"  # text | json: how the per-batch progress line is written
    # a backfill's end (driver/bounds.py): per partition the first offset not to read, or
    # the first record time not to read (epoch ms); at most one of the two
    until_offsets: Mapping[int, int] | None = None
    until_time_ms: int | None = None

    def bound(self) -> str | None:
        """The bound as the operator gave it (None: the run is not bounded)."""
        if self.until_offsets is not None:
            return "--until-offsets " + ",".join(f"{p}={o}" for p, o in
                                                 sorted(self.until_offsets.items()))
        if self.until_time_ms is not None:
            when = datetime.fromtimestamp(self.until_time_ms / 1000, UTC)
            return f"--until-time {when.isoformat(timespec='milliseconds')}"
        return None


class RunControl:
    """Why and when the run stops, and the plans handed from planning to output."""

    def __init__(self, limits: RunLimits) -> None:
        self.limits = limits
        # re-entrant: a signal handler runs on the main thread, which may hold the lock
        self._lock = threading.RLock()
        self._failure: BaseException | None = None
        self._stop_reason: str | None = None
        self._pending: dict[int, BatchPlan] = {}  # planned, output not yet started
        self._running = 0  # outputs started and not yet finished
        self._planned_with_data = 0
        # when planning first found nothing new since the last records or outage (None: it
        # has not yet): a slow start or a slow first batch is not silence
        self._quiet_since: float | None = None
        self._rate: float | None = None
        self._keys_moved_ms: int | None = None  # output found keys moved; planning takes it
        self._asked = False  # the stop came from an operator: a signal or `leakproof stop`
        self._finished = threading.Event()
        self.exit_code: int | None = None  # set with finish()
        self.signalled = False  # this process got SIGTERM or SIGINT

    # -- stopping --------------------------------------------------------------------------

    @property
    def failure(self) -> BaseException | None:
        with self._lock:
            return self._failure

    @property
    def stop_reason(self) -> str | None:
        with self._lock:
            return self._stop_reason

    def fail(self, exc: BaseException) -> None:
        """The first failure wins; the job stops and commits nothing after it."""
        with self._lock:
            if self._failure is None:
                self._failure = exc
                log.error("stopping: %s", exc)

    def request_stop(self, reason: str, *, operator: bool = False) -> None:
        """A graceful stop: batches already planned finish and commit, no new one is planned.

        ``operator``: asked for from outside (a signal, ``leakproof stop``), so a batch that
        cannot finish on the way out is abandoned, not a failure of the run.
        """
        with self._lock:
            self._request_stop(reason)
            self._asked = self._asked or operator
            if operator and self._pending:
                # An operator's stop finishes the batch in flight, not the ones queued behind
                # it (batches slower than the interval get planned ahead). Nothing of them
                # was committed: the next run reads their ranges again.
                log.info("stop asked: %d batch(es) planned but not started will not run",
                         len(self._pending))
                self._pending.clear()

    def _request_stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
            log.info("stopping gracefully: %s", reason)

    @property
    def asked_to_stop(self) -> bool:
        """An operator asked the run to stop (see ``request_stop``)."""
        with self._lock:
            return self._asked

    def quiescent(self) -> bool:
        """No batch planned and waiting, none running: stopping now loses nothing."""
        with self._lock:
            return self._quiescent()

    def _quiescent(self) -> bool:
        return not self._pending and not self._running

    def finish(self, exit_code: int | None) -> None:
        """The run is over (its last commit done or abandoned); None: it never started."""
        self.exit_code = exit_code
        self._finished.set()

    def wait_finished(self, timeout_s: float) -> bool:
        return self._finished.wait(timeout_s)

    def planning_allowed(self) -> bool:
        with self._lock:
            return self._failure is None and self._stop_reason is None

    # -- plans in flight -----------------------------------------------------------------

    def hand_over(self, plan: BatchPlan) -> None:
        """Planning's side: this plan's batch will run; count it for the idle clock,
        ``--max-batches`` and a bounded run's end (at plan time: batches generated while
        earlier ones run would otherwise all commit before a stop asked for at output time
        takes hold)."""
        with self._lock:
            self._pending[plan.batch_ms] = plan
            if plan.last:
                self._request_stop(f"every partition read to its bound ({self.limits.bound()})")
            if not plan.records:
                if self._quiet_since is None:
                    self._quiet_since = time.monotonic()
            else:
                self._quiet_since = None
                self._planned_with_data += 1
                limit = self.limits.max_batches
                if limit and self._planned_with_data >= limit:
                    self._request_stop(f"{self._planned_with_data} batches planned "
                                       f"(--max-batches)")

    def take(self, batch_ms: int) -> BatchPlan | None:
        """Output's side: the plan of this batch time (None: nothing to run for it).

        After an operator's stop no plan runs, not even one handed over in the instant the
        stop came: its tasks would write past the batches the stop dropped.
        """
        with self._lock:
            plan = self._pending.pop(batch_ms, None)
            if plan is not None and self._asked:
                log.info("batch %d not run: a stop was asked", batch_ms)
                return None
            if plan is not None:
                self._running += 1
            return plan

    def output_done(self) -> None:
        with self._lock:
            self._running -= 1

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Work of the planning thread that comes before a batch is handed over (the
        re-keying stage): counted as running, so a stop waits for it and ``--until-idle``
        never takes its time for silence."""
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1

    def not_idle(self) -> None:
        """Something happened that is not "no new records" (e.g. Kafka did not answer):
        ``--until-idle`` must not stop the job during an outage."""
        with self._lock:
            self._quiet_since = None

    def idle(self) -> bool:
        """``--until-idle`` is due: nothing in flight, and planning has looked and found no
        new records for that long (counted from a round that looked, never from the start:
        a Kafka or Spark slow to answer is not an idle topic)."""
        with self._lock:
            if (self.limits.until_idle_s is None or self._quiet_since is None
                    or not self._quiescent()):
                return False
            return time.monotonic() - self._quiet_since > self.limits.until_idle_s

    # -- keys moved (partitions added) ---------------------------------------------------

    def keys_moved(self, at_ms: int) -> None:
        """Output's side: a batch found keys in partitions not theirs (``key_guard``)."""
        with self._lock:
            self._keys_moved_ms = at_ms

    def take_keys_moved(self) -> int | None:
        """Planning's side: when keys were last found moved, once (None: not since)."""
        with self._lock:
            at, self._keys_moved_ms = self._keys_moved_ms, None
            return at

    # -- backpressure ----------------------------------------------------------------------

    @property
    def rate(self) -> float | None:
        """The newest backpressure estimate (events/s, whole job), None before the first."""
        with self._lock:
            return self._rate

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._rate = rate

    # -- signals ---------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT ask for a graceful stop (main thread only, as Python requires)."""
        def handler(signum: int, _frame: FrameType | None) -> None:
            self.signalled = True
            self.request_stop(f"{signal.Signals(signum).name} received", operator=True)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


_PY_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Refused|Failed)): (.+)$")


def describe(exc: BaseException) -> str:
    """The useful line of an error: for a failed Spark job, the Python error of the task."""
    lines = str(exc).splitlines()
    found = [m for m in map(_PY_ERROR.match, lines) if m]
    ours = [m for m in found if m.group(1).startswith("leakproof.")]
    pick = ours[0] if ours else (found[-1] if found else None)
    if pick is not None:
        return f"{pick.group(1).rsplit('.', 1)[-1]}: {pick.group(3)[:500]}"
    return f"{type(exc).__name__}: {lines[0][:500] if lines else ''}"
