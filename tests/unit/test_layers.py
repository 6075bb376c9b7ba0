"""Imports point one way: what an executor loads never reaches the CLI or the driver."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_by(module: str) -> set[str]:
    code = (f"import sys, json, {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('leakproof'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(json.loads(out.stdout))


def test_the_executor_side_loads_no_cli_or_driver_module() -> None:
    loaded = loaded_by("leakproof.task.worker")
    above = {m for m in loaded if m.startswith(("leakproof.cli", "leakproof.produce",
                                                 "leakproof.driver.", "leakproof.rewind",
                                                 "leakproof.verify", "leakproof.lag",
                                                 "leakproof.stop", "leakproof.generator"))}
    assert above == set()


def test_process_range_needs_no_adapter() -> None:
    loaded = loaded_by("leakproof.task.process")
    assert {m for m in loaded if m.startswith(("leakproof.hbase", "leakproof.kafka"))} == set()
