"""REKEY=1's second half: the same events produced keyed to a topic of their own and drained
by the job without ``input.rekey`` into tables of their own, in the same run -- so the
re-keyed rate is read beside a keyed one measured minutes apart on the same stack, not on
another day."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from benchparts.drain import Drain
from benchparts.job import run_job
from benchparts.settings import PARTITIONS, SPEC
from benchparts.tables import drop_tables
from leakproof.commands.produce import send_events
from leakproof.core import config
from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import generate


def keyed_beside(data: dict[str, Any], work: Path, name: str, rekeyed: Drain) -> int:
    """Drain the keyed copy and print both drains and their ratios (target: the re-keyed
    rate at least half the keyed one); 1 if the keyed run failed."""
    keyed = copy.deepcopy(data)
    keyed.get("input", {}).pop("rekey", None)
    topic, prefix = f"{name}-keyed", f"{name}k"
    keyed["kafka"]["topic"], keyed["hbase"]["table_prefix"] = topic, prefix
    sub = work / "keyed"
    sub.mkdir(parents=True, exist_ok=True)
    path = sub / "config.yml"
    path.write_text(yaml.safe_dump(keyed))
    cfg = config.load(path)
    print(f"== the same events keyed, into {topic}", flush=True)
    create_topic(cfg.kafka, topic, PARTITIONS)
    send_events(cfg.kafka, topic, generate(SPEC))
    try:
        drain = run_job(path, cfg, sub)
    finally:
        drop_tables(cfg.hbase, prefix)
    if drain is None:
        return 1
    print(f"\nRESULT re-keyed beside keyed (same events, one run): "
          f"{rekeyed.rate:.0f} / {drain.rate:.0f} ev/s = {rekeyed.rate / drain.rate:.2f} "
          f"(steady {rekeyed.steady:.0f} / {drain.steady:.0f} = "
          f"{rekeyed.steady / drain.steady:.2f}); CPU s per M events {rekeyed.cpu_per_m:.1f} / "
          f"{drain.cpu_per_m:.1f} = {rekeyed.cpu_per_m / drain.cpu_per_m:.2f}; "
          f"{rekeyed.verdict} / {drain.verdict} (target: the re-keyed rate at least 0.5 of "
          f"the keyed)", flush=True)
    return 0
