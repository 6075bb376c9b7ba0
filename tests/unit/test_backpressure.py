"""Spark's PID rate estimator and the lag-proportional split, with literal numbers."""

from __future__ import annotations

import pytest

from leakproof.core.backpressure import PIDRateEstimator, split_budgets


def test_first_batch_only_calibrates_then_pid_terms_apply() -> None:
    est = PIDRateEstimator(batch_interval_ms=1000)
    assert est.compute(1000, 1000, 500, 0) is None  # learns 2000/s
    # achieved 1000/s: error 1000 -> rate 2000 - 1.0 * 1000
    assert est.compute(2000, 1000, 1000, 0) == pytest.approx(1000)
    # achieved 2000/s (error -1000), but started 2 s late: backlog worth 4000/s
    # 1000 + 1000 - 0.2 * 4000
    assert est.compute(3000, 1000, 500, 2000) == pytest.approx(1200)


def test_rate_never_below_min_rate_and_ignores_empty_batches() -> None:
    est = PIDRateEstimator(batch_interval_ms=1000, min_rate=100)
    est.compute(1000, 1000, 1000, 0)
    assert est.compute(2000, 0, 1000, 0) is None  # nothing to learn from
    assert est.compute(900, 10, 1000, 0) is None  # time went backwards
    assert est.compute(3000, 10, 1000, 100_000) == 100


def test_derivative_term() -> None:
    est = PIDRateEstimator(batch_interval_ms=1000, proportional=0, integral=0, derivative=0.5)
    est.compute(1000, 1000, 1000, 0)  # 1000/s
    # error 1000 - 500 = 500 since last error 0 over 1 s: 1000 - 0.5 * 500
    assert est.compute(2000, 500, 1000, 0) == pytest.approx(750)


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="'integral' must be >= 0"):
        PIDRateEstimator(1000, integral=-1)
    with pytest.raises(ValueError, match="'min_rate' must be > 0"):
        PIDRateEstimator(1000, min_rate=0)


def test_split_by_lag_with_floor_and_cap() -> None:
    lags = {0: 9000, 1: 1000, 2: 0}
    assert split_budgets(1000.0, lags, 2.0, max_rate=0, min_rate=0) == {0: 1800, 1: 200,
                                                                         2: 1}
    # floor: each partition at least min_rate; cap: at most max_rate
    assert split_budgets(1000.0, lags, 2.0, max_rate=600, min_rate=150) == {0: 1200, 1: 300,
                                                                             2: 300}


def test_before_any_estimate_initial_rate_caps() -> None:
    assert split_budgets(None, {0: 10, 1: 10}, 2.0, max_rate=0, min_rate=0) == {0: None,
                                                                                 1: None}
    assert split_budgets(None, {0: 10}, 2.0, max_rate=0, min_rate=0, initial_rate=50) == {0: 100}
    assert split_budgets(None, {0: 10}, 2.0, max_rate=20, min_rate=0, initial_rate=50) == {0: 40}
