#!/usr/bin/env python3
"""make bench-ui: what the Spark UI costs the driver, with it off, on, and on and watched.

Under a steady load (RATE ev/s, default 4 000, for DURATION_S, default 90), ``leakproof run``
(local[2], 1 s batches, JSON log lines) runs once per arm, the arms alternating for ROUNDS
rounds: ``off`` (spark.ui.enabled=false, leakproof's default before issue 49), ``on`` (the
default now; nobody looks), ``watched`` (on, and the Streaming tab's page plus the REST API's
batch list fetched every 5 s, as an open browser tab and a scraper would). Each run reads a
fresh topic into fresh tables (dropped after it; KEEP=1 keeps them).

Printed per run: the driver JVM's peak and final RSS (in local mode it also holds the
executors, so it is the whole JVM side) and its heap in use after a full GC once the load
has ended (jcmd; what the JVM really keeps), its CPU seconds per batch with records, the
Python driver's CPU seconds per batch (planning, input reports, commits), and the batches'
mean and 95th percentile total time from the progress records.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from bench import drop_tables
from leakproof.commands.produce import send_raw
from leakproof.core import codec, config
from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import GeneratorSpec, generate

RATE = float(os.environ.get("RATE", "4000"))
SECONDS = float(os.environ.get("DURATION_S", "90"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
ARMS = os.environ.get("ARMS", "off,on,watched").split(",")
TICK = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def jvm_of(pid: int) -> int | None:
    """The driver JVM below ``pid`` (spark-submit's scripts exec into it; the launcher JVM
    that builds its command line comes and goes before it)."""
    todo = children(pid)
    while todo:
        p = todo.pop()
        try:
            if b"deploy.SparkSubmit" in Path(f"/proc/{p}/cmdline").read_bytes():
                return p
        except OSError:
            continue
        todo += children(p)
    return None


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def live_heap_mib(pid: int) -> float:
    """The JVM's heap in use after a full GC (what it really keeps), by jcmd."""
    run = [["jcmd", str(pid), "GC.run"], ["jcmd", str(pid), "GC.heap_info"]]
    subprocess.run(run[0], capture_output=True, timeout=60, check=False)
    out = subprocess.run(run[1], capture_output=True, text=True, timeout=60, check=False).stdout
    found = re.search(r"used (\d+)K", out)
    return int(found.group(1)) / 1024 if found else 0.0


def watch(port: int, stop: threading.Event) -> None:
    """An operator's open Streaming tab and a scraper of the REST API, every 5 s."""
    base = f"http://127.0.0.1:{port}"
    while not stop.wait(5):
        try:
            with urllib.request.urlopen(f"{base}/api/v1/applications", timeout=10) as r:
                app = json.loads(r.read())[0]["id"]
            for path in ("/streaming/", f"/api/v1/applications/{app}/streaming/batches"):
                with urllib.request.urlopen(base + path, timeout=10) as r:
                    r.read()
        except OSError:
            continue


def one_run(arm: str, n: int, work: Path) -> dict[str, float | str]:
    name = f"benchui{int(time.time())}{n}"
    port = 4700 + n
    data = {
        "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": name, "group_id": "bench",
                  "max_rate_per_partition": 0},
        "hbase": {"table_prefix": name},
        "job": {"batch_interval_s": 1, "master": "local[2]",
                "spark_conf": {"spark.ui.enabled": arm != "off", "spark.ui.port": port}},
    }
    path = work / f"{name}.yml"
    path.write_text(yaml.safe_dump(data))
    cfg = config.load(path)
    create_topic(cfg.kafka, name, 4)
    events = int(RATE * SECONDS)
    spec = GeneratorSpec(seed=n, events=events, sessions=max(1, events // 10))
    pairs = [(codec.encode_key(e), codec.encode_value(e)) for e in generate(spec)]
    log = work / f"{name}.log"
    with open(log, "wb") as out:
        job = subprocess.Popen([sys.executable, "-m", "leakproof.cli", "run", "--config",
                                str(path), "--log-format", "json", "--until-idle", "8"],
                               stdout=out, stderr=subprocess.STDOUT)
    producer = threading.Thread(target=send_raw, args=(cfg.kafka, name, pairs, RATE))
    producer.start()
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(port, stop), daemon=True)
    if arm == "watched":
        watcher.start()
    peak = last = jvm_cpu = py_cpu = live = 0.0
    jvm = None
    while job.poll() is None:
        time.sleep(1)
        if not producer.is_alive() and jvm is not None and not live:
            live = live_heap_mib(jvm)
        try:
            jvm = jvm or jvm_of(job.pid)
            if jvm is not None:
                last = rss_mib(jvm)
                peak = max(peak, last)
                jvm_cpu = cpu_s(jvm)
            py_cpu = cpu_s(job.pid)
        except OSError:
            pass
    stop.set()
    producer.join()
    batches = [json.loads(line) for line in log.read_text().splitlines()
               if line.startswith("{") and '"batch_ms"' in line]
    took = sorted(b["total_s"] for b in batches if b.get("records"))
    drop_tables(cfg.hbase, name)
    n_b = max(1, len(took))
    return {"arm": arm, "batches": len(took), "peak_mib": peak, "last_mib": last,
            "live_heap_mib": live,
            "jvm_cpu_per_batch": jvm_cpu / n_b, "py_cpu_per_batch": py_cpu / n_b,
            "mean_s": statistics.fmean(took) if took else 0.0,
            "p95_s": took[int(0.95 * (len(took) - 1))] if took else 0.0}


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for r in range(ROUNDS):
            for arm in ARMS if r % 2 == 0 else list(reversed(ARMS)):
                n += 1
                row = one_run(arm, n, Path(tmp))
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{RATE:.0f} ev/s for {SECONDS:.0f} s, local[2], 1 s batches\n")
    print("| arm | batches | JVM RSS peak / end MiB | live heap MiB | JVM CPU s/batch "
          "| Python CPU s/batch | batch mean / p95 s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['arm']} | {row['batches']} | {row['peak_mib']:.0f} / "
              f"{row['last_mib']:.0f} | {row['live_heap_mib']:.0f} | "
              f"{row['jvm_cpu_per_batch']:.3f} | "
              f"{row['py_cpu_per_batch']:.3f} | {row['mean_s']:.2f} / {row['p95_s']:.2f} |")


if __name__ == "__main__":
    main()
