"""The optional native read path (``src/native``: Rust through pyo3), found once per process.

A task's first step spends most of its CPU in two loops over bytes: a fetched batch's record
area into ``KafkaRecord`` tuples, and each value's schemaless Avro into a dict. The package
``leakproof_native`` does both natively where it is installed (``make venv`` and the YARN
pack build it when cargo is there). Its functions give what the pure-Python reference gives
or decline, and the caller then runs the reference, which decides every bad input and names
it: the native path changes the speed, never a result, a dead letter's kind or its message.
It also writes the session rows' put requests (``hbase.wire.puts``), the reference's bytes.

Where it is not installed, or was built for another layout, the reference runs, with one
line in the log. ``LEAKPROOF_NATIVE=0`` in the environment asks for the reference even where
the native path is installed (to compare the two, or to rule it out).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

ABI = 2  # the layout of leakproof_native's functions this code calls
ENV = "LEAKPROOF_NATIVE"
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes",
                         "string"})


@functools.cache
def module() -> Any | None:
    """``leakproof_native`` when it is installed, of this layout, and not turned off."""
    if os.environ.get(ENV, "1").strip() == "0":
        log.info("%s=0: reading records and Avro (and encoding row puts) with the "
                 "pure-Python path", ENV)
        return None
    try:
        import leakproof_native  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        log.info("leakproof_native is not installed here: reading records and Avro with "
                 "the pure-Python path (slower, same results)")
        return None
    if getattr(leakproof_native, "ABI", None) != ABI:
        log.warning("leakproof_native of layout %s, not %s: reading records and Avro with "
                    "the pure-Python path", getattr(leakproof_native, "ABI", None), ABI)
        return None
    return leakproof_native


def describe() -> str:
    """Which read path this process runs, for the job's first log lines."""
    return "native (leakproof_native)" if module() is not None else "pure Python"


def flat_program(schema: Any) -> list[tuple[str, bool, list[Any]]] | None:
    """A parsed record schema as ``FlatRecordReader``'s field list, or None when a field is
    anything but a primitive, an enum, or a union of those (a nested record, an array, a
    map, a fixed, a named reference, a logical type): such schemas stay with fastavro."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    program: list[tuple[str, bool, list[Any]]] = []
    for field in schema.get("fields", []):
        union = isinstance(field["type"], list)
        branches = [_branch(t) for t in (field["type"] if union else [field["type"]])]
        if not branches or any(b is None for b in branches):
            return None
        program.append((field["name"], union, branches))
    return program


def _branch(t: Any) -> Any:
    if isinstance(t, str):
        return t if t in _PRIMITIVES else None
    if not isinstance(t, dict) or "logicalType" in t:
        return None
    if t.get("type") == "enum" and isinstance(t.get("symbols"), list):
        return ("enum", [str(s) for s in t["symbols"]])
    if isinstance(t.get("type"), str) and t["type"] in _PRIMITIVES:
        return t["type"]
    return None


def flat_reader(schema: Any) -> Any | None:
    """A native reader of ``schema``'s records, or None (not flat, or no native path)."""
    native = module()
    if native is None:
        return None
    program = flat_program(schema)
    return native.FlatRecordReader(program) if program is not None else None
