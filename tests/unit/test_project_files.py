"""docker-compose.yml gives Docker users the same topology and ports as config.yml."""

from __future__ import annotations

from pathlib import Path

import yaml

from leakproof.core import config

ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_and_ports_agree_with_config() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    cfg = config.load(ROOT / "config.yml")
    services = compose["services"]
    assert {"kafka", "hbase", "registry"} <= set(services)
    kafka_port = int(cfg.kafka.bootstrap_servers.rsplit(":", 1)[1])
    ports = {s: [str(p) for p in services[s].get("ports", [])] for s in services}
    assert any(p.endswith(f":{kafka_port}") for p in ports["kafka"])
    assert any(p.endswith(f":{cfg.hbase.port}") for p in ports["hbase"])
    assert all(p.startswith("127.0.0.1:") for ps in ports.values() for p in ps)
    assert any(p.startswith("127.0.0.1:8081:") for p in ports["registry"])
    env = services["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert f"127.0.0.1:{kafka_port}" in env["KAFKA_ADVERTISED_LISTENERS"]


def test_makefile_has_the_readme_commands() -> None:
    makefile = (ROOT / "Makefile").read_text()
    readme = (ROOT / "README.md").read_text()
    for target in ("run", "test", "stack-up", "stack-down", "stack-status", "help"):
        assert f"\n{target}:" in makefile
    assert "make run" in readme and "make test" in readme


def test_the_design_the_code_cites_is_in_the_repository() -> None:
    design = ROOT / "docs/DESIGN.md"
    assert design.is_file()
    for section in ("## Events (contract)", "## Offsets table (contract)",
                    "## Sessions table (contract)", "## Dead letters (contract)",
                    "## Where a run starts (contract", "## Exactly once"):
        assert section in design.read_text(), section
    cited = [(p, line) for p in (*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/**/*.py"))
             for line in p.read_text().splitlines()
             if "DESIGN.md" in line and "docs/DESIGN.md" not in line]
    assert not cited, cited  # every reference points at docs/DESIGN.md


def test_every_locked_requirement_is_pinned() -> None:
    """make venv installs with constraints.txt: CI and users get the versions CI tested."""
    pins = [line for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins and all("==" in line for line in pins), pins
    names = {line.split("==")[0].lower().replace("_", "-") for line in pins}
    for required in ("pyspark", "kafka-python", "happybase", "fastavro", "pyyaml", "pytest",
                     "pytest-xdist"):
        assert required in names, required
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()
