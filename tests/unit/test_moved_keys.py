"""When a batch must run as one task after partitions were added (moved_keys)."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from leakproof.core.moved_keys import NONE, KeyMoves, murmur2, placed

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
                                   KeyMoves(1_795_000_000_000, {3: 0}),
                                   NONE.first_run(1_795_000_000_000),
                                   KeyMoves(None, {1: 2}, None, {0: 5, 3: 9}),
                                   KeyMoves(4, {1: 2}, 8, {0: 5, 3: 9})])
def test_the_record_reads_back_as_written(moves: KeyMoves) -> None:
    assert KeyMoves.from_text(*moves.to_text()) == moves


def test_the_record_is_readable_text() -> None:
    assert KeyMoves(None, {12: 7, 0: 50}).to_text() == ("", "0=50,12=7", "")
    assert NONE.added(1_795_000_000_000).to_text() == ("1795000000000", "", "")
    assert NONE.first_run(9).settled(9, 0, {1: 4, 0: 2}).to_text() == ("", "", ";0=2,1=4")
    assert NONE.first_run(9).to_text() == ("", "", "9;")


def test_a_first_run_checks_keys_until_records_written_after_it_settle() -> None:
    moves = NONE.first_run(1_000)
    assert moves.checking({0: 10**9}) and not moves.mixing({0: 0})
    assert moves.first_run(2_000).check_since_ms == 1_000
    settled = moves.settled(1_000 + SETTLE, SETTLE, {0: 50, 1: 70})
    assert settled == KeyMoves(None, {}, None, {0: 50, 1: 70})
    assert settled.checking({0: 49, 1: 70}) and not settled.checking({0: 50, 1: 70})
    assert not settled.mixing({0: 0, 1: 0})


def test_growth_and_checks_settle_each_on_its_own_clock() -> None:
    moves = NONE.first_run(0).added(SETTLE // 2)
    half = moves.settled(SETTLE, SETTLE, {0: 10})
    assert half == KeyMoves(SETTLE // 2, {}, None, {0: 10})
    assert half.settled(SETTLE + SETTLE // 2, SETTLE, {0: 30}) == KeyMoves(
        None, {0: 30}, None, {0: 10})


# Where Kafka's Java client puts these keys (Utils.toPositive(Utils.murmur2(key)) % n),
# as computed with the broker's own kafka-clients jar.
@pytest.mark.parametrize(("key", "partitions", "partition"), [
    (b"", 4, 1), (b"", 8, 1), (b"a", 4, 0), (b"a", 8, 4), (b"session-1", 4, 0),
    (b"session-1", 8, 4), (b"s2c7-0082da684a5a", 4, 1), (b"s2c7-0082da684a5a", 8, 5)])
def test_placed_is_where_the_default_partitioner_puts_a_key(
        key: bytes, partitions: int, partition: int) -> None:
    assert placed(key, partition, partitions)
    assert not placed(key, (partition + 1) % partitions, partitions)


def test_murmur2_is_kafka_python_s_on_any_bytes() -> None:
    rng = random.Random(7)
    for _ in range(5_000):
        data = rng.randbytes(rng.randrange(0, 41))
        assert murmur2(data) == kafka_python_murmur2(data) & 0xFFFFFFFF, data
