"""``sessions.retention_days`` against the real stack, as an operator runs it: a day of visits,
then a day and a half later new ones, then stragglers of the first day and first-day keys
used again. The first day's closed sessions are deleted -- rows and, split by the gap,
listings -- each with a tombstone on the closed-sessions topic; the stragglers are late and
make no ghost; a key used again starts a new session. Exact against the oracle
(``verify``), in both session modes, and through a driver SIGKILL right after the sweep's
deletes."""

from __future__ import annotations

import pytest

from leakproof.core.events import WebEvent
from leakproof.kafka.admin import create_topic

from .helpers import Env, audit_total, session_rows
from .test_gap_sessions import compacted

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
HOUR = 3_600_000
FIRST = [f"s{i:03d}" for i in range(240)]


def first_day() -> list[WebEvent]:
    """Three pages a minute apart for each session, spread over six hours."""
    return [WebEvent(sid, "u-" + sid, k, T0 + i * 90_000 + k * 60_000, "pageview", f"/{k}",
                     200, 10 + k)
            for i, sid in enumerate(FIRST) for k in range(3)]


def next_day() -> list[WebEvent]:
    """New sessions 36 to 38 hours on: the watermark passes the first day's retention."""
    return [WebEvent(f"n{i:03d}", f"u-n{i}", k, T0 + 36 * HOUR + i * 60_000 + k * 30_000,
                     "pageview", "/", 200, 5) for i in range(120) for k in range(2)]


def stragglers() -> list[WebEvent]:
    """A page of each of sixty first-day sessions, arriving now (late, past the horizon),
    and a visit under twenty first-day keys used again on the second day."""
    late = [WebEvent(sid, "u-" + sid, 3, T0 + i * 90_000 + 150_000, "pageview", "/late", 200,
                     99) for i, sid in enumerate(FIRST[:60])]
    again = [WebEvent(sid, "u-" + sid, 10 + k, T0 + 38 * HOUR + k * 10_000, "pageview",
                      "/again", 200, 7) for sid in FIRST[100:120] for k in range(2)]
    return late + again


def retention_config(env: Env, topic: str, **sessions: object) -> str:
    return env.variant("retention", sessions={"inactivity_gap_s": 300, "grace_s": 10,
                                              "idle_after_s": None, "retention_days": 1,
                                              **sessions},
                       output={"closed_sessions_topic": topic})


def key(sid: str, by: str, ts: int) -> str:
    return f"{sid}:{ts:013d}" if by == "gap" else sid


@pytest.mark.parametrize(("by", "crash"), [pytest.param("id", None, marks=pytest.mark.deep),
                                           pytest.param("gap", None, marks=pytest.mark.deep),
                                           ("id", "task_after_session_deletes:executor"),
                                           ("gap", "task_after_session_deletes:executor")])
def test_closed_sessions_past_the_retention_go_and_stragglers_make_no_ghosts(
        env: Env, by: str, crash: str | None) -> None:
    topic = f"{env.name}-closed"
    create_topic(env.cfg.kafka, topic, 2)
    config = retention_config(env, topic, by=by)
    env.produce_events(first_day())
    env.run("--until-idle", "3", config=config)
    assert len(session_rows(env)) == len(FIRST)
    env.produce_events(next_day())
    env.run("--until-idle", "3", config=config)
    env.produce_events(stragglers())  # their batch starts from the second day's watermark
    if crash is not None:
        crashed = env.run("--until-idle", "3", config=config,
                          env={"LEAKPROOF_CRASH_AT": crash}, check=False)
        assert crashed.returncode != 0, crashed.stderr[-3000:]
    env.run("--until-idle", "3", config=config)

    rows = session_rows(env)
    again = {key(sid, by, T0 + 38 * HOUR) for sid in FIRST[100:120]}
    # (split by the gap a key used again is a new row key; by id the same one)
    first_day_keys = {key(sid, by, T0 + i * 90_000) for i, sid in enumerate(FIRST)} - again
    assert first_day_keys.isdisjoint(rows)  # every first-day session gone, no ghost
    assert again <= rows.keys()
    assert all(rows[k]["events"] == "2" and rows[k]["first_ts"] == str(T0 + 38 * HOUR)
               for k in again)  # a key used again: a session of its own
    # by id a key used again takes its old row over (the new session replaces it); the
    # others are deleted by the sweep
    assert audit_total(env, b"retired") == len(FIRST) - (len(again) if by == "id" else 0)
    assert audit_total(env, b"late") >= 60
    # the topic compacted by key: each deleted session's last record a tombstone; a key
    # used again by id keeps its old summary until its new session closes
    published = compacted(topic)
    assert first_day_keys.isdisjoint(published)
    closed = {k for k, row in rows.items() if row["state"] == "closed"}
    assert set(published) == (closed | again if by == "id" else closed)
    env.verify(config=config)
