"""Whole-row puts in mutateRowsTs calls, encoded here instead of through happybase's ``Batch``.

happybase builds a thriftpy2 ``Mutation`` object for every cell and thriftpy2 serialises it:
2.1 us of CPU a cell on the development machine, and a session row write is cells above all.
The bytes of a put-only ``mutateRowsTs`` call are simple (Thrift's strict binary protocol: a
message header, the table name, a list of rows, each a list of (column, value) mutations,
the cells' timestamp),
so they are written here directly, 0.4 us a cell, the same bytes to the byte
(``tests/unit/test_row_puts.py`` compares them with thriftpy2's own encoding); where the
native module is installed (``core.native``) it writes them, the same bytes again
(``tests/unit/test_native.py``), and this encoder stays the reference it falls back to. They go
through the connection's own transport, so plain, framed, SASL and HTTP connections all
carry them; the reply is read by the Thrift client as any call's. A connection speaking
the compact protocol keeps happybase's ``Batch`` (with the same timestamp).

Every cell a range writes carries the batch's cell timestamp (``cell_clock``): HBase keeps
the cell of the newest timestamp whatever order the puts land in, so a put that arrives
late -- a Thrift server still retrying it after the caller gave up, a zombie attempt --
never hides a newer batch's cell. The timestamp rides in the same call: no round trip more.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Protocol

from leakproof.core import native

_I32 = struct.Struct(">i").pack
_I64 = struct.Struct(">q").pack
_CALL = _I32(-2147418112 | 1)  # strict binary: version 1, message type CALL
_METHOD = b"mutateRowsTs"
# field headers: type byte, then the field id as i16
_TABLE = b"\x0b\x00\x01"  # 1: tableName, string
_BATCHES = b"\x0f\x00\x02\x0c"  # 2: rowBatches, list of structs (then its length)
_ROW = b"\x0b\x00\x01"  # BatchMutation 1: row, string
_MUTATIONS = b"\x0f\x00\x02\x0c"  # BatchMutation 2: mutations, list of structs
_PUT_COLUMN = b"\x02\x00\x01\x00\x0b\x00\x02"  # Mutation 1: isDelete = false; 2: column
_VALUE = b"\x0b\x00\x03"  # Mutation 3: value, string
_TO_WAL = b"\x02\x00\x04\x01\x00"  # Mutation 4: writeToWAL = true; the mutation's end
_STOP = b"\x00"
_TIMESTAMP = b"\x0a\x00\x03"  # 3: timestamp, i64
_NO_ATTRIBUTES = b"\x0d\x00\x04\x0b\x0b\x00\x00\x00\x00\x00"  # 4: empty map; the args' end


def call_header(method: bytes, seqid: int) -> bytes:
    """A strict binary CALL message's header: what every request written here starts with."""
    return b"".join((_CALL, _I32(len(method)), method, _I32(seqid)))


def client_of(table: Any) -> Any:
    """The Thrift client of ``table``'s connection, whose transport a request goes out on
    and its reply comes back on (a reconnect replaces the client, so it is taken per call);
    its ``_seqid`` numbers the request."""
    return table.connection.client


def send_request(client: Any, request: bytes) -> None:
    """Write an encoded request on ``client``'s transport, whole."""
    trans = client._oprot.trans
    trans.write(request)
    trans.flush()


def encode_mutate_rows(table: bytes, rows: Mapping[bytes, Mapping[bytes, bytes]], ts: int,
                       seqid: int = 0) -> bytes:
    """The request ``mutateRowsTs(table, [one put of its cells per row], ts, {})``, each
    cell written to the WAL: what happybase's ``Batch(timestamp=ts)`` sends for the same
    puts."""
    out = [call_header(_METHOD, seqid), _TABLE, _I32(len(table)), table,
           _BATCHES, _I32(len(rows))]
    for row, cells in rows.items():
        out += (_ROW, _I32(len(row)), row, _MUTATIONS, _I32(len(cells)))
        for column, value in cells.items():
            out += (_PUT_COLUMN, _I32(len(column)), column,
                    _VALUE, _I32(len(value)), value, _TO_WAL)
        out.append(_STOP)
    out += (_TIMESTAMP, _I64(ts), _NO_ATTRIBUTES)
    return b"".join(out)


def encode_request(table: bytes, rows: dict[bytes, dict[bytes, bytes]], ts: int,
                   seqid: int) -> bytes:
    """``encode_mutate_rows``'s bytes, written natively where that is installed; anything
    the native encoder declines (a value not ``bytes``, a number past its width) is
    encoded by the reference, which raises what it raises."""
    mod = native.module()
    if mod is not None:
        try:
            request: bytes = mod.encode_mutate_rows(table, rows, ts, seqid)
            return request
        except (ValueError, OverflowError, TypeError):
            pass
    return encode_mutate_rows(table, rows, ts, seqid)


class Puts(Protocol):
    """What the stores put rows through: ``RowPuts`` or happybase's ``Batch`` (the same
    ``put``, and ``send`` for what is left at the end)."""

    def put(self, row: bytes, data: dict[bytes, bytes]) -> None: ...

    def send(self) -> None: ...


class RowPuts:
    """Collects whole-row puts and sends them ``batch_size`` cells at a time, every cell at
    timestamp ``ts``; a row is never split between two calls (HBase applies a row's put
    atomically), and a row put twice is one put of both, as in happybase's ``Batch``."""

    def __init__(self, table: Any, batch_size: int, ts: int) -> None:
        if batch_size <= 0:
            raise ValueError("'batch_size' must be > 0")
        self._table = table
        self._ts = ts
        self._batch_size = batch_size
        self._rows: dict[bytes, dict[bytes, bytes]] = {}
        self._cells = 0

    def put(self, row: bytes, data: dict[bytes, bytes]) -> None:
        self._rows.setdefault(row, {}).update(data)
        self._cells += len(data)
        if self._cells >= self._batch_size:
            self.send()

    def send(self) -> None:
        """One mutateRowsTs call with every row collected; raises what the server answers."""
        if not self._rows:
            return
        client = client_of(self._table)
        send_request(client, encode_request(self._table.name, self._rows, self._ts,
                                            client._seqid))
        client._recv("mutateRowsTs")
        self._rows, self._cells = {}, 0


def speaks_strict_binary(table: Any) -> bool:
    """Whether ``table``'s connection writes Thrift's strict binary protocol (happybase's
    default) -- what ``encode_mutate_rows`` writes: decided when the connection was made
    (``hbase.connection``), or now for a connection made elsewhere."""
    connection = getattr(table, "connection", None)
    decided = getattr(connection, "strict_binary", None)
    if decided is not None:
        return bool(decided)
    return strict_binary(getattr(connection, "client", None))


def strict_binary(client: Any) -> bool:
    """Whether a Thrift client writes the strict binary protocol."""
    protocol = getattr(client, "_oprot", None)
    return (type(protocol).__name__ in ("TCyBinaryProtocol", "TBinaryProtocol")
            and bool(getattr(protocol, "strict_write", False)))


def row_puts(table: Any, batch_size: int, ts: int) -> Puts:
    """Puts on ``table`` at timestamp ``ts``, sent every ``batch_size`` cells and by the
    caller's ``send`` at the end: ``RowPuts`` where the connection speaks strict binary,
    happybase's ``Batch`` elsewhere. A caller that raises before its ``send`` sends no more."""
    if speaks_strict_binary(table):
        return RowPuts(table, batch_size, ts)
    batch: Puts = table.batch(batch_size=batch_size, timestamp=ts)
    return batch
