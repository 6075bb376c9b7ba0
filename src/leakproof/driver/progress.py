"""Progress: one line per batch (text for people or one JSON object), and the metrics.

Fed once per finished batch with its ``BatchOutcome``; the figures are the batch's
``BatchTotals``, summed once when it committed (the offsets row's audit holds the same).
Listeners are plain callables, so a new sink (metrics, a test) is one more function.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from leakproof.core.logs import FIELDS
from leakproof.driver.batch import BatchOutcome

# The progress line's logger keeps the name it always had: operators filter logs on it. With
# --log-format json its record is one JSON object whose fields are the batch's figures.
log = logging.getLogger("leakproof.stream")

Listener = Callable[[BatchOutcome, dict[str, Any]], None]


def progress_record(outcome: BatchOutcome, now_ms: int | None = None) -> dict[str, Any]:
    """One batch's figures: counts summed over tasks, task timings as the slowest task's;
    lag in records and in seconds (the oldest unread record's age, over all partitions and
    per partition behind)."""
    plan, done, t = outcome.plan, outcome.committed, outcome.committed.totals
    took = outcome.took_s
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ages = plan.lag_s_by_partition(now)
    lag_s = plan.lag_s(now)
    return {
        "batch_ms": plan.batch_ms,
        "ranges": [{"partition": r.partition, "from": r.from_offset, "until": r.until_offset}
                   for r in plan.work],
        **t.counts(), "dead_letter_kinds": dict(t.dead_letter_kinds),
        "withdrawn": t.withdrawn,
        "retired": t.retired,
        "lag": plan.lag, "lag_s": None if lag_s is None else round(lag_s, 1),
        "lag_s_by_partition": {str(p): None if age is None else round(age, 1)
                               for p, age in ages.items() if p in plan.unread_ts},
        "events_per_s": round(t.records / took if took else 0.0, 1),
        "read_s": round(t.read_s, 3), "fold_s": round(t.fold_s, 3),
        "write_s": round(t.write_s, 3), "publish_s": round(t.publish_s, 3),
        "commit_s": round(done.commit_s, 3),
        "total_s": round(took, 3),
        "gaps": [{"partition": g.partition, "from": g.stored, "to": g.resumed_at}
                 for g in done.gaps],
        "rate_limit": None if outcome.rate_limit is None else round(outcome.rate_limit, 1),
        "cache": {"tasks": t.tasks, "consumer": t.consumers_cached, "rows": t.rows_kept},
        "expiring": t.expiring,
        "client_stalls": t.client_stalls,
        "held": held_record(outcome),
    }


def held_record(outcome: BatchOutcome, now_ms: int | None = None) -> list[dict[str, Any]]:
    """The partitions an open transaction holds back: where, and for how long so far."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return [{"partition": h.partition, "at": h.offset,
             "age_s": None if (age := h.age_s(now)) is None else round(age, 1)}
            for h in sorted(outcome.plan.held.values(), key=lambda h: h.partition)]


def text_line(p: dict[str, Any]) -> str:
    """The progress record as the one line people read."""
    kinds = p["dead_letter_kinds"]
    ranges = ranges_text(p["ranges"])
    return (
        f"batch {p['batch_ms']} | {ranges} | records {p['records']} (applied {p['applied']}, "
        f"replayed {p['replayed']}, late {p['late']}, duplicate {p['duplicates']}, "
        f"dead {p['dead_letters']}"
        f"{' ' + json.dumps(kinds, sort_keys=True) if kinds else ''}"
        f"{', withdrawn ' + str(p['withdrawn']) if p.get('withdrawn') else ''}) | "
        f"sessions {p['sessions']} closed {p['closed']}"
        f"{' retired ' + str(p['retired']) if p.get('retired') else ''} | "
        f"lag {p['lag']}{_lag_s_text(p)} | "
        f"{p['events_per_s']:.0f} ev/s | read {p['read_s']:.2f}s fold {p['fold_s']:.2f}s "
        f"write {p['write_s']:.2f}s"
        + (f" (publish {p['publish_s']:.2f}s)" if p.get("publish_s") else "")
        + f" commit {p['commit_s']:.2f}s total {p['total_s']:.2f}s"
        f" | cached consumer {p['cache']['consumer']}/{p['cache']['tasks']}"
        f" rows {p['cache']['rows']}/{p['sessions']}"
        + ("" if p["rate_limit"] is None else f" | rate limit {p['rate_limit']:.0f} ev/s")
        + _held_text(p["held"]))


WIDE_BATCH = 12  # more ranges than this: the line summarises them


def ranges_text(ranges: list[dict[str, int]]) -> str:
    """Each range (``p3:120->160``), or for a wide batch a summary: how many partitions,
    which, and the records per partition. The offsets row, the JSON line and the Spark UI's
    job description keep every range."""
    if len(ranges) <= WIDE_BATCH:
        return " ".join(f"p{r['partition']}:{r['from']}->{r['until']}" for r in ranges)
    counts = [r["until"] - r["from"] for r in ranges]
    parts = sorted(r["partition"] for r in ranges)
    return (f"{len(ranges)} partitions p{parts[0]}..p{parts[-1]}, {min(counts)}-{max(counts)} "
            f"records each")


def _lag_s_text(p: dict[str, Any]) -> str:
    """The oldest unread record's age beside the lag in records, when any is behind."""
    if not p["lag_s_by_partition"]:
        return ""
    return " (age unknown)" if p["lag_s"] is None else f" ({p['lag_s']:.0f}s)"


def _held_text(held: list[dict[str, Any]]) -> str:
    if not held:
        return ""
    ages = " ".join(f"p{h['partition']}@{h['at']}"
                    + ("" if h["age_s"] is None else f" ({h['age_s']:.0f}s)") for h in held)
    return f" | held by open transaction: {ages}"


def log_line(log_format: str) -> Listener:
    """The per-batch line: text, or (``--log-format json``) a record whose ``fields`` are
    the batch's figures, which ``logs.JsonFormatter`` writes as one JSON object."""
    def write(_outcome: BatchOutcome, record: dict[str, Any]) -> None:
        if log_format == "json":
            log.info("batch %d", record["batch_ms"], extra={FIELDS: record})
        else:
            log.info("%s", text_line(record))
    return write


class Progress:
    """Hands each batch that ran tasks, skipped a gap or is held to every listener, and
    every finished batch, records or not, to the ``add_every`` ones (the metrics' times)."""

    def __init__(self, *listeners: Listener) -> None:
        self._listeners = list(listeners)
        self._every: list[Callable[[BatchOutcome], None]] = []

    def add(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add_every(self, listener: Callable[[BatchOutcome], None]) -> None:
        self._every.append(listener)

    def batch(self, outcome: BatchOutcome) -> None:
        """A batch that read records, skipped a gap, or waits on an open transaction (so a
        stuck producer shows in every batch's line and metrics, records or not)."""
        for every in self._every:
            every(outcome)
        plan = outcome.plan
        if not plan.work and not outcome.committed.gaps and not plan.held:
            log.debug("batch %d: no new records", outcome.plan.batch_ms)
            return
        record = progress_record(outcome)
        for listener in self._listeners:
            listener(outcome, record)
