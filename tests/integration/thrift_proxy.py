"""A TCP proxy in front of the HBase Thrift server that makes one call *late*.

What a Thrift server whose own HBase client is still retrying a put (a region moving, a
region server failing over, a long GC) looks like to its caller: the call does not answer,
the caller times out and retries, and the first copy lands anyway, seconds later. The proxy
reads Thrift's strict binary protocol (buffered transport: happybase's default) one message
at a time, so it can pick the call to delay:

- ``mode="request"``: the matching request is kept from the server; the caller's socket is
  left without an answer (it times out and reconnects), and ``hold_s`` later the request is
  sent to the server on the connection it came for, its reply thrown away;
- ``mode="reply"``: the request goes through at once and its reply is kept ``hold_s`` (the
  write landed; the caller does not know and writes again).

A call matches by method name (one of ``methods``, comma separated) and a part of its
table name (the first argument of every
table call); ``skip`` matching calls go through first, then ``count`` are held. ``held``
and ``delivered`` record when each happened (monotonic seconds). Runnable as a script too:
``python -m tests.integration.thrift_proxy --listen 9190 --table web_sessions --hold-s 25``.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import BinaryIO

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_FIXED = {2: 1, 3: 1, 4: 8, 6: 2, 8: 4, 10: 8}  # bool, byte, double, i16, i32, i64


class _Recorder:
    """Reads exactly what is asked from a stream, keeping every byte read."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream, self.raw = stream, bytearray()

    def take(self, n: int) -> bytes:
        data = self.stream.read(n)
        if data is None or len(data) < n:
            raise EOFError("the connection closed part way through a message")
        self.raw += data
        return data

    def i32(self) -> int:
        value: int = _I32.unpack(self.take(4))[0]
        return value

    def skip(self, ttype: int) -> None:
        if ttype in _FIXED:
            self.take(_FIXED[ttype])
        elif ttype == 11:  # string / binary
            self.take(self.i32())
        elif ttype == 12:  # struct: fields up to STOP
            while (field := self.take(1)[0]) != 0:
                self.take(2)
                self.skip(field)
        elif ttype == 13:  # map
            key, value = self.take(1)[0], self.take(1)[0]
            for _ in range(self.i32()):
                self.skip(key)
                self.skip(value)
        elif ttype in (14, 15):  # set, list
            element = self.take(1)[0]
            for _ in range(self.i32()):
                self.skip(element)
        else:
            raise ValueError(f"not Thrift's binary protocol: field type {ttype}")


def read_message(stream: BinaryIO) -> tuple[bytes, bytes, bytes] | None:
    """One strict binary message: (its bytes, the method name, the first string argument
    -- a table call's table name -- or b""). None at a clean end of stream."""
    first = stream.read(4)
    if not first:
        return None
    rec = _Recorder(stream)
    rec.raw += first
    if first[0] != 0x80:
        raise ValueError("not Thrift's strict binary protocol (no version header)")
    name = rec.take(rec.i32())
    rec.take(4)  # seqid
    table = b""
    start = len(rec.raw)
    rec.skip(12)
    body = bytes(rec.raw[start:])
    if len(body) > 7 and body[0] == 11 and body[1:3] == b"\x00\x01":
        table = body[7:7 + _I32.unpack(body[3:7])[0]]
    return bytes(rec.raw), name, table


class ThriftProxy:
    """Listens on 127.0.0.1 (a free port unless ``port``) and forwards to ``upstream``."""

    def __init__(self, upstream: tuple[str, int], methods: str, table_part: str, *,
                 hold_s: float, mode: str = "request", skip: int = 0, count: int = 1,
                 port: int = 0) -> None:
        if mode not in ("request", "reply"):
            raise ValueError("'mode' must be 'request' or 'reply'")
        self.upstream = upstream
        self.methods = {m.encode() for m in methods.split(",")}
        self.table_part = table_part.encode()
        self.hold_s, self.mode = hold_s, mode
        self._skip, self._count = skip, count
        self._lock = threading.Lock()
        self.held: list[float] = []
        self.delivered: list[float] = []
        self._server = socket.create_server(("127.0.0.1", port))
        self.port: int = self._server.getsockname()[1]
        self._closed = False
        self._kept_open: list[object] = []
        threading.Thread(target=self._accept, name="thrift-proxy", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    def wait_delivered(self, timeout: float) -> bool:
        """Whether every held call was delivered within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.held and len(self.delivered) == len(self.held):
                    return True
            time.sleep(0.2)
        return False

    def _take(self, name: bytes, table: bytes) -> bool:
        """Whether this call is one to hold."""
        if name not in self.methods or self.table_part not in table:
            return False
        with self._lock:
            if self._skip:
                self._skip -= 1
                return False
            if not self._count:
                return False
            self._count -= 1
            self.held.append(time.monotonic())
            return True

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        up = socket.create_connection(self.upstream)
        from_client, from_up = client.makefile("rb"), up.makefile("rb")
        holding = False  # a held call owns both sockets from then on
        try:
            while (message := read_message(from_client)) is not None:
                raw, name, table = message
                if self._take(name, table):
                    holding = True
                    self._kept_open.append((client, from_client))  # no close on collection
                    if self.mode == "request":  # the caller is left waiting: it times out
                        self._later(partial(self._deliver, up, from_up, raw))
                    else:
                        up.sendall(raw)
                        reply = read_message(from_up)
                        self._later(partial(self._answer, client, up, reply))
                    return
                up.sendall(raw)
                reply = read_message(from_up)
                if reply is None:
                    return
                client.sendall(reply[0])
        except (OSError, EOFError, ValueError):
            pass
        finally:
            if not holding:
                for sock in (client, up):
                    with contextlib.suppress(OSError):
                        sock.close()

    def _later(self, action: Callable[[], None]) -> None:
        def run() -> None:
            time.sleep(self.hold_s)
            try:
                action()
            finally:
                with self._lock:
                    self.delivered.append(time.monotonic())

        threading.Thread(target=run, name="thrift-proxy-late", daemon=True).start()

    @staticmethod
    def _deliver(up: socket.socket, from_up: BinaryIO, raw: bytes) -> None:
        """The held request reaches the server now; its answer goes nowhere."""
        try:
            up.sendall(raw)
            read_message(from_up)
        finally:
            with contextlib.suppress(OSError):
                up.close()

    @staticmethod
    def _answer(client: socket.socket, up: socket.socket,
                reply: tuple[bytes, bytes, bytes] | None) -> None:
        """The held reply goes back now, to a caller that has long given up."""
        with contextlib.suppress(OSError):
            if reply is not None:
                client.sendall(reply[0])
        for sock in (client, up):
            with contextlib.suppress(OSError):
                sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--upstream", default="127.0.0.1:9090", help="the Thrift server")
    parser.add_argument("--methods", default="mutateRows,mutateRowsTs",
                        help="the calls to hold, by name, comma separated")
    parser.add_argument("--table", default="web_sessions", help="a part of its table name")
    parser.add_argument("--hold-s", type=float, default=25.0, help="how long to hold it")
    parser.add_argument("--mode", choices=["request", "reply"], default="request")
    parser.add_argument("--skip", type=int, default=0, help="matching calls to let through")
    parser.add_argument("--count", type=int, default=1, help="matching calls to hold")
    args = parser.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    proxy = ThriftProxy((host, int(port)), args.methods, args.table, hold_s=args.hold_s,
                        mode=args.mode, skip=args.skip, count=args.count, port=args.listen)
    print(f"proxy on 127.0.0.1:{proxy.port} -> {args.upstream}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
