"""The job's own state table: partition watermarks and open sessions, driver leases, gaps.

Rows:
- ``wm:<topic>:<partition>`` family ``w`` (watermark, offset), family ``o`` (open session ->
  its last_ts): written after the partition's session rows, so it never runs ahead of them.
- ``lease:<topic>:<group>`` family ``l``, cell ``holder`` = ``<epoch>:<last batch ms>``:
  every offsets commit is a checkAndPut on it, so a second driver fences the first.
- ``gap:<topic>:<group>:<partition>:<stored offset>`` family ``g``: data lost to retention.
"""

from __future__ import annotations

import time

import happybase
from Hbase_thrift import Mutation  # happybase loads this module from its Thrift IDL

from leakproof.errors import CommitRefused
from leakproof.sessions import NO_WATERMARK, PartitionState


def _wm_row(topic: str, partition: int) -> bytes:
    return f"wm:{topic}:{partition}".encode()


def lease_row(topic: str, group: str) -> bytes:
    return f"lease:{topic}:{group}".encode()


LEASE_COLUMN = b"l:holder"


class StateStore:
    """Reads and writes of the state table on one happybase connection."""

    def __init__(self, conn: happybase.Connection, table_name: str) -> None:
        self._conn = conn
        self._name = table_name
        self._table = conn.table(table_name)

    def read_partition(self, topic: str, partition: int) -> PartitionState:
        cells = self._table.row(_wm_row(topic, partition))
        if not cells:
            return PartitionState()
        return PartitionState(
            watermark=int(cells.get(b"w:watermark", str(NO_WATERMARK).encode())),
            watermark_offset=int(cells.get(b"w:offset", b"-1")),
            open_sessions={k[2:].decode("utf-8"): int(v) for k, v in cells.items()
                           if k.startswith(b"o:")},
        )

    def write_partition(self, topic: str, partition: int, state: PartitionState,
                        opened: dict[str, int], closed: list[str],
                        batch_size: int = 5000) -> None:
        """Store the watermark; ``opened`` sessions (re)enter the open set, ``closed`` leave it.

        Only what changed is written: the open set of a busy partition holds thousands of
        sessions that most batches do not touch.
        """
        row = _wm_row(topic, partition)
        cells = {b"w:watermark": str(state.watermark).encode(),
                 b"w:offset": str(state.watermark_offset).encode()}
        cells.update({f"o:{sid}".encode(): str(ts).encode() for sid, ts in opened.items()})
        with self._table.batch(batch_size=batch_size) as batch:
            if closed:
                batch.delete(row, columns=[f"o:{sid}".encode() for sid in closed])
            batch.put(row, cells)

    # -- leases --------------------------------------------------------------------------

    def read_lease(self, topic: str, group: str) -> bytes | None:
        cells: dict[bytes, bytes] = self._table.row(lease_row(topic, group), columns=[LEASE_COLUMN])
        return cells.get(LEASE_COLUMN)

    def lease_epoch(self, topic: str, group: str) -> int | None:
        """The epoch of the driver that holds the lease (None: no driver ever ran)."""
        holder = self.read_lease(topic, group)
        return int(holder.split(b":", 1)[0]) if holder else None

    def bump_epoch(self, topic: str, group: str, tag: str, attempts: int = 20) -> bytes:
        """Take the lease with the next epoch; returns the new holder value.

        A running driver rewrites the holder cell at every commit, so a read-then-CAS can
        lose to it: read again and retry. Whoever bumps last holds the lease; every older
        epoch is fenced at its next commit or task.
        """
        for _ in range(attempts):
            current = self.read_lease(topic, group)
            epoch = int(current.split(b":", 1)[0]) + 1 if current else 1
            lease = f"{epoch}:{tag}".encode()
            if self.compare_and_set_lease(topic, group, current, lease):
                return lease
            time.sleep(0.05)
        raise CommitRefused(f"could not take the lease of {topic}:{group} in {attempts} "
                            f"attempts: the holder cell keeps changing")

    def compare_and_set_lease(self, topic: str, group: str, expected: bytes | None,
                              new: bytes) -> bool:
        """Thrift1 checkAndPut: set the holder cell only if it still holds ``expected``."""
        mutation = Mutation(column=LEASE_COLUMN, value=new, isDelete=False, writeToWAL=True)
        full = self._conn._table_name(self._name)  # with table_prefix, as happybase does
        ok: bool = self._conn.client.checkAndPut(full, lease_row(topic, group), LEASE_COLUMN,
                                                 expected, mutation, {})
        return ok

    # -- gaps ----------------------------------------------------------------------------

    def record_gap(self, topic: str, group: str, partition: int, stored: int,
                   resumed_at: int) -> None:
        row = f"gap:{topic}:{group}:{partition}:{stored:020d}".encode()
        self._table.put(row, {b"g:stored": str(stored).encode(),
                              b"g:resumed_at": str(resumed_at).encode(),
                              b"g:lost": str(resumed_at - stored).encode(),
                              b"g:recorded_ms": str(int(time.time() * 1000)).encode()})

    def gaps(self, topic: str, group: str) -> list[dict[str, str]]:
        prefix = f"gap:{topic}:{group}:".encode()
        return [{"row": k.decode(), **{c[2:].decode(): v.decode() for c, v in cells.items()}}
                for k, cells in self._table.scan(row_prefix=prefix)]
