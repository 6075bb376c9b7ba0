"""Imports point one way: every module's imports (at the top or inside a function) reach
only its own floor or those below, and no two modules import each other, even through
others. The floors are the package's folders, in ``leakproof/floors.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from leakproof.floors import FLOORS, floor
from leakproof.floors import modules as package_modules

SRC = Path(__file__).resolve().parents[2] / "src"


def modules() -> dict[str, Path]:
    return package_modules(SRC)


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The leakproof modules ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                out.add(whole if whole in known else base)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m in known and m != name}


GRAPH = {name: imports(name, path, set(modules())) for name, path in modules().items()}


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_no_import_reaches_a_higher_floor(name: str) -> None:
    above = sorted(m for m in GRAPH[name] if floor(m) > floor(name))
    assert above == [], f"{name} ({FLOORS[floor(name)]}) imports " + ", ".join(
        f"{m} ({FLOORS[floor(m)]})" for m in above)


def test_no_circle_of_imports() -> None:
    done: set[str] = set()

    def walk(name: str, trail: tuple[str, ...]) -> None:
        if name in trail:
            raise AssertionError(" -> ".join((*trail[trail.index(name):], name)))
        if name in done:
            return
        for other in sorted(GRAPH[name]):
            walk(other, (*trail, name))
        done.add(name)

    for name in sorted(GRAPH):
        walk(name, ())


def test_the_pure_core_and_a_range_import_no_io_library() -> None:
    """The core and ``task.process`` run in tests with no network and no JVM."""
    pure = [n for n in GRAPH if floor(n) <= FLOORS.index("ports")] + ["leakproof.task.process",
                                                                       "leakproof.task.index"]
    for name in pure:
        tree = ast.parse(modules()[name].read_text("utf-8"))
        used = {(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
        assert not used & {"pyspark", "kafka", "happybase", "thriftpy2", "py4j"}, name


def test_every_floor_holds_a_module() -> None:
    assert {FLOORS[floor(n)] for n in GRAPH} == set(FLOORS)
