"""Table reads in row-key order, streamed: one batch of rows per Thrift call, never the table
in memory (``sessions diff`` merges two such scans; the dead-letter commands walk one)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from thriftpy2.thrift import TException

from leakproof.core.config import HBaseConfig
from leakproof.core.errors import StoreError, TableMissing
from leakproof.hbase.connection import connect, missing_table


def scan(cfg: HBaseConfig, table: str, *, columns: Sequence[bytes] | None = None,
         row_start: bytes | None = None, row_stop: bytes | None = None,
         row_prefix: bytes | None = None, batch_size: int = 1000
         ) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
    """The rows of ``table`` (the short name: ``cfg.table_prefix`` is added) in
    ``[row_start, row_stop)`` or under ``row_prefix``, with their cells (of ``columns``:
    families or cells), in row-key order; over a connection of its own, closed when the scan
    ends or is dropped."""
    if batch_size < 1:
        raise ValueError("'batch_size' must be > 0")
    conn = connect(cfg)
    try:
        yield from conn.table(table).scan(row_start=row_start, row_stop=row_stop,
                                          row_prefix=row_prefix, columns=columns,
                                          batch_size=batch_size)
    except TException as exc:
        if missing_table(exc) is not None:
            raise TableMissing(f"HBase table {cfg.full_name(table)} does not exist at "
                               f"{cfg.host}:{cfg.port} (hbase.table_prefix: "
                               f"{cfg.table_prefix or 'none'})") from exc
        raise StoreError(f"scanning HBase table {cfg.full_name(table)} at {cfg.host}:"
                         f"{cfg.port} failed: {exc}") from exc
    finally:
        conn.close()
