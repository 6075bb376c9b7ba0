"""When a batch must run as one task after partitions were added (moved_keys)."""

from __future__ import annotations

import pytest

from leakproof.moved_keys import NONE, KeyMoves

SETTLE = 300_000


def test_a_topic_never_grown_never_mixes() -> None:
    assert not NONE.mixing({0: 0, 1: 5})
    assert NONE.settled(10**13, SETTLE, {0: 9}) == NONE


def test_added_is_pending_until_the_producers_settle() -> None:
    moves = NONE.added(1_000)
    assert moves.mixing({0: 10**9})
    assert moves.settled(1_000 + SETTLE - 1, SETTLE, {0: 50, 1: 70}) == moves
    settled = moves.settled(1_000 + SETTLE, SETTLE, {0: 50, 1: 70, 2: 3})
    assert settled == KeyMoves(None, {0: 50, 1: 70, 2: 3})


def test_settled_mixes_until_every_partition_starts_past_its_bound() -> None:
    moves = KeyMoves(None, {0: 50, 1: 70, 2: 3})
    assert moves.mixing({0: 50, 1: 69, 2: 3})
    assert moves.mixing({0: 49})
    assert not moves.mixing({0: 50, 1: 70, 2: 3})
    assert not moves.mixing({0: 51, 1: 900})
    assert not moves.mixing({7: 0})  # a partition added after the bound was taken: its own
    assert not moves.mixing({})


def test_a_rewind_below_the_bound_mixes_again() -> None:
    assert KeyMoves(None, {0: 50}).mixing({0: 10})


def test_pending_keeps_its_first_sight() -> None:
    assert NONE.added(5_000).added(9_000).since_ms == 5_000
    assert NONE.added(5_000).added(2_000).since_ms == 2_000


def test_a_second_growth_never_lowers_an_earlier_bound() -> None:
    first = NONE.added(0).settled(SETTLE, SETTLE, {0: 50, 1: 70})
    second = first.added(SETTLE + 10).settled(2 * SETTLE + 10, SETTLE, {0: 40, 1: 90, 2: 8})
    assert second == KeyMoves(None, {0: 50, 1: 90, 2: 8})
    assert first.added(SETTLE + 10).mixing({0: 10**9, 1: 10**9})


@pytest.mark.parametrize("moves", [NONE, NONE.added(1_795_000_000_000),
                                   KeyMoves(None, {0: 50, 12: 7}),
                                   KeyMoves(1_795_000_000_000, {3: 0})])
def test_the_record_reads_back_as_written(moves: KeyMoves) -> None:
    assert KeyMoves.from_text(*moves.to_text()) == moves


def test_the_record_is_readable_text() -> None:
    assert KeyMoves(None, {12: 7, 0: 50}).to_text() == ("", "0=50,12=7")
    assert NONE.added(1_795_000_000_000).to_text() == ("1795000000000", "")
