"""What a session row's cells mean, kept beside the rows so a changed model is noticed (pure).

Rows written under one model and folded on under another mix two meanings in every open
session: an aggregate whose ``fn`` or ``where`` changed goes on from a value that counted
something else, a renamed one starts again at zero beside its old cell, a dropped sequence
stops catching duplicates. So the driver records the model's meaning in the state table and
refuses to start over rows of another one (``driver.startup``), naming what changed.

An added aggregate is the one change whose meaning is plain: its cell counts the events
applied from the change on, and rows written before lack it until their next event.
``leakproof model accept`` records such a model; other changes need new tables (a new
``hbase.table_prefix``, reprocessed), or ``--force`` from an operator who knows better.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from leakproof.model.spec import Model


def meaning(model: Model) -> str:
    """The model's meaning as canonical JSON: the session key, event time, sequence and
    every aggregate (the schema file, the format and the registry are not meaning: a record
    read another way gives the same event)."""
    return json.dumps({
        "session_key": model.session_key,
        "event_time": model.event_time,
        "sequence": model.sequence,
        "aggregates": {a.name: {"fn": a.fn, "field": a.field,
                                "where": (a.where or "").strip() or None,
                                "options": json.loads(a.options)}
                       for a in model.aggregates},
    }, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Change:
    """One difference between the recorded meaning and the configured one."""

    what: str  # e.g. "aggregate clicks"
    kind: str  # added | removed | changed
    before: Any = None
    after: Any = None

    def __str__(self) -> str:
        if self.kind == "added":
            return f"{self.what} added ({_text(self.after)})"
        if self.kind == "removed":
            return f"{self.what} removed (was {_text(self.before)})"
        return f"{self.what} changed from {_text(self.before)} to {_text(self.after)}"


def changes(recorded: str, configured: str) -> list[Change]:
    """What differs between two ``meaning`` texts, in a stable order."""
    old, new = json.loads(recorded), json.loads(configured)
    found = [Change(key.replace("_", " "), "changed", old.get(key), new.get(key))
             for key in ("session_key", "event_time", "sequence")
             if old.get(key) != new.get(key)]
    before, after = old.get("aggregates", {}), new.get("aggregates", {})
    for name in sorted(before.keys() | after.keys()):
        what = f"aggregate {name}"
        if name not in before:
            found.append(Change(what, "added", after=after[name]))
        elif name not in after:
            found.append(Change(what, "removed", before=before[name]))
        elif before[name] != after[name]:
            found.append(Change(what, "changed", before[name], after[name]))
    return found


def only_added(found: list[Change]) -> bool:
    """Whether every change is an added aggregate (``model accept`` takes those)."""
    return all(c.kind == "added" and c.what.startswith("aggregate ") for c in found)


_ORDER = ("fn", "field", "where", "options")


def _text(value: Any) -> str:
    if isinstance(value, dict):  # an aggregate, in the order config.yml writes it
        keys = sorted(value, key=lambda k: (_ORDER.index(k) if k in _ORDER else 9, k))
        return ", ".join(f"{k}: {value[k]}" for k in keys if value[k] not in (None, {}))
    return "none" if value is None else str(value)
