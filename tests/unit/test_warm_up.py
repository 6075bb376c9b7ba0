"""The executor side of the start-up warm-up: it prepares what a first range needs, and an
HBase that does not answer never makes it fail (the first range meets that and names it)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import yaml

from leakproof.core import config
from leakproof.task import worker

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    """A local port nobody listens on: connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(port: int) -> config.Config:
    data: dict[str, Any] = yaml.safe_load((ROOT / "config.yml").read_text())
    data["hbase"]["port"] = port
    return config.from_dict(data)


def test_warm_up_builds_the_decoder_and_survives_an_hbase_that_refuses() -> None:
    cfg = _config(_closed_port())
    worker._decoders.pop((cfg.model, cfg.input), None)

    took = worker.warm_up(cfg)

    assert took >= 0
    assert (cfg.model, cfg.input) in worker._decoders  # the first range finds it parsed
    conns = worker._connections[cfg.hbase]
    assert conns._conn is None  # the refused connection is not kept for the first range
