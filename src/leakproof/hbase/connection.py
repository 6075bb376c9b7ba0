"""happybase connections and table creation.

Everything above the ``hbase`` package uses happybase's API. Three things go to the raw
Thrift client instead: checkAndPut for the driver lease (happybase lacks it), here; the
put-only mutateRows requests of session rows and index entries, encoded in ``wire.puts``; and
the session rows' reads, whose replies ``wire.gets`` decodes.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import happybase
from thriftpy2.thrift import TClient, TException
from thriftpy2.transport import TTransportException

from leakproof.core.config import HBaseConfig
from leakproof.core.errors import HBaseUnavailable, KerberosError, StoreError, TableMissing
from leakproof.hbase import secure
from leakproof.hbase.wire.puts import strict_binary

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors after which a connection is unusable: drop it and let the caller retry or fail.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (TException, TTransportException,
                                                      socket.error, BrokenPipeError)

# What every family the job creates asks for. Thrift1's ColumnDescriptor does not leave the
# choice to HBase: a field left out is sent as the IDL's default, and those are no Bloom
# filter and no block cache. Without them each read of a session row visits every store
# file of both families (a miss too: most touched sessions are new) and reads its blocks
# from disk, checksum and all, every time; at 25 000 ev/s the fold's reads took 0.43 s a
# batch on average and up to 6.5 s, with them 0.25 s and 2.2 s (docs/BENCHMARKS.md).
# One version: the row is the state, older cells are only garbage.
FAMILY = {"max_versions": 1, "bloom_filter_type": "ROW", "block_cache_enabled": True}


def families(*names: str, **extra: int) -> dict[str, dict[str, object]]:
    """``FAMILY`` for each of ``names`` (``extra``: more options, e.g. ``time_to_live``)."""
    return {name: {**FAMILY, **extra} for name in names}


SESSIONS_FAMILIES = families("s", "f")
DEAD_LETTER_FAMILIES = families("d")
DAY_S = 86_400


def offsets_families(ttl_days: float) -> dict[str, dict[str, object]]:
    """Both families of the offsets table expire together after ``ttl_days`` (0: never)."""
    ttl = {"time_to_live": round(ttl_days * DAY_S)} if ttl_days else {}
    return families("offsets", "audit", **ttl)


STATE_FAMILIES = families("w", "o", "l", "g")


class _Connection(happybase.Connection):  # type: ignore[misc]
    """happybase's API over the transport ``cfg`` asks for: its own (buffered, framed), or
    Kerberos / HTTP(S) from ``secure``."""

    def __init__(self, cfg: HBaseConfig) -> None:
        self._cfg = cfg
        super().__init__(
            host=cfg.host, port=cfg.port, timeout=cfg.timeout_ms,
            transport="buffered" if cfg.transport == "http" else cfg.transport,
            protocol=cfg.protocol, table_prefix=cfg.table_prefix, autoconnect=True)

    def _refresh_thrift_client(self) -> None:
        transport = secure.transport(self._cfg)
        if transport is None:
            super()._refresh_thrift_client()
        else:
            from Hbase_thrift import Hbase  # happybase generates it from its Thrift IDL

            self.transport = transport
            proto = (secure.protocol(self._cfg, transport)
                     or self._protocol_class(transport, decode_response=False))
            self.client = TClient(Hbase, proto)
        # the codec of the hot calls, chosen once per connection (``hbase.wire``)
        self.strict_binary = strict_binary(self.client)


def connect(cfg: HBaseConfig) -> happybase.Connection:
    """A new connection; table names get ``table_prefix`` the happybase way (``prefix_name``)."""
    try:
        return _Connection(cfg)
    except KerberosError as exc:
        if exc.transient:  # the KDC is down: an outage like any other, ridden out
            raise HBaseUnavailable(str(exc)) from exc
        raise
    except CONNECTION_ERRORS as exc:
        raise HBaseUnavailable(f"cannot connect to the HBase Thrift server at {cfg.host}:"
                               f"{cfg.port} ({describe(cfg)}): {exc}") from exc


def describe(cfg: HBaseConfig) -> str:
    """How the connection is made, for messages: transport/protocol and the security."""
    parts = [f"{cfg.transport}/{cfg.protocol}"]
    if cfg.tls:
        parts.append("TLS")
    if cfg.auth == "kerberos":
        parts.append(f"Kerberos as {cfg.kerberos.principal if cfg.kerberos else '?'} to "
                     f"{cfg.kerberos_service() if cfg.kerberos else '?'}")
    return ", ".join(parts)


class ConnectionSlot:
    """One cached connection (per process and config), replaced after any transport error."""

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

    def call(self, what: str, fn: Callable[[happybase.Connection], T]) -> T:
        """Run ``fn`` (idempotent) with a connection, retried on fresh connections while the
        outage lasts less than ``hbase.outage_tolerance_s``."""
        return ride_out(self.cfg, what, lambda: self._once(fn), self.reset)

    def _once(self, fn: Callable[[happybase.Connection], T]) -> T:
        with self.get() as conn:
            return fn(conn)


def _brief(exc: BaseException) -> str:
    """The first line of an error: HBase's IOError carries the server's whole Java stack."""
    text = str(exc).replace("\\n", "\n").splitlines()
    return (text[0] if text else "")[:300]


def _plain_hint(cfg: HBaseConfig, exc: BaseException) -> str:
    """A Thrift server that demands SASL takes a plain client's first call for a broken
    handshake: it closes the connection or waits for bytes that never come."""
    if cfg.auth == "none" and cfg.transport == "buffered" and isinstance(
            exc, (TTransportException, TimeoutError)):
        return (" -- a Thrift server that requires Kerberos (hbase.thrift.security.qop) "
                "closes plain connections like this; if so, set hbase.auth: kerberos")
    return ""


RETRYABLE: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, HBaseUnavailable)


_TABLE_NOT_FOUND = re.compile(r"TableNotFoundException: ([\w.:-]+)")


def missing_table(exc: BaseException) -> str | None:
    """The table an HBase error says does not exist (the Thrift server passes the Java
    exception on as an IOError's message), or None for any other error."""
    found = _TABLE_NOT_FOUND.search(_brief(exc))
    return found.group(1) if found else None


def ride_out(cfg: HBaseConfig, what: str, attempt: Callable[[], T],
             reset: Callable[[], None] = lambda: None) -> T:
    """Call ``attempt`` until it succeeds, riding out an outage as ``riding_out`` does."""
    for each in riding_out(cfg, what, reset):
        with each:
            return attempt()
    raise AssertionError("riding_out ends only after a try that succeeded")  # pragma: no cover


class Try:
    """One try of ``riding_out``: a block that keeps a retryable error for the loop to judge,
    and lets any other error through."""

    error: BaseException | None = None

    def __enter__(self) -> Try:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> bool:
        if isinstance(exc, RETRYABLE):
            self.error = exc
            return True
        return False


def riding_out(cfg: HBaseConfig, what: str, reset: Callable[[], None] = lambda: None
               ) -> Iterator[Try]:
    """Tries of a block of idempotent HBase calls, in the caller's own frame::

        for each in riding_out(cfg, "writes", slot.reset):
            with each:
                ...

    The loop ends after the first try whose block raised no retryable error. After one
    that did: wait (0.5 s doubling to 5 s) and try again, for at most
    ``cfg.outage_tolerance_s`` -- then raise HBaseUnavailable; a missing table raises
    TableMissing at once.

    One retry is always allowed: a connection the Thrift server closed while idle fails
    once, harmlessly, even with a tolerance of 0.
    """
    deadline = time.monotonic() + cfg.outage_tolerance_s
    delay, tries = 0.5, 0
    while True:
        each = Try()
        yield each
        exc = each.error
        if exc is None:
            return
        missing = missing_table(exc)
        if missing is not None:
            raise TableMissing(
                f"HBase {what}: table {missing} does not exist at {cfg.host}:{cfg.port} "
                f"(hbase.table_prefix: {cfg.table_prefix or 'none'}; `leakproof tables "
                "create` makes the job's tables)") from exc
        reset()
        tries += 1
        if tries > 1 and time.monotonic() + delay > deadline:
            raise HBaseUnavailable(
                f"HBase {what} failed {tries} times over {cfg.outage_tolerance_s:.0f}s "
                f"(hbase.outage_tolerance_s) at {cfg.host}:{cfg.port}: "
                f"{type(exc).__name__}: {_brief(exc)}{_plain_hint(cfg, exc)}") from exc
        log.warning("HBase %s failed (%s: %s); retry %d in %.1fs", what,
                    type(exc).__name__, _brief(exc), tries, delay if tries > 1 else 0)
        if tries > 1:
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def check_and_put(conn: happybase.Connection, table: str, row: bytes, column: bytes,
                  expected: bytes | None, value: bytes, put_column: bytes | None = None
                  ) -> bool:
    """Thrift1 checkAndPut: write ``value`` to ``column`` (or to ``put_column`` of the same
    row) only if ``column`` now holds ``expected`` (None: only if it is empty). True when
    the put happened.

    ``table`` is the short name: the ``table_prefix`` is added the way happybase adds it.
    """
    from Hbase_thrift import Mutation  # happybase generates this module from its Thrift IDL

    mutation = Mutation(column=put_column or column, value=value, isDelete=False,
                        writeToWAL=True)
    done: bool = conn.client.checkAndPut(conn._table_name(table), row, column, expected,
                                         mutation, {})
    return done


def ensure_tables(conn: happybase.Connection, cfg: HBaseConfig) -> list[str]:
    """Create the job's tables if missing (idempotent; safe if two processes race).

    The missing tables are created at once, each over its own connection but the first:
    HBase's master runs the create procedures side by side, and a Thrift1 createTable waits
    for its table's region to open (about 0.6 s each here: 0.65 s for four at once, 2.45 s
    one after another -- what a job's first start waits)."""
    wanted = {
        cfg.sessions_table: SESSIONS_FAMILIES,
        cfg.dead_letter_table: DEAD_LETTER_FAMILIES,
        cfg.offsets_table: offsets_families(cfg.offsets_ttl_days),
        cfg.state_table: STATE_FAMILIES,
    }
    existing = {t.decode() for t in conn.tables()}
    missing = [name for name in wanted if name not in existing]
    if not missing:
        return []

    def create(name: str, on: happybase.Connection) -> bool:
        """True if this call made the table (False: a racing creator did)."""
        try:
            on.create_table(name, wanted[name])
            return True
        except TException as exc:  # AlreadyExists from a racing creator is fine
            if name.encode() not in on.tables():
                raise StoreError(f"cannot create HBase table {cfg.full_name(name)}: {exc}"
                                 ) from exc
            return False

    def create_apart(name: str) -> bool:
        own = connect(cfg)
        try:
            return create(name, own)
        finally:
            own.close()

    with ThreadPoolExecutor(max_workers=max(1, len(missing) - 1)) as pool:
        others = [pool.submit(create_apart, name) for name in missing[1:]]
        made = [create(missing[0], conn)]
        made += [done.result() for done in others]  # the first error of any, as raised
    return [name for name, ok in zip(missing, made, strict=True) if ok]


def family_advice(table: str, found: dict[bytes, dict[str, object]]) -> str | None:
    """The HBase shell command that gives ``table``'s families what ``FAMILY`` asks for, or
    None when they have it. Tables made before the job asked for Bloom filters and the block
    cache keep working, only slower; Thrift1 cannot alter a table, so an operator does."""
    lacking = sorted(name.decode().rstrip(":") for name, opts in found.items()
                     if opts.get("bloom_filter_type") == b"NONE"
                     or not opts.get("block_cache_enabled"))
    if not lacking:
        return None
    specs = ", ".join(f"{{NAME => '{n}', BLOOMFILTER => 'ROW', BLOCKCACHE => 'true'}}"
                      for n in lacking)
    return f"alter '{table}', {specs}"


FOREVER = 2**31 - 1  # HBase's "no TTL" (HConstants.FOREVER), as Thrift1 reports it


def ttl_refusal(table: str, found: dict[bytes, dict[str, object]]) -> str | None:
    """Why the job must not run over ``table`` when a family of it has a TTL, naming the
    HBase shell command that removes it; None when none has. A range writes only the cells
    that changed, so a TTL expires cells written once (``first_ts``, ``user_id``, a fence)
    under a live session, and expired index or state cells lose sessions."""
    timed = sorted((name.decode().rstrip(":"), opts.get("time_to_live")) for name, opts
                   in found.items() if opts.get("time_to_live") not in (None, -1, FOREVER))
    if not timed:
        return None
    specs = ", ".join(f"{{NAME => '{n}', TTL => 'FOREVER'}}" for n, _ in timed)
    ttls = ", ".join(f"{n} {ttl}s" for n, ttl in timed)
    return (f"HBase table {table} has a TTL on families the job writes ({ttls}): cells "
            "written once under a live session would expire and the rows come back wrong "
            f"(docs/DESIGN.md, late writes). In the HBase shell: alter '{table}', {specs}")


Judge = Callable[[str, dict[bytes, dict[str, object]]], str | None]


def untuned_tables(conn: happybase.Connection, cfg: HBaseConfig) -> list[str]:
    """``family_advice`` for each of the job's read tables that exists and lacks it."""
    return judge_families(conn, cfg, family_advice)[0]


def judge_families(conn: happybase.Connection, cfg: HBaseConfig, *judges: Judge
                   ) -> list[list[str]]:
    """What each of ``judges`` (``family_advice``, ``ttl_refusal``) says of the sessions and
    state tables' families, where it says anything: their descriptors read once."""
    said: list[list[str]] = [[] for _ in judges]
    for name in (cfg.sessions_table, cfg.state_table):
        try:
            found = conn.table(name).families()
        except TTransportException:
            raise  # the connection is gone: the caller's retry decides
        except TException as exc:  # e.g. a user without ADMIN or CREATE on the table
            log.info("not checking the families of %s: %s", cfg.full_name(name), _brief(exc))
            continue
        for judge, verdicts in zip(judges, said, strict=True):
            verdict = judge(cfg.full_name(name), found)
            if verdict is not None:
                verdicts.append(verdict)
    return said
