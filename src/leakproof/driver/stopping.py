"""Stopping on request: the driver's heartbeat and ``leakproof stop``'s durable requests.

Owned by the main thread, which calls ``poll`` between its waits. A signal cannot always
reach a driver gracefully -- on YARN the NodeManager follows SIGTERM with SIGKILL a quarter of
a second later -- so ``leakproof stop`` writes a request into the run record instead,
addressed to the running driver's lease epoch; the driver reads it with its heartbeat and
stops after the batch in flight. A request for another epoch (a run that already ended) is
never acted on.
"""

from __future__ import annotations

import logging
import time

from leakproof.driver.control import RunControl
from leakproof.ports.driver import RunRecord

log = logging.getLogger(__name__)

STOP_REASON = "leakproof stop was asked"


class StopRequests:
    """Heartbeats and stop requests for one driver (one lease epoch)."""

    def __init__(self, control: RunControl, record: RunRecord, epoch: int, period_s: float,
                 where: str) -> None:
        self._control = control
        self._record = record
        self._epoch = epoch
        self._period_s = period_s
        self._where = where
        self._next = 0.0

    def poll(self, now: float | None = None) -> None:
        """Every ``period_s``: write the heartbeat, and stop if a request names this epoch.

        A failed heartbeat is logged and skipped: HBase outages are the batches' business.
        """
        now = time.monotonic() if now is None else now
        if now < self._next:
            return
        self._next = now + self._period_s
        try:
            state = self._record.heartbeat(self._epoch, self._where)
        except Exception as exc:  # noqa: BLE001 - a missed heartbeat only delays a stop
            log.debug("heartbeat not written: %s", exc)
            return
        if state is not None and state.asked_to_stop(self._epoch):
            self._control.request_stop(STOP_REASON, operator=True)

    def ended(self, detail: str) -> None:
        """Record how the run ended, for ``leakproof stop --wait`` (best effort)."""
        try:
            self._record.stopped(self._epoch, detail)
        except Exception as exc:  # noqa: BLE001 - the process is exiting anyway
            log.warning("could not record the end of this run: %s", exc)
