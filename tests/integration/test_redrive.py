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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml
from kafka import KafkaProducer

from leakproof.core import codec
from leakproof.core.config import Registry
from leakproof.core.dead_letter import ORIGIN_HEADER, origin_of
from leakproof.core.events import schema_json
from leakproof.kafka.registry import RegistryClient
from leakproof.testing.generator import GeneratorSpec, generate

from .helpers import KAFKA, Env, background, log_ends, records, run_cli, topic_records, wait_for
from .test_registry import REGISTRY, WEB_SCHEMA, framed_config
from .test_rekey import internal_records
from .test_topic_changes import recreate

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


def send_framed(env: Env, spec: GeneratorSpec, schema_id: int, keyed: bool = True) -> None:
    """``spec``'s events framed with ``schema_id``, each with a header of its own (not
    ``keyed``: under null keys, as a log shipper sends them)."""
    parsed = fastavro.parse_schema(schema_json())
    producer = KafkaProducer(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}", acks="all")
    try:
        for i, e in enumerate(generate(spec)):
            producer.send(env.name, key=codec.encode_key(e) if keyed else None,
                          value=codec.encode_confluent(e.to_record(), schema_id, parsed),
                          headers=[("trace", f"t-{spec.seed}-{i}".encode())])
        producer.flush()
    finally:
        producer.close()


def copies_by_origin(env: Env) -> Counter[str]:
    return Counter(name for rec in topic_records(env.name)
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
    by_origin = {origin_of([(k, v) for k, v in r.headers]): r for r in topic_records(env.name)}
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


def test_a_rekeyed_topics_dead_letters_are_redriven_through_the_stage_exactly(
        env: Env) -> None:
    """``input.rekey`` over null-keyed records: a late schema's records pass the stage under
    their own keys and are dead-lettered on the internal topic, each naming its source
    record. Once the schema is registered, the redrive sends each to its source partition
    (not to the internal topic, where its null key would leave it dead), the stage re-keys it
    under its session key and the job folds it: exact, each copied once."""
    data = yaml.safe_load(Path(config(env)).read_text())
    data["input"] = {"rekey": {"field": "session_id"}}
    path = env.tmp / "rekeyed.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    good = GeneratorSpec(seed=5111, events=2_000, sessions=200)
    late = GeneratorSpec(seed=5112, events=900, sessions=90)
    good_id = registry().register(f"{env.name}-value", json.dumps(schema_json()))
    send_framed(env, good, good_id, keyed=False)
    late_id = an_id_to_come(env)
    send_framed(env, late, late_id, keyed=False)
    env.run("--until-idle", "3", config=str(path))
    dead = listed(str(path), "--kind", "unknown_schema_id")
    assert len(dead) == records(late) and all(d["source"].startswith(f"{env.name}:")
                                              for d in dead)

    register_at(env, late_id)
    dry = run_cli("deadletters", "redrive", "--config", str(path), "--dry-run").stdout
    assert f"of {env.name}.leakproof-rekey to its source {env.name}" in dry
    done = cli_json("deadletters", "redrive", "--config", str(path), "--rate", "2000")
    assert (done["selected"], done["sent"], done["found"]) == (len(dead), len(dead), 0)
    assert cli_json("deadletters", "redrive", "--config", str(path))["selected"] == 0
    # the copies are on the source, one each, in the partition their records came from
    by_origin = {origin_of([(k, v) for k, v in r.headers]): r for r in topic_records(env.name)}
    assert set(copies_by_origin(env).values()) == {1} and len(copies_by_origin(env)) == len(dead)
    for d in dead:
        copy = by_origin[f"{env.name}.leakproof-rekey:{d['partition']}:{d['offset']}"]
        assert copy.key is None and f"{env.name}:{copy.partition}:" in d["source"]

    env.run("--until-idle", "3", config=str(path))
    copied = [source for _, _, source in internal_records(env)]
    assert len(copied) == len(set(copied)) == records(good, late) + len(dead)
    out = run_cli("verify", "--config", str(path), "--spec", good.as_arg(), "--spec",
                  late.as_arg(), check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr


@pytest.mark.faults
@pytest.mark.parametrize("kill", ["redrive_before_commit@3",
                                  pytest.param("redrive_after_commit@3", marks=pytest.mark.deep),
                                  pytest.param("sigkill", marks=pytest.mark.deep)])
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


# ----------------------------------------- a redrive repairs exactly: the two recipes

MODES = [pytest.param("id", True, id="id-seq"), pytest.param("id", False, id="id-plain"),
         pytest.param("gap", True, id="gap-seq"), pytest.param("gap", False, id="gap-plain")]


def modes(*deep: str, among: list[Any] = MODES) -> list[Any]:
    """``among``, the modes named marked ``deep``: ``make test`` takes their code paths in
    the others; ``make test-all`` runs them too."""
    return [pytest.param(*m.values, id=m.id, marks=pytest.mark.deep) if m.id in deep else m
            for m in among]


def recipe_config(env: Env, by: str, sequenced: bool, gap_s: int) -> str:
    """Registry-framed input read with the web schema, split by ``by``, with or without a
    sequence, sessions closing ``gap_s`` + 5 s after their last event, ``late: count``."""
    path = Path(framed_config(env, f"recipe-{by}-{sequenced}", schema=WEB_SCHEMA))
    data = yaml.safe_load(path.read_text())
    data["sessions"].update({"by": by, "inactivity_gap_s": gap_s, "grace_s": 5,
                             "late": "count"})
    if not sequenced:
        del data["events"]["sequence"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def web_schema_id(env: Env) -> int:
    """The id the registry gives the web schema (registered for the topic)."""
    return registry().register(f"{env.name}-value", json.dumps(schema_json()))


def send_with(env: Env, events: list[Any], schema_id: Callable[[int], int]) -> None:
    """``events`` in order, event ``i`` framed with ``schema_id(i)``."""
    parsed = fastavro.parse_schema(schema_json())
    producer = KafkaProducer(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}", acks="all")
    try:
        for i, e in enumerate(events):
            producer.send(env.name, key=codec.encode_key(e),
                          value=codec.encode_confluent(e.to_record(), schema_id(i), parsed))
        producer.flush()
    finally:
        producer.close()


def session_rows(env: Env, by: str) -> dict[str, list[dict[bytes, bytes]]]:
    """Each session key's rows (a visitor's, split by the gap: one per session)."""
    conn = env.hbase()
    try:
        out: dict[str, list[dict[bytes, bytes]]] = {}
        for key, cells in conn.table(env.cfg.hbase.sessions_table).scan(
                columns=[b"s:state", b"s:events"]):
            sid = key.decode().rsplit(":", 1)[0] if by == "gap" else key.decode()
            out.setdefault(sid, []).append(cells)
        return out
    finally:
        conn.close()


@pytest.mark.faults
@pytest.mark.parametrize(("by", "sequenced"), modes("id-seq", among=MODES[:3]))
def test_a_replay_that_decodes_what_the_crashed_batch_dead_lettered_leaves_nothing_to_redrive(
        env: Env, by: str, sequenced: bool) -> None:
    """A bad hour dead-lettered, the driver killed before that batch commits: a redrive then
    leaves its dead letters (in flight). The schema registered, the restart's replay decodes
    and folds them and withdraws their dead letters: the redrive finds none, and every
    session is exact (no event counted twice, none a duplicate)."""
    path = recipe_config(env, by, sequenced, 1_800)
    good = GeneratorSpec(seed=5211, events=1_500, sessions=150)
    late = GeneratorSpec(seed=5212, events=600, sessions=60)
    good_id = web_schema_id(env)
    send_with(env, generate(good), lambda _: good_id)
    env.run("--until-idle", "3", config=path)
    late_id = an_id_to_come(env)
    send_with(env, generate(late), lambda _: late_id)
    crashed = env.run("--until-idle", "3", config=path, check=False,
                      env={"LEAKPROOF_CRASH_AT": "driver_before_commit"})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    dead = listed(path)
    assert 0 < len(dead) <= records(late)
    held = cli_json("deadletters", "redrive", "--config", path, "--dry-run")
    assert (held["selected"], held.get("in_flight")) == (0, len(dead))

    register_at(env, late_id)  # the cause fixed; the job restarts and replays the batch
    env.run("--until-idle", "3", config=path)
    assert listed(path) == []  # withdrawn: the replay decoded every one of them
    done = cli_json("deadletters", "redrive", "--config", path)
    assert (done["selected"], done["sent"], done.get("in_flight")) == (0, 0, 0)
    assert copies_by_origin(env) == Counter()
    env.run("--until-idle", "3", config=path)
    out = run_cli("verify", "--config", path, "--spec", good.as_arg(), "--spec", late.as_arg(),
                  check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize(("by", "sequenced"), modes("id-seq", "gap-seq"))
def test_dead_letters_redriven_after_their_sessions_closed_repair_them_exactly(
        env: Env, by: str, sequenced: bool) -> None:
    """A bad hour in the middle of the visits: its records dead-lettered, and every visit
    closed by events hours later. The schema registered, the dead letters re-driven, the
    job run on: the copies fold into their closed sessions (``late: count`` notwithstanding):
    every visit holds each of its events once, and every session is exact. (Produced in
    order, none late or repeated, and never a think time past the gap: so each visit's
    event count is known without the oracle.)"""
    path = recipe_config(env, by, sequenced, 1_000)
    spec = GeneratorSpec(seed=5221, events=2_000, sessions=200, late_fraction=0.0,
                         duplicate_fraction=0.0)
    closer = GeneratorSpec(seed=5222, events=120, sessions=60, late_fraction=0.0,
                           duplicate_fraction=0.0, start_ts=spec.start_ts + 4 * 3_600_000)
    events = generate(spec)
    hour = (spec.start_ts + 100_000, spec.start_ts + 250_000)  # in the middle of the visits
    bad = {i for i, e in enumerate(events) if hour[0] <= e.ts < hour[1]}
    good_id = web_schema_id(env)
    late_id = an_id_to_come(env)
    send_with(env, events, lambda i: late_id if i in bad else good_id)
    send_with(env, generate(closer), lambda _: good_id)
    env.run("--until-idle", "3", config=path)
    dead = listed(path)
    assert len(dead) == len(bad) > 100
    short = {events[i].session_id for i in bad}
    now = session_rows(env, by)
    assert all(r[b"s:state"] == b"closed" for sid in short for r in now.get(sid, [])), \
        "the sessions closed before the redrive"

    register_at(env, late_id)
    done = cli_json("deadletters", "redrive", "--config", path)
    assert (done["selected"], done["sent"]) == (len(bad), len(bad))
    assert done.get("in_flight") == 0  # every batch committed: none held
    env.run("--until-idle", "3", config=path)
    held = Counter(e.session_id for e in [*events, *generate(closer)])
    rows = session_rows(env, by)
    assert {sid: sum(int(r[b"s:events"]) for r in rows.get(sid, [])) for sid in held} == held
    # the oracle (no seeds: these runs' fractions are not produce's)
    out = run_cli("verify", "--config", path, check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
    assert f"({len(bad)} re-driven)" in out.stdout


def test_a_recreated_topics_dead_letters_are_its_own_and_are_redriven(env: Env) -> None:
    """Dead letters re-driven, then the topic deleted and recreated (its offsets from 0
    again) and rewound: the new topic's bad records go under its incarnation tag, not into
    the old rows with their ``sent`` marks, and a redrive sends them. Every visit whole."""
    path = recipe_config(env, "id", True, 1_800)
    old = GeneratorSpec(seed=5231, events=300, sessions=30, late_fraction=0.0,
                        duplicate_fraction=0.0)
    new = GeneratorSpec(seed=5232, events=300, sessions=30, late_fraction=0.0,
                        duplicate_fraction=0.0)
    first_id = an_id_to_come(env)
    send_with(env, generate(old), lambda _: first_id)
    env.run("--until-idle", "3", config=path)
    register_at(env, first_id)
    assert cli_json("deadletters", "redrive", "--config", path)["sent"] == records(old)
    env.run("--until-idle", "3", config=path)

    recreate(env)
    second_id = an_id_to_come(env)
    send_with(env, generate(new), lambda _: second_id)  # the same offsets as the old ones
    run_cli("offsets", "rewind", "--config", path, "--to-offsets", "0=0,1=0,2=0,3=0")
    env.run("--until-idle", "3", config=path)
    dead = listed(path)
    assert len(dead) == records(new) and {d["state"] for d in dead} == {"waiting"}
    assert {d["topic"].partition("~")[0] for d in dead} == {env.name}
    assert all(d["topic"].startswith(f"{env.name}~") for d in dead)
    register_at(env, second_id)
    done = cli_json("deadletters", "redrive", "--config", path)
    assert (done["selected"], done["sent"]) == (records(new), records(new))
    assert set(copies_by_origin(env).values()) == {1}
    env.run("--until-idle", "3", config=path)
    held = Counter(e.session_id for spec in (old, new) for e in generate(spec))
    rows = session_rows(env, "id")
    assert {sid: sum(int(r[b"s:events"]) for r in rows.get(sid, [])) for sid in held} == held
