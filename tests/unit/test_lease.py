"""The lease value: parse/encode, successor, after a commit."""

from __future__ import annotations

import pytest

from leakproof.core.lease import Lease


def test_round_trip() -> None:
    lease = Lease.parse(b"7:start:ab12cd34")
    assert lease == Lease(7, "start:ab12cd34")
    assert lease.encode() == b"7:start:ab12cd34" and str(lease) == "7:start:ab12cd34"


def test_successor_bumps_the_epoch_and_after_keeps_it() -> None:
    lease = Lease(3, "start:x")
    assert lease.successor("rewind") == Lease(4, "rewind")
    assert lease.after(1_700_000_000_000) == Lease(3, "1700000000000")


@pytest.mark.parametrize("raw", [b"", b"abc", b"x:1", b":tag"])
def test_garbage_is_named(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a lease holder value"):
        Lease.parse(raw)
