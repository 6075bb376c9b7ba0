"""``leakproof stop``: ask the running job of a topic and group to stop after its batch in
flight, through the run record in HBase -- the way to stop a job gracefully where no signal
can (YARN cluster mode) -- and optionally wait until it has."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from leakproof.core.config import Config
from leakproof.core.runs import STOPPED, stale_after_ms
from leakproof.hbase.connection import connect
from leakproof.hbase.state_store import HBaseRunRecord


def ask_to_stop(cfg: Config, wait_s: float | None, say: Callable[[str], None] = print,
                poll_s: float = 0.5) -> int:
    """Write the request; with ``wait_s``, wait for the run to record its end. Returns the
    exit code: 0 when it stopped (or nothing runs), 1 when the wait ran out or the run went
    silent without saying how it ended."""
    topic, group = cfg.kafka.topic, cfg.kafka.group_id
    name = f"{topic}:{group}"
    conn = connect(cfg.hbase)
    try:
        # happybase lists the tables of its table_prefix without the prefix
        exists = cfg.hbase.state_table.encode() in conn.tables()
    finally:
        conn.close()
    record = HBaseRunRecord(cfg.hbase, topic, group)
    stale_ms = stale_after_ms(cfg.job.batch_interval_s)
    try:
        state = record.read() if exists else None
        now = _now_ms()
        if state is None or not state.alive(now, stale_ms):
            seen = ("" if state is None else
                    f" (its last run, lease epoch {state.epoch}, {state.state}; last heard of "
                    f"{(now - max(state.heartbeat_ms, state.stopped_ms)) / 1000:.0f}s ago)")
            say(f"nothing to stop: no leakproof run is running for {name}{seen}")
            return 0
        record.request_stop(state.epoch)
        asked = time.monotonic()
        say(f"asked the run of {name} (lease epoch {state.epoch}, driver {state.where}) to "
            f"stop after its batch in flight")
        if wait_s is None:
            return 0
        while True:
            time.sleep(poll_s)
            now_state = record.read()
            took = time.monotonic() - asked
            if now_state is None:
                say(f"the run record of {name} disappeared")
                return 1
            if now_state.epoch > state.epoch:
                say(f"a newer run (lease epoch {now_state.epoch}) took over {name} after "
                    f"{took:.1f}s; the one asked to stop is gone")
                return 0
            if now_state.state == STOPPED:
                say(f"stopped {took:.1f}s after the request: {_describe(now_state.detail)}")
                return 0
            if not now_state.alive(_now_ms(), stale_ms):
                say(f"the run went silent {took:.1f}s after the request without recording "
                    f"its end (killed?); a restart resumes from its last committed batch")
                return 1
            if took > wait_s:
                say(f"still running {wait_s:.0f}s after the request (the request stays: it "
                    f"stops after its batch in flight)")
                return 1
    finally:
        record.close()


def _describe(detail: str) -> str:
    try:
        d = json.loads(detail)
    except ValueError:
        return detail
    last = d.get("last_batch_ms")
    return (f"{d.get('how')}; exit {d.get('exit')}; last committed batch "
            f"{last if last else 'none in this run'}, offsets {d.get('offsets')}")


def _now_ms() -> int:
    return int(time.time() * 1000)
