"""One record's trip, counted: the project functions on the call stack where a marked
record changes form (its *stops*), and every call up a floor (``leakproof.floors``).

``make trip`` (``scripts/trip.py``) follows a record through a task on the real stack, Kafka
fetch to put; ``tests/unit/test_trip.py`` follows one through ``process_ranges`` over the
fakes, its record bytes parsed as a fetched batch's, on the code alone. Both read this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import FrameType
from typing import Any

from leakproof.floors import floor, modules

# where the record changes form: the function, what it makes, and the argument that must
# carry the record there (None: any; a mapping's keys only -- a put's rows are keyed by row)
MOMENTS: dict[str, tuple[str, str | None]] = {
    "leakproof.kafka.records.read_records": ("fetched bytes -> record", None),
    "leakproof.core.codec.Decoder._event": ("record -> event", None),
    "leakproof.core.kept_rows.KeptRows.take": ("its session's row, kept", None),
    "leakproof.hbase.wire.gets.get_rows": ("its session's row, read", "rows"),
    "leakproof.hbase.session_store.SessionStore.read": ("its session's row, read", None),
    "leakproof.core.sessions.PartitionFolder.feed": ("event -> session", None),
    "leakproof.core.gap_fold.GapFolder.feed": ("event -> session (split by the gap)", None),
    "leakproof.hbase.visit_store.VisitStore.read": ("its visitor's sessions, read", None),
    "leakproof.hbase.visit_store.VisitStore.add": ("its visitor's listing", None),
    "leakproof.core.session_cells.to_cells": ("session -> cells", None),
    "leakproof.hbase.wire.puts.encode_request": ("cells -> put of its row", "rows"),
}


def not_on_the_trip(by: str) -> set[str]:
    """The moments a trip on the real stack of sessions ``by`` id or gap does not meet: the
    other rule's, and the store's read, which ``hbase.wire``'s reader stands for there."""
    other = ({"leakproof.core.sessions.PartitionFolder.feed"} if by == "gap" else
             {"leakproof.core.gap_fold.GapFolder.feed",
              "leakproof.hbase.visit_store.VisitStore.add",
              "leakproof.hbase.visit_store.VisitStore.read"})
    return other | {"leakproof.hbase.session_store.SessionStore.read"}


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
    """The nearest project frame at or above ``frame`` (test support is not the project)."""
    while frame is not None and (not module_of(frame).startswith("leakproof")
                                 or module_of(frame).startswith("leakproof.testing")):
        frame = frame.f_back
    return frame


class Tracer:
    """A ``sys.setprofile`` hook: the stops of the record carrying ``marker``, in order of
    first call, the moments met, and every upward call of the traced code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.stops: dict[str, None] = {}
        self.seen: dict[str, None] = {}
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
        chain = []  # the project frames from the traced entry down to this call
        up: FrameType | None = frame
        while up is not None:
            chain.append(name_of(up))
            up = project(up.f_back)
        for stop in reversed(chain):
            if "<" not in stop.rpartition(".")[2]:  # a comprehension is no stop
                self.stops[stop] = None


def files_of(names: Iterable[str]) -> set[str]:
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
