"""Parsing what an operator types for a rewind."""

from __future__ import annotations

import pytest

from leakproof.cli import build_parser
from leakproof.rewind import RewindTarget, parse_offsets


def test_parse_offsets() -> None:
    assert parse_offsets("0=120, 3=7") == {0: 120, 3: 7}
    for bad in ("", "0=x", "a=1", "0:1", "-1=4"):
        with pytest.raises(ValueError):
            parse_offsets(bad)


def test_to_time_is_iso8601_utc_by_default() -> None:
    args = build_parser().parse_args(["offsets", "rewind", "--config", "c.yml", "--to-time",
                                      "2026-01-01T00:00:00"])
    assert args.to_time == 1_767_225_600_000
    args = build_parser().parse_args(["offsets", "rewind", "--config", "c.yml", "--to-time",
                                      "2026-01-01T01:00:00+01:00"])
    assert args.to_time == 1_767_225_600_000


def test_only_one_target() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["offsets", "rewind", "--config", "c", "--to-batch", "1",
                                   "--to-offsets", "0=1"])


def test_describe() -> None:
    assert RewindTarget(to_offsets={1: 5, 0: 2}).describe() == "to-offsets 0=2,1=5"
    assert RewindTarget(to_batch=17).describe() == "to-batch 17"
