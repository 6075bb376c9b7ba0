"""What the model needs of an Avro reader schema (pure): each top-level field's kind.

Kinds are what aggregates and ``where`` reason about: ``string`` (string, enum), ``int`` (int,
long), ``float`` (float, double), ``boolean``, ``bytes``, and ``other`` (records, arrays,
maps, fixed, unions of two non-null types: readable by a Python aggregate, usable by no
built-in one). A union with ``null`` is the other branch's kind, nullable.

The reader schema the decoder uses has its logical types removed, so a ``timestamp-millis``
field reads as the long it is on the wire (not a ``datetime``): the model works in epoch
numbers. ``time_unit`` says how a time field's numbers relate to milliseconds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["string", "int", "float", "boolean", "bytes", "other"]
_PRIMITIVE: dict[str, Kind] = {"string": "string", "int": "int", "long": "int",
                               "float": "float", "double": "float", "boolean": "boolean",
                               "bytes": "bytes"}
NO_DEFAULT = object()  # a field without "default": missing from a JSON event is an error


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    nullable: bool
    avro: str  # the field's Avro type as the schema writes it, for messages
    logical: str | None = None
    default: Any = NO_DEFAULT
    symbols: tuple[str, ...] | None = None  # an enum's


def fields_of(schema: Any) -> dict[str, Field]:
    """The top-level fields of a record schema, by name; ValueError if it is not a record."""
    if not isinstance(schema, dict) or schema.get("type") != "record" \
            or not isinstance(schema.get("fields"), list):
        raise ValueError("the schema is not an Avro record with fields")
    out: dict[str, Field] = {}
    for f in schema["fields"]:
        kind, nullable, logical, symbols = _kind(f["type"])
        out[f["name"]] = Field(f["name"], kind, nullable, _describe(f["type"]), logical,
                               f.get("default", NO_DEFAULT), symbols)
    return out


def _kind(t: Any) -> tuple[Kind, bool, str | None, tuple[str, ...] | None]:
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        if len(branches) == 1:
            kind, _, logical, symbols = _kind(branches[0])
            return kind, len(branches) < len(t), logical, symbols
        return "other", "null" in t, None, None
    if isinstance(t, str):
        return _PRIMITIVE.get(t, "other"), t == "null", None, None
    if isinstance(t, dict):
        if t.get("type") == "enum":
            return "string", False, None, tuple(t.get("symbols", ()))
        kind, nullable, _, _ = _kind(t.get("type"))
        return kind, nullable, t.get("logicalType"), None
    return "other", False, None, None


def _describe(t: Any) -> str:
    if isinstance(t, list):
        return "[" + ", ".join(_describe(b) for b in t) + "]"
    if isinstance(t, dict):
        base = t.get("type")
        if "logicalType" in t:
            return f"{_describe(base)} ({t['logicalType']})"
        return str(t.get("name", base)) if base in ("enum", "record", "fixed") else str(base)
    return str(t)


def without_logical_types(schema: Any) -> Any:
    """A copy of ``schema`` whose logical types are gone: each reads as its base type."""
    def strip(node: Any) -> Any:
        if isinstance(node, list):
            return [strip(n) for n in node]
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "logicalType"}
        return node
    return strip(copy.deepcopy(schema))


def time_unit(f: Field) -> int | None:
    """Divisor that turns the field's numbers into epoch milliseconds; None: not a time."""
    if f.kind != "int":
        return None
    if f.logical in (None, "timestamp-millis", "local-timestamp-millis"):
        return 1
    if f.logical in ("timestamp-micros", "local-timestamp-micros"):
        return 1000
    return None
