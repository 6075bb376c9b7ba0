"""Operator rewinds and reprocessing, on real Kafka and HBase."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from leakproof.core import config
from leakproof.hbase.connection import connect
from leakproof.hbase.state_store import StateStore
from leakproof.testing.generator import GeneratorSpec

from .helpers import (
    ROOT,
    Env,
    assert_offsets_chain,
    audit_total,
    offsets_rows,
    progress_lines,
    records,
    run_cli,
    wait_for,
)

pytestmark = pytest.mark.integration


def rewind(env: Env, *args: str, config: str | None = None,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli("offsets", "rewind", "--config", config or str(env.path), *args, check=check)


def test_rewinds_append_rows_and_never_double_count(env: Env) -> None:
    spec = GeneratorSpec(seed=1500, events=12_000, sessions=1_200)
    env.produce(spec)
    env.run("--until-idle", "3")
    env.verify(spec)
    rows = offsets_rows(env)
    first_ms = int(rows[0][0].rsplit(b":", 1)[1])
    # explicit offsets: partition 0 back to 0, the others as committed
    out = rewind(env, "--to-offsets", "0=0")
    newest_key, newest = offsets_rows(env)[-1]
    assert newest[b"offsets:0"] == b"0"
    assert newest[b"audit:rewind"] == b"to-offsets 0=0"
    assert '"0": 0' in out.stdout
    # the HBase shell shows the rewind row first in a reversed scan
    shell = subprocess.run([str(ROOT / "scripts" / "hbase-shell")], capture_output=True,
                           text=True, timeout=180, check=False,
                           input=f"scan '{env.name}_stream_kafka_offsets', "
                                 f"{{REVERSED => true, LIMIT => 1}}\n")
    assert newest_key.decode() in shell.stdout
    # replaying partition 0 over the same tables: fenced, nothing counted twice
    env.run("--until-idle", "3")
    env.verify(spec)
    assert audit_total(env, b"replayed") > 0
    # to an earlier row, and to a time before everything
    rewind(env, "--to-batch", str(first_ms))
    assert {k: v for k, v in offsets_rows(env)[-1][1].items() if k.startswith(b"offsets:")} == \
        {k: v for k, v in rows[0][1].items() if k.startswith(b"offsets:")}
    rewind(env, "--to-time", "2000-01-01T00:00:00")
    assert all(v == b"0" for k, v in offsets_rows(env)[-1][1].items()
               if k.startswith(b"offsets:"))
    # nonsense is refused, naming the problem
    bad = rewind(env, "--to-offsets", "1=999999", check=False)
    assert bad.returncode == 1 and "outside the log" in bad.stderr
    missing = rewind(env, "--to-batch", "123", check=False)
    assert missing.returncode == 1 and "no offsets row" in missing.stderr


def stored_state(env: Env) -> dict[bytes, dict[bytes, tuple[bytes, int]]]:
    """Every cell a rewind writes, with its timestamp: the offsets rows, the lease row and
    the copy of the newest commit."""
    conn = env.hbase()
    try:
        rows = dict(conn.table("stream_kafka_offsets").scan(
            row_prefix=f"{env.name}:it:".encode(), include_timestamp=True))
        state = conn.table("leakproof_state")
        for key in (f"lease:{env.name}:it", f"last:{env.name}:it"):
            rows[key.encode()] = state.row(key.encode(), include_timestamp=True)
        return rows
    finally:
        conn.close()


def test_a_dry_run_prints_the_plan_and_changes_nothing(env: Env) -> None:
    spec = GeneratorSpec(seed=1550, events=4_000, sessions=400)
    env.produce(spec)
    env.run("--until-idle", "3")
    before = stored_state(env)
    assert before[f"lease:{env.name}:it".encode()]  # the lease row is there to be compared
    committed = assert_offsets_chain(env)[-1]
    out = rewind(env, "--to-offsets", "0=0", "--dry-run")
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"rewind of {env.name}:it (offsets.store hbase, newest commit")
    assert lines[2].split() == ["0", str(committed[0]), "0", str(committed[0]), "0"]
    assert lines[3].split() == ["1", str(committed[1]), str(committed[1]), "0", "0"]
    assert lines[-2] == "dry run: nothing written"
    summary = json.loads(lines[-1])
    assert summary["dry_run"] and summary["batch_ms"] is None
    assert summary["read_again"] == {"0": committed[0], "1": 0, "2": 0, "3": 0}
    everything = json.loads(rewind(env, "--to-time", "2000-01-01T00:00:00",
                                   "--dry-run").stdout.splitlines()[-1])
    assert sum(everything["read_again"].values()) == sum(committed.values()) == records(spec)
    assert stored_state(env) == before  # offsets rows, lease and its copy: cell for cell
    # a prefix no job has run on: nothing committed, and no table is made for the asking
    fresh = env.variant("fresh", hbase={"table_prefix": f"{env.name}dry"})
    out = rewind(env, "--to-time", "2000-01-01T00:00:00", "--dry-run", config=fresh)
    assert "nothing committed yet" in out.stdout.splitlines()[0]
    conn = env.hbase(f"{env.name}dry")
    try:
        assert conn.tables() == []
    finally:
        conn.close()


def test_rewind_fences_a_running_job(env: Env) -> None:
    spec = GeneratorSpec(seed=1600, events=20_000, sessions=2_000)
    env.produce(spec)
    with env.background(config=env.capped(150), name="running") as job:
        wait_for("commits", lambda: len(offsets_rows(env)) >= 2)
        rewind(env, "--to-offsets", "0=0")
        rc = job.wait(timeout=120)
        text = job.text()
    assert rc == 1, text[-3000:]
    assert "another driver" in text or "epoch" in text
    newest = offsets_rows(env)[-1][1]
    assert newest[b"offsets:0"] == b"0"  # nothing committed after the rewind row
    env.run("--until-idle", "3")
    env.verify(spec)


def test_reprocessing_into_fresh_tables(env: Env) -> None:
    """The README's procedure: same topic and group, fresh prefix, rewind, run."""
    spec = GeneratorSpec(seed=1700, events=8_000, sessions=800)
    env.produce(spec)
    env.run("--until-idle", "3")
    fresh = env.variant("reprocess", hbase={"table_prefix": f"{env.name}v2"})
    rewind(env, "--to-time", "2000-01-01T00:00:00", config=fresh)
    ran = env.run("--until-idle", "3", "--log-format", "json", config=fresh)
    lines = progress_lines(ran.stderr)
    assert sum(rec["records"] for rec in lines) == records(spec)  # one JSON object per batch
    env.verify(spec, config=fresh)
    conn = connect(config.load(fresh).hbase)
    try:
        epoch = StateStore(conn, "leakproof_state").lease_epoch(env.name, "it")
    finally:
        conn.close()
    assert epoch == 2  # the rewind's epoch, then the reprocessing run's


@pytest.mark.parametrize("store", ["hbase", pytest.param("kafka", marks=pytest.mark.deep),
                                   pytest.param("zookeeper", marks=pytest.mark.deep)])
def test_reprocessing_recipe_rewinds_the_configured_store(env: Env, store: str) -> None:
    """The rewind goes where the job resumes from: the store ``offsets.store`` names."""
    spec = GeneratorSpec(seed=1750 + len(store), events=6_000, sessions=600)
    env.produce(spec)
    first = env.variant(f"{store}-first", offsets={"store": store},
                        kafka={"mirror_group_offsets": False})
    env.run("--until-idle", "3", config=first)
    env.verify(spec, config=first)
    fresh = env.variant(f"{store}-again", offsets={"store": store},
                        kafka={"mirror_group_offsets": False},
                        hbase={"table_prefix": f"{env.name}r"})
    out = rewind(env, "--to-time", "2000-01-01T00:00:00", config=fresh)
    assert '"0": 0' in out.stdout
    history = run_cli("offsets", "show", "--config", fresh)
    assert '"0": 0' in history.stdout, history.stdout  # the store itself says so
    ran = env.run("--until-idle", "3", "--log-format", "json", config=fresh)
    assert sum(rec["records"] for rec in progress_lines(ran.stderr)) == records(spec)
    env.verify(spec, config=fresh)
    # --to-batch names a row only the HBase store keeps a history of
    named = rewind(env, "--to-batch", "123", config=fresh, check=False)
    assert named.returncode == 1
    assert ("no offsets row" if store == "hbase" else "keeps no history") in named.stderr


def test_a_rewind_from_a_host_an_hour_ahead_is_not_undone_by_a_driver_on_time(
        env: Env) -> None:
    """The newest row is the chain's head whatever the hosts' clocks: a driver whose clock
    is behind the newest row keys its commits above it, so the next start resumes from its
    own last commit, not from the older row with the later clock."""
    if shutil.which("faketime") is None:
        pytest.fail("the clock-skew test needs Debian's faketime: `make system-deps`")
    first = GeneratorSpec(seed=1530, events=4_000, sessions=400)
    env.produce(first)
    env.run("--until-idle", "3")
    ends = {int(k[len(b"offsets:"):]): int(v) for k, v in offsets_rows(env)[-1][1].items()
            if k.startswith(b"offsets:")}
    # the same offsets committed again from a host whose clock is an hour ahead
    subprocess.run(["faketime", "-f", "+1h", sys.executable, "-m", "leakproof.cli", "offsets",
                    "rewind", "--config", str(env.path), "--to-offsets",
                    ",".join(f"{p}={o}" for p, o in sorted(ends.items()))],
                   capture_output=True, text=True, timeout=240, check=True)
    ahead = int(offsets_rows(env)[-1][0].rsplit(b":", 1)[1])
    second = GeneratorSpec(seed=1531, events=4_000, sessions=400,
                           start_ts=first.start_ts + 7_200_000)
    env.produce(second)
    ran = env.run("--until-idle", "3", "--log-format", "json")
    assert "is not after the newest commit" in ran.stderr
    keys = [int(k.rsplit(b":", 1)[1]) for k, _ in offsets_rows(env)]
    assert keys == sorted(keys) and keys[-1] > ahead  # every later row above the rewind's
    # a third run on time: nothing new, so nothing is read again
    again = env.run("--until-idle", "3", "--log-format", "json")
    assert sum(int(b.get("records", 0)) for b in progress_lines(again.stderr)) == 0
    env.verify(first, second)
    assert_offsets_chain(env)
