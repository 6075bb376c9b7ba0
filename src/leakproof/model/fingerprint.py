"""What a session row's cells mean, kept beside the rows so a changed model is noticed (pure).

Rows written under one model and folded on under another mix two meanings in every open
session: an aggregate whose ``fn`` or ``where`` changed goes on from a value that counted
something else, a renamed one starts again at zero beside its old cell, a dropped sequence
stops catching duplicates. So the driver records the model's meaning in the state table and
refuses to start over rows of another one (``driver.startup``), naming what changed.

The meaning is the event model's and the session settings that say what a row is:
``sessions.by`` (what a row key is), ``sessions.late`` (whether a late event's values are in
the aggregates) and, with ``by: gap``, ``sessions.inactivity_gap_s`` and
``sessions.max_duration_s`` (where one session ends and the next begins). The others only say
*when* a row is final: ``grace_s``, ``idle_after_s`` and, with ``by: id``, the gap (a session
is every event of its id whatever the gap; a changed one closes it later or sooner, and the
index keeps the bucket width it was cut with).

A meaning recorded before the session settings were part of it has no ``sessions``: it is
read as the configured settings (a job upgraded in place is not refused for them), and the
complete meaning is recorded at that start (``driver.startup.check_model``).

An added aggregate is the one change whose meaning is plain: its cell counts the events
applied from the change on, and rows written before lack it until their next event.
``leakproof model accept`` records such a model; other changes need new tables (a new
``hbase.table_prefix``, reprocessed), or ``--force`` from an operator who knows better --
except the changes the stored rows cannot be folded on from (``beyond_force``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from leakproof.core.config import SessionsConfig
from leakproof.model.spec import Model

# the model's keys, each with the config key that sets it
_EVENTS = {"session_key": "events.session_key", "event_time": "events.event_time",
           "sequence": "events.sequence"}


def meaning(model: Model, sessions: SessionsConfig) -> str:
    """The meaning as canonical JSON: the session key, event time, sequence, every
    aggregate, and the session settings of the module docstring (the schema file, the
    format and the registry are not meaning: a record read another way gives the same
    event)."""
    split: dict[str, Any] = {"by": sessions.by, "late": sessions.late}
    if sessions.by == "gap":
        split["inactivity_gap_s"] = float(sessions.inactivity_gap_s)
        split["max_duration_s"] = (None if sessions.max_duration_s is None
                                   else float(sessions.max_duration_s))
    return json.dumps({
        "session_key": model.session_key,
        "event_time": model.event_time,
        "sequence": model.sequence,
        "aggregates": {a.name: {"fn": a.fn, "field": a.field,
                                "where": (a.where or "").strip() or None,
                                "options": json.loads(a.options)}
                       for a in model.aggregates},
        "sessions": split,
    }, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Change:
    """One difference between the recorded meaning and the configured one, named by the
    config key that makes it."""

    what: str  # e.g. "aggregates.clicks", "sessions.by"
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
    """What differs between two ``meaning`` texts, in a stable order. A recorded meaning
    without ``sessions`` (written before they were part of it) is read as the configured
    settings: it says nothing of them."""
    old, new = json.loads(recorded), json.loads(configured)
    found = [Change(key, "changed", old.get(k), new.get(k))
             for k, key in _EVENTS.items() if old.get(k) != new.get(k)]
    before, after = old.get("aggregates", {}), new.get("aggregates", {})
    for name in sorted(before.keys() | after.keys()):
        what = f"aggregates.{name}"
        if name not in before:
            found.append(Change(what, "added", after=after[name]))
        elif name not in after:
            found.append(Change(what, "removed", before=before[name]))
        elif before[name] != after[name]:
            found.append(Change(what, "changed", before[name], after[name]))
    was, now = old.get("sessions", new.get("sessions", {})), new.get("sessions", {})
    if was.get("by") != now.get("by"):  # the other settings follow from it
        found.append(Change("sessions.by", "changed", was.get("by"), now.get("by")))
    else:
        found += [Change(f"sessions.{k}", "changed", was.get(k), now.get(k))
                  for k in sorted(was.keys() | now.keys()) if was.get(k) != now.get(k)]
    return found


def only_added(found: list[Change]) -> bool:
    """Whether every change is an added aggregate (``model accept`` takes those)."""
    return all(c.kind == "added" and c.what.startswith("aggregates.") for c in found)


def beyond_force(found: list[Change], configured: str) -> list[str]:
    """Why ``--force`` cannot take some of ``found``: changes the stored rows cannot be
    carried over -- folded on, every batch touching an old row would fail, again on each
    retry and restart (a poison batch), or every open session would be split in two. Each
    reason names the config key; empty: ``--force`` may record the change. (The rest were
    each folded over rows of the old meaning, ``tests/unit/test_fingerprint.py``.)

    - ``sessions.by``: a row key is a session id under ``id`` and ``<key>:<first_ts>``
      under ``gap``; no open session's row is read again under the other rule, so each
      would end as two rows, split where the setting changed.
    - ``events.sequence`` removed with ``by: gap``: ``first`` / ``last`` then go by event
      time and need the time each value came from, which rows written with a sequence do
      not hold (they kept seqs, and not even those where they equal the seq bounds).
    - an aggregate's ``fn``, ``field`` or options: its cell holds a value of the old
      definition, which the new one may not read (``count`` over a text cell) or order
      (``first`` / ``last`` with no seq or time beside it). A changed ``where`` alone
      keeps the cell's kind and order, so ``--force`` takes it.
    """
    by = json.loads(configured).get("sessions", {}).get("by")
    reasons = []
    for c in found:
        if c.what == "sessions.by":
            reasons.append(f"{c}: a row's key is a session id under by: id and "
                           f"<key>:<first event time> under by: gap, so every open "
                           f"session would end as two rows, split where the setting "
                           f"changed")
        elif c.what == "events.sequence" and c.after is None and by == "gap":
            reasons.append(f"{c}: with sessions.by: gap and no sequence, first / last go "
                           f"by event time, which the rows written with a sequence do not "
                           f"hold (they kept seqs): every batch touching one would fail")
        elif c.what.startswith("aggregates.") and c.kind == "changed" and any(
                c.before.get(k) != c.after.get(k) for k in ("fn", "field", "options")):
            reasons.append(f"{c}: its cells hold values of the old definition, which the "
                           f"new one may not read or order: every batch touching such a "
                           f"row could fail. Give the new definition a new name instead "
                           f"(`leakproof model accept` takes it as added; the old cell "
                           f"stays, unread)")
    return reasons


_ORDER = ("fn", "field", "where", "options")


def _text(value: Any) -> str:
    if isinstance(value, dict):  # an aggregate, in the order config.yml writes it
        keys = sorted(value, key=lambda k: (_ORDER.index(k) if k in _ORDER else 9, k))
        return ", ".join(f"{k}: {value[k]}" for k in keys if value[k] not in (None, {}))
    if isinstance(value, float) and value.is_integer():  # 1800.0 s as config.yml has it
        return str(int(value))
    return "none" if value is None else str(value)
