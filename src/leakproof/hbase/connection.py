"""happybase connections and table creation; the one place that knows Thrift's quirks."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import happybase
from thriftpy2.thrift import TException
from thriftpy2.transport import TTransportException

from leakproof.config import HBaseConfig
from leakproof.errors import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors after which a connection is unusable: drop it and let the caller retry or fail.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (TException, TTransportException,
                                                      socket.error, BrokenPipeError)

SESSIONS_FAMILIES = {"s": {"max_versions": 1}, "f": {"max_versions": 1}}
DEAD_LETTER_FAMILIES = {"d": {"max_versions": 1}}
OFFSETS_FAMILIES = {"offsets": {"max_versions": 1}, "audit": {"max_versions": 1}}
STATE_FAMILIES = {"w": {"max_versions": 1}, "o": {"max_versions": 1},
                  "l": {"max_versions": 1}, "g": {"max_versions": 1}}


def connect(cfg: HBaseConfig) -> happybase.Connection:
    """A new connection; table names get ``table_prefix`` the happybase way (``prefix_name``)."""
    try:
        return happybase.Connection(
            host=cfg.host, port=cfg.port, timeout=cfg.timeout_ms, transport=cfg.transport,
            protocol=cfg.protocol, table_prefix=cfg.table_prefix, autoconnect=True)
    except CONNECTION_ERRORS as exc:
        raise StoreError(f"cannot connect to the HBase Thrift server at {cfg.host}:{cfg.port} "
                         f"({cfg.transport}/{cfg.protocol}): {exc}") from exc


class Connections:
    """One cached connection per process, replaced after any transport error."""

    def __init__(self, cfg: HBaseConfig) -> None:
        self.cfg = cfg
        self._conn: happybase.Connection | None = None

    @contextmanager
    def get(self) -> Iterator[happybase.Connection]:
        if self._conn is None:
            self._conn = connect(self.cfg)
        try:
            yield self._conn
        except CONNECTION_ERRORS:
            self.reset()
            raise

    def reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing a broken HBase connection failed", exc_info=True)

    def call(self, what: str, fn: Callable[[happybase.Connection], T], retries: int = 1) -> T:
        """Run ``fn`` with a connection; retry on a fresh connection for idempotent calls."""
        for attempt in range(retries + 1):
            try:
                with self.get() as conn:
                    return fn(conn)
            except CONNECTION_ERRORS as exc:
                if attempt == retries:
                    raise StoreError(f"HBase {what} failed: {type(exc).__name__}: {exc}") from exc
                log.warning("HBase %s failed (%s); retrying on a new connection", what, exc)
        raise AssertionError("unreachable")


def ensure_tables(conn: happybase.Connection, cfg: HBaseConfig) -> list[str]:
    """Create the job's tables if missing (idempotent; safe if two processes race)."""
    wanted = {
        cfg.sessions_table: SESSIONS_FAMILIES,
        cfg.dead_letter_table: DEAD_LETTER_FAMILIES,
        cfg.offsets_table: OFFSETS_FAMILIES,
        cfg.state_table: STATE_FAMILIES,
    }
    created = []
    existing = {t.decode() for t in conn.tables()}
    for name, families in wanted.items():
        if name in existing:
            continue
        try:
            conn.create_table(name, families)
            created.append(name)
        except TException as exc:  # AlreadyExists from a racing creator is fine
            if name.encode() not in conn.tables():
                raise StoreError(f"cannot create HBase table {cfg.full_name(name)}: {exc}") from exc
    return created
