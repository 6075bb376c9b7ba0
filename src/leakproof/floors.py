"""The package's floors, from the ground up: which modules may import which.

A module's floor is its folder's (``core/`` and ``model/`` are the pure core, ``ports/``,
the adapters ``kafka/``, ``hbase/``, ``commit_stores/``, ``security/``, then ``task/``,
``driver/``, ``commands/``) or, for the few named in MODULE_FLOOR, its own; a module imports
only from its own floor or those below (``tests/unit/test_layers.py`` checks every import,
``testing.trip`` every call of a task). Kept here, in the package, so both read one table
and a newcomer finds it beside the code.
"""

from __future__ import annotations

from pathlib import Path

FLOORS = ("core", "ports", "adapters", "task", "driver", "commands", "cli")
FOLDER_FLOOR = {"core": "core", "model": "core", "examples": "core", "ports": "ports",
                "kafka": "adapters", "hbase": "adapters", "commit_stores": "adapters",
                "security": "adapters", "task": "task", "testing": "task", "driver": "driver",
                "commands": "commands"}
# modules whose floor is not their folder's: the test support the adapters and the task
# call (crash points) or the pure core could (the generator, the oracle), and the entry
# points at the top level; the package's face and this table belong to the core
MODULE_FLOOR = {"leakproof.testing": "core", "leakproof.testing.crashpoints": "core",
                "leakproof.testing.generator": "core", "leakproof.testing.oracle": "core",
                "leakproof.testing.vectors": "core",
                "leakproof": "core", "leakproof.floors": "core",
                "leakproof.cli": "cli", "leakproof.__main__": "cli"}


def floor(name: str) -> int:
    """The floor of module ``name`` (``leakproof.hbase.connection``), as an index of FLOORS."""
    if name in MODULE_FLOOR:
        return FLOORS.index(MODULE_FLOOR[name])
    folder = name.split(".")[1]
    if folder not in FOLDER_FLOOR:
        raise KeyError(f"{name}: a module outside every floor (add its folder to FOLDER_FLOOR)")
    return FLOORS.index(FOLDER_FLOOR[folder])


def modules(src: Path | None = None) -> dict[str, Path]:
    """Every module of the package (its dotted name -> its file), under ``src`` (default:
    where this package was imported from)."""
    root = src if src is not None else Path(__file__).resolve().parents[1]
    found = {}
    for path in (root / "leakproof").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found
