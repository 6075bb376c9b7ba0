"""Thrift over HTTP keeps its timeout to its own connection (no network: the sender is faked)."""

from __future__ import annotations

import socket
from typing import Any

from leakproof.core.config import HBaseConfig
from leakproof.hbase.secure import HttpTransport


class _Recording(HttpTransport):
    """Records the process-wide default socket timeout at the moment a request goes out."""

    def __init__(self, cfg: HBaseConfig) -> None:
        super().__init__(cfg)
        self.sent: list[tuple[bytes, Any]] = []

    def isOpen(self) -> bool:  # noqa: N802 - thriftpy2's name
        return True

    def _THttpClient__send_request(self, data: bytes) -> None:  # noqa: N802
        self.sent.append((data, socket.getdefaulttimeout()))
        self.code, self.message = 200, "OK"


def test_a_request_leaves_the_process_wide_socket_timeout_alone() -> None:
    """Other threads (the driver's Py4J connections) open sockets while a call is under
    way; a default timeout set then would cut their long Spark jobs short."""
    before = socket.getdefaulttimeout()
    transport = _Recording(HBaseConfig(transport="http", timeout_ms=5_000))
    transport.write(b"call-1")
    transport.flush()
    transport.flush()  # nothing buffered: nothing sent
    transport.write(b"call-2")
    transport.flush()
    assert transport.sent == [(b"call-1", before), (b"call-2", before)]
    assert socket.getdefaulttimeout() == before
