"""The Spark lines leakproof supports (the converters each line picks are exercised by the
integration tests on each line: placement lists executors through them)."""

from __future__ import annotations

from leakproof.driver.spark_compat import SparkLine


def test_supported_lines() -> None:
    assert [SparkLine(v, (2, 12)).supported for v in ((3, 4), (3, 5), (3, 6), (4, 0), (4, 3),
                                                      (5, 0))] == [
        False, True, True, True, True, False]

