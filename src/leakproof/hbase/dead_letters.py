"""The dead-letter table: row ``<topic>:<partition>:<offset, 20 digits>``, family ``d``
(``<topic>~<tag>:...`` for a topic recreated under the same name: ``dead_letter.source``).

Keeps the raw key and value bytes exactly as Kafka had them (a null is recorded as a flag,
since HBase has no null cell), the record's Kafka timestamp and headers, the error text and
type, and the batch time; a record that is itself a re-driven copy also names the dead letter
it came from (``redriven_from``). Writing the same record twice writes the same row:
replays stay idempotent; a replay that decodes a record an earlier attempt dead-lettered
(its cause fixed in between) withdraws the row (``withdraw``). A redrive keeps its mark in
``d:redrive`` (``dead_letter.RedriveMark``), which the job never writes, moved by
checkAndPut only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping

import happybase

from leakproof.core.config import HBaseConfig
from leakproof.core.dead_letter import (
    ALL,
    DeadLetter,
    RedriveMark,
    Selection,
    decode_headers,
    encode_headers,
    origin_of,
    source,
)
from leakproof.core.errors import DecodeError
from leakproof.hbase.connection import ConnectionSlot, check_and_put
from leakproof.hbase.row_scan import scan

REDRIVE = b"d:redrive"
# the cells a selection reads (no record bytes): to count and plan before sending
BRIEF = [b"d:kind", b"d:timestamp", b"d:batch_time", REDRIVE]


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
    if err.timestamp is not None:
        cells[b"d:timestamp"] = str(err.timestamp).encode()
    if err.headers:
        cells[b"d:headers"] = encode_headers(err.headers)
        link = origin_of(err.headers)
        if link is not None:
            cells[b"d:redriven_from"] = link.encode()
    return cells


def from_cells(key: bytes, cells: Mapping[bytes, bytes]) -> DeadLetter:
    """A row read back (``to_cells`` and the redrive's mark)."""
    topic, partition, offset = key.decode().rsplit(":", 2)
    stamp, link, mark = (cells.get(c) for c in (b"d:timestamp", b"d:redriven_from", REDRIVE))
    return DeadLetter(
        topic, int(partition), int(offset),
        None if cells.get(b"d:key_null") == b"1" else cells.get(b"d:key", b""),
        None if cells.get(b"d:value_null") == b"1" else cells.get(b"d:value", b""),
        tuple(decode_headers(cells.get(b"d:headers"))),
        cells.get(b"d:kind", b"").decode(), cells.get(b"d:error", b"").decode(errors="replace"),
        cells.get(b"d:error_type", b"").decode(), int(cells.get(b"d:batch_time", b"0")),
        int(stamp) if stamp else None, RedriveMark.parse(mark) if mark else None,
        link.decode(errors="replace") if link else None)


class DeadLetterStore:
    """Batched writes of dead letters; scans for verification and operators."""

    def __init__(self, table: happybase.Table) -> None:
        self._table = table

    def write(self, errors: Iterable[DecodeError], batch_ms: int, *, ts: int,
              incarnation: str = "") -> None:
        """One row per record, every cell at timestamp ``ts`` (a late copy loses), under
        its topic's name tagged with ``incarnation`` (``dead_letter.source``)."""
        with self._table.batch(batch_size=500, timestamp=ts) as batch:
            for err in errors:
                batch.put(row_key(source(err.topic, incarnation), err.partition, err.offset),
                          to_cells(err, batch_ms))

    def withdraw(self, topic: str, partition: int, offsets: Collection[int], *, ts: int
                 ) -> int:
        """Delete the rows among ``offsets`` no redrive has marked (one scan of their span,
        then the deletes at ``ts``: a late copy of the earlier attempt's put stays hidden).
        A marked row stays: its copy in the topic carries its events."""
        if not offsets:
            return 0
        start, stop = row_key(topic, partition, min(offsets)), row_key(topic, partition,
                                                                       max(offsets) + 1)
        gone = [key for key, cells in self._table.scan(row_start=start, row_stop=stop,
                                                       columns=[b"d:kind", REDRIVE])
                if REDRIVE not in cells and int(key.rsplit(b":", 1)[1]) in offsets]
        if gone:
            with self._table.batch(timestamp=ts) as batch:
                for key in gone:
                    batch.delete(key)
        return len(gone)

    def scan(self, topic: str) -> dict[tuple[int, int], dict[bytes, bytes]]:
        """(partition, offset) -> cells, for every dead letter of ``topic``."""
        out = {}
        for key, cells in self._table.scan(row_prefix=f"{topic}:".encode()):
            _, partition, offset = key.decode().rsplit(":", 2)
            out[(int(partition), int(offset))] = cells
        return out


class DeadLetterRows:
    """The dead-letter table as operators and the redrive use it (``ports.redrive``): rows
    streamed in row-key order, one row by its coordinates, and the redrive's marks."""

    def __init__(self, cfg: HBaseConfig, batch_size: int = 1000) -> None:
        self._cfg = cfg
        self._batch_size = batch_size
        self._conns = ConnectionSlot(cfg)

    def letters(self, topic: str, selection: Selection = ALL, brief: bool = False
                ) -> Iterator[DeadLetter]:
        """The dead letters of ``topic`` the selection takes, in row-key order: partition by
        partition (as text: 10 sorts before 2), offsets ascending; streamed over a
        connection of its own. A selection of one partition scans only its offset range.
        ``brief``: without the record (key, value, headers) or the error text."""
        columns = BRIEF if brief else None
        if len(selection.partitions) == 1:
            (partition,) = selection.partitions
            stop = (row_key(topic, partition, selection.until_offset)
                    if selection.until_offset is not None
                    else f"{topic}:{partition};".encode())  # ';' is the byte after ':'
            rows = scan(self._cfg, self._cfg.dead_letter_table,
                        row_start=row_key(topic, partition, selection.from_offset),
                        row_stop=stop, columns=columns, batch_size=self._batch_size)
        else:
            rows = scan(self._cfg, self._cfg.dead_letter_table, row_prefix=f"{topic}:".encode(),
                        columns=columns, batch_size=self._batch_size)
        return selection.pick(from_cells(key, cells) for key, cells in rows)

    def get(self, topic: str, partition: int, offset: int) -> DeadLetter | None:
        key = row_key(topic, partition, offset)
        cells = self._conns.call("dead letter read", lambda c: c.table(
            self._cfg.dead_letter_table).row(key))
        return from_cells(key, cells) if cells else None

    def mark(self, letter: DeadLetter, new: RedriveMark) -> bool:
        """Move the row's mark from what ``letter`` read to ``new`` (a checkAndPut); False
        when the row holds another mark by now (another redrive moved it)."""
        key = row_key(letter.topic, letter.partition, letter.offset)
        expected = letter.mark.encode() if letter.mark else None
        value = new.encode()

        def cas(conn: happybase.Connection) -> bool:
            if check_and_put(conn, self._cfg.dead_letter_table, key, REDRIVE, expected, value):
                return True
            # a retried call whose first try landed finds its own value there
            now: dict[bytes, bytes] = conn.table(self._cfg.dead_letter_table).row(
                key, columns=[REDRIVE])
            return now.get(REDRIVE) == value
        return self._conns.call("redrive mark", cas)

    def close(self) -> None:
        self._conns.reset()
