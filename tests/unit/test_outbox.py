"""The outbox rules (outbox.py) with literals: what a range owes the output topic."""

from __future__ import annotations

import pytest

from leakproof.core.errors import ConfigError, KafkaReadError
from leakproof.core.outbox import Outbox, covers, outbox_id, with_digest
from leakproof.driver.startup import check_output_topic


def test_a_range_that_closes_nothing_and_owes_nothing_writes_no_outbox() -> None:
    assert Outbox().next("b1", []) is None
    published = Outbox("b0", ("a",), published="b0")
    assert not published.pending and published.next("b1", []) is None


def test_a_pending_outbox_is_carried_into_the_next_one() -> None:
    """A crash after the outbox write: the replay owes those sessions and its own."""
    crashed = Outbox("b1", ("a", "b"), published="b0")
    assert crashed.pending and crashed.owed() == ("a", "b")
    assert crashed.next("b2", ["b", "c"]) == Outbox(with_digest("b2", "abc"), ("a", "b", "c"),
                                                    "b0")


def test_a_published_outbox_is_owed_no_more() -> None:
    """A crash after the transaction committed: the marker marks it published."""
    done = Outbox("b1", ("a",), published="b1")
    assert done.owed() == () and done.next("b2", ["c"]) == Outbox(with_digest("b2", "c"),
                                                                  ("c",), "b1")


def test_the_cells_round_trip_and_an_absent_outbox_is_empty() -> None:
    box = Outbox("b1", ("a", "odd,id\n"), published="b0")
    cells = {**box.encode(), b"w:outbox_published": b"b0", b"w:watermark": b"9"}
    assert Outbox.parse(cells) == box
    assert Outbox.parse({b"w:watermark": b"9"}) == Outbox() and not Outbox().pending


def test_ids_differ_by_batch_range_and_driver() -> None:
    ids = {outbox_id(1, 0, 10, 1), outbox_id(2, 0, 10, 1), outbox_id(1, 0, 11, 1),
           outbox_id(1, 0, 10, 2)}
    assert len(ids) == 4


def test_two_attempts_owing_different_sessions_have_different_ids() -> None:
    """Copies of one range running at once can see each other's writes part way: each
    outbox's id names its sessions, so neither takes the other's marker for its own."""
    first = Outbox().next("b1", ["y", "z"])
    second = Outbox().next("b1", ["z"])
    same = Outbox().next("b1", ["z", "y"])
    assert first is not None and second is not None and same is not None
    assert first.id != second.id and first.id == same.id
    assert first.id.startswith("b1:")


def test_a_marker_covers_its_own_outbox_and_those_of_earlier_ranges_of_its_driver() -> None:
    mine = with_digest(outbox_id(5_000, 10, 20, 3), ["a"])
    assert covers(mine, mine)
    assert covers(with_digest(outbox_id(6_000, 20, 30, 3), ["b"]), mine)  # a later range
    # another driver never covers (it may have loaded before this outbox landed; epochs
    # restart with a new state table): published again, at least once
    assert not covers(with_digest(outbox_id(9_000, 0, 5, 4), ["c"]), mine)
    assert not covers(with_digest(outbox_id(9_000, 30, 40, 4), ["c"]), mine)
    assert not covers(outbox_id(6_000, 20, 30, 3) + "x", mine)  # not an id: no order
    assert not covers(with_digest(outbox_id(5_000, 10, 20, 3), ["a", "b"]), mine)  # a copy
    assert not covers(with_digest(outbox_id(4_000, 0, 10, 3), ["a"]), mine)  # before it
    assert not covers(with_digest(outbox_id(1_000, 500, 600, 2), ["a"]), mine)  # older driver
    assert not covers("", mine) and not covers("box-1", mine)


def test_a_missing_summaries_topic_is_refused_at_start_naming_the_key() -> None:
    """Before Spark starts, not after a batch waited out every transaction deadline."""
    asked: list[str] = []

    def missing(topic: str) -> None:
        asked.append(topic)
        raise KafkaReadError(f"topic {topic} does not exist")

    check_output_topic(missing, None)  # no summaries: nothing asked
    assert asked == []
    with pytest.raises(ConfigError, match=r"output\.closed_sessions_topic: topic sums does "
                                          r"not exist.*create sums first"):
        check_output_topic(missing, "sums")
    check_output_topic(lambda topic: (topic, [0, 1]), "sums")  # there: accepted
