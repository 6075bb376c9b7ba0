"""A TTL on the families the job writes is refused at start, naming the shell command that
removes it: the job writes only the cells that change, so a TTL would expire cells written
once under a live session (docs/DESIGN.md, late writes). Set and removed with the real HBase
shell, as an operator would."""

from __future__ import annotations

import subprocess

import pytest

from leakproof.testing.generator import GeneratorSpec

from .helpers import ROOT, Env

pytestmark = pytest.mark.integration


def shell(command: str) -> None:
    out = subprocess.run([str(ROOT / "scripts" / "hbase-shell")], input=command + "\n",
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def test_a_sessions_family_ttl_set_with_alter_is_refused_then_removed_as_told(env: Env) -> None:
    spec = GeneratorSpec(seed=5005, events=600, sessions=60)
    env.produce(spec)
    env.run("--until-idle", "2")  # makes the tables
    table = f"{env.name}_web_sessions"
    shell(f"alter '{table}', {{NAME => 's', TTL => 40}}")
    refused = env.run("--until-idle", "2", check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr[-3000:]
    told = f"alter '{table}', {{NAME => 's', TTL => 'FOREVER'}}"
    assert told in refused.stderr, refused.stderr[-3000:]
    shell(told)
    env.run("--until-idle", "2")
    env.verify(spec)
