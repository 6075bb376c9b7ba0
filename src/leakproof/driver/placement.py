"""Which executor each Kafka partition's range should run on, batch after batch (pure).

A worker keeps, per partition, its Kafka consumer and the partition state it wrote last; both
pay only if the partition's next range runs there again. Spark's own Kafka source gets that by
preferring, for each partition, the same executor every batch. The driver does the same: a
partition stays where it ran while that executor lives, partitions of executors that left go
to the least loaded ones, and load is evened out (no executor two ranges ahead of another)
by moving as few partitions as it takes. A preference only: Spark's locality wait still lets
an idle executor take a range whose preferred one is busy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping


def place(partitions: Iterable[int], executors: Iterable[str],
          previous: Mapping[int, str]) -> dict[int, str]:
    """partition -> executor, keeping ``previous`` wherever it is still fair to."""
    live = sorted(set(executors))
    wanted = sorted(set(partitions))
    if not live:
        return {}
    placed = {p: previous[p] for p in wanted if previous.get(p) in live}
    load: Counter[str] = Counter({e: 0 for e in live})
    load.update(placed.values())
    for p in wanted:
        if p not in placed:
            target = min(live, key=lambda e: (load[e], e))
            placed[p] = target
            load[target] += 1
    while True:
        busiest = max(live, key=lambda e: (load[e], e))
        idlest = min(live, key=lambda e: (load[e], e))
        if load[busiest] - load[idlest] <= 1:
            return placed
        moved = max(p for p, e in placed.items() if e == busiest)
        placed[moved] = idlest
        load[busiest] -= 1
        load[idlest] += 1
