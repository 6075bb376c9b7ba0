"""The refusal the Kafka-group and ZooKeeper stores give for offsets that are not the job's
own: written by someone else (another consumer with its group id, a hand reset)."""

from __future__ import annotations

from leakproof.core.errors import ForeignOffsets


def foreign(store: str, where: str, partitions: list[int], why: str) -> ForeignOffsets:
    """The refusal for offsets leakproof did not write."""
    return ForeignOffsets(
        f"offsets.store {store}: the offsets of {where} for partitions {partitions} were not "
        f"written by leakproof ({why}): another consumer commits with this group id, or they "
        f"were reset by hand. Refusing to take them for this job's; give it a group id no "
        f"one else uses, or say where to start with leakproof offsets rewind "
        f"(--to-offsets / --to-time), which writes them as leakproof's.")
