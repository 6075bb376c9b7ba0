"""One record's trip through a task, Kafka fetch to its session row's put, counted.

Needs the local stack (``make stack-up``). Produces one event whose session id carries a
marker to a new topic, takes the lease for new tables, and runs the task's entry point
(``task.worker.run_ranges``) on that one range in this process under a profiler.

The record changes form at a few places (``MOMENTS``): fetched bytes become a record, the
record an event, its session's row is read (or taken from the kept rows), the event is
folded into the session, the session becomes cells and the cells a put. Its *stops* are the
project functions on the call stack at those places, from the task's entry down: what a
reader follows to see where a record goes. A call is *upward* when the caller's floor is
below the callee's (the floors of ``leakproof/floors.py``: core, ports, adapters,
task, driver, ...): any such call in the whole task is counted, not only on the trip.

    python scripts/trip.py           # make trip: the stops in order, the counts, upward calls
    python scripts/trip.py --by gap  # the same with sessions split by the gap
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

from kafka import KafkaAdminClient  # noqa: E402

from leakproof.commands.produce import send_events  # noqa: E402
from leakproof.core import config  # noqa: E402
from leakproof.core.events import WebEvent  # noqa: E402
from leakproof.core.offsets import OffsetRange  # noqa: E402
from leakproof.hbase.connection import connect, ensure_tables  # noqa: E402
from leakproof.hbase.state_store import HBaseLeaseStore  # noqa: E402
from leakproof.kafka.admin import create_topic  # noqa: E402
from leakproof.task import worker  # noqa: E402
from leakproof.testing.trip import MOMENTS, Tracer, files_of, not_on_the_trip  # noqa: E402


def main(argv: list[str]) -> int:
    by = argv[argv.index("--by") + 1] if "--by" in argv else "id"
    run = f"trip{uuid.uuid4().hex[:8]}"
    marker = f"MARK{uuid.uuid4().hex[:10]}"
    cfg = config.from_dict({
        "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topic": run, "group_id": "trip"},
        "hbase": {"table_prefix": run},
        "job": {"batch_interval_s": 1, "master": "local[1]"},
        "sessions": {"by": by},
    })
    create_topic(cfg.kafka, run, 1)
    try:
        tracer, reports = _traced(cfg, run, marker)
    finally:
        _remove(cfg, run)
    assert reports[0].applied == 1, reports[0]
    for name in tracer.stops:
        print(f"  {name}" + (f"   <- {MOMENTS[name][0]}" if name in MOMENTS else ""))
    missed = sorted(MOMENTS.keys() - tracer.seen.keys() - not_on_the_trip(by))
    print(f"{len(tracer.stops)} stops in {len(files_of(tracer.stops))} files; "
          f"{len(tracer.upward)} upward calls in the task"
          + (f"; not met: {', '.join(missed)}" if missed else ""))
    for caller, callee in tracer.upward:
        print(f"  upward: {caller} -> {callee}")
    return 0


def _traced(cfg: config.Config, run: str, marker: str) -> tuple[Tracer, list[Any]]:
    """The marked record produced, the tables made and the lease taken; then its range run
    under the tracer (after an empty range: imports, connection and consumer warm)."""
    now = int(time.time() * 1000)
    send_events(cfg.kafka, run, [WebEvent(f"s-{marker}", "u1", 1, now, "page_view", "/",
                                          200, 512)])
    conn = connect(cfg.hbase)
    ensure_tables(conn, cfg.hbase)
    conn.close()
    lease = HBaseLeaseStore(cfg.hbase, run, "trip").take("trip")
    worker.run_ranges(cfg, now, [OffsetRange(run, 0, 0, 0)], lease.epoch, cell_ts={0: now})
    tracer = Tracer(marker)
    sys.setprofile(tracer)
    try:
        reports = worker.run_ranges(cfg, now, [OffsetRange(run, 0, 0, 1)], lease.epoch,
                                    cell_ts={0: now + 1})
    finally:
        sys.setprofile(None)
    return tracer, reports


def _remove(cfg: config.Config, run: str) -> None:
    """The run's topic and tables gone again: a stack holding many slows the benches."""
    conn = connect(cfg.hbase)
    try:
        for table in conn.tables():
            conn.delete_table(table, disable=True)
    finally:
        conn.close()
    admin = KafkaAdminClient(bootstrap_servers=cfg.kafka.bootstrap_servers)
    try:
        admin.delete_topics([run])
    finally:
        admin.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
