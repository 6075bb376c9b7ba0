"""The refusals the Kafka-group and ZooKeeper stores give for offsets that are not the
job's own: written by someone else, or gone although the job committed some."""

from __future__ import annotations

from leakproof.errors import ForeignOffsets
from leakproof.offsets import CommittedBatch


def vanished(store: str, where: str, copy: CommittedBatch) -> ForeignOffsets:
    """The refusal for a store that holds no offsets although the job committed some."""
    offsets = ",".join(f"{p}={o}" for p, o in sorted(copy.offsets.items()))
    return ForeignOffsets(
        f"offsets.store {store} holds no offsets for {where}, though this job committed "
        f"batch {copy.batch_ms} ({offsets}): they expired (Kafka drops a group's offsets "
        f"after offsets.retention.minutes without a commit) or were deleted. Refusing to "
        f"start over from kafka.auto_offset_reset; resume where the job was with leakproof "
        f"offsets rewind --to-offsets {offsets}, or choose with --to-time.")


def foreign(store: str, where: str, partitions: list[int], why: str) -> ForeignOffsets:
    """The refusal for offsets leakproof did not write."""
    return ForeignOffsets(
        f"offsets.store {store}: the offsets of {where} for partitions {partitions} were not "
        f"written by leakproof ({why}): another consumer commits with this group id, or they "
        f"were reset by hand. Refusing to take them for this job's; give it a group id no "
        f"one else uses, or say where to start with leakproof offsets rewind "
        f"(--to-offsets / --to-time), which writes them as leakproof's.")
