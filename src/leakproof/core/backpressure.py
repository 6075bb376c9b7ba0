"""Backpressure: Spark's PID rate estimator, and the per-partition split of its rate (pure).

After every batch the estimator sees how many records the batch held, how long it took and
how late it started (scheduling delay), and proposes the rate (records/s, whole job) the
next batches may read. The terms, as in Spark's PIDRateEstimator:

- error: the rate used minus the rate just achieved (records / processing time);
- historical error: the backlog the scheduling delay stands for, as a rate over one batch;
- new rate = rate - P*error - I*historical - D*d(error)/dt, never below ``min_rate``.

The first batch only calibrates (no estimate yet: ``initial_rate`` per partition caps it,
as spark.streaming.backpressure.initialRate does). The rate is then split over partitions
in proportion to their lag, as DirectKafkaInputDStream does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from leakproof.core.offsets import per_partition_budget


@dataclass
class PIDRateEstimator:
    """State of the estimator; ``compute`` is called once per completed batch."""

    batch_interval_ms: int
    proportional: float = 1.0
    integral: float = 0.2
    derivative: float = 0.0
    min_rate: float = 100.0
    _first: bool = True
    _latest_time: int = -1
    _latest_rate: float = -1.0
    _latest_error: float = -1.0

    def __post_init__(self) -> None:
        if self.batch_interval_ms <= 0:
            raise ValueError("'batch_interval_ms' must be > 0")
        for name in ("proportional", "integral", "derivative"):
            if getattr(self, name) < 0:
                raise ValueError(f"'{name}' must be >= 0")
        if self.min_rate <= 0:
            raise ValueError("'min_rate' must be > 0")

    def compute(self, time_ms: int, elements: int, processing_ms: float,
                scheduling_ms: float) -> float | None:
        """The new rate (records/s), or None when there is nothing to learn from."""
        if not (time_ms > self._latest_time and elements > 0 and processing_ms > 0):
            return None
        since_update_s = (time_ms - self._latest_time) / 1000.0
        processing_rate = elements / processing_ms * 1000.0
        error = self._latest_rate - processing_rate
        historical_error = scheduling_ms * processing_rate / self.batch_interval_ms
        d_error = (error - self._latest_error) / since_update_s
        new_rate = max(self._latest_rate - self.proportional * error
                       - self.integral * historical_error - self.derivative * d_error,
                       self.min_rate)
        self._latest_time = time_ms
        if self._first:
            self._latest_rate, self._latest_error, self._first = processing_rate, 0.0, False
            return None
        self._latest_rate, self._latest_error = new_rate, error
        return new_rate


def split_budgets(rate: float | None, lags: Mapping[int, int], interval_s: float,
                  max_rate: int, min_rate: int, initial_rate: int = 0) -> dict[int, int | None]:
    """Per-partition offsets allowed this batch.

    With no estimate yet, ``initial_rate`` (per partition; 0 = none) caps like a max rate.
    With an estimate, each partition gets its lag's share of it, floored by ``min_rate``
    and capped by ``max_rate`` (per_partition_budget applies both).
    """
    if rate is None:
        cap = min(x for x in (initial_rate, max_rate) if x) if (initial_rate or max_rate) else 0
        return {p: per_partition_budget(interval_s, cap) for p in lags}
    total = sum(lags.values())
    return {p: per_partition_budget(interval_s, max_rate, min_rate,
                                    estimated_rate=rate * lag / total if total else 0.0)
            for p, lag in lags.items()}
