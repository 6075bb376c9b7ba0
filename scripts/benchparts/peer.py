"""The Structured Streaming peer (scripts/bench_peer.py), one variant at a time: its drain of
the same topic, and the check of its table against a fold of its own semantics in plain
Python."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchparts.drain import Drain, measured
from benchparts.settings import ROOT
from leakproof.core import config
from leakproof.core.events import Event, WebEvent
from leakproof.hbase.connection import connect
from leakproof.hbase.session_store import scan_readable
from leakproof.testing import oracle


def peer_fold(partitions: Mapping[int, Sequence[Event]]) -> dict[str, dict[str, str]]:
    """What the peer's semantics give, folded in plain Python: the first of each repeated
    (session_id, seq) counts, every other event is summed; no late rule, no state."""
    kept: dict[str, dict[int, WebEvent]] = {}
    for events in partitions.values():
        for e in events:
            assert e.seq is not None  # the web model has a sequence
            kept.setdefault(e.session_id, {}).setdefault(e.seq, WebEvent(**e.record))
    rows = {}
    for sid, by_seq in kept.items():
        evs = [by_seq[k] for k in sorted(by_seq)]
        rows[sid] = {
            "user_id": evs[0].user_id, "events": str(len(evs)),
            "pageviews": str(sum(e.event_type == "pageview" for e in evs)),
            "clicks": str(sum(e.event_type == "click" for e in evs)),
            "purchases": str(sum(e.event_type == "purchase" for e in evs)),
            "errors": str(sum(e.status >= 500 for e in evs)),
            "bytes": str(sum(e.bytes for e in evs)),
            "first_ts": str(min(e.ts for e in evs)), "last_ts": str(max(e.ts for e in evs)),
            "entry_url": evs[0].url, "exit_url": evs[-1].url,
        }
    return rows


def check_peer(cfg: config.Config, table: str,
               expected: Mapping[str, Mapping[str, str]]) -> str:
    conn = connect(cfg.hbase)
    try:
        got = scan_readable(conn.table(table))
    finally:
        conn.close()
    wrong = [sid for sid in expected.keys() | got.keys() if expected.get(sid) != got.get(sid)]
    if not wrong:
        return f"EXACT MATCH ({len(got)} sessions against the independent fold)"
    sid = sorted(wrong)[0]
    return (f"MISMATCH in {len(wrong)} sessions, e.g. {sid}: expected {expected.get(sid)}, "
            f"HBase has {got.get(sid)}")


def gap_fold(cfg: config.Config, partitions: Mapping[int, Sequence[Event]]
             ) -> dict[str, dict[str, str]]:
    """The oracle's gap sessions of the topic, every event folded in (``late: fold``):
    Spark's ``session_window`` drops only what is behind its watermark, which moves between
    batches, not per event; an event it drops leaves its session short (counted apart)."""
    rows = oracle.expected_gap_rows(partitions, cfg.sessions.close_after_ms,
                                    cfg.sessions.gap_ms, cfg.model, fold_late=True)
    return {key: {c: row[c] for c in PEER_COLUMNS if c in row} for key, row in rows.items()}


PEER_COLUMNS = ("user_id", "events", "pageviews", "clicks", "purchases", "errors", "bytes",
                "first_ts", "last_ts", "entry_url", "exit_url")


def check_windows(cfg: config.Config, table: str,
                  expected: Mapping[str, Mapping[str, str]]) -> str:
    """The session-window peer writes each session once it closed (append mode): every row
    it wrote must be the oracle's; those it has not closed yet are counted apart."""
    conn = connect(cfg.hbase)
    try:
        got = scan_readable(conn.table(table))
    finally:
        conn.close()
    wrong = sorted(k for k, row in got.items() if expected.get(k) != row)
    short = [k for k in wrong if k in expected
             and int(got[k]["events"]) < int(expected[k]["events"])]
    if len(short) < len(wrong):
        k = next(k for k in wrong if k not in short)
        return (f"MISMATCH in {len(wrong) - len(short)} of {len(got)} sessions written, e.g. "
                f"{k}: expected {expected.get(k)}, HBase has {got.get(k)}")
    return (f"EXACT MATCH ({len(got)} closed sessions written, {len(short)} short of events "
            f"behind its watermark; {len(expected) - len(got)} still open in its state)")


def run_peer(variant: str, cfg_path: Path, cfg: config.Config, work: Path,
             expected: Mapping[str, Mapping[str, str]]) -> Drain | None:
    decode = "pandas" if variant.startswith("pandas") else "jvm"
    table = f"peer_{variant.replace('-', '_')}"
    print(f"== the peer, {variant}: Structured Streaming, RocksDB state, foreachBatch to HBase",
          flush=True)
    log = work / f"peer-{variant}.log"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench_peer.py"), "--config", str(cfg_path),
           "--table", table, "--checkpoint", str(work / f"checkpoint-{variant}"),
           "--decode", decode, *(["--one-batch"] if "one-batch" in variant else []),
           *(["--session-window", str(cfg.sessions.inactivity_gap_s)]
             if variant == "session-window" else [])]
    rc, cpu_s, peak, spent, _ = measured(cmd, log)
    line = next((ln for ln in log.read_text(errors="replace").splitlines()
                 if ln.startswith("PEER ")), None)
    if rc != 0 or line is None:
        print(f"   the peer failed (exit {rc}); see {log}", flush=True)
        return None
    result = json.loads(line[5:])
    batches = result["batches"]
    commits = [(b["start_ms"] + b["took_ms"], b["rows"]) for b in batches]
    drain = Drain(f"peer {variant}", result["done"], batches[0]["start_ms"], commits, cpu_s,
                  peak, spent)
    drain.verdict = (check_windows(cfg, table, expected) if variant == "session-window"
                     else check_peer(cfg, table, expected))
    print(drain.describe(), flush=True)
    return drain
