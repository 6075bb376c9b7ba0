"""Operator rewinds: write a new offsets row that the next run resumes from.

A rewind never edits history: it commits a new batch ``<now ms>`` through the store
``offsets.store`` names (in HBase, a row ``<topic>:<group>:<now ms>`` whose ``audit`` family
records what was asked), with offsets from an earlier row, from a point in (Kafka record)
time, or from explicit values. It also bumps the driver lease epoch, so a
job still running on that topic and group is fenced: its next task or commit sees the new
epoch and it stops (exit 1) without committing anything after the rewind row.

Rewinding over the same session tables re-reads records that the session fences already
hold, so nothing is counted twice -- and nothing is recomputed either. To *reprocess* (an
updated algorithm over known data), point a config with a fresh ``hbase.table_prefix`` at
the same topic and group and rewind that; see README, "Reprocessing".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from leakproof.config import Config
from leakproof.errors import OffsetError
from leakproof.offsets import LogBounds
from leakproof.ports.driver import CommitStore, LeaseStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewindTarget:
    """Exactly one of the three ways to say where to go back to."""

    to_batch: int | None = None
    to_time_ms: int | None = None
    to_offsets: Mapping[int, int] | None = None

    def describe(self) -> str:
        if self.to_batch is not None:
            return f"to-batch {self.to_batch}"
        if self.to_time_ms is not None:
            return f"to-time {self.to_time_ms}"
        return "to-offsets " + ",".join(f"{p}={o}" for p, o in sorted((self.to_offsets or {})
                                                                       .items()))


def parse_offsets(text: str) -> dict[int, int]:
    """``0=120,3=7`` -> {0: 120, 3: 7}; raises ValueError naming the bad part."""
    out: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isdigit() or not value.strip().isdigit():
            raise ValueError(f"{part!r} is not PARTITION=OFFSET (two non-negative integers)")
        out[int(key)] = int(value)
    if not out:
        raise ValueError("no PARTITION=OFFSET pairs given")
    return out


def rewound_offsets(target: RewindTarget, store: CommitStore, bounds: Mapping[int, LogBounds],
                    by_time: Mapping[int, int | None] | None,
                    where: str) -> dict[int, int]:
    """Where the target points, checked against the log; ``where`` names topic and group."""
    if target.to_batch is not None:
        row = store.get(target.to_batch)
        if row is None:
            if not store.keeps_history:
                raise OffsetError(
                    f"offsets.store: {store.name} keeps no history: only its newest commit "
                    f"can be named with --to-batch; use --to-time or --to-offsets")
            raise OffsetError(f"no offsets row {where}:{target.to_batch:013d}; "
                              f"see `leakproof offsets history`")
        offsets = dict(row.offsets)
    elif by_time is not None:
        # nothing that new: the readable end (an open transaction's records may commit)
        offsets = {p: bounds[p].readable_end if o is None else o for p, o in by_time.items()}
    else:
        latest = store.latest()
        offsets = {**(latest.offsets if latest else {}), **(target.to_offsets or {})}
    for p, o in sorted(offsets.items()):
        if p not in bounds:
            raise OffsetError(f"{where.split(':')[0]} has no partition {p} "
                              f"(partitions {sorted(bounds)})")
        if not bounds[p].log_start <= o <= bounds[p].log_end:
            raise OffsetError(f"{where.split(':')[0]} partition {p}: offset {o} is outside "
                              f"the log [{bounds[p].log_start}, {bounds[p].log_end}]")
    return offsets


def write_rewind(target: RewindTarget, offsets: Mapping[int, int], store: CommitStore,
                 leases: LeaseStore, topic_id: str | None, now_ms: int) -> int:
    """Fence any running driver, then commit ``offsets`` as a new batch; returns its time.

    The epoch is bumped before the commit, so a driver still running fails its next lease
    check and commits nothing after the rewind.
    """
    latest = store.latest()
    epoch = leases.take("rewind").epoch
    if topic_id:  # a rewind accepts the topic as it is now (a recreated one, say)
        # the first topic's id pinned before it is replaced: its fences carry no tag, and a
        # recreated topic's are kept apart from them (sessions.incarnation_of)
        leases.first_topic_id(leases.topic_id() or topic_id)
        leases.record_topic_id(topic_id)
    batch_ms = max(now_ms, (latest.batch_ms + 1) if latest else now_ms)
    store.put(batch_ms, offsets, {
        "rewind": target.describe(),
        "rewound_from": str(latest.batch_ms) if latest else "none",
        "epoch": str(epoch),
        "committed_ms": str(now_ms),
        **({"topic_id": topic_id} if topic_id else {}),
    })
    return batch_ms


def rewind(cfg: Config, target: RewindTarget, now_ms: int | None = None) -> tuple[int,
                                                                                  dict[int, int]]:
    """Rewind through the store ``offsets.store`` names; returns the batch time and offsets."""
    from leakproof.commit_stores import open_store
    from leakproof.hbase.connection import connect, ensure_tables
    from leakproof.hbase.state_store import HBaseLeaseStore
    from leakproof.kafka.admin import KafkaMetadata

    topic, group = cfg.kafka.topic, cfg.kafka.group_id
    meta = KafkaMetadata(cfg.kafka)
    try:
        topic_id, parts = meta.describe(topic)
        bounds = meta.log_bounds(topic, parts)
        by_time = (meta.offsets_for_time(topic, parts, target.to_time_ms)
                   if target.to_time_ms is not None else None)
    finally:
        meta.close()
    conn = connect(cfg.hbase)  # the lease lives in HBase whatever the store
    try:
        ensure_tables(conn, cfg.hbase)
    finally:
        conn.close()
    store = open_store(cfg)
    leases = HBaseLeaseStore(cfg.hbase, topic, group)
    try:
        offsets = rewound_offsets(target, store, bounds, by_time, f"{topic}:{group}")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        batch_ms = write_rewind(target, offsets, store, leases, topic_id, now)
    finally:
        store.close()
        leases.close()
    log.info("rewound %s:%s in offsets.store %s with %s: batch %d, offsets %s", topic, group,
             store.name, target.describe(), batch_ms, offsets)
    return batch_ms, offsets
