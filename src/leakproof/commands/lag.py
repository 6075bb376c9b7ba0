"""``leakproof offsets lag``: how far the committed offsets are behind each partition's end
(with ``input.rekey``, of both stages: source -> internal topic, internal topic -> sessions)."""

from __future__ import annotations

import logging
import time
from typing import Any

from leakproof.commit_stores import open_store
from leakproof.core.config import Config, session_stage
from leakproof.core.errors import KafkaReadError, TableMissing
from leakproof.core.offsets import LogBounds
from leakproof.core.rekey import rekey_group
from leakproof.driver.batch import lag_seconds, max_lag_s
from leakproof.kafka.admin import KafkaMetadata

log = logging.getLogger(__name__)


def lag(cfg: Config) -> dict[str, Any]:
    """Per partition: committed offset, log end, lag in records and in seconds (the age of
    the oldest unread record, the one at the committed offset: ``lag_s``, None where it
    could not be read) and its state; the age of the newest commit.

    ``state`` tells an operator what the lag means: ``caught up`` (nothing behind),
    ``behind`` (records the job has yet to read), or ``held by open transaction`` (the job
    has read up to the stable end, and the rest belongs to a transaction still open: a stuck
    producer, not a slow job; ``held_s`` says for how long).

    With ``input.rekey`` the rows are the session job's over the internal topic, and
    ``rekey`` holds the stage's: the group ``<group>.rekey``'s committed offsets against the
    source's ends (``rekey_lag``).
    """
    if cfg.input.rekey is not None:
        return {**lag(session_stage(cfg)), "rekey": rekey_lag(cfg)}
    topic = cfg.kafka.topic
    store = open_store(cfg)
    try:
        latest = store.latest()
    except TableMissing as exc:  # before the job's first run: every record is behind
        log.warning("%s; read as nothing committed", exc)
        latest = None
    finally:
        store.close()
    committed = latest.offsets if latest else {}
    meta = KafkaMetadata(cfg.kafka)
    try:
        parts = meta.partitions(topic)
        bounds = meta.log_bounds(topic, parts)
        held = meta.open_transactions(topic, {p: b.readable_end for p, b in bounds.items()
                                              if b.held})
        # the oldest unread record of each partition behind
        starts = {p: unread_from(committed.get(p), b) for p, b in bounds.items()}
        unread = {p: at for p, at in starts.items() if at < bounds[p].log_end}
        oldest = meta.record_timestamps(topic, unread)
        mirror = group_mirror(cfg, meta, committed)
    finally:
        meta.close()
    now = int(time.time() * 1000)
    rows = []
    for p in parts:
        b, at = bounds[p], committed.get(p)
        # no commit yet for a partition: all it holds is behind
        behind = b.log_end - (at if at is not None else b.log_start)
        row: dict[str, Any] = {"partition": p, "committed": at, "log_start": b.log_start,
                               "log_end": b.log_end, "stable_end": b.readable_end,
                               "lag": behind, "lag_s": lag_seconds(oldest, p, now),
                               "oldest_unread_ms": oldest.get(p),
                               "state": partition_state(behind, at, b.readable_end)}
        if p in held:
            row["held_since_ms"] = held[p].since_ms
            row["held_s"] = None if (age := held[p].age_s(now)) is None else round(age, 1)
        rows.append(row)
    committed_ms = int(latest.audit.get("committed_ms", latest.batch_ms)) if latest else None
    return {"topic": topic, "group": cfg.kafka.group_id, "partitions": rows,
            "total_lag": sum(r["lag"] for r in rows),
            "lag_s": max_lag_s(r["lag_s"] for r in rows if r["lag"] > 0),
            "mirror": mirror,
            "batch_ms": latest.batch_ms if latest else None, "committed_ms": committed_ms,
            "age_s": round((now - committed_ms) / 1000, 1) if committed_ms else None}


def rekey_lag(cfg: Config) -> dict[str, Any]:
    """The re-keying stage's lag: per source partition the offset the stage committed (in
    the same transaction as its copies) against the log's ends."""
    group, topic = rekey_group(cfg.kafka.group_id), cfg.kafka.topic
    meta = KafkaMetadata(cfg.kafka)
    try:
        parts = meta.partitions(topic)
        bounds = meta.log_bounds(topic, parts)
        committed = {p: o for p, (o, _note) in meta.group_offsets(group, topic).items()}
    finally:
        meta.close()
    rows = []
    for p in parts:
        b, at = bounds[p], committed.get(p)
        behind = b.log_end - unread_from(at, b) if at is not None else b.log_end - b.log_start
        rows.append({"partition": p, "committed": at, "log_start": b.log_start,
                     "log_end": b.log_end, "stable_end": b.readable_end, "lag": behind,
                     "state": partition_state(behind, at, b.readable_end)})
    return {"topic": topic, "group": group, "partitions": rows,
            "total_lag": sum(r["lag"] for r in rows)}


def group_mirror(cfg: Config, meta: KafkaMetadata, committed: dict[int, int]
                 ) -> dict[str, Any] | None:
    """The copy of the commits in the Kafka group (``kafka.mirror_group_offsets``): whether
    it holds the committed offsets (``in step``), older ones (``behind``: copies failing,
    or still to come), or none; and the group's state, whose members (anyone who joined
    it) make Kafka refuse every copy. None: no copy is made (off, or the group is the
    commit store itself)."""
    if not cfg.kafka.mirror_group_offsets or cfg.offsets.store == "kafka":
        return None
    group = cfg.kafka.group_id
    try:
        copied = {p: o for p, (o, _note) in meta.group_offsets(group, cfg.kafka.topic).items()}
        state = meta.group_state(group)
    except KafkaReadError as exc:
        return {"group": group, "state": f"unknown ({exc})", "offsets": None}
    found: dict[str, Any] = {"group": group, "offsets": copied,
                             "group_state": state["state"] if state else None,
                             "group_type": state["type"] if state else None,
                             "members": state["members"] if state else None}
    if not copied:
        found["state"] = "none yet"
    elif all(copied.get(p) == o for p, o in committed.items()):
        found["state"] = "in step"
    else:
        found["state"] = "behind"
    if state and state["state"] not in ("Empty", "Dead"):
        found["state"] += (f"; the group has members ({state['state']}): Kafka refuses "
                           f"leakproof's copies until they leave, never join group {group}")
    return found


def unread_from(committed: int | None, bounds: LogBounds) -> int:
    """Where a partition's unread records start: its committed offset, or the log's start
    (no commit yet, or retention deleted past it)."""
    return bounds.log_start if committed is None else max(committed, bounds.log_start)


def partition_state(behind: int, committed: int | None, stable_end: int) -> str:
    if behind <= 0:
        return "caught up"
    if committed is not None and committed >= stable_end:
        return "held by open transaction"
    return "behind"


COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS",
           "STABLE-END", "STATE")


def lag_table(found: dict[str, Any]) -> str:
    """``lag``'s answer for people: a table like ``kafka-consumer-groups --describe`` (one
    row per partition, ``-`` where nothing is committed or an age is unknown), then the
    newest commit, the totals and the Kafka group mirror."""
    rows = [[found["group"], found["topic"], str(r["partition"]), _or_dash(r["committed"]),
             str(r["log_end"]), str(r["lag"]), _or_dash(r["lag_s"], "{:.1f}"), str(r["stable_end"]),
             r["state"] + ("" if r.get("held_s") is None else f" ({r['held_s']:.0f}s)")]
            for r in found["partitions"]]
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
              for row in [list(COLUMNS), *rows]]
    lines.append("")
    if found["batch_ms"] is None:
        lines.append("newest commit: none")
    else:
        lines.append(f"newest commit: batch {found['batch_ms']}, {found['age_s']:.1f}s ago")
    lines.append(f"total lag: {found['total_lag']} records, oldest unread record "
                 f"{_or_dash(found['lag_s'], '{:.1f}')}s old")
    mirror = found.get("mirror")
    if mirror is not None:
        lines.append(f"Kafka group mirror ({mirror['group']}): {mirror['state']}")
    stage = found.get("rekey")
    if stage is not None:
        lines += ["", f"re-keying {stage['topic']} (group {stage['group']}): "
                  f"{stage['total_lag']} records not yet copied"]
        rows = [[stage["group"], stage["topic"], str(r["partition"]), _or_dash(r["committed"]),
                 str(r["log_end"]), str(r["lag"]), str(r["stable_end"]), r["state"]]
                for r in stage["partitions"]]
        cols = [c for c in COLUMNS if c != "LAG-SECONDS"]
        widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
                  for i, c in enumerate(cols)]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                  for row in [cols, *rows]]
    return "\n".join(lines)


def _or_dash(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)
