"""How a run ended: its exit code, the log line that says why, and the run record's account.

0 after a stop (asked for, or by the run limits) -- also when the batch in flight had to be
abandoned uncommitted, since a restart replays it; 1 after a failed batch nobody asked for;
``BOUND_NOT_REACHED`` when a bounded run stopped short of its bound, so a backfill stopped
early is never taken for a finished copy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from leakproof.core.logs import FIELDS
from leakproof.driver.bounds import BOUND_NOT_REACHED, shortfall
from leakproof.driver.control import RunControl

log = logging.getLogger("leakproof.driver.job")


def run_outcome(control: RunControl, committed: Mapping[int, int], last: int | None,
                outputs: int, abandoned: bool, until: Mapping[int, int] | None
                ) -> tuple[int, str]:
    """The exit code and the run record's account of the end (JSON), logged as it is
    decided. ``committed``: the offsets committed last; ``last``: that batch's time;
    ``outputs``: the batches committed; ``abandoned``: a stop gave up on the batch in
    flight; ``until``: the run's bound per partition (None: unbounded)."""
    committed = dict(sorted(committed.items()))
    failure = control.failure
    where = (f"the last committed batch is {last}" if last else
             "this run committed no batch")
    if failure is not None and not control.asked_to_stop:
        log.error("job failed; offsets were not committed past the last good batch. "
                  "Restart to resume from HBase. Cause: %s", failure)
        rc, how = 1, f"failed: {failure}"
    elif failure is not None or abandoned:
        # Asked to stop, and the batch in flight could not finish: nothing after the last
        # commit was committed, so nothing is lost -- a restart replays that batch.
        log.warning("stopped as asked (%s); the batch in flight was abandoned without "
                    "commit%s. Nothing is lost: %s (offsets %s) and a restart resumes "
                    "there.", control.stop_reason,
                    f" ({failure})" if failure else "", where, committed)
        rc, how = 0, f"stopped ({control.stop_reason}); batch in flight abandoned"
    else:
        log.info("stopped after %d batches (%s); %s; committed offsets %s", outputs,
                 control.stop_reason, where, committed, extra={FIELDS: {
                     "stop_reason": control.stop_reason, "last_batch_ms": last,
                     "offsets": committed}})
        rc, how = 0, f"stopped ({control.stop_reason})"
    short = shortfall(until, committed)
    if rc == 0 and short:
        log.error("the bounded run (%s) stopped before its bound: %s. The tables do not "
                  "yet hold every record up to it; run again with the same bound to "
                  "finish (exit %d)", control.limits.bound(), short, BOUND_NOT_REACHED)
        rc, how = BOUND_NOT_REACHED, f"{how}; bound not reached: {short}"
    return rc, json.dumps({"exit": rc, "how": how, "last_batch_ms": last,
                           "offsets": committed})
