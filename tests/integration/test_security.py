"""Security settings pass through to every Kafka client; secrets never reach logs or errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from leakproof.config import load
from leakproof.generator import GeneratorSpec
from leakproof.kafka import reader
from leakproof.offsets import OffsetRange
from leakproof.produce import producer_settings

from .conftest import Env, write_config

pytestmark = pytest.mark.integration

CANARY = "canary-Zx81-do-not-log"
SECURITY = {"security_protocol": "PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "leakproof", "sasl_plain_password": CANARY}


def test_consumer_settings_reach_every_client(env: Env) -> None:
    path = env.tmp / "secure.yml"
    cfg = write_config(path, env.name, kafka={"consumer": SECURITY})
    assert producer_settings(cfg.kafka)["sasl_plain_password"] == CANARY
    list(reader.read_range(cfg.kafka, OffsetRange(env.name, 0, 0, 0)))  # empty: no consumer
    consumer = reader._consumer(cfg.kafka, env.name, 0)
    try:
        for key, value in SECURITY.items():
            assert consumer.config[key] == value
        assert consumer.config["group_id"] is None
        assert consumer.config["enable_auto_commit"] is False
    finally:
        reader.drop_consumer(cfg.kafka, env.name, 0)


def test_canary_password_never_appears_in_output(env: Env) -> None:
    path = env.tmp / "secure.yml"
    write_config(path, env.name, kafka={"consumer": SECURITY})
    spec = GeneratorSpec(seed=1200, events=4_000, sessions=400)
    env.produce(spec)
    ok = env.run_config(str(path), "--until-idle", "3")
    assert "batch " in ok.stderr
    # a failing start (no such topic) prints an error: still no secret
    missing = env.tmp / "missing.yml"
    write_config(missing, env.name, kafka={"consumer": SECURITY, "topic": "no-such-topic-x"})
    failed = env.run_config(str(missing), check=False)
    assert failed.returncode == 1 and "no-such-topic-x" in failed.stderr
    shown = subprocess.run([sys.executable, "-c", "import sys; from leakproof.config import "
                            "load; print(load(sys.argv[1]))", str(path)],
                           capture_output=True, text=True, check=True)
    for text in (ok.stdout, ok.stderr, failed.stdout, failed.stderr, shown.stdout,
                 repr(load(path))):
        assert CANARY not in text
    env.verify(spec)
