"""The hand-decoded getRowsWithColumns reply gives what happybase's ``rows`` gives for the
bytes thriftpy2 writes (as HBase's server does), and the request is happybase's to the byte."""

from __future__ import annotations

import struct
from typing import Any

import happybase  # noqa: F401  (puts Hbase_thrift on the path)
import pytest
from Hbase_thrift import Hbase, IOError, TCell, TColumn, TRowResult
from thriftpy2 import protocol, transport
from thriftpy2.thrift import TApplicationException, TClient

from leakproof.hbase.wire.gets import ReplyError, encode_get_rows, get_rows, read_reply

TBinaryProtocol: Any = protocol.TBinaryProtocol
TCompactProtocol: Any = protocol.TCompactProtocol
TMemoryBuffer: Any = transport.TMemoryBuffer

ROWS = [
    (b"s1", {b"s:events": b"3", b"s:user_id": "jürgen".encode(), b"f:p:web:0": b"41"}),
    (b"", {b"s:empty": b""}),  # empty key and value: lengths of 0
    ("sessión-2".encode(), {b"s:" + b"x" * 300: b"\x00\xff" * 200}),
    (b"only-key", {}),
]


def reply(rows: list[tuple[bytes, dict[bytes, bytes]]], *, io_error: str | None = None,
          sorted_columns: bool = False) -> bytes:
    """A getRowsWithColumns reply as thriftpy2 (and HBase's Thrift server) writes it."""
    buffer = TMemoryBuffer()
    proto = TBinaryProtocol(buffer)
    proto.write_message_begin("getRowsWithColumns", 2, 0)  # REPLY
    result = Hbase.getRowsWithColumns_result()
    if io_error is not None:
        result.io = IOError(message=io_error)
    else:
        result.success = [
            TRowResult(row=key, columns={c: TCell(value=v, timestamp=1_700_000_000_123 + i)
                                         for i, (c, v) in enumerate(cells.items())},
                       sortedColumns=[TColumn(columnName=c, cell=TCell(value=v, timestamp=5))
                                      for c, v in cells.items()] if sorted_columns else None)
            for key, cells in rows]
    result.write(proto)
    proto.write_message_end()
    return bytes(buffer.getvalue())


def decoded(data: bytes) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return read_reply(TMemoryBuffer(data).read)


@pytest.mark.parametrize("rows", [ROWS, [], ROWS[:1]], ids=["rows", "none", "one"])
def test_the_reply_decodes_to_what_happybase_returns(rows: list[Any]) -> None:
    assert decoded(reply(rows)) == rows
    assert decoded(reply(rows, sorted_columns=True)) == rows  # a field it skips


def by_hand(cell: bytes, after: bytes = b"") -> bytes:
    """A reply of one row ``r`` with two columns, ``s:a`` and ``s:b``, each holding the TCell
    bytes ``cell``, as no server writes it; ``after``: bytes past its end."""
    row = (b"\x0b\x00\x01" + struct.pack(">i", 1) + b"r"
           + b"\x0d\x00\x02\x0b\x0c" + struct.pack(">i", 2)
           + struct.pack(">i", 3) + b"s:a" + cell
           + struct.pack(">i", 3) + b"s:b" + cell + b"\x00")
    head = (struct.pack(">i", -2147418112 | 2) + struct.pack(">i", 18) + b"getRowsWithColumns"
            + struct.pack(">i", 0))
    return head + b"\x0f\x00\x00\x0c" + struct.pack(">i", 1) + row + b"\x00" + after


def test_a_cell_in_another_field_order_is_still_read() -> None:
    cell = (b"\x0a\x00\x02" + struct.pack(">q", 7)  # timestamp first
            + b"\x0b\x00\x01" + struct.pack(">i", 2) + b"v1" + b"\x00")
    assert decoded(by_hand(cell)) == [(b"r", {b"s:a": b"v1", b"s:b": b"v1"})]


def test_the_servers_errors_are_raised_as_thriftpy2_raises_them() -> None:
    with pytest.raises(IOError, match="TableNotFoundException: t1_web_sessions"):
        decoded(reply([], io_error="TableNotFoundException: t1_web_sessions"))
    buffer = TMemoryBuffer()
    proto = TBinaryProtocol(buffer)
    proto.write_message_begin("getRowsWithColumns", 3, 0)  # EXCEPTION
    TApplicationException(TApplicationException.UNKNOWN_METHOD, "no such method").write(proto)
    with pytest.raises(TApplicationException, match="no such method"):
        decoded(bytes(buffer.getvalue()))
    with pytest.raises(ReplyError, match="not a strict binary reply"):
        decoded(b"\x00\x00\x00\x12getRowsWithColumns")


def sent_by_happybase(table: bytes, rows: list[bytes], columns: list[bytes] | None,
                      seqid: int) -> bytes:
    buffer = TMemoryBuffer()
    client = TClient(Hbase, TBinaryProtocol(buffer))
    client._seqid = seqid
    client._send("getRowsWithColumns", tableName=table, rows=rows, columns=columns,
                 attributes={})
    return bytes(buffer.getvalue())


@pytest.mark.parametrize("columns", [None, [b"s:last_ts", b"s:state"], []])
def test_the_request_is_happybases_to_the_byte(columns: list[bytes] | None) -> None:
    rows = [b"s1", b"", "sessión-2".encode()]
    assert encode_get_rows(b"t1_web_sessions", rows, columns, 3) == sent_by_happybase(
        b"t1_web_sessions", rows, columns, 3)


class _Wire:
    def __init__(self, answer: bytes, speaks: Any = TBinaryProtocol) -> None:
        self.sent = TMemoryBuffer()
        self.client = TClient(Hbase, speaks(self.sent))
        self.client._iprot = speaks(TMemoryBuffer(answer))


class _Table:
    def __init__(self, connection: _Wire) -> None:
        self.connection = connection
        self.name = b"t"
        self.asked: list[Any] = []

    def rows(self, rows: list[bytes], columns: list[bytes] | None = None) -> list[Any]:
        self.asked.append((rows, columns))
        return [(b"from", {b"happybase": b"1"})]


def test_get_rows_sends_the_request_and_reads_its_reply_and_compact_keeps_happybase() -> None:
    table = _Table(_Wire(reply(ROWS[:2])))
    assert list(get_rows(table, [b"s1", b""], [b"s:events"])) == ROWS[:2]
    assert bytes(table.connection.sent.getvalue()) == encode_get_rows(
        b"t", [b"s1", b""], [b"s:events"])
    assert list(get_rows(table, [])) == []  # no call at all
    compact = _Table(_Wire(b"", speaks=TCompactProtocol))
    assert list(get_rows(compact, [b"a", b"b", b"c"], per_call=2)) == [
        (b"from", {b"happybase": b"1"})] * 2
    assert compact.asked == [([b"a", b"b"], None), ([b"c"], None)]  # per_call rows a call


def test_a_tcell_shorter_than_the_bytes_read_ahead_is_refused_not_misread() -> None:
    tiny = b"\x02\x00\x03\x01" + b"\x00"  # a bool field, then the stop: 5 bytes, 7 read ahead
    with pytest.raises(ReplyError, match="shorter than the bytes read ahead"):
        decoded(by_hand(tiny, after=b"\x00" * 8))
