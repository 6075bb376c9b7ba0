"""Changes under a long-running job that are not crashes -- a compacted or recreated topic,
partitions added, the gap changed, a second job on the same tables, a fast clock -- each
either exact against the oracle or refused at start with a message that names the way out."""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from importlib import resources

import pytest
import yaml
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions

from leakproof.commands.produce import send_events
from leakproof.core import codec, config
from leakproof.core.errors import OffsetError
from leakproof.core.events import WebEvent
from leakproof.core.moved_keys import home, placed
from leakproof.driver.job import Job
from leakproof.kafka.admin import create_topic
from leakproof.testing.generator import GeneratorSpec

from .helpers import KAFKA, Env, offsets_rows, run_cli, session_rows, wait_for

pytestmark = pytest.mark.integration


def set_topic_config(topic: str, **settings: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}")
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={k.replace("_", "."): v
                                                     for k, v in settings.items()})])
    finally:
        admin.close()


def test_a_compacted_source_topic_is_refused_unless_its_loss_is_accepted(env: Env) -> None:
    set_topic_config(env.name, cleanup_policy="compact,delete")
    with pytest.raises(OffsetError, match=r"cleanup\.policy=compact,delete.*"
                                          r"kafka\.on_compacted_topic: accept"):
        Job(env.cfg).prepare()
    accepted = config.load(env.variant("accept", kafka={"on_compacted_topic": "accept"}))
    assert Job(accepted).prepare() == {0: 0, 1: 0, 2: 0, 3: 0}


T0 = 1_767_225_600_000  # 2026-01-01, as the generator's events


def ids_in(partition: int, count: int, partitions: int = 4, prefix: str = "s") -> list[str]:
    """Session ids Kafka's default partitioner puts in ``partition``."""
    found = []
    for i in range(100_000):
        sid = f"{prefix}{i}"
        if placed(sid.encode(), partition, partitions):
            found.append(sid)
            if len(found) == count:
                return found
    raise AssertionError("no such ids")


def event(sid: str, seq: int, ts: int) -> WebEvent:
    return WebEvent(sid, f"u-{sid}", seq, ts, "pageview", f"/{sid}/{seq}", 200, 100)


def test_a_gap_changed_between_runs_closes_no_session_early(env: Env) -> None:
    x, y = ids_in(0, 2)
    env.produce_events([event(x, 0, T0)])
    env.run("--until-idle", "3")  # gap 1 800 s
    wider = env.variant("wider", sessions={"inactivity_gap_s": 3600})
    env.produce_events([event(x, 1, T0 + 1_000_000)])
    env.run("--until-idle", "3", config=wider)
    env.produce_events([event(y, 0, T0 + 3_700_000)])  # passes x's entry from before
    env.run("--until-idle", "3", config=wider)
    env.produce_events([event(x, 2, T0 + 1_500_000)])
    env.run("--until-idle", "3", config=wider)
    rows = session_rows(env)
    assert (rows[x]["events"], rows[x]["late_events"], rows[x]["state"]) == ("3", "0", "open")


def test_a_session_active_across_added_partitions_is_exact(env: Env) -> None:
    """A topic grown from 2 to 4 partitions under a session: x's first 2 events sit in its
    old partition, its next 40 (one a minute) in its new one, and the old partition's own
    traffic goes 32 minutes on. x is not closed by the old partition's clock: all 42 events
    count, none late; ``leakproof verify`` judges x where it went."""
    name = env.name + "g"
    create_topic(env.cfg.kafka, name, 2)
    grown = env.variant("grown", kafka={"topic": name})
    x = next(s for s in ids_in(0, 50, 2, "x") if home(s.encode(), 4) == 2)
    y = next(s for s in ids_in(0, 50, 4, "y"))
    send_events(env.cfg.kafka, name, [event(x, 0, T0), event(x, 1, T0 + 60_000)])
    env.run("--until-idle", "3", config=grown)
    admin = KafkaAdminClient(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}")
    try:
        admin.create_partitions({name: NewPartitions(total_count=4)})
    finally:
        admin.close()
    send_events(env.cfg.kafka, name, [event(x, i, T0 + i * 60_000) for i in range(2, 42)]
                + [event(y, 0, T0 + 32 * 60_000)])
    env.run("--until-idle", "3", config=grown)
    rows = session_rows(env)
    assert (rows[x]["events"], rows[x]["late_events"], rows[x]["state"]) == ("42", "0", "open")
    assert rows[y]["events"] == "1"
    env.verify(config=grown)


def test_a_second_job_on_the_same_tables_is_refused_while_the_first_runs(env: Env) -> None:
    """Two groups (a blue/green deploy, a copied config) on one table set: the second is
    refused naming the first while it runs; once it stopped, the second takes the tables
    over and goes on exactly."""
    spec = GeneratorSpec(seed=5040, events=2_000, sessions=200)
    env.produce(spec)
    green = env.variant("green", kafka={"group_id": "green"})
    with env.background("--until-idle", "60", name="blue") as blue:
        wait_for("blue's first commit", lambda: bool(offsets_rows(env)))
        refused = env.run(config=green, check=False)
        assert refused.returncode != 0
        assert f"written by the job of topic {env.name}, group it, which runs" in \
            refused.stderr, refused.stderr[-3000:]
        blue.send_signal(signal.SIGTERM)
        assert blue.wait(timeout=120) == 0
    out = env.run("--until-idle", "3", config=green)
    assert f"took the tables over from the job of {env.name}:it" in out.stderr, out.stderr[-3000:]
    env.verify(spec, config=green)


def test_a_new_group_taking_the_tables_over_with_latest_counts_what_came_in_between(
        env: Env) -> None:
    """Blue/green: blue (group it) stops; more sessions arrive; green, a new group set to
    auto_offset_reset latest (as many production configs are), takes the tables over. It
    starts where blue's last commit left the tables, not at the log end. A job of another
    topic on the same tables is refused while the old topic has sessions open."""
    first = GeneratorSpec(seed=5050, events=3_000, sessions=300)
    between = GeneratorSpec(seed=5051, events=3_000, sessions=300, start_ts=T0 + 7_200_000)
    env.produce(first)
    env.run("--until-idle", "3")
    env.produce(between)  # while nobody runs
    green = env.variant("green-latest", kafka={"group_id": "green",
                                                "auto_offset_reset": "latest"})
    out = env.run("--until-idle", "3", config=green)
    assert "taking the tables over from group it" in out.stderr, out.stderr[-3000:]
    env.verify(first, between, config=green)
    # a new topic on the same tables: the old topic's open sessions would never close
    other = f"{env.name}-next"
    create_topic(env.cfg.kafka, other, 4)
    moved = env.variant("next-topic", kafka={"topic": other})
    refused = env.run("--until-idle", "3", config=moved, check=False)
    assert refused.returncode != 0
    assert f"written by the job of topic {env.name} (group green), which left" in \
        refused.stderr and "never closes them" in refused.stderr, refused.stderr[-3000:]


WEB_SCHEMA = str(resources.files("leakproof").joinpath("schemas/web_event.avsc"))
EVENTS = {"schema": WEB_SCHEMA, "session_key": "session_id", "event_time": "ts",
          "sequence": "seq"}


def test_a_model_changed_over_existing_rows_is_refused_naming_the_change(env: Env) -> None:
    spec = GeneratorSpec(seed=5070, events=1_000, sessions=100)
    env.produce(spec)
    first = {"events": {"fn": "count"}, "bytes": {"fn": "sum", "field": "bytes"}}
    env.run("--until-idle", "3", config=model_config(env, "m1", first))
    changed = model_config(env, "m2", {**first, "bytes": {"fn": "max", "field": "bytes"}})
    refused = env.run(config=changed, check=False)
    assert refused.returncode != 0
    assert "aggregates.bytes changed from fn: sum, field: bytes to fn: max, field: bytes" in \
        refused.stderr, refused.stderr[-3000:]
    added = model_config(env, "m3", {**first, "clicks": {"fn": "count",
                                                           "where": "event_type == 'click'"}})
    refused = env.run(config=added, check=False)
    assert refused.returncode != 0 and "leakproof model accept" in refused.stderr
    accepted = run_cli("model", "accept", "--config", added)
    assert "aggregates.clicks added" in accepted.stdout
    env.produce(GeneratorSpec(seed=5071, events=500, sessions=50,
                              start_ts=T0 + 7_200_000))
    env.run("--until-idle", "3", config=added)  # the new cell counts from here on


def test_session_settings_are_meaning_and_force_takes_no_change_the_rows_cannot_survive(
        env: Env) -> None:
    """Split by the gap, ``sessions.late`` says what a row's aggregates hold: changed over
    the rows, the start is refused naming the key. A sequence dropped there would leave
    rows whose first / last the fold cannot order (every batch failing): ``model accept
    --force`` refuses it, naming why and the way out, and records nothing."""
    env.produce(GeneratorSpec(seed=5072, events=400, sessions=40))
    aggregates = {"events": {"fn": "count"}, "entry_url": {"fn": "first", "field": "url"}}
    gap = {"sessions": {"by": "gap", "inactivity_gap_s": 60, "grace_s": 5}}
    first = model_config(env, "g1", aggregates, **gap)
    env.run("--until-idle", "3", config=first)
    folded = model_config(env, "g2", aggregates,
                          sessions={**gap["sessions"], "late": "fold"})
    refused = env.run(config=folded, check=False)
    assert refused.returncode != 0
    assert "sessions.late changed from count to fold" in refused.stderr, refused.stderr[-3000:]
    unsequenced = model_config(env, "g3", aggregates, **gap, sequence=None)
    forced = run_cli("model", "accept", "--force", "--config", unsequenced, check=False)
    assert forced.returncode != 0
    said = forced.stdout + forced.stderr
    assert "events.sequence changed from seq to none: with sessions.by: gap" in said, said
    assert "hbase.table_prefix" in said and "leakproof sessions diff" in said
    env.produce(GeneratorSpec(seed=5073, events=200, sessions=20, start_ts=T0 + 7_200_000))
    env.run("--until-idle", "3", config=first)  # nothing recorded: the rows' model goes on


def model_config(env: Env, label: str, aggregates: Mapping[str, object],
                 sessions: Mapping[str, object] | None = None, **events: object) -> str:
    """The test's config with the event model declared in full (``events:`` and
    ``aggregates:``, ``events`` changing keys of it) instead of the shipped web model."""
    path = env.tmp / f"{label}.yml"
    data = yaml.safe_load(env.path.read_text())
    data.update(events={k: v for k, v in {**EVENTS, **events}.items() if v is not None},
                aggregates=aggregates)
    data["sessions"].update(sessions or {})
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_quiet_partitions_close_their_sessions_with_the_wall_clock(env: Env) -> None:
    """``sessions.idle_after_s``: once no record comes, each partition's watermark moves on
    with the wall clock from its newest event, and every session closes gap + grace after
    its last event, its summary published; the aggregates stay exact."""
    now = int(time.time() * 1000)
    events = [event(f"q{i}", seq, now - 3_000 + seq * 1_000) for i in range(40)
              for seq in range(3)]
    env.produce_events(events)
    quick = env.variant("quick", sessions={"inactivity_gap_s": 4, "grace_s": 1,
                                           "idle_after_s": 2})
    env.run("--until-idle", "15", config=quick, timeout=120)
    rows = session_rows(env)
    assert {sid: row["state"] for sid, row in rows.items()} == {
        f"q{i}": "closed" for i in range(40)}
    assert {sid: row["events"] for sid, row in rows.items()} == {
        f"q{i}": "3" for i in range(40)}


def test_quiet_partitions_close_their_sessions_with_the_shipped_idle_default(
        env: Env) -> None:
    """``sessions.idle_after_s`` left out, as config.yml ships it: a partition the job has
    read nothing of for the inactivity gap moves on, and every session closes, exact."""
    assert "idle_after_s" not in yaml.safe_load(env.path.read_text())["sessions"]
    now = int(time.time() * 1000)
    env.produce_events([event(f"d{i}", seq, now - 3_000 + seq * 1_000) for i in range(40)
                        for seq in range(3)])
    quick = env.variant("quick", sessions={"inactivity_gap_s": 4, "grace_s": 1})
    env.run("--until-idle", "20", config=quick, timeout=120)
    rows = session_rows(env)
    assert {sid: (row["state"], row["events"]) for sid, row in rows.items()} == {
        f"d{i}": ("closed", "3") for i in range(40)}


def test_records_stamped_an_hour_back_close_no_session_before_its_silence(env: Env) -> None:
    """A mirrored topic (MirrorMaker 2, a Connect source, a backfill) stamps its records
    with their event times, here an hour back: that age is the upstream's lag, not silence.
    A run that reads them and stays quiet for less than gap + grace leaves every session
    open; a run quiet for longer closes them all, exact."""
    hour_back = int(time.time() * 1000) - 3_600_000
    events = [event(f"m{i}", seq, hour_back + seq * 1_000) for i in range(40)
              for seq in range(3)]
    producer = KafkaProducer(bootstrap_servers=f"{KAFKA[0]}:{KAFKA[1]}", acks="all")
    try:
        for e in events:  # each record stamped with its event's time, as MirrorMaker keeps it
            producer.send(env.name, key=codec.encode_key(e), value=codec.encode_value(e),
                          timestamp_ms=e.ts)
        producer.flush()
    finally:
        producer.close()
    # silence is counted from the last planned records, and --until-idle from the last batch
    # done: a gap well past the quiet run's 8 s leaves room for a slow day's batches
    mirrored = env.variant("mirrored", sessions={"inactivity_gap_s": 60, "grace_s": 1,
                                                 "idle_after_s": 2})
    env.run("--until-idle", "8", config=mirrored, timeout=120)  # ticks, 8 s quiet at most
    rows = session_rows(env)
    assert {sid: (row["state"], row["events"]) for sid, row in rows.items()} == {
        f"m{i}": ("open", "3") for i in range(40)}
    env.run("--until-idle", "70", config=mirrored, timeout=240)  # quiet past gap + grace
    rows = session_rows(env)
    assert {sid: (row["state"], row["events"], row["late_events"])
            for sid, row in rows.items()} == {f"m{i}": ("closed", "3", "0") for i in range(40)}


def test_one_producer_an_hour_fast_closes_no_session_early(env: Env) -> None:
    """An event stamped an hour ahead of its record's Kafka timestamp (a web server or
    producer whose clock runs fast) counts in its own session but moves the partition's
    watermark only to its record's time + grace: the partition's live sessions stay open and
    their next events count, none late."""
    x, fast = ids_in(0, 2, prefix="c")
    now = int(time.time() * 1000)
    env.produce_events([event(x, 0, now - 60_000), event(x, 1, now - 30_000),
                        event(fast, 0, now + 3_600_000), event(x, 2, now - 5_000)])
    env.run("--until-idle", "3")
    rows = session_rows(env)
    assert (rows[x]["events"], rows[x]["late_events"], rows[x]["state"]) == ("3", "0", "open")
    assert (rows[fast]["events"], rows[fast]["state"]) == ("1", "open")


def test_late_fold_folds_a_late_event_into_its_closed_session(env: Env) -> None:
    """``sessions.late: fold``: an event for a session already closed counts in late_events
    and in the session's aggregates; the row stays closed; verify agrees."""
    a, b = ids_in(1, 2, prefix="f")
    fold = env.variant("fold", sessions={"late": "fold"})
    env.produce_events([event(a, 0, T0), event(a, 1, T0 + 60_000),
                        event(b, 0, T0 + 7_200_000)])  # closes a
    env.run("--until-idle", "3", config=fold)
    assert session_rows(env)[a]["state"] == "closed"
    env.produce_events([event(a, 2, T0 + 90_000)])  # late: a closed an hour ago
    env.run("--until-idle", "3", config=fold)
    row = session_rows(env)[a]
    assert (row["events"], row["late_events"], row["state"]) == ("3", "1", "closed")
    env.verify(config=fold)
