"""getRowsWithColumns calls, their replies decoded here instead of through thriftpy2 and
happybase.

A session row that exists costs the reader more than HBase: thriftpy2 builds a ``TRowResult``
and a ``TCell`` object per cell and happybase copies them into a dict, 35-45 us of CPU for a
row of 16 cells on the development machine (``make bench-cells``), against HBase's 20. The
reply is simple (Thrift's strict binary protocol: a message header, then a list of rows,
each a key and a map of column to (value, timestamp)), so it is read here into the dicts the
stores use, three reads of the transport a cell. The request goes out as happybase would
send it, through the connection's own transport and protocol; a connection speaking the
compact protocol keeps happybase's ``rows``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from thriftpy2.thrift import TApplicationException, TException

from leakproof.hbase.wire.puts import (
    call_header,
    client_of,
    send_request,
    speaks_strict_binary,
)

Read = Callable[[int], bytes]
Row = tuple[bytes, dict[bytes, bytes]]

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_VERSION_MASK = -65536  # 0xffff0000 as a signed i32
_VERSION_1 = -2147418112  # 0x80010000
_REPLY, _EXCEPTION = 2, 3
_METHOD = b"getRowsWithColumns"

# Thrift type ids
_STOP, _BOOL, _BYTE, _DOUBLE, _I16_T, _I32_T, _I64 = 0, 2, 3, 4, 6, 8, 10
_STRING, _STRUCT, _MAP, _SET, _LIST = 11, 12, 13, 14, 15
_FIXED = {_BOOL: 1, _BYTE: 1, _DOUBLE: 8, _I16_T: 2, _I32_T: 4, _I64: 8}

# A TCell as HBase's Thrift server writes it: 1: value (string), 2: timestamp (i64), stop.
_CELL_VALUE = b"\x0b\x00\x01"
_CELL_TS = b"\x0a\x00\x02"


class ReplyError(TException):
    """A reply this decoder does not understand: a Thrift error, so the connection it came
    on is dropped and the call retried on a new one, as after any broken reply."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def __str__(self) -> str:
        return self.message


def encode_get_rows(table: bytes, rows: Sequence[bytes], columns: Sequence[bytes] | None,
                    seqid: int = 0) -> bytes:
    """The request ``getRowsWithColumns(table, rows, columns, {})``, as happybase sends it
    (no columns: the field is left out, and the server returns every column)."""
    pack = _I32.pack
    out = [call_header(_METHOD, seqid), b"\x0b\x00\x01", pack(len(table)), table,
           b"\x0f\x00\x02\x0b", pack(len(rows))]
    for row in rows:
        out += (pack(len(row)), row)
    if columns is not None:
        out += (b"\x0f\x00\x03\x0b", pack(len(columns)))
        for column in columns:
            out += (pack(len(column)), column)
    out.append(b"\x0d\x00\x04\x0b\x0b\x00\x00\x00\x00\x00")  # 4: empty map; the args' end
    return b"".join(out)


def read_reply(read: Read) -> list[Row]:
    """The rows of a getRowsWithColumns reply; raises what the server answered instead
    (happybase's ``IOError``, thriftpy2's ``TApplicationException``) as thriftpy2 would."""
    version = _I32.unpack(read(4))[0]
    if version & _VERSION_MASK != _VERSION_1:
        raise ReplyError(f"not a strict binary reply (header {version & 0xffffffff:#x})")
    _string(read)  # the method's name
    read(4)  # the seqid: one call at a time on a connection
    if version & 0xFF == _EXCEPTION:
        fields = _struct_fields(read)
        raise TApplicationException(fields.get(2, 0), (fields.get(1) or b"").decode(
            "utf-8", "replace"))
    if version & 0xFF != _REPLY:
        raise ReplyError(f"unexpected message type {version & 0xFF}")
    rows: list[Row] = []
    for ftype, fid in _fields(read):
        if fid == 0 and ftype == _LIST:
            etype, count = _list_header(read)
            if etype != _STRUCT:
                raise ReplyError(f"a list of type {etype} where rows were expected")
            rows += [_row(read) for _ in range(count)]
        elif fid == 1 and ftype == _STRUCT:
            from Hbase_thrift import IOError as HBaseIOError  # happybase's generated module

            message = _struct_fields(read).get(1) or b""
            raise HBaseIOError(message=message.decode("utf-8", "replace"))
        else:
            _skip(read, ftype)
    return rows


def _row(read: Read) -> Row:
    """One TRowResult: its key and its columns' values."""
    key, cells = b"", dict[bytes, bytes]()
    for ftype, fid in _fields(read):
        if fid == 1 and ftype == _STRING:
            key = _string(read)
        elif fid == 2 and ftype == _MAP:
            ktype, vtype, count = read(1)[0], read(1)[0], _I32.unpack(read(4))[0]
            if (ktype, vtype) != (_STRING, _STRUCT):
                raise ReplyError(f"a map of {ktype}/{vtype} where columns were expected")
            cells = _cells(read, count)
        else:
            _skip(read, ftype)
    return key, cells


def _cells(read: Read, count: int) -> dict[bytes, bytes]:
    """``count`` column -> TCell entries. Each is read in three pieces whose sizes are known
    when the TCell is in the order HBase writes it (value, timestamp); one that starts with
    another field is read field by field, one with fields past those two is refused."""
    cells: dict[bytes, bytes] = {}
    unpack = _I32.unpack_from
    if count == 0:
        return cells
    size = unpack(read(4))[0]  # the first column's length
    for i in range(count):
        chunk = read(size + 7)  # the column, the value's field header and its length
        column = chunk[:size]
        if chunk[size:size + 3] != _CELL_VALUE:
            cells[column] = _cell_slowly(read, chunk[size:])
            if i + 1 < count:
                size = unpack(read(4))[0]
            continue
        vlen = unpack(chunk, size + 3)[0]
        last = i + 1 == count
        tail = read(vlen + 12 + (0 if last else 4))  # value, timestamp, stop, next length
        if tail[vlen:vlen + 3] != _CELL_TS or tail[vlen + 11] != _STOP:
            raise ReplyError("a TCell with fields past value and timestamp")
        cells[column] = tail[:vlen]
        if not last:
            size = unpack(tail, vlen + 12)[0]
    return cells


def _cell_slowly(read: Read, head: bytes) -> bytes:
    """A TCell whose first seven bytes (``head``) are already read, not in HBase's order."""
    pending = bytearray(head)

    def take(n: int) -> bytes:
        nonlocal pending
        if len(pending) >= n:
            out, pending = bytes(pending[:n]), pending[n:]
            return out
        out = bytes(pending) + read(n - len(pending))
        pending = bytearray()
        return out

    value = b""
    for ftype, fid in _fields(take):
        if fid == 1 and ftype == _STRING:
            value = take(_I32.unpack(take(4))[0])
        else:
            _skip(take, ftype)
    if pending:  # the head held bytes past the TCell: they were the next entry's
        raise ReplyError("a TCell shorter than the bytes read ahead of it")
    return value


def _fields(read: Read) -> Iterator[tuple[int, int]]:
    """A struct's field headers (type, id) up to its stop; the caller reads each value."""
    while (ftype := read(1)[0]) != _STOP:
        yield ftype, _I16.unpack(read(2))[0]


def _string(read: Read) -> bytes:
    return read(_I32.unpack(read(4))[0])


def _list_header(read: Read) -> tuple[int, int]:
    head = read(5)
    return head[0], _I32.unpack_from(head, 1)[0]


def _struct_fields(read: Read) -> dict[int, Any]:
    """A struct's string and i32 fields by id (others skipped): enough for the errors."""
    found: dict[int, Any] = {}
    for ftype, fid in _fields(read):
        if ftype == _STRING:
            found[fid] = _string(read)
        elif ftype == _I32_T:
            found[fid] = _I32.unpack(read(4))[0]
        else:
            _skip(read, ftype)
    return found


def _skip(read: Read, ftype: int) -> None:
    """Read past one value of ``ftype``."""
    if ftype in _FIXED:
        read(_FIXED[ftype])
    elif ftype == _STRING:
        _string(read)
    elif ftype == _STRUCT:
        for inner, _ in _fields(read):
            _skip(read, inner)
    elif ftype == _MAP:
        ktype, vtype, count = read(1)[0], read(1)[0], _I32.unpack(read(4))[0]
        for _ in range(count):
            _skip(read, ktype)
            _skip(read, vtype)
    elif ftype in (_LIST, _SET):
        etype, count = _list_header(read)
        for _ in range(count):
            _skip(read, etype)
    else:
        raise ReplyError(f"unknown Thrift type {ftype}")


def get_rows(table: Any, rows: Sequence[bytes], columns: Sequence[bytes] | None = None,
             per_call: int = 1000) -> Iterator[Row]:
    """``table.rows(rows, columns)`` (happybase) in calls of ``per_call`` rows, each reply
    decoded here where the connection speaks strict binary."""
    lean = speaks_strict_binary(table)
    for i in range(0, len(rows), per_call):
        chunk = rows[i:i + per_call]
        if not lean:
            yield from table.rows(list(chunk), columns=None if columns is None else list(columns))
            continue
        client = client_of(table)
        send_request(client, encode_get_rows(table.name, chunk, columns, client._seqid))
        yield from read_reply(client._iprot.trans.read)
