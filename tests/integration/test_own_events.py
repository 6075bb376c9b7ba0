"""A foreign event model on the real stack: a proxy access log (tests/data/access_log.avsc)
as Avro and as JSON, folded by the model in tests/data/access_log.yml -- exact against the
oracle's independent fold, through a driver crash, a rewind, spark-submit on the standalone
cluster and YARN with a Python aggregate shipped by --py-files."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from leakproof.commands.produce import send_raw
from leakproof.examples.access_log import avro_value, json_value, model_sections, requests

from .helpers import (
    Env,
    assert_offsets_chain,
    audit_total,
    offsets_rows,
    require_standalone,
    require_yarn,
    run_cli,
    session_rows,
    standalone_submit,
    submit_yarn,
)

pytestmark = pytest.mark.integration

# a Python aggregate of the user's own, shipped with --py-files: the first and last request
# time of a visit, as FIRST..LAST (its value must read back from its cell)
DWELL = '''
class Dwell:
    def __init__(self, field="at"):
        self.field = field

    def initial(self):
        return None

    def apply(self, value, event):
        t = event[self.field]
        return (t, t) if value is None else (min(value[0], t), max(value[1], t))

    def to_text(self, value):
        return None if value is None else f"{value[0]}..{value[1]}"

    def from_text(self, text):
        lo, hi = text.split("..")
        return int(lo), int(hi)
'''


def model_config(env: Env, label: str, fmt: str = "avro", extra: dict[str, Any] | None = None,
                 **changes: dict[str, Any]) -> str:
    """The test's config with the access-log model in place of the web one."""
    data = yaml.safe_load(env.path.read_text())
    sections = model_sections()
    sections["events"]["format"] = fmt
    data.update(sections)
    data["aggregates"].update(extra or {})
    for key, values in changes.items():
        data.setdefault(key, {}).update(values)
    path = env.tmp / f"{label}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def produce(env: Env, recs: list[dict[str, Any]], fmt: str = "avro") -> None:
    encode = avro_value if fmt == "avro" else json_value
    send_raw(env.cfg.kafka, env.name, [(r["visit"].encode(), encode(r)) for r in recs])


def verify(config: str) -> str:
    out = run_cli("verify", "--config", config, check=False)
    assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
    return out.stdout


def run(config: str, env: Env, *args: str, extra_env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli("run", "--config", config, "--until-idle", "4", *args, env=extra_env,
                   check=check, log=env.tmp / f"run-{len(list(env.tmp.iterdir()))}.log")


def test_a_foreign_avro_model_is_exact_through_a_crash_and_a_rewind(env: Env) -> None:
    config = model_config(env, "access")
    recs = requests(seed=71, visits=1_500)
    produce(env, recs)
    # the model checked against the topic first, as a user would: nothing is written
    check = run_cli("model", "check", "--config", config, "--sample", "200")
    assert "aggregates: hits, posts," in check.stdout and ": OK" in check.stdout
    sampled = [json.loads(line) for line in check.stdout.splitlines() if line.startswith("{")]
    assert sampled and all({"hits", "landing", "funnel", "last_ts"} <= s.keys()
                           for s in sampled)
    assert offsets_rows(env) == []

    crashed = run(config, env, extra_env={"LEAKPROOF_CRASH_AT": "driver_before_commit"},
                  check=False)
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert session_rows(env)  # session rows written, no commit: the restart replays them
    run(config, env)
    verify(config)
    assert_offsets_chain(env)
    assert audit_total(env, b"replayed") > 0
    assert audit_total(env, b"records") == len(recs)  # the crashed batch committed nothing
    got = session_rows(env)
    assert len(got) == 1_500
    assert any("account" not in r for r in got.values())  # never logged in: no cell
    assert any(r["late_events"] != "0" for r in got.values())
    assert any(r["duplicates"] != "0" for r in got.values())
    assert all("." in r["slowest_ms"] for r in got.values())  # a double's text

    # rewind to the start: everything is read again, nothing counted twice
    out = run_cli("offsets", "rewind", "--config", config, "--to-time", "2000-01-01T00:00:00")
    assert json.loads(out.stdout)["offsets"] == {"0": 0, "1": 0, "2": 0, "3": 0}
    more = requests(seed=72, visits=300)
    produce(env, more)
    run(config, env)
    verify(config)
    assert session_rows(env).keys() == got.keys() | {r["visit"] for r in more}


def test_the_same_events_as_json_with_bad_input_dead_lettered(env: Env) -> None:
    config = model_config(env, "json", fmt="json")
    recs = requests(seed=73, visits=600)
    good = recs[0]
    bad = [(b"v", b"{not json"), (b"v", b"[1, 2]"),
           (b"v", b'{"visit": "v", "at": 1767225600000}'),
           (good["visit"].encode(), json_value({**good, "code": "500"})),
           (good["visit"].encode(), json_value({**good, "method": "PATCH"})),
           (good["visit"].encode(), b'{"visit": "\xff\xfe"}'),
           (b"other-key", json_value(good))]
    kinds = ["not_json", "not_json", "missing_field", "invalid_field", "invalid_field",
             "invalid_utf8", "key_mismatch"]
    send_raw(env.cfg.kafka, env.name, bad, partition=2)
    produce(env, recs, fmt="json")
    out = run(config, env, "--log-format", "json")
    verify(config)  # the oracle's rows, and a dead letter for exactly the bad records
    conn = env.hbase()
    try:
        dead = {k.decode(): c for k, c in
                conn.table("web_events_dead_letter").scan(row_prefix=f"{env.name}:".encode())}
    finally:
        conn.close()
    assert sorted(dead) == [f"{env.name}:2:{o:020d}" for o in range(len(bad))]
    assert [dead[k][b"d:kind"].decode() for k in sorted(dead)] == kinds
    assert Counter(kinds) == sum((Counter(json.loads(line[line.index('{"'):])
                                          ["dead_letter_kinds"])
                                  for line in out.stderr.splitlines()
                                  if '"dead_letter_kinds"' in line), Counter())
    assert len(session_rows(env)) == 600


def _dwell_module(tmp: Path) -> Path:
    path = tmp / "mydwell.py"
    path.write_text(DWELL)
    return path


@pytest.mark.cluster
@pytest.mark.xdist_group("cluster")
def test_a_python_aggregate_shipped_with_py_files_on_the_standalone_cluster(env: Env) -> None:
    require_standalone()
    module = _dwell_module(env.tmp)
    config = model_config(env, "dwell", extra={"dwell": {"fn": "mydwell:Dwell", "field": "at"}})
    recs = requests(seed=74, visits=800)
    produce(env, recs)
    cmd = standalone_submit(config, "--until-idle", "5")
    at = next(i for i, a in enumerate(cmd) if a.endswith("spark_main.py"))
    cmd[at:at] = ["--py-files", str(module)]  # the driver and the executors import it
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    (env.tmp / "spark-submit.log").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stderr[-5000:]
    out = run_cli("verify", "--config", config, env={"PYTHONPATH": str(env.tmp)}, check=False)
    assert "EXACT MATCH" in out.stdout, out.stdout + out.stderr
    got = session_rows(env)
    assert all(".." in r["dwell"] for r in got.values())


@pytest.mark.cluster
@pytest.mark.xdist_group("cluster")
def test_a_python_aggregate_shipped_to_yarn(env: Env) -> None:
    require_yarn()
    module = _dwell_module(env.tmp)
    config = model_config(env, "yarn-dwell",
                          extra={"dwell": {"fn": "mydwell:Dwell", "field": "at"}})
    recs = requests(seed=75, visits=600)
    produce(env, recs)
    with submit_yarn(env, "client", config, "yarn-dwell", "--until-idle", "5",
                     py_files=(str(module),)) as job:
        rc = job.wait(timeout=420)
        assert rc == 0, job.text()[-6000:]
    out = run_cli("verify", "--config", config, env={"PYTHONPATH": str(env.tmp)}, check=False)
    assert "EXACT MATCH" in out.stdout, out.stdout + out.stderr
    assert all(".." in r["dwell"] for r in session_rows(env).values())
