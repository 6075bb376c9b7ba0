"""The HBase tables around a run: its own dropped after it (KEEP=1 keeps them), and a note
before the figures when HBase already holds many (it slows as they pile up)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace

from leakproof.core import config
from leakproof.hbase.connection import connect


def drop_tables(cfg: config.HBaseConfig, prefix: str) -> None:
    """Drop a run's tables (KEEP=1 keeps them): HBase slows down as they pile up. Measured:
    with ~200 tables of earlier runs left over, the same leakproof drain ran at 22 361 ev/s
    with HBase at 40 CPU s per M events; on a clean HBase, 37 651 ev/s and 14.8."""
    if os.environ.get("KEEP") == "1":
        return
    with contextlib.closing(connect(replace(cfg, table_prefix=prefix))) as conn:
        for table in conn.tables():  # with a prefix, happybase lists only its tables
            conn.delete_table(table, disable=True)


LEFTOVER_TABLES = 40  # more than this on the HBase a bench starts on: say so


def leftover_note(tables: int) -> str | None:
    """What to say of the tables an HBase holds before a run: the figures of a region server
    that carries hundreds of tables (left by tests, or runs with KEEP=1) are not comparable."""
    if tables <= LEFTOVER_TABLES:
        return None
    return (f"note: HBase holds {tables} tables before this run (tests and KEEP=1 runs leave "
            "theirs); it slows as they pile up (see drop_tables), so these figures compare "
            "only with runs on as full an HBase. `make stack-down WIPE=1 && make stack-up` "
            "starts an empty one.")


def count_tables(cfg: config.HBaseConfig) -> int:
    with contextlib.closing(connect(replace(cfg, table_prefix=None))) as conn:
        return len(conn.tables())
