"""Two tables' rows merged in row-key order: what only one holds, what differs and by which
cells -- with literals, and streamed (never more than a row of each side at once)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leakproof.cli import build_parser
from leakproof.commands.sessions_diff import SessionsDiff
from leakproof.core.row_diff import Row, diff_rows

A: list[Row] = [(b"a", {b"s:events": b"3"}),
                (b"b", {b"s:events": b"5", b"s:state": b"open"}),
                (b"c", {b"s:events": b"1"}),
                (b"e", {b"s:events": b"2"})]
B: list[Row] = [(b"b", {b"s:events": b"6", b"s:state": b"open"}),
                (b"c", {b"s:events": b"1"}),
                (b"d", {b"s:events": b"9"}),
                (b"e", {b"s:events": b"2", b"s:late_events": b"1"})]


def test_rows_only_in_one_rows_that_differ_and_by_which_cells() -> None:
    d = diff_rows(A, B)
    assert (d.rows_a, d.rows_b, d.equal, d.only_a, d.only_b, d.differ) == (4, 4, 1, 1, 1, 2)
    assert d.only_a_sample == [b"a"] and d.only_b_sample == [b"d"]
    assert d.differ_sample == [(b"b", {b"s:events": (b"5", b"6")}),
                               (b"e", {b"s:late_events": (None, b"1")})]  # a missing cell
    assert dict(d.cells) == {b"s:events": 1, b"s:late_events": 1}
    assert not d.same and diff_rows(A, A).same and diff_rows([], []).same


def test_samples_are_bounded_and_counts_are_not() -> None:
    d = diff_rows(A, [], sample=2)
    assert d.only_a == 4 and d.only_a_sample == [b"a", b"b"]
    assert diff_rows(A, B, sample=0).differ_sample == []


def test_both_sides_are_streamed() -> None:
    pulled: list[str] = []

    def side(name: str, n: int) -> Iterator[Row]:
        for i in range(n):
            pulled.append(f"{name}{i}")
            yield f"{i:06d}".encode(), {b"s:events": b"1"}

    d = diff_rows(side("a", 1000), side("b", 1000))
    assert d.equal == 1000
    assert pulled[:6] == ["a0", "b0", "a1", "b1", "a2", "b2"]  # in step, one row each


def test_rows_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="not in row-key order"):
        diff_rows([(b"b", {}), (b"a", {})], [])


def test_the_report_names_the_cells_and_says_the_family() -> None:
    report = SessionsDiff("t_web_sessions at h:9090", "u_web_sessions at h:9090",
                          diff_rows(A, B, sample=1))
    lines = report.lines()
    assert "family s only" in lines[2]
    assert lines[3] == "rows: 4 in A, 4 in B: 1 equal, 1 only in A, 1 only in B, 2 differ"
    assert lines[4] == "cells that differ (rows): s:events 1, s:late_events 1"
    assert "  b: s:events A='5' B='6'" in lines and lines[-1] == "DIFFERENT"
    got = report.as_json()
    assert (got["equal"], got["only_a"], got["differ"]) == (False, 1, 2)
    assert got["sample"]["differ"] == [{"row": "b", "cells": {"s:events": ["5", "6"]}}]


def test_the_command_line() -> None:
    args = build_parser().parse_args(["sessions", "diff", "--config", "a.yml", "--against",
                                      "b.yml", "--sample", "3", "--json"])
    assert (args.action, args.config, args.against, args.sample, args.json) == (
        "diff", "a.yml", "b.yml", 3, True)
    args = build_parser().parse_args(["sessions", "get", "--config", "a.yml", "S1"])
    assert (args.action, args.session_id) == ("get", "S1")
    for bad in (["diff", "--config", "a.yml"], ["diff", "--config", "a", "--against", "b",
                                                 "--sample", "-1"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["sessions", *bad])
