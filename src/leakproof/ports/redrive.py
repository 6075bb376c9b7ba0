"""What a redrive of dead letters needs from HBase and Kafka, as protocols.

The real ones: ``hbase.dead_letters.DeadLetterRows`` (DeadLetterRows) and
``kafka.redrive.TransactionalPartition`` (RedriveTarget). ``leakproof.testing`` has a fake
of each, whose Kafka side keeps transactions the broker's way (a new producer of an id
fences the old one and aborts what it left open; only committed records are seen).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from leakproof.core.dead_letter import ALL, DeadLetter, Headers, RedriveMark, Selection

__all__ = ["Copy", "DeadLetterRows", "RedriveTarget"]

# a record to send back: key, value, headers
Copy = tuple[bytes | None, bytes | None, Headers]


class DeadLetterRows(Protocol):
    """The dead-letter table."""

    def letters(self, topic: str, selection: Selection = ALL, brief: bool = False
                ) -> Iterator[DeadLetter]:
        """The dead letters of ``topic`` the selection takes, in row-key order; ``brief``:
        without the record's bytes."""
        ...

    def mark(self, letter: DeadLetter, new: RedriveMark) -> bool:
        """Replace the mark ``letter`` was read with by ``new``, only if the row still holds
        it (compare-and-set); False: another redrive moved it first."""
        ...


class RedriveTarget(Protocol):
    """One partition of the source topic, written through one transactional id."""

    txn_id: str

    def fence(self) -> int:
        """Start a producer of ``txn_id``: every older producer of it is fenced and the
        transaction one left open aborted. Returns the partition's log end read after that,
        once the stable end has reached it (every copy committed before the fence is then
        below it and readable)."""
        ...

    def copies(self, from_offset: int, until_offset: int) -> dict[str, int]:
        """The committed records in ``[from_offset, until_offset)`` that carry an origin
        header: origin -> offset of its first copy."""
        ...

    def send(self, records: Sequence[Copy]) -> list[int]:
        """Send ``records`` to the partition in one transaction and commit it; returns their
        offsets. Raises PublishError when the commit did not succeed as far as the producer
        knows (fenced, refused, past the deadline); a commit whose answer was lost may still
        have landed, which the next redrive's ``copies`` finds."""
        ...

    def close(self) -> None: ...
