"""``sessions.by: gap`` against the real stack: a topic keyed by client, each client's day of
visits split into sessions by the gap, then late events that bridge two closed visits or come
before a visit's first event; exact against the oracle (``verify``), through a driver SIGKILL
in the middle of a merge, and the closed-sessions topic, read back at read_committed and
compacted by key, ends as the session set; and rewinds and another group over the same
tables fold nothing again."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from leakproof.core.events import WebEvent
from leakproof.kafka.admin import create_topic

from .helpers import Env, audit_total, log_ends, run_cli, session_rows, topic_records

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
MIN = 60_000
CLIENTS = [f"c{i:03d}" for i in range(48)]


def day() -> tuple[list[WebEvent], list[WebEvent]]:
    """Each client's visits (four pages ten seconds apart; a gap of 60 s), and what arrives
    after they closed: for a third of the clients a page between two visits 100 s apart (it
    bridges them), for another third a page 30 s before their first visit (its start moves),
    then one page five hours on for every client (the watermark passes everything)."""
    on_time: list[WebEvent] = []
    late: list[WebEvent] = []
    seqs = dict.fromkeys(CLIENTS, 0)

    def page(client: str, ts: int, out: list[WebEvent], url: str = "/") -> None:
        out.append(WebEvent(client, "u-" + client, seqs[client], ts, "pageview", url, 200, 10))
        seqs[client] += 1

    for i, client in enumerate(CLIENTS):
        starts = [T0 + i * 1_000 + v * 20 * MIN for v in range(3)]
        starts.append(starts[-1] + 30_000 + 100_000)  # 100 s after the third visit ends
        for start in starts:
            for k in range(4):
                page(client, start + k * 10_000, on_time, f"/{k}")
        if i % 3 == 0:
            page(client, starts[2] + 30_000 + 50_000, late, "/bridge")
        elif i % 3 == 1:
            page(client, starts[0] - 30_000, late, "/early")
    for client in CLIENTS:
        page(client, T0 + 5 * 60 * MIN, late, "/tomorrow")
    return on_time, late


def gap_config(env: Env, topic: str) -> str:
    return env.variant("gap", sessions={"by": "gap", "inactivity_gap_s": 60, "grace_s": 5,
                                        "late": "fold"},
                       output={"closed_sessions_topic": topic})


def compacted(topic: str) -> dict[str, dict[str, Any]]:
    """The closed-sessions topic as compaction leaves it: each key's last value, a key whose
    last record is a tombstone left out; read as a read_committed consumer."""
    last: dict[str, bytes | None] = {}
    for m in topic_records(topic):  # a key's records in one partition, in order
        last[m.key.decode()] = m.value
    return {k: json.loads(v) for k, v in last.items() if v is not None}


def check_day(env: Env, topic: str) -> None:
    rows = session_rows(env)
    by_client: dict[str, list[str]] = {}
    for key in rows:
        by_client.setdefault(key.rpartition(":")[0], []).append(key)
    for i, client in enumerate(CLIENTS):
        first = T0 + i * 1_000
        want = [first, first + 20 * MIN, first + 40 * MIN, T0 + 5 * 60 * MIN]
        if i % 3 == 1:
            want[0] -= 30_000  # its start moved: no row under the old key
        if i % 3 != 0:
            want.insert(3, first + 40 * MIN + 130_000)  # not bridged: a visit of its own
        assert sorted(by_client[client]) == [f"{client}:{t:013d}" for t in want], client
        if i % 3 == 0:  # the bridged visit holds both and the bridge
            assert rows[f"{client}:{want[2]:013d}"]["events"] == "9", client
    assert all(row["state"] == "closed" for key, row in rows.items()
               if not key.endswith(f":{T0 + 5 * 60 * MIN:013d}"))
    published = compacted(topic)
    closed = {key: row for key, row in rows.items() if row["state"] == "closed"}
    assert set(published) == set(closed)
    assert all(published[key]["events"] == row["events"] for key, row in closed.items())
    env.verify(config=gap_config(env, topic))


def test_a_client_keyed_day_splits_bridges_and_moves_starts_exactly(env: Env) -> None:
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    on_time, late = day()
    env.produce_events(on_time)
    env.run("--until-idle", "3", config=gap_config(env, topic))
    assert len(session_rows(env)) == 4 * len(CLIENTS)
    env.produce_events(late)
    env.run("--until-idle", "3", config=gap_config(env, topic))
    check_day(env, topic)


@pytest.mark.parametrize("point", ["task_after_sessions:executor",
                                   pytest.param("task_after_session_deletes:executor",
                                                marks=pytest.mark.deep)])
def test_a_driver_killed_in_the_middle_of_merges_restarts_exactly(env: Env, point: str
                                                                  ) -> None:
    """The late pages' batch killed (the driver's JVM, local executors with it) after the
    merged rows were written, or after the merged-away rows were deleted: the restart
    replays the batch from the stored offsets and counts nothing twice."""
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    on_time, late = day()
    env.produce_events(on_time)
    env.run("--until-idle", "3", config=gap_config(env, topic))
    env.produce_events(late)
    crashed = env.run("--until-idle", "3", config=gap_config(env, topic),
                      env={"LEAKPROOF_CRASH_AT": point}, check=False)
    assert crashed.returncode != 0, crashed.stderr[-3000:]
    assert "job failed; offsets were not committed" in crashed.stderr or \
        crashed.returncode < 0, crashed.stderr[-3000:]
    env.run("--until-idle", "3", config=gap_config(env, topic))
    check_day(env, topic)


def test_quiet_partitions_close_their_visitors_sessions_with_the_wall_clock(env: Env) -> None:
    """With ``idle_after_s`` the visits close once the partitions go quiet -- gap + grace
    after their last page in wall time -- and their summaries go out, each once."""
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    now = int(time.time() * 1000)
    env.produce_events([WebEvent(f"q{i}", "u", k, now - 3_000 + k * 1_000, "pageview", "/",
                                 200, 1) for i in range(24) for k in range(3)])
    quiet = env.variant("quiet", sessions={"by": "gap", "inactivity_gap_s": 4, "grace_s": 1,
                                           "idle_after_s": 2},
                        output={"closed_sessions_topic": topic})
    env.run("--until-idle", "15", config=quiet, timeout=120)
    rows = session_rows(env)
    assert {key: (row["events"], row["state"]) for key, row in rows.items()} == {
        f"q{i}:{now - 3_000:013d}": ("3", "closed") for i in range(24)}
    assert set(compacted(topic)) == set(rows)


def test_re_reads_of_committed_offsets_over_the_same_tables_fold_nothing_again(env: Env
                                                                               ) -> None:
    """600 visitors' pages, in time order, read in a dozen batches (a visitor's session is
    written by several); then, over the same tables, a rewind to 0, a rewind to the middle,
    and another group from the earliest offset: each re-read skips every committed record
    (its visitor's rows say so), and the rows stay the oracle's."""
    visitors = [f"v{i:03d}" for i in range(600)]
    pages = sorted((WebEvent(v, "u-" + v, k, T0 + i * 100 + k * 10_000 + (k // 2) * 5 * MIN,
                             "pageview", f"/{k}", 200, 10 + k)
                    for i, v in enumerate(visitors) for k in range(4)),
                   key=lambda e: e.ts)  # two visits each, a page of each visit per burst
    env.produce_events(pages)
    by_gap = {"by": "gap", "inactivity_gap_s": 60, "grace_s": 5}
    capped = env.variant("gap-capped", sessions=by_gap, kafka={"max_rate_per_partition": 60})
    plain = env.variant("gap", sessions=by_gap)
    env.run("--until-idle", "3", config=capped)
    assert len(session_rows(env)) == 2 * len(visitors)
    env.verify(config=plain)
    ends = log_ends(env)
    for to in ({p: 0 for p in ends}, {p: end // 2 for p, end in ends.items()}):
        replayed = audit_total(env, b"replayed")
        run_cli("offsets", "rewind", "--config", plain, "--to-offsets",
                ",".join(f"{p}={o}" for p, o in sorted(to.items())))
        env.run("--until-idle", "3", config=plain)
        assert audit_total(env, b"replayed") - replayed == sum(
            end - to[p] for p, end in ends.items())
        env.verify(config=plain)
    # another group takes the tables over, from the earliest offset
    group = env.variant("gap-group", sessions=by_gap,
                        kafka={"group_id": "it2", "auto_offset_reset": "earliest"})
    env.run("--until-idle", "3", config=group)
    env.verify(config=group)
    assert len(session_rows(env)) == 2 * len(visitors)
