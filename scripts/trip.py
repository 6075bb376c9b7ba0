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
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

from kafka import KafkaAdminClient  # noqa: E402

from leakproof import config  # noqa: E402
from leakproof.commands.produce import send_events  # noqa: E402
from leakproof.events import WebEvent  # noqa: E402
from leakproof.floors import floor, modules  # noqa: E402
from leakproof.hbase.connection import connect, ensure_tables  # noqa: E402
from leakproof.hbase.state_store import HBaseLeaseStore  # noqa: E402
from leakproof.kafka.admin import create_topic  # noqa: E402
from leakproof.offsets import OffsetRange  # noqa: E402
from leakproof.task import worker  # noqa: E402

# where the record changes form: the function, what it makes, and the argument that must
# carry the record there (None: any; a mapping's keys only -- a put's rows are keyed by row)
MOMENTS: dict[str, tuple[str, str | None]] = {
    "leakproof.kafka.records.read_records": ("fetched bytes -> record", None),
    "leakproof.codec.Decoder._event": ("record -> event", None),
    "leakproof.kept_rows.KeptRows.take": ("its session's row, kept", None),
    "leakproof.hbase.wire.gets.get_rows": ("its session's row, read", "rows"),
    "leakproof.sessions.PartitionFolder.feed": ("event -> session", None),
    "leakproof.gap_fold.GapFolder.feed": ("event -> session (split by the gap)", None),
    "leakproof.session_cells.to_cells": ("session -> cells", None),
    "leakproof.hbase.wire.puts.encode_mutate_rows": ("cells -> put of its row", "rows"),
}


def carries(obj: Any, marker: str, depth: int = 3) -> bool:
    """Whether ``obj`` holds the marker: in a string or bytes, or inside a container or an
    object's fields, ``depth`` levels down."""
    if isinstance(obj, str):
        return marker in obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return marker.encode() in bytes(obj)
    if depth == 0 or obj is None or isinstance(obj, (int, float, bool, type)):
        return False
    if isinstance(obj, dict):
        items: Iterable[Any] = [x for kv in list(obj.items())[:5000] for x in kv]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)[:5000]
    elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        if not type(obj).__module__.startswith("leakproof"):
            return False  # a library's object (a consumer, a socket): not the record
        items = [*getattr(obj, "__dict__", {}).values(),
                 *(getattr(obj, name, None) for name in getattr(type(obj), "__slots__", ()))]
    else:
        return False
    return any(carries(x, marker, depth - 1) for x in items)


def module_of(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "?"))


def name_of(frame: FrameType) -> str:
    return f"{module_of(frame)}.{frame.f_code.co_qualname}"


def project(frame: FrameType | None) -> FrameType | None:
    """The nearest project frame at or above ``frame``."""
    while frame is not None and not module_of(frame).startswith("leakproof"):
        frame = frame.f_back
    return frame


class Tracer:
    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.stops: dict[str, None] = {}  # in order of first call
        self.seen: dict[str, None] = {}  # the moments met
        self.upward: dict[tuple[str, str], None] = {}

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or project(frame) is not frame:
            return
        name = name_of(frame)
        caller = project(frame.f_back)
        if caller is not None and floor(module_of(caller)) < floor(module_of(frame)):
            self.upward[(name_of(caller), name)] = None
        if name not in MOMENTS:
            return
        code = frame.f_code
        wanted = MOMENTS[name][1]
        if wanted is None:
            args = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            values = [frame.f_locals.get(a) for a in args]
        else:
            value = frame.f_locals.get(wanted)
            values = [list(value.keys()) if isinstance(value, Mapping) else value]
        if not any(carries(v, self.marker) for v in values):
            return
        self.seen[name] = None
        chain = []  # the project frames from the task's entry down to this call
        up: FrameType | None = frame
        while up is not None:
            chain.append(name_of(up))
            up = project(up.f_back)
        for stop in reversed(chain):
            if "<" not in stop.rpartition(".")[2]:  # a comprehension is no stop
                self.stops[stop] = None


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
    other = "sessions.PartitionFolder" if by == "gap" else "gap_fold.GapFolder"
    missed = sorted(MOMENTS.keys() - tracer.seen.keys() - {f"leakproof.{other}.feed"})
    print(f"{len(tracer.stops)} stops in {len(_modules(tracer.stops))} files; "
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


def _modules(names: Iterable[str]) -> set[str]:
    """The modules the functions ``names`` live in (a qualname may hold dots)."""
    known = set(modules())
    out = set()
    for name in names:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in known:
                out.add(".".join(parts[:i]))
                break
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
