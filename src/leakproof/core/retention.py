"""How long closed sessions are kept (``sessions.retention_days``): the horizon and the
sweep's cut (pure).

A partition's *horizon* is its watermark less the retention: an event at or before it is
late and touches no row (``sessions.PartitionFolder``). A closed session is deleted once its
reach (the newest event time it took) lies before the sweep's cut: the horizon less the
close delay (no event newer than the horizon can reach it, whichever way sessions are cut),
of the watermark a range started from (``task.sweep`` says why), rounded down to a whole
bucket of the retention index, so each bucket row is read about once. Sessions are indexed
for the sweep by bucket of reach when they close (``PartitionRows``): the sweep reads what
it deletes, not the table. docs/DESIGN.md, "Retention", has the argument.
"""

from __future__ import annotations

from leakproof.core.sessions import NO_WATERMARK

WIDTH = 3_600_000  # an hour of event time per index row


def bucket_of(last_ts: int) -> int:
    return max(0, last_ts - last_ts % WIDTH)


def cut(watermark: int, retention_ms: int, close_after_ms: int) -> int:
    """Closed sessions whose last_ts is below this are deleted (0: none yet)."""
    if watermark == NO_WATERMARK:
        return 0
    return bucket_of(max(0, watermark - retention_ms - close_after_ms))
