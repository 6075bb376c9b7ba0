"""A source partition's rows in the state table: what an executor's range reads and writes.

- ``wm:<topic>:<partition>`` family ``w`` (watermark, offset, cutoff, check_below, the
  index's bucket width): written after the partition's session rows and open-session index,
  so it never runs ahead of them; ``pending`` and the writer tokens before any session row.
  With an output topic it also holds the partition's outbox (``outbox.py``), written before
  the session rows; and ``dead_until``, the highest offset a range dead-lettered, before its
  dead letters (``StoredPartition.dead_until``).
- ``op:<topic>:<partition>:<bucket>`` family ``o`` (open session -> its last_ts): the open
  sessions by bucket of last_ts (``open_index``), so a range reads only what may expire.
- ``rt:<topic>:<partition>:<bucket>`` family ``o`` (closed session -> its last_ts), with a
  retention only: the closed sessions by hour of last_ts (``retention``), so the sweep
  reads what it deletes; its entries go with their sessions (``w:swept``: the sweep's cut,
  ``w:held``: a bucket below it still listing a session kept until committed).

The driver's rows of the same table (lease, topic id, gaps, run record) are ``state_store``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import happybase
from happybase.table import TScan  # the Thrift struct happybase itself scans with

from leakproof.core.kept_rows import new_token
from leakproof.core.open_index import MAX_BUCKET, MAX_WIDTH, Entry, IndexChanges, bucket_of
from leakproof.core.outbox import PUBLISHED, Outbox
from leakproof.core.sessions import NO_WATERMARK, PartitionState
from leakproof.hbase.state_store import read_lease_epoch
from leakproof.hbase.wire.puts import row_puts
from leakproof.ports.task import Mark, PartitionSave, StoredPartition

DEAD_UNTIL = b"w:dead_until"


def _wm_row(topic: str, partition: int) -> bytes:
    return f"wm:{topic}:{partition}".encode()


def _open_row(topic: str, partition: int, ts: int, prefix: str = "op") -> bytes:
    """The index row of the bucket starting at ``ts``, or the key a scan stops at before it:
    13 digits, so keys sort as times do (clamped: a wider number would sort wrongly).
    ``prefix`` ``rt``: the retention index's."""
    return f"{prefix}:{topic}:{partition}:".encode() + b"%013d" % min(MAX_BUCKET, max(0, ts))


Scan = Callable[[Any, bytes, bytes, int], Iterable[tuple[bytes, dict[bytes, bytes]]]]


def stored_partition(cells: Mapping[bytes, bytes]) -> StoredPartition:
    """The ``wm:`` row's cells read: ``w:pending`` still set means a range stopped part way,
    and may have left index entries as old as its watermark stale (a session row it wrote
    moved on; the row's old entry is still there)."""
    return StoredPartition(PartitionState(int(cells.get(b"w:watermark", b"%d" % NO_WATERMARK)),
                                          int(cells.get(b"w:offset", b"-1"))),
                           int(cells.get(b"w:cutoff", b"0")),
                           max(int(cells.get(b"w:check_below", b"0")),
                               int(cells.get(b"w:pending", b"0"))),
                           Outbox.parse(cells),
                           writer_token(cells),
                           int(cells.get(b"w:width", b"0")),
                           int(cells.get(b"w:record_ts", b"-1")),
                           int(cells.get(b"w:record_wm", b"%d" % NO_WATERMARK)),
                           int(cells.get(DEAD_UNTIL, b"-1")),
                           int(cells.get(b"w:swept", b"0")),
                           int(cells.get(b"w:held", b"-1")))


def writer_token(cells: Mapping[bytes, bytes]) -> bytes:
    """The ``wm:`` row's writer token (``ports.task.rewritten``): ``w:writer`` (a fresh one
    in each range's pending mark), then ``w:foreign``."""
    return cells.get(b"w:writer", b"") + b"/" + cells.get(b"w:foreign", b"")


def watermark_cells(save: PartitionSave) -> dict[bytes, bytes]:
    """The ``wm:`` row's cells a save writes last (``stored_partition`` reads them)."""
    cells = {b"w:watermark": str(save.state.watermark).encode(),
             b"w:offset": str(save.state.watermark_offset).encode(),
             b"w:cutoff": str(max(0, save.cutoff)).encode(),
             b"w:check_below": str(save.check_below).encode()}
    if save.width:
        cells[b"w:width"] = str(save.width).encode()
    if save.record_ts >= 0:
        cells[b"w:record_ts"] = str(save.record_ts).encode()
        cells[b"w:record_wm"] = str(save.record_wm).encode()
    if save.swept:
        cells[b"w:swept"] = str(save.swept).encode()
    if save.held >= 0 or save.swept:  # the sweep ran: whether it holds anything back
        cells[b"w:held"] = str(save.held).encode()
    return cells


class PartitionStore:
    """Reads and writes of partition rows on one happybase connection."""

    def __init__(self, conn: happybase.Connection, table_name: str,
                 scan: Scan | None = None) -> None:
        """``scan``: how the index is scanned (``short_scan``; tests pass the table's own)."""
        self._table = conn.table(table_name)
        self._scan = scan or short_scan

    def read_partitions(self, topic: str, partitions: Sequence[int], width: int, *,
                        ts: int) -> dict[int, StoredPartition]:
        """Each partition's watermark, and below what the index holds nothing any more (its
        open sessions stay in the index: ``scan_open``): one getRows for all of them.

        A ``wm:`` row of the layout before the index, its open set in family ``o``, is
        moved into the index first (puts at ``ts``, the range's cell timestamp, then the old
        cells' delete: a crash in between leaves the old cells, moved again next time).
        """
        found = dict(self._table.rows([_wm_row(topic, p) for p in partitions]))
        stored = {}
        for p in partitions:
            cells = found.get(_wm_row(topic, p), {})
            old = {k[2:].decode("utf-8"): int(v) for k, v in cells.items()
                   if k.startswith(b"o:")}
            if old:
                moved = IndexChanges()
                for sid, last_ts in old.items():
                    moved.put(bucket_of(last_ts, int(cells.get(b"w:width", width))), sid,
                              last_ts)
                self._put_entries(topic, [(p, moved)], ts=ts)
                self._table.delete(_wm_row(topic, p), columns=[b"o", b"w:version"])
            stored[p] = stored_partition(cells)
        return stored

    def begin_writes(self, topic: str, marks: Sequence[Mark],
                     foreign: Sequence[tuple[str, int]] = (), *, ts: int) -> None:
        """``w:pending`` and ``w:writer`` before the ranges write anything, and the sessions
        each will publish; ``w:foreign`` for the partitions in ``foreign``: one put per
        partition, all in one call at timestamp ``ts``, before any session row is written."""
        with self._table.batch(timestamp=ts) as batch:
            for mark in marks:
                cells = {b"w:pending": str(mark.pending).encode(), b"w:writer": mark.writer}
                if mark.outbox is not None:
                    cells.update(mark.outbox.encode())
                if mark.dead_until >= 0:
                    cells[DEAD_UNTIL] = str(mark.dead_until).encode()
                batch.put(_wm_row(topic, mark.partition), cells)
                for bucket, entries in sorted(mark.retain.items()):
                    batch.put(_open_row(topic, mark.partition, bucket, "rt"),
                              {f"o:{sid}".encode(): str(last_ts).encode()
                               for sid, last_ts in entries.items()})
            for other, partition in foreign:
                batch.put(_wm_row(other, partition), {b"w:foreign": new_token()})

    def outbox_published(self, topic: str, partition: int, outbox_id: str, *, ts: int
                         ) -> None:
        """The outbox went out (the Kafka marker says so too: this only saves a look-up)."""
        self._table.put(_wm_row(topic, partition), {PUBLISHED: outbox_id.encode()},
                        timestamp=ts)

    def watermarks(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """Other partitions' stored watermarks (a session whose key moved closes only once
        its owner's has passed it too): one getRows, nothing moved or written."""
        found = dict(self._table.rows([_wm_row(topic, p) for p in partitions],
                                      columns=[b"w:watermark"]))
        return {p: int(found.get(_wm_row(topic, p), {}).get(b"w:watermark", b"%d" % NO_WATERMARK))
                for p in partitions}

    def hand_over(self, topic: str, changes: Sequence[tuple[int, IndexChanges]], *, ts: int
                  ) -> None:
        """Entries put in the indexes of the partitions sessions' keys moved to
        (``task.process``); checked against their rows there like every entry of a grown
        topic."""
        self._put_entries(topic, changes, ts=ts)

    def scan_retained(self, topic: str, partition: int, since: int, before: int,
                      batch_size: int = 1000) -> list[Entry]:
        """The retention index's entries in buckets from ``since`` (the last sweep's cut:
        the rows below it are deleted) that start below ``before``."""
        if before <= since:
            return []
        found = []
        for key, cells in self._scan(self._table, _open_row(topic, partition, since, "rt"),
                                     _open_row(topic, partition, before, "rt"), batch_size):
            bucket = int(key.rsplit(b":", 1)[1])
            found += [Entry(bucket, k[2:].decode("utf-8"), int(v)) for k, v in cells.items()]
        return found

    def scan_open(self, topic: str, partition: int, since: int, before: int,
                  batch_size: int = 1000) -> list[Entry]:
        """The index entries in buckets that start below ``before``: every open session
        whose last_ts is below it, and the rest of the bucket that straddles it.

        ``since`` is the cutoff of the partition's last range: it left no entry below it.
        The scan starts a widest bucket before it, not at the first bucket: HBase keeps the
        delete markers of closed sessions' entries until a compaction, and a scan from the
        start would walk all of them, a cost that grows with every session ever closed.
        """
        if before <= 0:
            return []
        start = _open_row(topic, partition, since - MAX_WIDTH)
        found = []
        for key, cells in self._scan(self._table, start, _open_row(topic, partition, before),
                                     batch_size):
            bucket = int(key.rsplit(b":", 1)[1])
            found += [Entry(bucket, k[2:].decode("utf-8"), int(v)) for k, v in cells.items()]
        return found

    def write_partitions(self, topic: str, saves: Sequence[PartitionSave], *, ts: int
                         ) -> None:
        """Every partition's index changes, then the watermarks and the cutoffs the ranges
        closed below: no state row runs ahead of its index.

        ``w:pending`` (``begin_writes``: a range's watermark, no entry it leaves stale is
        newer) marks the writes under way; the last call writes each watermark, keeping
        ``check_below`` (what ``read_partitions`` said, a crashed range's mark included),
        and clears the mark -- by a put of 0, not a delete: a delete marker at ``ts`` would
        hide a retry's mark written at the same timestamp.
        """
        changes = [(s.partition, s.changes) for s in saves]
        self._put_entries(topic, changes, ts=ts)
        self._delete_entries(topic, changes, ts=ts)
        self._forget_swept(topic, saves, ts=ts)
        self._write_watermarks(topic, saves, ts=ts)

    def _forget_swept(self, topic: str, saves: Sequence[PartitionSave], *, ts: int) -> None:
        """The retention index's entries a sweep is done with (their sessions' rows
        deleted, or moved on)."""
        if any(s.forget for s in saves):
            with self._table.batch(timestamp=ts) as batch:
                for s in saves:
                    for bucket, sids in sorted(s.forget.items()):
                        batch.delete(_open_row(topic, s.partition, bucket, "rt"),
                                     columns=[f"o:{sid}".encode() for sid in sorted(sids)])

    def _write_watermarks(self, topic: str, saves: Sequence[PartitionSave], *, ts: int
                          ) -> None:
        with self._table.batch(timestamp=ts) as batch:
            for s in saves:
                batch.put(_wm_row(topic, s.partition), {**watermark_cells(s),
                                                        b"w:pending": b"0"})

    def _put_entries(self, topic: str, changes: Sequence[tuple[int, IndexChanges]], *,
                     ts: int, batch_size: int = 5000) -> None:
        """Every partition's index puts in one round (``write_partitions`` deletes in
        another, after: never an entry deleted before its replacement is written)."""
        if any(index.puts for _, index in changes):
            batch = row_puts(self._table, batch_size, ts)
            for partition, index in changes:
                for bucket, cells in index.puts.items():
                    batch.put(_open_row(topic, partition, bucket),
                              {f"o:{sid}".encode(): str(last_ts).encode()
                               for sid, last_ts in cells.items()})
            batch.send()

    def _delete_entries(self, topic: str, changes: Sequence[tuple[int, IndexChanges]], *,
                        ts: int, batch_size: int = 5000) -> None:
        """Every partition's index deletes, at ``ts``: a delete hides the entry's versions up
        to it, so a late put of an older range stays hidden, and a later range's put of it
        (a newer timestamp) shows again."""
        if any(index.deletes for _, index in changes):
            with self._table.batch(batch_size=batch_size, timestamp=ts) as batch:
                for partition, index in changes:
                    for bucket, sids in index.deletes.items():
                        batch.delete(_open_row(topic, partition, bucket),
                                     columns=[f"o:{sid}".encode() for sid in sorted(sids)])


def short_scan(table: happybase.Table, start: bytes, stop: bytes, batch_size: int
               ) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
    """``table.scan(row_start=start, row_stop=stop)`` without its last round trip: happybase
    asks for more until an empty answer, where a short answer already says the scan is done.
    A range's index scan is short, so this is three calls instead of four -- one in ten of
    what a range of a wide topic sends HBase."""
    client = table.connection.client
    scan_id = client.scannerOpenWithScan(table.name, TScan(startRow=start, stopRow=stop,
                                                           caching=batch_size), {})
    try:
        while True:
            items = client.scannerGetList(scan_id, batch_size)
            for item in items:
                yield item.row, {name: cell.value for name, cell in item.columns.items()}
            if len(items) < batch_size:
                return
    finally:
        client.scannerClose(scan_id)


class LeaseReader:
    """The lease epoch as a range checks it before its writes (the task's LeaseCheck)."""

    def __init__(self, conn: happybase.Connection, table_name: str, topic: str,
                 group: str) -> None:
        self._table = conn.table(table_name)
        self._topic, self._group = topic, group

    def epoch(self) -> int | None:
        return read_lease_epoch(self._table, self._topic, self._group)
