"""The copy of each commit to the Kafka consumer group (kafka.mirror_group_offsets) when
someone joins that group: Kafka 4's group coordinator (KIP-848's ``consumer`` protocol, and
the ``classic`` one alike) refuses an outside commit while the group has members. The job
must go on committing to HBase, count the failed copies, log them once, show them in
``offsets lag``, and copy again once the member is gone.

The KIP-848 member is Kafka's own Java consumer (the stack's kafka-clients, GroupMember.java)
with ``group.protocol=consumer``: kafka-python (3.0.x) joins groups only with the classic
protocol, so the classic member is kafka-python's."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kafka import KafkaConsumer

from leakproof.testing.generator import GeneratorSpec

from .helpers import ROOT, Env, log_ends, records, run_cli, wait_for
from .test_observability import free_port, scrape

pytestmark = pytest.mark.integration

MEMBER = ROOT / "tests" / "integration" / "GroupMember.java"
KAFKA_LIB = ROOT / ".services" / "kafka" / "lib"


@contextmanager
def java_member(topic: str, group: str) -> Iterator[None]:
    """A KIP-848 member (group.protocol=consumer) of ``group``, for a ``with`` block."""
    proc = subprocess.Popen(["java", "-cp", f"{KAFKA_LIB}/*", str(MEMBER), "127.0.0.1:9092",
                             topic, group, "consumer"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("joined"), line
        yield
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the member leaves the group and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def python_member(topic: str, group: str) -> Iterator[None]:
    """A classic-protocol member of ``group`` (kafka-python's consumer), for a ``with``."""
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9092", group_id=group,
                             enable_auto_commit=False)
    # the topic's partitions known before joining: a member that joins first is given none
    # and has to notice the metadata change to rejoin, which a loaded machine once missed
    wait_for("the topic's partitions", lambda: bool(consumer.partitions_for_topic(topic)), 60)
    consumer.subscribe([topic])
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            consumer.poll(timeout_ms=200)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        wait_for("the classic member's assignment", lambda: bool(consumer.assignment()), 60)
        yield
    finally:
        stop.set()
        thread.join()
        consumer.close(autocommit=False)  # leaves the group


def lag_json(config: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(run_cli("offsets", "lag", "--config", config, "--json",
                                               check=False).stdout)
    return found


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_a_member_in_the_mirror_group_never_fails_a_batch(env: Env, protocol: str) -> None:
    group = f"mirror{env.name}"  # its own: group "it" is every other test's mirror
    cfg = env.variant("mirrored", kafka={"group_id": group, "max_rate_per_partition": 400},
                      job={"metrics_port": (mport := free_port())})
    first = GeneratorSpec(seed=2200, events=4_000, sessions=400)
    second = GeneratorSpec(seed=2201, events=4_000, sessions=400, start_ts=1_700_100_000_000)
    env.produce(first)
    member = java_member if protocol == "consumer" else python_member
    url = f"http://127.0.0.1:{mport}/metrics"

    def mirror() -> dict[str, Any]:
        found: dict[str, Any] = lag_json(cfg)["mirror"]
        return found

    def all_committed() -> bool:
        found = lag_json(cfg)
        return found["total_lag"] == 0 and found["batch_ms"] is not None

    # ended by SIGTERM below; the idle bound only outlasts a member's start on a slow day
    with env.background("--until-idle", "600", config=cfg, name="mirrored") as job:
        job.wait_until("the first records committed and copied",
                       lambda: all_committed() and mirror()["state"] == "in step", 180)
        with member(env.name, group):
            env.produce(second)
            job.wait_until("the second records committed", all_committed, 180)
            failed = scrape(url)["leakproof_group_mirror_failures_total"][()]
            assert failed >= 1
            seen = mirror()
            assert seen["state"].startswith("behind; the group has members")
            assert seen["group_type"] == protocol
            table = run_cli("offsets", "lag", "--config", cfg).stdout
            assert f"Kafka group mirror ({group}): behind; the group has members" in table
            assert job.poll() is None  # the job goes on
        job.wait_until("the copy landed after the member left",
                       lambda: mirror()["state"] == "in step", 120)
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == 0
        text = job.text()
    warned = re.findall(r"could not copy batch \d+'s offsets to Kafka group", text)
    assert len(warned) == 1, text[-4000:]  # once, however many batches failed to copy
    assert "Nothing may join that group" in text
    assert re.search(r"copied to Kafka group \S+ again, after \d+ failed copies", text)
    assert {int(p): o for p, o in mirror()["offsets"].items()} == log_ends(env)
    assert records(first, second) == sum(log_ends(env).values())
    env.verify(first, second, config=cfg)
