"""A model compiled for the fold (pure): one generated function applies an event to every
aggregate of a session, plus each aggregate's cell text.

Compiled once per worker (``compile_model`` is cached per model), never interpreted per
event: the function is Python source built from the checked model -- field names and
literals enter it only through ``repr`` -- so folding an event costs what hand-written code
for that model would. ``source`` keeps the text, for ``leakproof model check`` and tests.

A session's aggregate values live in a list, in the model's order; ``None`` is "no value
yet" (no cell). With a sequence, ``first`` and ``last`` keep beside their value the seq it
came from (``orders``), so a late-delivered lower seq still becomes ``first``. Sessions split
by the gap (``by_time``) without a sequence order them by event time instead, and two
sessions merge (``CompiledModel.merge``) when an event bridges them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from leakproof.model import where
from leakproof.model.schema import Field
from leakproof.model.spec import Aggregate, Model, load_python

Apply = Callable[[list[Any], list[Any], dict[str, Any], int], None]


def float_text(v: Any) -> str:
    """The shortest text that reads back to the same double (``repr``'s rule)."""
    return repr(float(v))


def bool_text(v: Any) -> str:
    return "true" if v else "false"


def bool_value(text: str) -> bool:
    return text == "true"


_TEXT: dict[str, tuple[Callable[[Any], str | None], Callable[[str], Any]]] = {
    "int": (str, int), "float": (float_text, float), "boolean": (bool_text, bool_value),
    "string": (str, str)}


class CompiledModel:
    """What the fold and the session cells need of a model; ``by_time``: ``first`` / ``last``
    without a sequence go by event time (``sessions.by: gap``), not by offset."""

    def __init__(self, model: Model, by_time: bool = False) -> None:
        self.model = model
        fields = model.fields()
        self.sequenced = model.sequence is not None
        # first / last keep the order key they came from (a seq, or with by_time a ts)
        self.by_time = by_time and not self.sequenced
        self.names = tuple(a.name for a in model.aggregates)
        self.cell_names = tuple(f"s:{n}".encode() for n in self.names)
        self.order_cells = tuple(f"f:o:{n}".encode() for n in self.names)
        self.python = {i: load_python(a) for i, a in enumerate(model.aggregates) if a.python}
        # which bound of the seqs an aggregate's order defaults to: first -> lowest seq
        self.ordered: dict[int, str] = {
            i: a.fn for i, a in enumerate(model.aggregates)
            if (self.sequenced or self.by_time) and a.fn in ("first", "last")}
        self._fns = tuple(a.fn for a in model.aggregates)
        self._initial = [self.python[i].initial() if i in self.python
                         else 0 if a.fn == "count" else None
                         for i, a in enumerate(model.aggregates)]
        self.to_text: list[Callable[[Any], str | None]] = []
        self.from_text: list[Callable[[str], Any]] = []
        for i, a in enumerate(model.aggregates):
            if i in self.python:
                self.to_text.append(self.python[i].to_text)
                self.from_text.append(self.python[i].from_text)
            else:
                to, back = _TEXT["int" if a.fn == "count" else _kind(fields, a)]
                self.to_text.append(to)
                self.from_text.append(back)
        self.source = generate(model.aggregates, self.sequenced,
                               frozenset(n for n, f in fields.items() if f.nullable),
                               self.by_time)
        namespace: dict[str, Any] = {"P": self.python}
        exec(compile(self.source, f"<model {model.schema_file}>", "exec"), namespace)
        self.apply: Apply = namespace["apply"]

    def initial(self) -> tuple[list[Any], list[Any]]:
        """A new session's (values, orders)."""
        return list(self._initial), [None] * len(self._initial)

    def merge(self, values: list[Any], orders: list[Any], other_values: Sequence[Any],
              other_orders: Sequence[Any]) -> None:
        """Fold another session's aggregates into ``values`` / ``orders`` (two sessions an
        event bridges): counts and sums add, min / max compare, first / last keep the value
        of the lower / higher order key (on a tie, the one ``values`` had). Not per event:
        a merge is rare, so plain code."""
        for i, fn in enumerate(self._fns):
            b = other_values[i]
            if i in self.python:
                values[i] = self.python[i].merge(values[i], b)
                continue
            a = values[i]
            if b is None:
                continue
            if a is None:
                values[i], orders[i] = b, other_orders[i]
            elif fn in ("count", "sum"):
                values[i] = a + b
            elif fn == "min":
                values[i] = min(a, b)
            elif fn == "max":
                values[i] = max(a, b)
            elif i in self.ordered and other_orders[i] is not None and (
                    orders[i] is None or (other_orders[i] < orders[i] if fn == "first"
                                          else other_orders[i] > orders[i])):
                values[i], orders[i] = b, other_orders[i]


def _kind(fields: dict[str, Field], a: Aggregate) -> str:
    assert a.field is not None  # spec.check: every built-in but count names a field
    return fields[a.field].kind


def generate(aggregates: Sequence[Aggregate], sequenced: bool, nullable: frozenset[str],
             by_time: bool = False) -> str:
    """The source of ``apply(v, o, r, k)``: v the values, o the orders, r the record, k the
    event's order key (its seq with a sequence, else with ``by_time`` its event time, else
    its offset)."""
    lines = ["def apply(v, o, r, k):"]
    loaded: dict[str, str] = {}
    for a in aggregates:
        if a.field is not None and not a.python and a.field not in loaded:
            loaded[a.field] = f"f{len(loaded)}"
            lines.append(f"    {loaded[a.field]} = r[{a.field!r}]")
    for i, a in enumerate(aggregates):
        body = _body(i, a, loaded.get(a.field or ""), sequenced, a.field in nullable, by_time)
        if a.where is not None:
            lines.append(f"    if {where.to_python(where.parse(a.where), nullable)}:")
            lines += [f"        {b}" for b in body]
        else:
            lines += [f"    {b}" for b in body]
    if len(lines) == 1:
        lines.append("    pass")
    return "\n".join(lines) + "\n"


def _body(i: int, a: Aggregate, x: str | None, sequenced: bool, nullable: bool,
          by_time: bool = False) -> list[str]:
    """One aggregate's statements over the loaded field ``x``; its null test only where
    the schema lets the field be null. By event time (``by_time``), ``last`` takes a tie:
    as by offset, the later arrival."""
    vi, oi = f"v[{i}]", f"o[{i}]"
    if a.python:
        return [f"{vi} = P[{i}].apply({vi}, r)"]
    if x is None:  # count of events
        return [f"{vi} += 1"]
    tests = [f"{x} is not None"] if nullable else []
    then = f"{vi} = {x}"
    if a.fn == "count":
        then = f"{vi} += 1"
    elif a.fn == "sum":
        then = f"{vi} = {x} if {vi} is None else {vi} + {x}"
    elif a.fn in ("min", "max"):
        tests.append(f"({vi} is None or {x} {'<' if a.fn == 'min' else '>'} {vi})")
    elif sequenced or by_time:  # first / last by seq, or by event time
        op = "<" if a.fn == "first" else ">" if sequenced else ">="
        tests.append(f"({vi} is None or k {op} {oi})")
        then = f"{vi} = {x}; {oi} = k"
    elif a.fn == "first":  # by offset: the first value stays
        tests.append(f"{vi} is None")
    return [f"if {' and '.join(tests)}:", f"    {then}"] if tests else [then]


@cache
def compile_model(model: Model, by_time: bool = False) -> CompiledModel:
    """The model compiled, once per process (``by_time``: ``CompiledModel``)."""
    return CompiledModel(model, by_time)
