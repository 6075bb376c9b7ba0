"""Dead letters re-driven on the real stack: records framed with a schema id the registry
(the stack's Apicurio) does not know yet are dead-lettered; the schema is registered under
that id; ``deadletters redrive`` sends them back, each once -- also when the redrive is
SIGKILLed half way and run again -- and the job folds them: every session exact against the
oracle. A record still bad comes back as a new dead letter linked to its original."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer

from leakproof import codec
from leakproof.config import Registry
from leakproof.dead_letter import ORIGIN_HEADER, origin_of
from leakproof.events import schema_json
from leakproof.generator import GeneratorSpec, generate
from leakproof.kafka.registry import RegistryClient

from .helpers import KAFKA, Env, background, log_ends, records, run_cli, wait_for
from .test_registry import REGISTRY, WEB_SCHEMA, framed_config

# every test here takes registry ids it predicts: one at a time (see ``register_at``)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("registry-ids")]
NEVER = 2_000_000_000  # a schema id no test registers: its records stay bad
AHEAD = 50  # how far past the registry's newest id the late schema's id is taken


def registry() -> RegistryClient:
    return RegistryClient(Registry(REGISTRY))


def unique_schema(label: str) -> str:
    """A schema content no one registered before (the registry numbers each new content)."""
    return json.dumps({"type": "record", "name": "Pad", "namespace": "leakproof.test",
                       "fields": [{"name": f"f{uuid.uuid4().hex}", "type": "string"}],
                       "doc": label})


def an_id_to_come(env: Env) -> int:
    """An id the registry will give a new schema soon, but has not given yet."""
    return registry().register(f"{env.name}-pad-value", unique_schema("probe")) + AHEAD


def register_at(env: Env, want: int) -> None:
    """Register the web schema (a content of its own) so that the registry gives it id
    ``want``: Apicurio numbers new contents in order and takes no id from the caller, so
    throwaway contents are registered up to the one before it. Another registration landing
    in between would take the id: this fails then, saying so."""
    client = registry()
    got = 0
    while got < want - 1:
        got = client.register(f"{env.name}-pad-value", unique_schema("pad"))
        assert got < want, f"the registry gave id {got}, past {want}: registrations raced"
    late = {**schema_json(), "doc": f"registered late ({uuid.uuid4().hex})"}
    got = client.register(f"{env.name}-late-value", json.dumps(late))
    assert got == want, f"the late schema got id {got}, not {want}: a registration raced"
    for permanent in ("", "?permanent=true"):  # the throwaways go (their ids are not reused)
        urllib.request.urlopen(urllib.request.Request(
            f"{REGISTRY}/subjects/{env.name}-pad-value{permanent}", method="DELETE"),
            timeout=30).close()


def config(env: Env) -> str:
    """Registry-framed input read with the web schema; sessions that never close, so every
    re-driven event reaches its session (none is late)."""
    path = Path(framed_config(env, "framed", schema=WEB_SCHEMA))
    data = yaml.safe_load(path.read_text())
    data["sessions"]["inactivity_gap_s"] = 30 * 86_400
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def send_framed(env: Env, spec: GeneratorSpec, schema_id: int) -> None:
    """``spec``'s events framed with ``schema_id``, each with a header of its own."""
    parsed = fastavro.parse_schema(schema_json())
    producer = KafkaProducer(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}", acks="all")
    try:
        for i, e in enumerate(generate(spec)):
            producer.send(env.name, key=codec.encode_key(e),
                          value=codec.encode_confluent(e.to_record(), schema_id, parsed),
                          headers=[("trace", f"t-{spec.seed}-{i}".encode())])
        producer.flush()
    finally:
        producer.close()


def topic_records(env: Env) -> list[Any]:
    """Every committed record of the topic (read_committed)."""
    consumer = KafkaConsumer(env.name, bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}",
                             group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, isolation_level="read_committed")
    try:
        return list(consumer)
    finally:
        consumer.close()


def copies_by_origin(env: Env) -> Counter[str]:
    return Counter(name for rec in topic_records(env)
                   if (name := origin_of([(k, v) for k, v in rec.headers])) is not None)


def cli_json(*args: str, check: bool = True) -> dict[str, Any]:
    out = run_cli(*args, check=check)
    found: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return found


def listed(path: str, *args: str) -> list[dict[str, Any]]:
    out = run_cli("deadletters", "list", "--config", path, "--json", "--limit", "0", *args)
    return [json.loads(line) for line in out.stdout.splitlines()][:-1]


def dead_lettered(env: Env, path: str) -> tuple[GeneratorSpec, GeneratorSpec, int]:
    """Good events, then events framed with an id still to come; the job run over them.
    Returns the two specs and the late id."""
    good = GeneratorSpec(seed=5101, events=3_000, sessions=300)
    late = GeneratorSpec(seed=5102, events=1_200, sessions=120)
    run_cli("produce", "--config", path, "--format", "confluent", "--events", "3000",
            "--sessions", "300", "--seed", "5101")
    late_id = an_id_to_come(env)
    send_framed(env, late, late_id)
    env.run("--until-idle", "3", config=path)
    return good, late, late_id


def test_dead_letters_of_a_late_schema_are_redriven_once_and_every_session_is_exact(
        env: Env) -> None:
    path = config(env)
    good, late, late_id = dead_lettered(env, path)
    never = GeneratorSpec(seed=5103, events=3, sessions=1)
    send_framed(env, never, NEVER)  # still bad after the redrive
    env.run("--until-idle", "3", config=path)  # the job read them too: dead letters
    dead = listed(path, "--kind", "unknown_schema_id")
    assert len(dead) == records(late) + records(never)
    assert {d["state"] for d in dead} == {"waiting"} and all(d["timestamp_ms"] for d in dead)
    first = dead[0]
    shown = run_cli("deadletters", "show", "--config", path,
                    f"{first['partition']}:{first['offset']}").stdout
    assert "unknown_schema_id (ValueDecodeError)" in shown and "is not in the registry" in shown
    assert "header        trace: " in shown and "value" in shown
    raw = cli_json("deadletters", "show", "--config", path, "--json",
                   f"{first['partition']}:{first['offset']}")
    assert bytes.fromhex(raw["value"])[:5] in (b"\x00" + late_id.to_bytes(4, "big"),
                                               b"\x00" + NEVER.to_bytes(4, "big"))

    register_at(env, late_id)  # the cause fixed
    ends = log_ends(env)
    dry = run_cli("deadletters", "redrive", "--config", path, "--dry-run")
    summary = json.loads(dry.stdout.splitlines()[-1])
    assert summary["dry_run"] and summary["selected"] == len(dead) and summary["sent"] == 0
    assert "would re-drive" in dry.stdout
    assert log_ends(env) == ends and {d["state"] for d in listed(path)} == {"waiting"}

    done = cli_json("deadletters", "redrive", "--config", path, "--kind", "unknown_schema_id",
                    "--rate", "2000")
    assert (done["selected"], done["sent"], done["found"]) == (len(dead), len(dead), 0)
    assert set(copies_by_origin(env).values()) == {1}
    assert len(copies_by_origin(env)) == len(dead)
    again = cli_json("deadletters", "redrive", "--config", path)
    assert (again["selected"], again["sent"]) == (0, 0)  # each went once: none goes again

    env.run("--until-idle", "3", config=path)
    # the three still bad are no events: the seeds of the topic's events are the other two
    out = run_cli("verify", "--config", path, "--spec", good.as_arg(), "--spec", late.as_arg(),
                  check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
    assert f"({len(dead)} re-driven)" in out.stdout
    # the copies kept their headers, gained their origin, and carry the same bytes
    by_origin = {origin_of([(k, v) for k, v in r.headers]): r for r in topic_records(env)}
    copy = by_origin[f"{env.name}:{first['partition']}:{first['offset']}"]
    assert [k for k, _ in copy.headers] == ["trace", ORIGIN_HEADER]
    assert copy.value == bytes.fromhex(raw["value"]) and copy.key == bytes.fromhex(raw["key"])
    # the records still bad came back as dead letters, each linked to its original
    again_dead = [d for d in listed(path) if d["redriven_from"]]
    assert len(again_dead) == records(never)
    sent = {f"{env.name}:{d['partition']}:{d['offset']}" for d in listed(path, "--state", "sent")}
    assert {d["redriven_from"] for d in again_dead} <= sent
    linked = again_dead[0]
    assert f"redriven from {linked['redriven_from']}" in run_cli(
        "deadletters", "show", "--config", path,
        f"{linked['partition']}:{linked['offset']}").stdout


@pytest.mark.faults
@pytest.mark.parametrize("kill", ["redrive_before_commit@3", "redrive_after_commit@3", "sigkill"])
def test_a_redrive_killed_half_way_and_run_again_sends_each_record_once(
        env: Env, kill: str) -> None:
    path = config(env)
    good, late, late_id = dead_lettered(env, path)
    register_at(env, late_id)
    cmd = [sys.executable, "-m", "leakproof.cli", "deadletters", "redrive", "--config", path,
           "--rate", "200"]  # a transaction a second, 200 records each
    crash = {} if kill == "sigkill" else {"LEAKPROOF_CRASH_AT": kill}
    with background(cmd, env.tmp / "redrive.log", crash) as first:
        if kill == "sigkill":  # killed from outside once it has sent some
            wait_for("a first chunk sent", lambda: " 0 sent" not in first.text()
                     and "sent," in first.text(), timeout=120)
            time.sleep(0.4)
            os.kill(first.pid, signal.SIGKILL)
        rc = first.wait(timeout=120)
    assert rc == -signal.SIGKILL, first.text()[-3000:]
    partial = copies_by_origin(env)
    assert 0 < len(partial) < records(late) and set(partial.values()) == {1}
    done = cli_json("deadletters", "redrive", "--config", path, "--rate", "2000")
    if kill == "redrive_after_commit@3":
        assert done["found"] > 0  # committed before the kill, not marked: found, not sent
    if kill == "redrive_before_commit@3":
        assert done["found"] == 0  # its transaction was aborted by the next one's fence
    assert done["sent"] + len(partial) == records(late)  # the rest, once
    assert set(copies_by_origin(env).values()) == {1}
    assert len(copies_by_origin(env)) == records(late)
    env.run("--until-idle", "3", config=path)
    out = run_cli("verify", "--config", path, "--spec", good.as_arg(), "--spec", late.as_arg(),
                  check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
