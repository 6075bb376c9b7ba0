"""A model compiled for the fold (pure): one generated function applies an event to every
aggregate of a session, plus each aggregate's cell text.

Compiled once per worker (``compile_model`` is cached per model), never interpreted per
event: the function is Python source built from the checked model -- field names and
literals enter it only through ``repr`` -- so folding an event costs what hand-written code
for that model would. ``source`` keeps the text, for ``leakproof model check`` and tests.

A session's aggregate values live in a list, in the model's order; ``None`` is "no value
yet" (no cell). With a sequence, ``first`` and ``last`` keep beside their value the seq it
came from (``orders``), so a late-delivered lower seq still becomes ``first``.
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
    """What the fold and the session cells need of a model."""

    def __init__(self, model: Model) -> None:
        self.model = model
        fields = model.fields()
        self.sequenced = model.sequence is not None
        self.names = tuple(a.name for a in model.aggregates)
        self.cell_names = tuple(f"s:{n}".encode() for n in self.names)
        self.order_cells = tuple(f"f:o:{n}".encode() for n in self.names)
        self.python = {i: load_python(a) for i, a in enumerate(model.aggregates) if a.python}
        # which bound of the seqs an aggregate's order defaults to: first -> lowest seq
        self.ordered: dict[int, str] = {
            i: a.fn for i, a in enumerate(model.aggregates)
            if self.sequenced and a.fn in ("first", "last")}
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
                               frozenset(n for n, f in fields.items() if f.nullable))
        namespace: dict[str, Any] = {"P": self.python}
        exec(compile(self.source, f"<model {model.schema_file}>", "exec"), namespace)
        self.apply: Apply = namespace["apply"]

    def initial(self) -> tuple[list[Any], list[Any]]:
        """A new session's (values, orders)."""
        return list(self._initial), [None] * len(self._initial)


def _kind(fields: dict[str, Field], a: Aggregate) -> str:
    assert a.field is not None  # spec.check: every built-in but count names a field
    return fields[a.field].kind


def generate(aggregates: Sequence[Aggregate], sequenced: bool, nullable: frozenset[str]
             ) -> str:
    """The source of ``apply(v, o, r, k)``: v the values, o the orders, r the record, k the
    event's order key (its seq with a sequence, else its offset)."""
    lines = ["def apply(v, o, r, k):"]
    loaded: dict[str, str] = {}
    for a in aggregates:
        if a.field is not None and not a.python and a.field not in loaded:
            loaded[a.field] = f"f{len(loaded)}"
            lines.append(f"    {loaded[a.field]} = r[{a.field!r}]")
    for i, a in enumerate(aggregates):
        body = _body(i, a, loaded.get(a.field or ""), sequenced, a.field in nullable)
        if a.where is not None:
            lines.append(f"    if {where.to_python(where.parse(a.where), nullable)}:")
            lines += [f"        {b}" for b in body]
        else:
            lines += [f"    {b}" for b in body]
    if len(lines) == 1:
        lines.append("    pass")
    return "\n".join(lines) + "\n"


def _body(i: int, a: Aggregate, x: str | None, sequenced: bool, nullable: bool
          ) -> list[str]:
    """One aggregate's statements over the loaded field ``x``; its null test only where
    the schema lets the field be null."""
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
    elif sequenced:  # first / last by seq
        tests.append(f"({vi} is None or k {'<' if a.fn == 'first' else '>'} {oi})")
        then = f"{vi} = {x}; {oi} = k"
    elif a.fn == "first":  # by offset: the first value stays
        tests.append(f"{vi} is None")
    return [f"if {' and '.join(tests)}:", f"    {then}"] if tests else [then]


@cache
def compile_model(model: Model) -> CompiledModel:
    """The model compiled, once per process."""
    return CompiledModel(model)
