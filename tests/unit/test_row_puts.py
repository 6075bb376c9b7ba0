"""The hand-encoded mutateRows request is the one thriftpy2 encodes for happybase, byte for
byte, and RowPuts sends what happybase's Batch would, in the same calls: each test on both
paths (the native encoder and the reference)."""

from __future__ import annotations

from typing import Any

import happybase  # noqa: F401  (puts Hbase_thrift on the path)
import pytest
from Hbase_thrift import BatchMutation, Hbase, IOError, Mutation
from thriftpy2 import protocol, transport
from thriftpy2.thrift import TClient

from leakproof.core import native
from leakproof.hbase.wire.puts import (
    RowPuts,
    encode_mutate_rows,
    encode_request,
    row_puts,
    speaks_strict_binary,
)

pytestmark = pytest.mark.usefixtures("read_path")  # each test on both paths

# thriftpy2 has no type hints
TBinaryProtocol: Any = protocol.TBinaryProtocol
TCompactProtocol: Any = protocol.TCompactProtocol
TMemoryBuffer: Any = transport.TMemoryBuffer

ROWS = {
    b"s1": {b"s:events": b"3", b"s:user_id": "jürgen".encode(), b"f:p:web:0": b"41"},
    b"": {b"s:empty": b""},  # empty row key and value: lengths of 0
    "sessión-2".encode(): {b"s:" + b"x" * 300: b"\x00\xff" * 200},
}


def thriftpy2_bytes(table: bytes, rows: dict[bytes, dict[bytes, bytes]], ts: int,
                    seqid: int = 0) -> bytes:
    """What thriftpy2 writes for happybase's ``Batch(timestamp=ts).send`` of the same puts."""
    buffer = TMemoryBuffer()
    client = TClient(Hbase, TBinaryProtocol(buffer))
    client._seqid = seqid
    batches = [BatchMutation(row, [Mutation(isDelete=False, column=c, value=v, writeToWAL=True)
                                   for c, v in cells.items()]) for row, cells in rows.items()]
    client._send("mutateRowsTs", tableName=table, rowBatches=batches, timestamp=ts,
                 attributes={})
    return bytes(buffer.getvalue())


@pytest.mark.parametrize("rows", [ROWS, {}, {b"r": {}}], ids=["cells", "no rows", "no cells"])
def test_the_request_is_thriftpy2s_to_the_byte(rows: dict[bytes, dict[bytes, bytes]]) -> None:
    ts = 1_764_215_866_123
    assert encode_mutate_rows(b"t1_web_sessions", rows, ts) == thriftpy2_bytes(
        b"t1_web_sessions", rows, ts)
    assert encode_mutate_rows(b"t", rows, 0, seqid=7) == thriftpy2_bytes(b"t", rows, 0, seqid=7)
    assert encode_mutate_rows(b"t", rows, 2**63 - 1) == thriftpy2_bytes(b"t", rows, 2**63 - 1)
    for at, seqid in ((ts, 0), (0, 7), (2**63 - 1, 2**31 - 1), (-(2**63), -1)):
        assert encode_request(b"t1", rows, at, seqid) == thriftpy2_bytes(b"t1", rows, at, seqid)
        if (fast := native.module()) is not None:  # written natively, not by the fallback
            assert fast.encode_mutate_rows(b"t1", rows, at, seqid) == thriftpy2_bytes(
                b"t1", rows, at, seqid)


def test_cells_the_native_encoder_declines_go_out_as_the_reference_writes_them() -> None:
    rows: Any = {b"r": {b"s:a": bytearray(b"1"), b"s:b": memoryview(b"22")}}
    assert encode_request(b"t", rows, 5, 3) == encode_mutate_rows(b"t", rows, 5, 3)
    assert encode_request(b"t", rows, 5, 3) == thriftpy2_bytes(
        b"t", {b"r": {b"s:a": b"1", b"s:b": b"22"}}, 5, 3)


class _Wire:
    """A connection whose Thrift client writes to memory and reads a canned reply."""

    def __init__(self, reply: bytes = b"", speaks: Any = None) -> None:
        self.sent = TMemoryBuffer()
        self.reply = TMemoryBuffer(reply)
        speaks = speaks or TBinaryProtocol
        self.client = TClient(Hbase, speaks(self.sent))
        self.client._iprot = speaks(self.reply)

    def requests(self) -> list[bytes]:
        return [bytes(self.sent.getvalue())]


class _Table:
    def __init__(self, connection: _Wire, name: bytes = b"t") -> None:
        self.connection = connection
        self.name = name


def _reply(io_error: str | None = None, count: int = 1) -> bytes:
    """``count`` mutateRows replies as the server writes them."""
    buffer = TMemoryBuffer()
    proto = TBinaryProtocol(buffer)
    for _ in range(count):
        proto.write_message_begin("mutateRowsTs", 2, 0)  # REPLY
        result = Hbase.mutateRowsTs_result()
        if io_error is not None:
            result.io = IOError(message=io_error)
        result.write(proto)
        proto.write_message_end()
    return bytes(buffer.getvalue())


def test_rows_go_out_whole_in_calls_of_batch_size_cells_and_the_rest_at_the_end() -> None:
    wire = _Wire(_reply(count=2))
    puts = row_puts(_Table(wire), batch_size=4, ts=9)
    puts.put(b"a", {b"s:1": b"1", b"s:2": b"2"})
    puts.put(b"a", {b"s:3": b"3"})  # the same row again: one put of all three
    puts.put(b"b", {b"s:1": b"x"})  # 4 cells: the first call goes out
    puts.put(b"c", {b"s:1": b"y"})
    puts.send()
    first = encode_mutate_rows(b"t", {b"a": {b"s:1": b"1", b"s:2": b"2", b"s:3": b"3"},
                                      b"b": {b"s:1": b"x"}}, 9)
    second = encode_mutate_rows(b"t", {b"c": {b"s:1": b"y"}}, 9)
    assert wire.requests() == [first + second]


def test_an_error_the_server_answers_is_raised() -> None:
    wire = _Wire(_reply(io_error="region too busy"))
    puts = RowPuts(_Table(wire), batch_size=10, ts=1)
    puts.put(b"a", {b"s:1": b"1"})
    with pytest.raises(IOError, match="region too busy"):
        puts.send()


def test_a_compact_protocol_connection_keeps_happybases_batch() -> None:
    class Batching(_Table):
        def batch(self, batch_size: int, timestamp: int) -> str:
            return f"happybase batch of {batch_size} at {timestamp}"

    assert speaks_strict_binary(_Table(_Wire()))
    assert not speaks_strict_binary(_Table(_Wire(speaks=TCompactProtocol)))
    made: Any = row_puts(Batching(_Wire(speaks=TCompactProtocol)), 5, 7)
    assert made == "happybase batch of 5 at 7"
    with pytest.raises(ValueError, match="'batch_size' must be > 0"):
        RowPuts(_Table(_Wire()), 0, 1)
