"""The run record: which driver runs a topic and group now, and whether it was asked to stop
(pure). ``leakproof stop`` writes a request addressed to the running driver's lease epoch;
the driver reads it with its heartbeat and stops after its batch in flight. A request names
an epoch, so it never stops a later run by accident.
"""

from __future__ import annotations

from dataclasses import dataclass

RUNNING, STOPPED = "running", "stopped"


@dataclass(frozen=True)
class RunState:
    """What the record says about the newest run of one topic and group.

    ``stop_epoch`` is the epoch a ``leakproof stop`` was addressed to (0: none).
    """

    epoch: int
    state: str  # running | stopped
    heartbeat_ms: int
    stop_epoch: int = 0
    stop_requested_ms: int = 0
    stopped_ms: int = 0
    detail: str = ""  # how it stopped: the last committed batch and offsets (JSON)
    where: str = ""  # host:pid of the driver

    def alive(self, now_ms: int, stale_after_ms: int) -> bool:
        """Running, and heard from recently (a driver killed with SIGKILL says nothing)."""
        return self.state == RUNNING and now_ms - self.heartbeat_ms <= stale_after_ms

    def asked_to_stop(self, epoch: int) -> bool:
        return self.stop_epoch == epoch


def stale_after_ms(batch_interval_s: float) -> int:
    """How long without a heartbeat means the driver is gone: a few heartbeats' worth."""
    return round(max(15.0, 5 * heartbeat_period_s(batch_interval_s)) * 1000)


def heartbeat_period_s(batch_interval_s: float) -> float:
    """How often the driver writes its heartbeat (and reads stop requests)."""
    return min(max(batch_interval_s, 1.0), 5.0)
