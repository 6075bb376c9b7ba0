"""The package's floors, from the ground up: which modules may import which.

A module's floor is its folder's, else the top level's (the pure core); a module imports
only from its own floor or those below (``tests/unit/test_layers.py`` checks every import,
``scripts/trip.py`` every call of a task at run time). Kept here, in the package, so both
read one table and a newcomer finds it beside the code.
"""

from __future__ import annotations

from pathlib import Path

FLOORS = ("core", "ports", "adapters", "task", "driver", "commands", "cli")
FOLDER_FLOOR = {"ports": "ports", "kafka": "adapters", "hbase": "adapters",
                "commit_stores": "adapters", "task": "task", "driver": "driver",
                "commands": "commands", "testing": "task"}
# top-level modules that are not pure: the Kerberos login (a KDC client), the entry
# points, and the unit tests' fakes (the real stores over a fake table)
MODULE_FLOOR = {"leakproof.kerberos": "adapters", "leakproof.cli": "cli",
                "leakproof.__main__": "cli"}


def floor(name: str) -> int:
    """The floor of module ``name`` (``leakproof.hbase.connection``), as an index of FLOORS."""
    folder = name.split(".")[1] if "." in name else ""
    return FLOORS.index(MODULE_FLOOR.get(name) or FOLDER_FLOOR.get(folder, "core"))


def modules(src: Path | None = None) -> dict[str, Path]:
    """Every module of the package (its dotted name -> its file), under ``src`` (default:
    where this package was imported from)."""
    root = src if src is not None else Path(__file__).resolve().parents[1]
    found = {}
    for path in (root / "leakproof").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found
