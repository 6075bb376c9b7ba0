"""``leakproof offsets lag``: how far the committed offsets are behind each partition's end."""

from __future__ import annotations

import logging
import time
from typing import Any

from leakproof.commit_stores import open_store
from leakproof.config import Config
from leakproof.errors import TableMissing
from leakproof.kafka.admin import KafkaMetadata

log = logging.getLogger(__name__)


def lag(cfg: Config) -> dict[str, Any]:
    """Per partition: committed offset, log end, lag and its state; the age of the newest
    commit.

    ``state`` tells an operator what the lag means: ``caught up`` (nothing behind),
    ``behind`` (records the job has yet to read), or ``held by open transaction`` (the job
    has read up to the stable end, and the rest belongs to a transaction still open: a stuck
    producer, not a slow job; ``held_s`` says for how long).
    """
    topic = cfg.kafka.topic
    store = open_store(cfg)
    try:
        latest = store.latest()
    except TableMissing as exc:  # before the job's first run: every record is behind
        log.warning("%s; read as nothing committed", exc)
        latest = None
    finally:
        store.close()
    meta = KafkaMetadata(cfg.kafka)
    try:
        parts = meta.partitions(topic)
        bounds = meta.log_bounds(topic, parts)
        held = meta.open_transactions(topic, {p: b.readable_end for p, b in bounds.items()
                                              if b.held})
    finally:
        meta.close()
    committed = latest.offsets if latest else {}
    now = int(time.time() * 1000)
    rows = []
    for p in parts:
        b, at = bounds[p], committed.get(p)
        # no commit yet for a partition: all it holds is behind
        behind = b.log_end - (at if at is not None else b.log_start)
        row: dict[str, Any] = {"partition": p, "committed": at, "log_start": b.log_start,
                               "log_end": b.log_end, "stable_end": b.readable_end,
                               "lag": behind, "state": partition_state(behind, at, b.readable_end)}
        if p in held:
            row["held_since_ms"] = held[p].since_ms
            row["held_s"] = None if (age := held[p].age_s(now)) is None else round(age, 1)
        rows.append(row)
    committed_ms = int(latest.audit.get("committed_ms", latest.batch_ms)) if latest else None
    return {"topic": topic, "group": cfg.kafka.group_id, "partitions": rows,
            "total_lag": sum(r["lag"] for r in rows),
            "batch_ms": latest.batch_ms if latest else None, "committed_ms": committed_ms,
            "age_s": round((now - committed_ms) / 1000, 1) if committed_ms else None}


def partition_state(behind: int, committed: int | None, stable_end: int) -> str:
    if behind <= 0:
        return "caught up"
    if committed is not None and committed >= stable_end:
        return "held by open transaction"
    return "behind"
