"""The job's drain: ``leakproof run --until-idle 5`` on the topic under the samplers, its
batches read back from the commit store, ``leakproof verify`` against the oracle, and what
its log says of consumer caches, publishing and task times."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from benchparts.drain import Drain, measured
from benchparts.joblog import batch_records, cache_hits, task_times
from benchparts.settings import ACCESS, SPEC
from leakproof.commit_stores import open_store
from leakproof.core import config
from leakproof.kafka.admin import KafkaMetadata


def run_job(cfg_path: Path, cfg: config.Config, work: Path) -> Drain | None:
    print("== the job: leakproof run --until-idle 5 (config.yml settings)", flush=True)
    log = work / "job.log"
    rc, cpu_s, peak, spent, spy = measured(
        [sys.executable, "-m", "leakproof.cli", "run", "--config", str(cfg_path),
         "--until-idle", "5", "--log-format", "json"], log, work / "worker-profile.txt")
    if rc != 0:
        print(f"job failed (exit {rc}); see {log}")
        return None
    # with input.rekey the job commits the internal topic's offsets (config.session_stage)
    with contextlib.closing(open_store(config.session_stage(cfg))) as store:
        rows = store.history(100_000)
    rows.reverse()
    commits, before = [], 0
    for row in rows:
        total = sum(row.offsets.values())
        commits.append((float(row.audit["committed_ms"]), total - before))
        before = total
    # from the first batch's time (when it was planned) to the last commit
    drain = Drain("leakproof", before, float(rows[0].batch_ms), commits, cpu_s, peak, spent)
    # a reused topic is taken to be one make bench filled with the same EVENTS
    checked = subprocess.run([sys.executable, "-m", "leakproof.cli", "verify", "--config",
                              str(cfg_path), *([] if ACCESS else ["--spec", SPEC.as_arg()])],
                             capture_output=True, text=True, check=False)
    drain.verdict = ("EXACT MATCH (the oracle)" if checked.returncode == 0 and "EXACT MATCH"
                     in checked.stdout else
                     "MISMATCH: " + (checked.stdout + checked.stderr)[-500:])
    print(drain.describe(), flush=True)
    assert spy is not None
    print(spy.summary(), flush=True)
    print(f"   cache: {cache_hits(log)}", flush=True)
    if cfg.output.closed_sessions_topic:
        publish = sorted(r["publish_s"] * 1000 for r in batch_records(log))
        mode = "transactions" if cfg.output.transactional else "plain sends"
        if publish:
            print(f"   closed-session summaries ({mode}): slowest task's publish per batch "
                  f"median {publish[len(publish) // 2]:.0f} ms, max {publish[-1]:.0f} ms, "
                  f"over {len(publish)} batches", flush=True)
        out = _summaries_written(cfg)
        print(f"   summaries topic: {out} offsets written (records and transaction "
              f"markers), {out / max(drain.records, 1):.3f} per record read "
              f"(output.emit: {cfg.output.emit})", flush=True)
    tasks = task_times(log)
    if len(tasks) >= 5:
        print(f"   slowest task per batch (read+fold+write): 2nd {tasks[1]:.2f}s, last three "
              f"{', '.join(f'{t:.2f}' for t in tasks[-4:-1])}s, min {min(tasks):.2f}s, max "
              f"{max(tasks):.2f}s; last three / 2nd "
              f"{sum(tasks[-4:-1]) / 3 / tasks[1]:.2f} (target <= 1.20)", flush=True)
    return drain


def _summaries_written(cfg: config.Config) -> int:
    """How many offsets the run's summaries topic holds (its records and markers)."""
    topic = cfg.output.closed_sessions_topic
    assert topic is not None
    meta = KafkaMetadata(cfg.kafka)
    try:
        bounds = meta.log_bounds(topic, meta.partitions(topic))
    finally:
        meta.close()
    return sum(b.log_end - b.log_start for b in bounds.values())
