"""A partition's range keeps its executor while it lives; load stays even."""

from __future__ import annotations

import random
from collections import Counter

from leakproof.driver.placement import place

A, B, C = "executor_h1_1", "executor_h2_2", "executor_h3_3"


def test_first_placement_spreads_the_partitions_evenly() -> None:
    placed = place(range(4), [B, A], {})
    assert sorted(Counter(placed.values()).values()) == [2, 2]
    assert place(range(4), [A, B], {}) == placed  # the executors' order does not matter


def test_a_partition_stays_where_it_ran() -> None:
    first = place(range(4), [A, B], {})
    assert place(range(4), [A, B], first) == first
    assert place([0, 1, 2], [A, B], first) == {p: first[p] for p in (0, 1, 2)}


def test_partitions_of_a_lost_executor_move_and_the_others_stay() -> None:
    first = place(range(4), [A, B], {})
    after = place(range(4), [A], first)
    assert set(after.values()) == {A}
    assert all(after[p] == first[p] for p in first if first[p] == A)


def test_a_new_executor_takes_load_by_moving_as_few_partitions_as_needed() -> None:
    first = place(range(6), [A, B], {})
    after = place(range(6), [A, B, C], first)
    assert sorted(Counter(after.values()).values()) == [2, 2, 2]
    assert sum(after[p] != first[p] for p in first) == 2


def test_no_executors_no_preference() -> None:
    assert place(range(3), [], {0: A}) == {}


def test_random_histories_stay_sticky_and_even() -> None:
    rng = random.Random(5)
    pool = [f"executor_h_{i}" for i in range(6)]
    placed: dict[int, str] = {}
    for _ in range(500):
        live = rng.sample(pool, rng.randint(1, 6))
        parts = range(rng.randint(1, 12))
        before = placed
        placed = place(parts, live, before)
        assert set(placed) == set(parts) and set(placed.values()) <= set(live)
        loads = Counter(placed.values())
        assert max(loads.values()) - min(loads.get(e, 0) for e in live) <= 1 or \
            len(placed) < len(live)
        kept = [p for p in parts if before.get(p) in live]
        moved = sum(placed[p] != before[p] for p in kept)
        # only the moves evening out the load: the most loaded keep the few places at the
        # rounded-up share, everyone else the rounded-down one; what is above that moves
        low, high = divmod(len(placed), len(live))
        kept_loads = sorted(Counter(before[p] for p in kept).values(), reverse=True)
        caps = [low + 1] * high + [low] * len(live)
        assert moved <= sum(max(0, n - cap) for n, cap in zip(kept_loads, caps, strict=False))
