"""What the local region server did beside the job's batches: its memstore flushes and
compactions as its log tells them, and the steady batches' times grouped by them."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"
_BATCH_LINE = re.compile(r"^(\S+ \S+) INFO leakproof\.stream: batch .* total ([\d.]+)s")
# HBase writes its log's times as the job does, with a "T" between day and clock
_FLUSHED = re.compile(r"^(\S+T\S+) INFO .*Finished flush of .* in (\d+)ms")
_COMPACTED = re.compile(r"^(\S+T\S+) INFO .*CompactSplit: Completed compaction .*"
                        r"duration=(\d+)sec")


def _log_time(text: str) -> float:
    return datetime.datetime.strptime(text.replace("T", " "), _LOG_TIME).timestamp()


def store_work(hbase_log: Path) -> list[tuple[float, float, str]]:
    """The region server's memstore flushes and compactions, (start, end, kind), as its log
    says (a compaction's duration is in whole seconds: at least one is counted). HBase's own
    system tables (the master's store, hbase:meta) are left out."""
    spans = []
    for line in hbase_log.read_text(errors="replace").splitlines():
        if (m := _FLUSHED.match(line)) and "master:store" not in line \
                and " 1588230740 " not in line:
            end = _log_time(m[1])
            spans.append((end - int(m[2]) / 1000, end, "flush"))
        elif m := _COMPACTED.match(line):
            end = _log_time(m[1])
            spans.append((end - max(1, int(m[2])), end, "compaction"))
    return spans


def batches_beside_store_work(job_log: Path, hbase_log: Path, warmup_s: float) -> str:
    """Where a steady batch's extra time goes: the batches' time (output start to commit)
    after the first ``warmup_s``, grouped by what the region server did meanwhile -- nothing
    of its own, a memstore flush, or a compaction (which rewrites the sessions store's files
    on one of the two cores the job shares)."""
    if not hbase_log.exists():
        return "no local HBase log to compare with"
    spans = store_work(hbase_log)
    batches = []
    for line in job_log.read_text(errors="replace").splitlines():
        if m := _BATCH_LINE.match(line):
            end = _log_time(m[1])
            batches.append((end - float(m[2]), end))
    if not batches:
        return "no batch lines in the job's log"
    start = batches[0][0] + warmup_s
    groups: dict[str, list[float]] = {"none": [], "flush": [], "compaction": []}
    for begin, end in batches:
        if begin >= start:
            kinds = {kind for s, e, kind in spans if s < end and e > begin}
            group = "compaction" if "compaction" in kinds else "flush" if kinds else "none"
            groups[group].append(end - begin)
    return "; ".join(
        f"{'beside ' + kind if kind != 'none' else 'alone'}: {len(took)} batches, mean "
        f"{sum(took) / len(took):.2f}s, max {max(took):.2f}s"
        for kind, took in groups.items() if took) or "no batch after the warm-up"
