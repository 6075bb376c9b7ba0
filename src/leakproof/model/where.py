"""The ``where`` language of an aggregate (pure): parsed once, type-checked against the
schema, then turned into Python source that the compiled model builds its fold from.

Grammar (lowest precedence first)::

    expr    := and ('or' and)*
    and     := not ('and' not)*
    not     := 'not' not | test
    test    := primary (OP primary | 'in' list | 'not' 'in' list)?
    primary := '(' expr ')' | FIELD | STRING | NUMBER | 'true' | 'false' | 'null'
    list    := '[' (literal (',' literal)*)? ']'
    OP      := '==' | '!=' | '<' | '<=' | '>' | '>='

Nulls: a comparison, ``in`` or ``not in`` whose field is null is false, except ``== null``
and ``!= null``, which test for it; ``not`` negates what that gives. The generated source
holds field names and literals only through ``repr``, so no text of the user's is run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from leakproof.model.schema import Field

Literal_ = str | int | float | bool | None


class WhereError(ValueError):
    """A ``where`` that cannot be used; ``pos`` is the 1-based column it is about."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} (at column {pos})")
        self.pos = pos


@dataclass(frozen=True)
class Node:
    op: str  # field, lit, cmp, in, not_in, and, or, not
    pos: int
    args: tuple[Any, ...]


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,)
""", re.VERBOSE)
_KEYWORDS = {"and", "or", "not", "in", "true", "false", "null"}
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


def _tokens(text: str) -> list[tuple[str, Any, int]]:
    out: list[tuple[str, Any, int]] = []
    i = 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            raise WhereError(f"unexpected {text[i]!r}", i + 1)
        kind, raw = m.lastgroup, m.group()
        if kind == "num":
            out.append(("lit", float(raw) if any(c in raw for c in ".eE") else int(raw), i + 1))
        elif kind == "str":
            body = re.sub(r"\\(.)", lambda e: _ESCAPES.get(e.group(1), e.group(1)), raw[1:-1])
            out.append(("lit", body, i + 1))
        elif kind == "name":
            if raw in ("true", "false", "null"):
                out.append(("lit", {"true": True, "false": False, "null": None}[raw], i + 1))
            else:
                out.append(("kw" if raw in _KEYWORDS else "field", raw, i + 1))
        elif kind == "op":
            out.append(("op", raw, i + 1))
        i = m.end()
    out.append(("end", None, len(text) + 1))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, Any, int]:
        return self.toks[self.i]

    def take(self, kind: str, value: Any = None) -> bool:
        k, v, _ = self.peek()
        if k == kind and (value is None or v == value):
            self.i += 1
            return True
        return False

    def expect(self, kind: str, value: Any, what: str) -> None:
        if not self.take(kind, value):
            raise WhereError(f"expected {what}, found {_show(self.peek())}", self.peek()[2])

    def expr(self) -> Node:
        node = self.conj()
        while (pos := self.peek()[2]) and self.take("kw", "or"):
            node = Node("or", pos, (node, self.conj()))
        return node

    def conj(self) -> Node:
        node = self.neg()
        while (pos := self.peek()[2]) and self.take("kw", "and"):
            node = Node("and", pos, (node, self.neg()))
        return node

    def neg(self) -> Node:
        pos = self.peek()[2]
        if self.take("kw", "not"):
            return Node("not", pos, (self.neg(),))
        return self.test()

    def test(self) -> Node:
        left = self.primary()
        kind, value, pos = self.peek()
        if kind == "op" and value in ("==", "!=", "<", "<=", ">", ">="):
            self.i += 1
            return Node("cmp", pos, (value, left, self.primary()))
        if self.take("kw", "in"):
            return Node("in", pos, (left, self.items()))
        if kind == "kw" and value == "not" and self.toks[self.i + 1][1] == "in":
            self.i += 2
            return Node("not_in", pos, (left, self.items()))
        return left

    def primary(self) -> Node:
        kind, value, pos = self.peek()
        if self.take("op", "("):
            node = self.expr()
            self.expect("op", ")", "')'")
            return node
        if kind in ("field", "lit"):
            self.i += 1
            return Node(kind, pos, (value,))
        raise WhereError(f"expected a field, a literal or '(', found {_show(self.peek())}", pos)

    def items(self) -> tuple[Literal_, ...]:
        self.expect("op", "[", "'[' after in")
        values: list[Literal_] = []
        if not self.take("op", "]"):
            while True:
                kind, value, pos = self.peek()
                if kind != "lit":
                    raise WhereError(f"a list holds literals only, found {_show(self.peek())}",
                                     pos)
                self.i += 1
                values.append(value)
                if self.take("op", "]"):
                    break
                self.expect("op", ",", "',' or ']'")
        return tuple(values)


def _show(tok: tuple[str, Any, int]) -> str:
    kind, value, _ = tok
    return "the end" if kind == "end" else repr(value)


def parse(text: str) -> Node:
    """The expression's tree; WhereError naming the column of the first problem."""
    p = _Parser(text)
    node = p.expr()
    if p.peek()[0] != "end":
        raise WhereError(f"unexpected {_show(p.peek())}", p.peek()[2])
    return node


# ------------------------------------------------------------------------- type check

def _lit_kind(v: Literal_) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return "string"


def _operand_kind(node: Node, fields: dict[str, Field]) -> str:
    if node.op == "field":
        name = node.args[0]
        f = fields.get(name)
        if f is None:
            raise WhereError(f"unknown field {name!r}; the schema has "
                             f"{', '.join(sorted(fields))}", node.pos)
        if f.kind in ("int", "float"):
            return "number"
        if f.kind in ("string", "boolean"):
            return f.kind
        raise WhereError(f"field {name!r} is {f.avro}: where compares strings, numbers and "
                         f"booleans only", node.pos)
    if node.op == "lit":
        return _lit_kind(node.args[0])
    return "boolean-expr"


def check(node: Node, fields: dict[str, Field]) -> None:
    """WhereError for an unknown field or a comparison of incompatible types."""
    if node.op in ("and", "or", "not"):
        for a in node.args:
            check(a, fields)
        return
    if node.op == "cmp":
        op, a, b = node.args
        ka, kb = _operand_kind(a, fields), _operand_kind(b, fields)
        if "boolean-expr" in (ka, kb):
            raise WhereError("compare fields and literals, not conditions", node.pos)
        if "null" in (ka, kb):
            if op not in ("==", "!="):
                raise WhereError(f"null can only be tested with == or !=, not {op}", node.pos)
            return
        if ka != kb:
            raise WhereError(f"cannot compare {ka} with {kb}", node.pos)
        if ka == "boolean" and op not in ("==", "!="):
            raise WhereError(f"booleans compare with == or != only, not {op}", node.pos)
        return
    if node.op in ("in", "not_in"):
        left, values = node.args
        k = _operand_kind(left, fields)
        if k == "boolean-expr":
            raise WhereError("'in' tests a field or a literal, not a condition", node.pos)
        for v in values:
            if _lit_kind(v) not in (k, "null"):
                raise WhereError(f"cannot test {k} in a list holding {v!r}", node.pos)
        return
    k = _operand_kind(node, fields)  # a bare operand must be a boolean
    if k != "boolean":
        raise WhereError(f"a condition must be a comparison or a boolean, found {k} "
                         f"{node.args[0]!r}", node.pos)


def fields_used(node: Node) -> set[str]:
    if node.op == "field":
        return {node.args[0]}
    return set().union(*(fields_used(a) for a in node.args if isinstance(a, Node)))


# ------------------------------------------------------------------------- to Python

def to_python(node: Node, nullable: frozenset[str] | set[str], record: str = "r") -> str:
    """Python expression text for a checked tree, over the record dict named ``record``;
    ``nullable`` names the fields that may be null (only those get null guards)."""
    def operand(n: Node) -> str:
        if n.op == "field":
            return f"{record}[{n.args[0]!r}]"
        return repr(n.args[0])

    def may_be_null(n: Node) -> bool:
        return n.op == "field" and n.args[0] in nullable

    def sub(n: Node) -> str:
        return to_python(n, nullable, record)

    if node.op == "and":
        return f"({sub(node.args[0])} and {sub(node.args[1])})"
    if node.op == "or":
        return f"({sub(node.args[0])} or {sub(node.args[1])})"
    if node.op == "not":
        return f"(not {sub(node.args[0])})"
    if node.op == "cmp":
        op, a, b = node.args
        if (a.op == "lit" and a.args[0] is None) or (b.op == "lit" and b.args[0] is None):
            other = b if a.op == "lit" and a.args[0] is None else a
            return f"({operand(other)} {'is' if op == '==' else 'is not'} None)"
        # None == x is already false; every other operator needs its guard
        guards = [] if op == "==" else [f"{operand(x)} is not None" for x in (a, b)
                                        if may_be_null(x)]
        test = f"{operand(a)} {op} {operand(b)}"
        return f"({' and '.join([*guards, test])})"
    if node.op in ("in", "not_in"):
        left, values = node.args
        negated = node.op == "not_in"
        test = f"{operand(left)} {'not in' if negated else 'in'} {tuple(values)!r}"
        if may_be_null(left) and None not in values:
            return f"({operand(left)} is not None and {test})"
        return f"({test})"
    if node.op == "field":
        return f"({operand(node)} is True)"
    return repr(bool(node.args[0]))
