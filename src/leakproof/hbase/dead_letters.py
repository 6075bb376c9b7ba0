"""The dead-letter table: row ``<topic>:<partition>:<offset, 20 digits>``, family ``d``.

Keeps the raw key and value bytes exactly as Kafka had them (a null is recorded as a flag,
since HBase has no null cell), the error text and type, and the batch time. Writing the same
record twice writes the same row: replays stay idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable

import happybase

from leakproof.errors import DecodeError


def row_key(topic: str, partition: int, offset: int) -> bytes:
    return f"{topic}:{partition}:{offset:020d}".encode()


def to_cells(err: DecodeError, batch_ms: int) -> dict[bytes, bytes]:
    cells = {
        b"d:error": err.reason.encode("utf-8"),
        b"d:error_type": type(err).__name__.encode(),
        b"d:kind": err.kind.encode(),
        b"d:batch_time": str(batch_ms).encode(),
        b"d:key_null": b"1" if err.key is None else b"0",
        b"d:value_null": b"1" if err.value is None else b"0",
    }
    if err.key is not None:
        cells[b"d:key"] = err.key
    if err.value is not None:
        cells[b"d:value"] = err.value
    return cells


class DeadLetterStore:
    """Batched writes of dead letters; scans for verification and operators."""

    def __init__(self, table: happybase.Table) -> None:
        self._table = table

    def write(self, errors: Iterable[DecodeError], batch_ms: int, *, ts: int) -> None:
        """One row per record, every cell at timestamp ``ts`` (a late copy loses)."""
        with self._table.batch(batch_size=500, timestamp=ts) as batch:
            for err in errors:
                batch.put(row_key(err.topic, err.partition, err.offset), to_cells(err, batch_ms))

    def scan(self, topic: str) -> dict[tuple[int, int], dict[bytes, bytes]]:
        """(partition, offset) -> cells, for every dead letter of ``topic``."""
        out = {}
        for key, cells in self._table.scan(row_prefix=f"{topic}:".encode()):
            _, partition, offset = key.decode().rsplit(":", 2)
            out[(int(partition), int(offset))] = cells
        return out
