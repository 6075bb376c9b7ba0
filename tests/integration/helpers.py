"""Shared helpers of the integration tests: a test's private Env, background runs that
cannot outlive their test, the offsets-table checks, spark-submit commands, the stack.

Each test gets its own topic and table prefix (conftest's ``env`` fixture). Every config a
test uses is derived from its Env's base config with ``Env.variant``: one way, so a test
reads as "the base, with these keys changed".
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import happybase
import pytest
import yaml
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import OffsetSpec

from leakproof.commands.produce import send_events
from leakproof.core import codec, config
from leakproof.core.events import WebEvent
from leakproof.testing.generator import GeneratorSpec, generate
from submit import spark_submit as spark_submit  # the tests take these from here
from submit import standalone_submit as standalone_submit

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ("127.0.0.1", 9092)
# the brokers the tests' jobs and clients bootstrap from: the plain stack's one, or the
# cluster stack's three (`make stack-up CLUSTER=1`), which the multinode tier sets here
BOOTSTRAP = os.environ.get("LEAKPROOF_TEST_BOOTSTRAP", "127.0.0.1:9092")
THRIFT = ("127.0.0.1", 9090)
# a second Thrift server on the same HBase (`stack.py start thrift-spare`), which the tests
# that stop or kill Thrift point their jobs at: the tests beside them keep theirs
SPARE_THRIFT = ("127.0.0.1", 9096)
SPARK_MASTER = ("127.0.0.1", 7077)
YARN_RM = ("127.0.0.1", 8032)
# Every wait's bound is multiplied by this: the bounds were set on a day when the machine
# ran at its usual pace, and it runs 2-3x slower on some days. A wait ends the moment its
# condition holds, so a generous bound costs nothing then; it only delays a real failure.
SLACK = float(os.environ.get("LEAKPROOF_TEST_SLACK", "3"))
YARN_CONF = ROOT / ".services" / "yarn" / "conf"
YARN_ARCHIVE = ROOT / ".services" / "yarn" / "leakproof-env.tar.gz"  # make yarn-pack
ROW_RE = re.compile(rb"^(?P<topic>[^:]+):(?P<group>[^:]+):(?P<ms>\d{13})$")  # offsets rows


def port_open(addr: tuple[str, int]) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(addr) == 0


def require(addr: tuple[str, int], what: str, how: str) -> None:
    """A service the test needs is down: fail (never skip), saying how to start it."""
    if not port_open(addr):
        pytest.fail(f"{what} is not running on {addr[0]}:{addr[1]}: {how}", pytrace=False)


def require_standalone() -> None:
    require(SPARK_MASTER, "the Spark standalone master", "`make stack-up SPARK=1`")


def require_yarn() -> None:
    require(YARN_RM, "the YARN ResourceManager", "`make yarn-up`")
    if not (YARN_CONF / "yarn-site.xml").is_file():
        pytest.fail(f"{YARN_CONF} has no yarn-site.xml: run `make yarn-up`", pytrace=False)
    if not YARN_ARCHIVE.is_file():
        pytest.fail(f"{YARN_ARCHIVE} is missing: run `make yarn-pack`", pytrace=False)


def base_config(name: str, **sections: dict[str, Any]) -> dict[str, Any]:
    """A test's config: its topic, its table prefix, one-second batches, local[2]."""
    data: dict[str, Any] = {
        "kafka": {"bootstrap_servers": BOOTSTRAP, "topic": name, "group_id": "it",
                  "max_rate_per_partition": 0, "read_timeout_s": 30},
        "hbase": {"table_prefix": name},
        "job": {"batch_interval_s": 1, "master": "local[2]"},
        "sessions": {"inactivity_gap_s": 600, "grace_s": 30},
    }
    for key, values in sections.items():
        data.setdefault(key, {}).update(values)
    return data


# --------------------------------------------------------------------------- processes


class Background:
    """A command in its own process group, its output in ``log``; ``kill`` ends the group
    (a local-mode job's JVM, spark-submit's children) so nothing outlives the test."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})},
                                         start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float = 240) -> int:
        return self.proc.wait(timeout=timeout * SLACK)

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait_until(self, what: str, check: Callable[[], object], timeout: float = 600) -> None:
        """``wait_for`` while the command runs: it fails at once, with the log, if the
        command ends first (the timeout only bounds a hung run, never a slow one)."""
        def done() -> object:
            if check():
                return True
            assert self.proc.poll() is None, \
                f"exited {self.proc.poll()} before {what}:\n{self.text()[-5000:]}"
            return False
        wait_for(what, done, timeout)

    def send_signal(self, sig: int) -> None:
        """To the job's own process only (``signal_group`` reaches its children too)."""
        self.proc.send_signal(sig)

    def signal_group(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@contextmanager
def background(cmd: list[str], log: Path, env: dict[str, str] | None = None
               ) -> Iterator[Background]:
    """Run ``cmd`` for the length of a ``with`` block; whatever is left at its exit is killed."""
    job = Background(cmd, log, env)
    try:
        yield job
    finally:
        job.kill()


def submit(env: Env, config: str, label: str, *args: str,
           executor_env: dict[str, str] | None = None) -> AbstractContextManager[Background]:
    """spark-submit on the standalone cluster in the background, for a ``with`` block."""
    require_standalone()
    extra = {f"spark.executorEnv.{k}": v for k, v in (executor_env or {}).items()}
    cmd = standalone_submit(config, *args, **{"spark.executor.memory": "640m",
                                              "spark.task.maxFailures": "8", **extra})
    return background(cmd, env.tmp / f"{label}.log")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240,
            check: bool = True, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``leakproof ARGS`` in its own process, as users run it."""
    proc = subprocess.run([sys.executable, "-m", "leakproof.cli", *args], capture_output=True,
                          text=True, timeout=timeout * SLACK,
                          env={**os.environ, **(env or {})},
                          check=False)
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if check and proc.returncode != 0:
        raise AssertionError(f"leakproof {args[0]} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr[-6000:]}")
    return proc


def wait_for(what: str, check: Callable[[], object], timeout: float = 120) -> None:
    """Until ``check()`` holds: at once when it does, a failure after ``timeout`` (times
    SLACK) when it never does."""
    deadline = time.monotonic() + timeout * SLACK
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def stack(*args: str) -> None:
    """``scripts/stack.py ARGS`` (start/stop/kill waits until the service answers or is gone)."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), *args], check=True,
                   timeout=300)


# --------------------------------------------------------------------------- a test's Env


def records(*specs: GeneratorSpec) -> int:
    """How many records producing ``specs`` sends (events plus the generator's duplicates)."""
    return sum(len(generate(s)) for s in specs)


@dataclass
class Env:
    """One test's private topic, tables and base config file."""

    name: str
    path: Path
    cfg: config.Config
    tmp: Path

    def produce(self, spec: GeneratorSpec) -> None:
        send_events(self.cfg.kafka, self.cfg.kafka.topic, generate(spec))

    def produce_events(self, events: list[WebEvent]) -> None:
        send_events(self.cfg.kafka, self.cfg.kafka.topic, events)

    def variant(self, label: str, **sections: dict[str, Any]) -> str:
        """The base config (same topic and tables) with some keys changed: a file path."""
        path = self.tmp / f"{label}.yml"
        data = yaml.safe_load(self.path.read_text())
        for key, values in sections.items():
            data.setdefault(key, {}).update(values)
        path.write_text(yaml.safe_dump(data))
        return str(path)

    def capped(self, rate: int) -> str:
        """A variant reading at most ``rate`` events/s per partition: a drain of many batches."""
        return self.variant(f"capped{rate}", kafka={"max_rate_per_partition": rate})

    def run(self, *args: str, config: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 240, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``leakproof run`` with the base config (or ``config``), to its end."""
        return run_cli("run", "--config", config or str(self.path), *args, env=env,
                       timeout=timeout, check=check,
                       log=self.tmp / f"run-{time.monotonic_ns()}.log")

    def background(self, *args: str, config: str | None = None, name: str = "job",
                   env: dict[str, str] | None = None) -> AbstractContextManager[Background]:
        """``leakproof run`` in the background for a ``with`` block (see ``background``)."""
        cmd = [sys.executable, "-m", "leakproof.cli", "run", "--config",
               config or str(self.path), *args]
        return background(cmd, self.tmp / f"{name}.log", env)

    def verify(self, *specs: GeneratorSpec, config: str | None = None) -> str:
        args = [a for s in specs for a in ("--spec", s.as_arg())]
        out = run_cli("verify", "--config", config or str(self.path), *args, check=False)
        assert out.returncode == 0 and "EXACT MATCH" in out.stdout, out.stdout + out.stderr
        return out.stdout

    def hbase(self, table_prefix: str | None = None) -> happybase.Connection:
        """A connection to the test's tables (or those of another ``table_prefix``)."""
        return happybase.Connection(*THRIFT,
                                    table_prefix=table_prefix or self.cfg.hbase.table_prefix)


def fresh_env(tmp_path: Path, name: str, partitions: int = 4,
              **sections: dict[str, Any]) -> Env:
    """A new topic ``name`` of ``partitions`` and the tables of its prefix (``base_config``
    with ``sections`` over it), for a fixture."""
    from leakproof.kafka.admin import create_topic

    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(base_config(name, **sections)))
    cfg = config.load(path)
    create_topic(cfg.kafka, name, partitions)
    return Env(name, path, cfg, tmp_path)


# --------------------------------------------------------------------------- transactions


class TransactionalProducer:
    """An upstream producer writing in Kafka transactions, as Kafka Streams, Flink's Kafka
    sink or Debezium do: ``send`` inside a transaction, then ``commit`` or ``abort``."""

    def __init__(self, topic: str, transactional_id: str) -> None:
        self.topic = topic
        # a transaction a test holds open lasts until the test ends it, never until the
        # broker aborts it (60 s by default: less than a slow day's wait for the job)
        self._producer = KafkaProducer(bootstrap_servers=BOOTSTRAP,
                                       transactional_id=transactional_id, acks="all",
                                       enable_idempotence=True, linger_ms=5,
                                       transaction_timeout_ms=900_000)
        self._producer.init_transactions()

    def transaction(self, events: list[WebEvent], commit: bool) -> None:
        """One whole transaction: begin, send every event keyed by its session, end it."""
        self.begin(events)
        if commit:
            self.commit()
        else:
            self.abort()

    def begin(self, events: list[WebEvent]) -> None:
        """Open a transaction and send ``events`` in it; it stays open until commit/abort."""
        self._producer.begin_transaction()
        for e in events:
            self._producer.send(self.topic, key=codec.encode_key(e), value=codec.encode_value(e))
        self._producer.flush()

    def commit(self) -> None:
        self._producer.commit_transaction()

    def abort(self) -> None:
        self._producer.abort_transaction()

    def close(self) -> None:
        self._producer.close()


def lag_report(env: Env, config: str | None = None) -> dict[str, Any]:
    """``leakproof offsets lag`` as an operator runs it, parsed."""
    out = run_cli("offsets", "lag", "--json", "--config", config or str(env.path), check=False)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.stdout)
    return report


# --------------------------------------------------------------------------- the output topic


def session_rows(env: Env) -> dict[str, dict[str, str]]:
    """Every session row's ``s`` cells, as text (``events`` -> ``"3"``)."""
    conn = env.hbase()
    try:
        return {k.decode(): {c.decode()[2:]: v.decode() for c, v in cells.items()}
                for k, cells in conn.table("web_sessions").scan(columns=[b"s"])}
    finally:
        conn.close()


def closed_rows(env: Env) -> dict[str, dict[str, str]]:
    """The closed sessions' ``s`` cells, as text."""
    return {sid: row for sid, row in session_rows(env).items() if row.get("state") == "closed"}


def topic_records(topic: str, isolation: str = "read_committed", servers: str = BOOTSTRAP
                  ) -> list[Any]:
    """Every record of ``topic`` a consumer at ``isolation`` can read now, partition by
    partition in offset order: read up to the ends the topic has when asked (at
    read_committed the last stable offsets, so an open transaction holds nothing up),
    however long that takes on a slow day -- never "until nothing came for a while"."""
    consumer = KafkaConsumer(bootstrap_servers=servers, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation)
    try:
        deadline = time.monotonic() + 60 * SLACK
        while not (parts := consumer.partitions_for_topic(topic)):
            assert time.monotonic() < deadline, f"no metadata for topic {topic}"
            consumer.topics()  # asks the brokers again
            time.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        found: dict[int, list[Any]] = {tp.partition: [] for tp in tps}
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, (
                f"{topic} not read to {ends} in {60 * SLACK:.0f}s: at "
                f"{ {tp.partition: consumer.position(tp) for tp in tps} }")
            for tp, batch in consumer.poll(timeout_ms=1000).items():
                found[tp.partition].extend(batch)
        return [m for p in sorted(found) for m in found[p]]
    finally:
        consumer.close()


def summaries(topic: str, isolation: str, decode: Callable[[bytes], dict[str, Any]] = json.loads
              ) -> list[tuple[str, dict[str, Any]]]:
    """Every summary on the output topic, in order, as a consumer at ``isolation`` sees it
    (``decode``: a record value to {cell: text})."""
    return [(m.key.decode(), decode(m.value)) for m in topic_records(topic, isolation)]


def published_once_per_change(env: Env, topic: str,
                              decode: Callable[[bytes], dict[str, Any]] = json.loads
                              ) -> dict[str, dict[str, str]]:
    """A read_committed consumer sees every closed session, once per change, ending with its
    row; returns the closed rows.

    A closed session changes again only when a late event reaches it (``late_events`` goes
    up), so its summaries, in topic order, must each carry more late events than the one
    before: the same summary twice is a duplicate.
    """
    closed = closed_rows(env)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for sid, summary in summaries(topic, "read_committed", decode):
        by_session.setdefault(sid, []).append(summary)
    assert set(by_session) == set(closed), (f"{len(set(closed) - set(by_session))} missing, "
                                            f"{len(set(by_session) - set(closed))} extra")
    twice = [sid for sid, got in by_session.items()
             if any(int(b["late_events"]) <= int(a["late_events"])
                    for a, b in itertools.pairwise(got))]
    assert not twice, f"{len(twice)} sessions published twice for one change, e.g. {twice[0]}"
    for sid, got in by_session.items():
        row, last = closed[sid], got[-1]
        assert (last["events"], last["bytes"], last["late_events"], last["state"]) == (
            row["events"], row["bytes"], row["late_events"], "closed"), sid
    return closed


# --------------------------------------------------------------------------- the offsets table


def offsets_rows(env: Env, table_prefix: str | None = None
                 ) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """The test's offsets rows, oldest first (in the tables of ``table_prefix``, if given)."""
    conn = env.hbase(table_prefix)
    try:
        if b"stream_kafka_offsets" not in conn.tables():  # the job has not created it yet
            return []
        return list(conn.table("stream_kafka_offsets").scan(row_prefix=f"{env.name}:it:".encode()))
    finally:
        conn.close()


def partition_count(topic: str) -> int:
    """How many partitions the brokers' metadata lists for ``topic`` now (0: none)."""
    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP)
    try:
        return len(consumer.partitions_for_topic(topic) or ())
    finally:
        consumer.close()


def log_ends(env: Env, partitions: int = 4) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        got = admin.list_partition_offsets({TopicPartition(env.name, p): OffsetSpec.LATEST
                                            for p in range(partitions)})
    finally:
        admin.close()
    return {tp.partition: o.offset for tp, o in got.items()}


def assert_offsets_chain(env: Env, *, complete: bool = True) -> list[dict[int, int]]:
    """Rows as docs/DESIGN.md fixes them; offsets never go back; the newest is the log end."""
    rows = offsets_rows(env)
    assert rows, "no offsets row committed"
    chain = []
    for key, cells in rows:
        m = ROW_RE.match(key)
        assert m and m["topic"].decode() == env.name and m["group"] == b"it", key
        offsets = {}
        for col, value in cells.items():
            if col.startswith(b"offsets:"):
                assert value.isdigit() and col[8:].isdigit(), (col, value)
                offsets[int(col[8:])] = int(value)
        assert sorted(offsets) == list(range(len(offsets))), sorted(offsets)  # 0..n-1
        chain.append(offsets)
    for before, after in itertools.pairwise(chain):
        assert all(after[p] >= before[p] for p in before), (before, after)
    if complete:
        assert chain[-1] == log_ends(env, len(chain[-1]))
    return chain


def audit_total(env: Env, column: bytes) -> int:
    return sum(int(cells.get(b"audit:" + column, b"0")) for _, cells in offsets_rows(env))


def finish_exact(env: Env, spec: GeneratorSpec | tuple[GeneratorSpec, ...], job: Background,
                 timeout: float = 300) -> str:
    """Wait for a background job to stop (exit 0), then hold it to the oracle over ``spec``
    (or every spec of a tuple: waves), the offsets chain and one commit per record; returns
    its log."""
    specs = spec if isinstance(spec, tuple) else (spec,)
    rc = job.wait(timeout=timeout)
    text = job.text()
    assert rc == 0, text[-6000:]
    env.verify(*specs)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(*specs)
    return text


def resume_exactly(env: Env, spec: GeneratorSpec) -> None:
    """After a stop part way, a plain local run finishes the topic: held to the oracle, the
    offsets chain and one commit per record."""
    env.run("--until-idle", "4")
    env.verify(spec)
    assert_offsets_chain(env)
    assert audit_total(env, b"records") == records(spec)


def progress_lines(stderr: str) -> list[dict[str, Any]]:
    """The progress objects of a ``--log-format json`` run, in order: of the log's JSON
    lines (every record leakproof logs is one), those of the batches."""
    found = []
    for line in stderr.splitlines():
        if line.startswith("{") and '"leakproof.stream"' in line:
            record = json.loads(line)
            if record.get("logger") == "leakproof.stream" and "batch_ms" in record:
                found.append(record)
    return found


# --------------------------------------------------------------------------- spark-submit


def submit_yarn(env: Env, mode: str, config: str, label: str, *args: str,
                files: tuple[str, ...] = (), py_files: tuple[str, ...] = ()
                ) -> AbstractContextManager[Background]:
    """spark-submit to YARN in the background, for a ``with`` block: the packed environment
    with --archives; in cluster mode the config (and ``files``) with --files, named by file
    name, as the driver's container finds them in its working directory; ``py_files`` (the
    user's own modules, say a Python aggregate) with --py-files."""
    cmd = [str(spark_submit()), "--master", "yarn", "--deploy-mode", mode,
           "--name", f"leakproof-{label}",
           "--archives", f"{YARN_ARCHIVE}#environment",
           "--conf", "spark.pyspark.python=./environment/bin/python",
           "--conf", "spark.yarn.maxAppAttempts=2",
           "--conf", "spark.yarn.am.attemptFailuresValidityInterval=1h",
           "--conf", "spark.task.maxFailures=8",
           "--driver-memory", "768m", "--executor-memory", "640m", "--num-executors", "1",
           "--conf", "spark.ui.enabled=false"]
    if mode == "client":
        cmd += ["--conf", f"spark.pyspark.driver.python={sys.executable}",
                "--conf", "spark.driver.host=127.0.0.1"]
        config_arg = config
    else:
        cmd += ["--files", ",".join((*files, config))]
        config_arg = Path(config).name
    if py_files:
        cmd += ["--py-files", ",".join(py_files)]
    cmd += [str(ROOT / "scripts" / "spark_main.py"), "run", "--config", config_arg, *args]
    return background(cmd, env.tmp / f"{label}.log", {"HADOOP_CONF_DIR": str(YARN_CONF)})


def crash_mid_publish(env: Env, config: str) -> None:
    """The summaries' crash sequence, each run restarted from HBase by the next: the
    driver's JVM killed with a worker's sixth transaction open, then right after one
    committed (before the offsets did), then a Python worker killed after the session rows
    (outbox written, nothing published; the run exits 1). Each of the first two finds a
    batch committed before it."""
    for point, code in (("task_before_publish_commit@6:executor", None),
                        ("task_after_publish@6:executor", None),
                        ("task_after_sessions@2", 1)):
        before = len(offsets_rows(env))
        crashed = env.run("--until-idle", "4", config=config,
                          env={"LEAKPROOF_CRASH_AT": point}, check=False)
        assert crashed.returncode != 0 if code is None else crashed.returncode == code, (
            point, crashed.returncode, crashed.stderr[-3000:])
        assert len(offsets_rows(env)) > before or point.endswith("@2"), point
