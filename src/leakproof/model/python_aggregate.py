"""The protocol of a Python aggregate (``fn: "module:Class"``), and a shipped example.

The class is built once per worker as ``Class(**options)`` (options: the aggregate's keys
other than fn, field and where). The core keeps the session's fences, late and duplicate
rules around it: ``apply`` sees only events that count, in offset order, each once per row
(a replay after a crash skips what the row already holds). ``apply`` must not mutate the value
it is given in place -- return a new one -- since the value read from HBase is kept to see
what changed. The value's text is the cell ``s:<name>`` and must give the value back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class PythonAggregate(Protocol):
    def initial(self) -> Any:
        """The value of a session that has no event yet."""
        ...

    def apply(self, value: Any, event: Mapping[str, Any]) -> Any:
        """The value after one more event (the record as read, every field by name)."""
        ...

    def to_text(self, value: Any) -> str | None:
        """The cell's text; None: no cell (as for a session with no value yet)."""
        ...

    def from_text(self, text: str) -> Any:
        """The value back from its cell."""
        ...

    # Optional, needed with ``sessions.by: gap``: ``merge(self, value, other) -> value``,
    # the value of two sessions joined by an event that bridges them (it must not depend on
    # which is which when the aggregate's result does not depend on event order).


class Funnel:
    """How far along an ordered list of pages a session got: the number of ``steps`` it
    visited in that order (each step after the ones before it, other pages in between).

    ``{fn: "leakproof.model.python_aggregate:Funnel", field: path, steps: [/, /cart, /pay]}``
    """

    def __init__(self, steps: Sequence[str], field: str = "path") -> None:
        self.steps = tuple(steps)
        self.field = field

    def initial(self) -> int:
        return 0

    def apply(self, value: int, event: Mapping[str, Any]) -> int:
        if value < len(self.steps) and event.get(self.field) == self.steps[value]:
            return value + 1
        return value

    def to_text(self, value: int) -> str | None:
        return str(value)

    def from_text(self, text: str) -> int:
        return int(text)
