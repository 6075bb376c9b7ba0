"""The offsets table operators know: row ``<topic>:<group>:<batch ms, 13 digits>``.

Family ``offsets``: qualifier = partition id (decimal text), value = the next offset to read
(the batch's until offset, decimal text). Family ``audit``: the batch's counts and timings.
``scan 'stream_kafka_offsets', {REVERSED => true}`` in the HBase shell shows the newest first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import happybase


def row_key(topic: str, group: str, batch_ms: int) -> bytes:
    return f"{topic}:{group}:{batch_ms:013d}".encode()


@dataclass(frozen=True)
class CommittedBatch:
    """One offsets row, decoded."""

    batch_ms: int
    offsets: dict[int, int]
    audit: dict[str, str]


def _decode(key: bytes, cells: Mapping[bytes, bytes]) -> CommittedBatch:
    offsets = {int(k[len(b"offsets:"):]): int(v) for k, v in cells.items()
               if k.startswith(b"offsets:")}
    audit = {k[len(b"audit:"):].decode(): v.decode() for k, v in cells.items()
             if k.startswith(b"audit:")}
    return CommittedBatch(int(key.rsplit(b":", 1)[1]), offsets, audit)


class OffsetStore:
    """Reads and writes of committed batches for one topic and group."""

    def __init__(self, table: happybase.Table, topic: str, group: str) -> None:
        self._table = table
        self._topic = topic
        self._group = group
        self._prefix = f"{topic}:{group}:".encode()

    def latest(self) -> CommittedBatch | None:
        """The newest committed row (a reverse scan of one row)."""
        for key, cells in self._table.scan(row_prefix=self._prefix, reverse=True, limit=1):
            return _decode(key, cells)
        return None

    def get(self, batch_ms: int) -> CommittedBatch | None:
        key = row_key(self._topic, self._group, batch_ms)
        cells = self._table.row(key)
        return _decode(key, cells) if cells else None

    def history(self, limit: int = 20) -> list[CommittedBatch]:
        return [_decode(k, c)
                for k, c in self._table.scan(row_prefix=self._prefix, reverse=True, limit=limit)]

    def put(self, batch_ms: int, offsets: Mapping[int, int],
            audit: Mapping[str, str] | None = None) -> None:
        cells = {f"offsets:{p}".encode(): str(o).encode() for p, o in offsets.items()}
        cells.update({f"audit:{k}".encode(): v.encode() for k, v in (audit or {}).items()})
        self._table.put(row_key(self._topic, self._group, batch_ms), cells)
