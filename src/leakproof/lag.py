"""``leakproof offsets lag``: how far the committed offsets are behind each partition's end."""

from __future__ import annotations

import time
from typing import Any

from leakproof.commit_stores import open_store
from leakproof.config import Config
from leakproof.kafka.admin import KafkaMetadata


def lag(cfg: Config) -> dict[str, Any]:
    """Per partition: committed offset, log end, lag; and the age of the newest commit."""
    topic = cfg.kafka.topic
    store = open_store(cfg)
    try:
        latest = store.latest()
    finally:
        store.close()
    meta = KafkaMetadata(cfg.kafka)
    try:
        parts = meta.partitions(topic)
        bounds = meta.log_bounds(topic, parts)
    finally:
        meta.close()
    committed = latest.offsets if latest else {}
    rows = []
    for p in parts:
        at = committed.get(p)
        # no commit yet for a partition: all it holds is behind
        behind = bounds[p].log_end - (at if at is not None else bounds[p].log_start)
        rows.append({"partition": p, "committed": at, "log_start": bounds[p].log_start,
                     "log_end": bounds[p].log_end, "lag": behind})
    now = int(time.time() * 1000)
    committed_ms = int(latest.audit.get("committed_ms", latest.batch_ms)) if latest else None
    return {"topic": topic, "group": cfg.kafka.group_id, "partitions": rows,
            "total_lag": sum(r["lag"] for r in rows),
            "batch_ms": latest.batch_ms if latest else None, "committed_ms": committed_ms,
            "age_s": round((now - committed_ms) / 1000, 1) if committed_ms else None}
