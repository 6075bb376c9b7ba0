"""The HBase commit store: the offsets table operators know, ``<topic>:<group>:<batch ms>``.

Family ``offsets``: qualifier = partition id (decimal text), value = the next offset to read
(the batch's until offset, decimal text). Family ``audit``: the batch's counts and timings.
``scan 'stream_kafka_offsets', {REVERSED => true}`` in the HBase shell shows the newest first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import happybase

from leakproof.core.config import Config
from leakproof.core.offsets import CommittedBatch
from leakproof.hbase.connection import ConnectionSlot
from leakproof.hbase.state_store import decode_last, last_row
from leakproof.ports.driver import REQUIRED_AUDIT

log = logging.getLogger(__name__)


def row_key(topic: str, group: str, batch_ms: int) -> bytes:
    return f"{topic}:{group}:{batch_ms:013d}".encode()


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


class LastCommit:
    """The row ``last:<topic>:<group>`` of the state table (family ``l``, no TTL): a copy of
    the newest commit, whatever the store. The HBase store resumes from it when its offsets
    rows expired; the Kafka-group and ZooKeeper stores hold their own offsets to it, so
    offsets that vanished (expired by the broker, deleted) are noticed, not taken for a
    first run."""

    def __init__(self, cfg: Config) -> None:
        self._hb = cfg.hbase
        self._row = last_row(cfg.kafka.topic, cfg.kafka.group_id)
        self._conns = ConnectionSlot(cfg.hbase)

    def read(self, conn: happybase.Connection | None = None) -> CommittedBatch | None:
        def read(c: happybase.Connection) -> CommittedBatch | None:
            return decode_last(c.table(self._hb.state_table).row(self._row))

        return read(conn) if conn is not None else self._conns.call("offsets read", read)

    def write(self, batch_ms: int, offsets: Mapping[int, int], audit: Mapping[str, str],
              conn: happybase.Connection | None = None) -> None:
        copy = {f"l:p{p}".encode(): str(o).encode() for p, o in offsets.items()}
        copy[b"l:batch_ms"] = str(batch_ms).encode()
        copy.update({f"l:{k}".encode(): audit[k].encode() for k in REQUIRED_AUDIT
                     if k in audit})

        def write(c: happybase.Connection) -> None:
            c.table(self._hb.state_table).put(self._row, copy)

        if conn is not None:
            write(conn)
        else:
            self._conns.call("offsets commit", write)

    def close(self) -> None:
        self._conns.reset()


class HBaseCommitStore:
    """The default commit store: one offsets row per batch, plus a copy of the newest one.

    The offsets table may carry a TTL (``offsets.ttl_days``) so history does not grow for
    ever; a job stopped for longer than the TTL would then find no row and start over from
    ``auto_offset_reset``. So every commit also writes its offsets to the row
    ``last:<topic>:<group>`` of the state table (family ``l``), which has no TTL, and
    ``latest`` falls back to it. The copy keeps the REQUIRED_AUDIT keys too, so the
    recreated-topic check still works on a job resumed from it.
    """

    name = "hbase"
    keeps_history = True

    def __init__(self, cfg: Config) -> None:
        self._cfg = cfg
        self._hb = cfg.hbase
        self._topic, self._group = cfg.kafka.topic, cfg.kafka.group_id
        self._conns = ConnectionSlot(cfg.hbase)
        self._last = LastCommit(cfg)

    def _rows(self, conn: happybase.Connection) -> OffsetStore:
        return OffsetStore(conn.table(self._hb.offsets_table), self._topic, self._group)

    def latest(self) -> CommittedBatch | None:
        def read(conn: happybase.Connection) -> CommittedBatch | None:
            found = self._rows(conn).latest()
            if found is not None:
                return found
            copy = self._last.read(conn)
            if copy is None:
                return None
            log.warning("no row for %s:%s in %s (expired by its TTL?): resuming from the "
                        "copy of batch %d kept in %s", self._topic, self._group,
                        self._hb.full_name(self._hb.offsets_table), copy.batch_ms,
                        self._hb.full_name(self._hb.state_table))
            return copy

        return self._conns.call("offsets read", read)

    def put(self, batch_ms: int, offsets: Mapping[int, int], audit: Mapping[str, str]) -> None:
        def write(conn: happybase.Connection) -> None:
            self._rows(conn).put(batch_ms, offsets, audit)
            self._last.write(batch_ms, offsets, audit, conn)

        self._conns.call("offsets commit", write)

    def get(self, batch_ms: int) -> CommittedBatch | None:
        found = self._conns.call("offsets read", lambda c: self._rows(c).get(batch_ms))
        if found is None:  # expired by the TTL: the copy, if it is that batch
            latest = self.latest()
            if latest is not None and latest.batch_ms == batch_ms:
                return latest
        return found

    def history(self, limit: int) -> list[CommittedBatch]:
        return self._conns.call("offsets history", lambda c: self._rows(c).history(limit))

    def close(self) -> None:
        self._conns.reset()

