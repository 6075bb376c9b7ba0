"""Registry-framed Avro against the real schema registry of the local stack (Apicurio, its
Confluent-compatible API): two schema versions on one topic, bad framing dead-lettered, a
registry that hangs or is gone while the job starts (behind a ``TcpGate``, so the tests
beside it keep theirs), and refused credentials."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml

from leakproof.commands.produce import send_raw
from leakproof.core import codec
from leakproof.core.config import Registry
from leakproof.core.events import schema_json
from leakproof.kafka.registry import RegistryClient
from leakproof.testing.generator import GeneratorSpec, generate

from .helpers import ROOT, Env, assert_offsets_chain, run_cli, wait_for
from .tcp_gate import TcpGate

pytestmark = pytest.mark.integration
REGISTRY = "http://127.0.0.1:8081/apis/ccompat/v7"
REGISTRY_ADDR = ("127.0.0.1", 8081)
WEB_SCHEMA = str(ROOT / "src" / "leakproof" / "schemas" / "web_event.avsc")
V2 = copy.deepcopy(schema_json())
V2["fields"].append({"name": "country", "type": "string", "default": "??"})


def framed_config(env: Env, label: str, registry: dict[str, Any] | None = None,
                  schema: str | None = None) -> str:
    """Without ``schema`` the reader is the registry's latest for the topic, as a user who
    names no schema file gets."""
    data = yaml.safe_load(env.path.read_text())
    data["events"] = {"format": "confluent", "session_key": "session_id", "event_time": "ts",
                      "sequence": "seq", "registry": registry or {"url": REGISTRY}}
    if schema is not None:
        data["events"]["schema"] = schema
    web = yaml.safe_load((ROOT / "config.yml").read_text())
    data["aggregates"] = web["aggregates"]
    path = env.tmp / f"{label}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def produce_v2(env: Env, spec: GeneratorSpec) -> None:
    """``spec``'s events written by a producer whose schema gained a field (v2)."""
    client = RegistryClient(Registry(REGISTRY))
    schema_id = client.register(f"{env.name}-value", json.dumps(V2))
    parsed = fastavro.parse_schema(V2)
    send_raw(env.cfg.kafka, env.name, [
        (codec.encode_key(e), codec.encode_confluent({**e.to_record(), "country": "NL"},
                                                     schema_id, parsed))
        for e in generate(spec)])


def dead_letters(env: Env) -> dict[str, dict[bytes, bytes]]:
    conn = env.hbase()
    try:
        return {k.decode(): c for k, c in conn.table("web_events_dead_letter").scan(
            row_prefix=f"{env.name}:".encode())}
    finally:
        conn.close()


def test_two_schema_versions_decode_and_bad_framing_is_dead_lettered(env: Env) -> None:
    config = framed_config(env, "framed")
    v1 = GeneratorSpec(seed=2801, events=6_000, sessions=600)
    v2 = GeneratorSpec(seed=2802, events=6_000, sessions=600)
    good = codec.encode_value(generate(v1)[0])
    bad = [(b"x", b"\x00" + (987_654).to_bytes(4, "big") + good),  # an id nobody registered
           (b"x", b"\x07" + bytes(4) + good),  # not the Confluent magic byte
           (b"x", good)]  # bare Avro on a framed topic: its first byte is not 0
    send_raw(env.cfg.kafka, env.name, bad, partition=3)  # offsets 0-2 of partition 3
    run_cli("produce", "--config", config, "--format", "confluent", "--events", "6000",
            "--sessions", "600", "--seed", "2801")
    produce_v2(env, v2)
    out = run_cli("run", "--config", config, "--until-idle", "4")
    assert out.returncode == 0
    # no events.schema: the reader is the subject's latest, v2; v1's records resolve to it
    assert f"{env.name}-value (the registry's latest at start)" in \
        run_cli("model", "check", "--config", config).stdout
    verify = run_cli("verify", "--config", config, "--spec", v1.as_arg(), "--spec",
                     v2.as_arg(), check=False)
    assert "EXACT MATCH" in verify.stdout, verify.stdout + verify.stderr
    dead = dead_letters(env)
    assert sorted(dead) == [f"{env.name}:3:{o:020d}" for o in range(3)]
    kinds = [dead[k][b"d:kind"] for k in sorted(dead)]
    assert kinds[:2] == [b"unknown_schema_id", b"unknown_magic"], kinds
    assert b"987654" in dead[sorted(dead)[0]][b"d:error"]
    assert_offsets_chain(env)


@contextmanager
def registry_gate() -> Iterator[tuple[TcpGate, str]]:
    """A gate in front of the stack's registry, and the registry's URL through it: a test
    takes the registry away from its own job only (the tests beside it keep theirs)."""
    gate = TcpGate(REGISTRY_ADDR)
    try:
        yield gate, REGISTRY.replace(f":{REGISTRY_ADDR[1]}/", f":{gate.port}/")
    finally:
        gate.close()


def test_a_registry_down_when_the_job_starts_is_waited_for_and_nothing_is_dead_lettered(
        env: Env) -> None:
    """The registry hangs (it takes connections and never answers, as a process stopped
    with SIGSTOP or stuck in a long GC does) while the job starts, then answers again."""
    with registry_gate() as (gate, url):
        config = framed_config(env, "outage", {"url": url, "timeout_s": 2,
                                               "outage_tolerance_s": 120}, WEB_SCHEMA)
        spec = GeneratorSpec(seed=2803, events=4_000, sessions=400)
        run_cli("produce", "--config", config, "--format", "confluent", "--events", "4000",
                "--sessions", "400", "--seed", "2803")
        with env.background("--until-idle", "6", config=config, name="outage") as job:
            gate.hang()
            # the job starts, plans, and its ranges wait for the registry
            wait_for("the ranges waiting for the registry", lambda: job.poll() is not None or (
                "schema registry" in job.text() and "retry" in job.text()), timeout=300)
            assert job.poll() is None, job.text()[-3000:]
            gate.open()
            assert job.wait(timeout=240) == 0, job.text()[-6000:]
            text = job.text()
        verify = run_cli("verify", "--config", config, "--spec", spec.as_arg(), check=False)
    assert "schema registry" in text and "retry" in text  # it said it was waiting
    assert "EXACT MATCH" in verify.stdout, verify.stdout + verify.stderr
    assert dead_letters(env) == {}


def test_a_registry_stopped_before_the_job_starts_is_waited_for_and_nothing_is_dead_lettered(
        env: Env) -> None:
    """The registry gone (connections refused) before the job starts, and back while its
    ranges wait."""
    with registry_gate() as (gate, url):
        config = framed_config(env, "stopped", {"url": url, "timeout_s": 2,
                                                "outage_tolerance_s": 180}, WEB_SCHEMA)
        v1, v2 = GeneratorSpec(seed=2811, events=2_000, sessions=200), \
            GeneratorSpec(seed=2812, events=2_000, sessions=200)
        run_cli("produce", "--config", config, "--format", "confluent", "--events", "2000",
                "--sessions", "200", "--seed", "2811")
        produce_v2(env, v2)
        gate.refuse()
        with env.background("--until-idle", "6", config=config, name="stopped") as job:
            # it starts, plans, and its ranges retry the refused registry
            wait_for("the ranges retrying the registry", lambda: job.poll() is not None or (
                "schema registry" in job.text() and "Connection refused" in job.text()),
                timeout=300)
            assert job.poll() is None, job.text()[-3000:]
            gate.open()
            assert job.wait(timeout=300) == 0, job.text()[-6000:]
            text = job.text()
        verify = run_cli("verify", "--config", config, "--spec", v1.as_arg(), "--spec",
                         v2.as_arg(), check=False)
    assert "schema registry" in text and "Connection refused" in text
    assert "EXACT MATCH" in verify.stdout, verify.stdout + verify.stderr
    assert dead_letters(env) == {}


class _Refusing(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="registry"')
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_refused_registry_credentials_stop_the_job_at_start(env: Env, tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/apis/ccompat/v7"
        config = framed_config(env, "refused", {"url": url, "username": "svc-leakproof",
                                                "password": "wrong-Pw-7731"})
        out = run_cli("run", "--config", config, "--until-idle", "2", check=False)
    finally:
        server.shutdown()
    assert out.returncode == 1
    assert "refused the credentials" in out.stderr and url.split("/apis")[0] in out.stderr
    assert "wrong-Pw-7731" not in out.stdout + out.stderr


def test_a_writer_that_removed_a_field_the_reader_needs_stops_the_job_naming_it(
        env: Env) -> None:
    """A producer whose schema lost a field (the registry's BACKWARD rule allows it, and the
    reader here has no default for it): the job stops, exit 1, naming the writer's id, the
    subject and the field, instead of dead-lettering every record of it; none is."""
    config = framed_config(env, "fixed", schema=WEB_SCHEMA)  # the reader: web_event.avsc
    fewer = copy.deepcopy(schema_json())
    fewer["fields"] = [f for f in fewer["fields"] if f["name"] != "status"]
    schema_id = RegistryClient(Registry(REGISTRY)).register(f"{env.name}-value",
                                                            json.dumps(fewer))
    parsed = fastavro.parse_schema(fewer)
    events = generate(GeneratorSpec(seed=2810, events=200, sessions=20))
    send_raw(env.cfg.kafka, env.name, [
        (codec.encode_key(e), codec.encode_confluent(
            {k: v for k, v in e.to_record().items() if k != "status"}, schema_id, parsed))
        for e in events])
    out = run_cli("run", "--config", config, "--until-idle", "4", check=False)
    assert out.returncode == 1, out.stderr[-3000:]
    assert f"schema id {schema_id} (subject {env.name}-value) has no field status" in \
        out.stderr, out.stderr[-3000:]
    assert dead_letters(env) == {}
