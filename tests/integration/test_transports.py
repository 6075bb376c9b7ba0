"""hbase.transport / hbase.protocol against a real Thrift server started with -f -c."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leakproof.commit_stores.hbase import OffsetStore
from leakproof.core import config
from leakproof.core.lease import Lease
from leakproof.hbase.connection import connect, ensure_tables
from leakproof.hbase.state_store import StateStore

from .helpers import Env, stack

pytestmark = pytest.mark.integration
PORT = 9091


@pytest.fixture
def framed_compact() -> Iterator[None]:
    stack("start", "thrift-framed-compact")  # returns once the server answers
    try:
        yield
    finally:
        stack("stop", "thrift-framed-compact")


def test_framed_compact_transport_end_to_end(env: Env, framed_compact: None) -> None:
    cfg = config.load(env.variant("fc", hbase={"port": PORT, "transport": "framed",
                                               "protocol": "compact"}))
    conn = connect(cfg.hbase)
    try:
        assert len(ensure_tables(conn, cfg.hbase)) == 4
        offsets = OffsetStore(conn.table(cfg.hbase.offsets_table), env.name, "it")
        offsets.put(1_700_000_000_000, {0: 5, 1: 7})
        offsets.put(1_700_000_001_000, {0: 9, 1: 9})
        latest = offsets.latest()
        assert latest is not None and latest.offsets == {0: 9, 1: 9}
        state = StateStore(conn, cfg.hbase.state_table)
        assert state.compare_and_set_lease(env.name, "it", None, Lease(1, "start"))  # checkAndPut
        assert not state.compare_and_set_lease(env.name, "it", None, Lease(2, "start"))
    finally:
        conn.close()
    # the default buffered/binary server sees the same rows
    plain = env.hbase()
    try:
        row = plain.table("stream_kafka_offsets").row(f"{env.name}:it:1700000001000".encode())
        assert row == {b"offsets:0": b"9", b"offsets:1": b"9"}
    finally:
        plain.close()
