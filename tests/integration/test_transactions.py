"""Topics written by transactional producers, on the real broker: an aborted record is an
event that never happened, and an open transaction holds the job at the stable end.

Each test's oracle is the seeds of the *committed* events only: the verify step reads the
topic back and must find exactly those, and the session rows must be their fold.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from leakproof.core.events import WebEvent
from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec, generate

from .helpers import (
    Env,
    TransactionalProducer,
    assert_offsets_chain,
    audit_total,
    lag_report,
    offsets_rows,
    progress_lines,
    run_cli,
    wait_for,
)

pytestmark = pytest.mark.integration


@contextmanager
def producer(env: Env, label: str) -> Iterator[TransactionalProducer]:
    txp = TransactionalProducer(env.name, f"{env.name}-{label}")
    try:
        yield txp
    finally:
        txp.close()


def chunks(events: list[WebEvent], n: int) -> list[list[WebEvent]]:
    """``events`` in ``n`` consecutive pieces, in order (the last ones may be empty)."""
    size = -(-len(events) // n)
    return [events[i * size:(i + 1) * size] for i in range(n)]


def extra_events(real: list[WebEvent], n: int, rnd: random.Random) -> list[WebEvent]:
    """Events for real sessions that, were they counted, would change those rows."""
    return [WebEvent(**{**e.to_record(), "seq": e.seq + 10_000, "bytes": 7})
            for e in rnd.sample(real, n)]


def session_ids(env: Env, table_prefix: str | None = None) -> set[str]:
    conn = env.hbase(table_prefix)
    try:
        return {key.decode() for key, _ in conn.table("web_sessions").scan(columns=[b"s:state"])}
    finally:
        conn.close()


def test_aborted_transactions_never_reach_a_session_row(env: Env) -> None:
    """1 500 real sessions in committed transactions; 200 sessions that exist only in
    aborted ones and 200 aborted extra events for real sessions, interleaved; the log ends
    with an abort marker. The rows hold exactly the committed events, and the offsets and
    the lag reach the log end."""
    spec = GeneratorSpec(seed=2500, events=6_000, sessions=1_500)
    real = generate(spec)
    ghosts = generate(GeneratorSpec(seed=2501, events=600, sessions=200))
    rnd = random.Random(2502)
    doomed = ghosts + extra_events(real, 200, rnd)
    rnd.shuffle(doomed)
    with producer(env, "upstream") as txp:
        for good, bad in zip(chunks(real, 15), chunks(doomed, 15), strict=True):
            txp.transaction(good, commit=True)
            txp.transaction(bad, commit=False)
        txp.transaction(doomed[-50:], commit=False)  # the log's last offset: an abort marker

    env.run("--until-idle", "4")
    env.verify(spec)  # the topic, read back, holds exactly the committed events
    ids = session_ids(env)
    assert len(ids) == 1_500 and not ids & {e.session_id for e in ghosts}
    assert_offsets_chain(env)  # the newest row is the log end: markers and all
    assert audit_total(env, b"records") == len(real)
    report = lag_report(env)
    assert report["total_lag"] == 0
    assert {p["state"] for p in report["partitions"]} == {"caught up"}

    # read_uncommitted (documented as unsafe here) does count them: the setting is real
    dirty = env.variant("dirty", kafka={"isolation_level": "read_uncommitted"},
                        hbase={"table_prefix": f"{env.name}u"})
    env.run("--until-idle", "4", config=dirty)
    assert len(session_ids(env, f"{env.name}u")) == 1_700


@pytest.mark.slow
def test_an_open_transaction_holds_the_range_until_it_commits_or_aborts(env: Env) -> None:
    """The job waits at the stable end while a transaction is open (the lag says so, with its
    age); when the producer commits it catches up exactly; an aborted one leaves nothing."""
    before = GeneratorSpec(seed=2510, events=2_000, sessions=400)
    held = GeneratorSpec(seed=2511, events=800, sessions=200, start_ts=DEFAULT_START_TS + 60_000)
    after = GeneratorSpec(seed=2512, events=800, sessions=200, start_ts=DEFAULT_START_TS + 90_000)
    ghost = GeneratorSpec(seed=2513, events=300, sessions=100, start_ts=DEFAULT_START_TS + 90_000)
    env.produce(before)
    with producer(env, "slow") as txp, \
            env.background("--log-format", "json", "--until-idle", "120") as job:
        txp.begin(generate(held))
        env.produce(after)  # plain records behind the open transaction: they wait too

        def holding() -> bool:
            states = {p["state"] for p in lag_report(env)["partitions"]}
            return states == {"held by open transaction"}

        wait_for("every partition held at its stable end", holding, timeout=120)
        time.sleep(3)  # a few more batches while held
        report = lag_report(env)
        assert all(p["held_s"] is not None and p["held_s"] >= 2 for p in report["partitions"])
        assert report["total_lag"] == len(generate(held)) + len(generate(after))
        ids = session_ids(env)
        assert not ids & {e.session_id for e in generate(held) + generate(after)}
        assert any(line["held"] for line in progress_lines(job.text()))

        txp.commit()
        wait_for("the lag to reach 0", lambda: lag_report(env)["total_lag"] == 0, timeout=60)
        txp.begin(generate(ghost))
        wait_for("the next hold", lambda: lag_report(env)["total_lag"] > 0, timeout=30)
        time.sleep(2)
        txp.abort()
        wait_for("the lag to reach 0 again", lambda: lag_report(env)["total_lag"] == 0,
                 timeout=60)
        run_cli("stop", "--config", str(env.path), "--wait", "60")
        assert job.wait(60) == 0, job.text()[-3000:]
    env.verify(before, held, after)
    assert not session_ids(env) & {e.session_id for e in generate(ghost)}
    assert_offsets_chain(env)


@pytest.mark.faults
def test_transactional_and_plain_producers_mixed_with_a_crash_in_the_middle(env: Env) -> None:
    """Plain records and transactions (committed and aborted) interleaved in every
    partition; the driver is SIGKILLed after its third commit and restarted: exact."""
    plain = GeneratorSpec(seed=2520, events=6_000, sessions=800)
    txed = GeneratorSpec(seed=2521, events=6_000, sessions=800)
    ghosts = generate(GeneratorSpec(seed=2522, events=1_000, sessions=300))
    plain_events, tx_events = generate(plain), generate(txed)
    with producer(env, "mixed") as txp:
        for a, b, c in zip(chunks(plain_events, 12), chunks(tx_events, 12), chunks(ghosts, 12),
                           strict=True):
            env.produce_events(a)
            txp.transaction(b, commit=True)
            txp.transaction(c, commit=False)
    crashed = env.run("--until-idle", "4", config=env.capped(300),
                      env={"LEAKPROOF_CRASH_AT": "driver_after_commit@3"}, check=False)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert len(offsets_rows(env)) == 3
    env.run("--until-idle", "4")
    env.verify(plain, txed)
    assert not session_ids(env) & {e.session_id for e in ghosts}
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == len(plain_events) + len(tx_events)
