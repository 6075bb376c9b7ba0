"""Every start case of docs/DESIGN.md, against real Kafka and HBase (Job.prepare, no Spark)."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, TopicPartition

from leakproof.commands.produce import send_raw
from leakproof.commit_stores.hbase import OffsetStore
from leakproof.core import config
from leakproof.core.config import Config
from leakproof.core.errors import DataLossError, OffsetError
from leakproof.core.lease import Lease
from leakproof.driver.job import Job
from leakproof.hbase.connection import connect, ensure_tables
from leakproof.hbase.state_store import StateStore

from .helpers import Env

pytestmark = pytest.mark.integration


def fill(env: Env, per_partition: int) -> None:
    for p in range(4):
        send_raw(env.cfg.kafka, env.name, [(b"k", b"v")] * per_partition, partition=p)


def store_row(cfg: Config, offsets: dict[int, int], batch_ms: int = 1_700_000_000_000) -> None:
    conn = connect(cfg.hbase)
    try:
        ensure_tables(conn, cfg.hbase)
        OffsetStore(conn.table(cfg.hbase.offsets_table), cfg.kafka.topic,
                    cfg.kafka.group_id).put(batch_ms, offsets)
    finally:
        conn.close()


def reconfigure(env: Env, **kafka: object) -> Config:
    return config.load(env.variant("c2", kafka=dict(kafka)))


def test_first_run_earliest(env: Env) -> None:
    fill(env, 5)
    assert Job(env.cfg).prepare() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_first_run_latest(env: Env) -> None:
    fill(env, 5)
    assert Job(reconfigure(env, auto_offset_reset="latest")).prepare() == {p: 5 for p in range(4)}


def test_first_run_none_refuses(env: Env) -> None:
    with pytest.raises(OffsetError, match="no committed offsets"):
        Job(reconfigure(env, auto_offset_reset="none")).prepare()


def test_resume_from_the_newest_row(env: Env) -> None:
    fill(env, 10)
    store_row(env.cfg, {0: 1, 1: 1, 2: 1, 3: 1}, 1_700_000_000_000)
    store_row(env.cfg, {0: 3, 1: 4, 2: 5, 3: 6}, 1_700_000_001_000)
    assert Job(env.cfg).prepare() == {0: 3, 1: 4, 2: 5, 3: 6}


def test_partitions_added_start_at_earliest(env: Env) -> None:
    fill(env, 10)
    store_row(env.cfg, {0: 7, 1: 7})
    assert Job(reconfigure(env, auto_offset_reset="latest")).prepare() == {0: 7, 1: 7, 2: 0,
                                                                           3: 0}


def test_explicit_partition_list(env: Env) -> None:
    fill(env, 3)
    assert Job(reconfigure(env, partitions=[1, 3])).prepare() == {1: 0, 3: 0}
    with pytest.raises(OffsetError, match=r"kafka.partitions lists \[7\]"):
        Job(reconfigure(env, partitions=[1, 7])).prepare()


def delete_up_to(env: Env, partition: int, offset: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    try:
        admin.delete_records({TopicPartition(env.name, partition): offset})
    finally:
        admin.close()


def test_stored_offset_below_log_start_fails_by_default(env: Env) -> None:
    fill(env, 10)
    store_row(env.cfg, {0: 2, 1: 2, 2: 2, 3: 2})
    delete_up_to(env, 1, 6)
    with pytest.raises(DataLossError) as err:
        Job(env.cfg).prepare()
    for part in (f"{env.name} partition 1", "stored offset 2", "earliest available offset 6"):
        assert part in str(err.value)


def test_stored_offset_below_log_start_skip_records_the_gap(env: Env) -> None:
    fill(env, 10)
    store_row(env.cfg, {0: 2, 1: 2, 2: 2, 3: 2})
    delete_up_to(env, 1, 6)
    cfg = reconfigure(env, on_data_loss="skip")
    assert Job(cfg).prepare() == {0: 2, 1: 6, 2: 2, 3: 2}
    conn = connect(cfg.hbase)
    try:
        gaps = StateStore(conn, cfg.hbase.state_table).gaps(env.name, "it")
    finally:
        conn.close()
    assert [(g["stored"], g["resumed_at"], g["lost"]) for g in gaps] == [("2", "6", "4")]


def test_stored_offset_above_log_end_refuses(env: Env) -> None:
    fill(env, 3)
    store_row(env.cfg, {0: 3, 1: 3, 2: 9, 3: 3})
    with pytest.raises(OffsetError, match="beyond the log end 3; the topic was probably "
                                          "deleted and recreated"):
        Job(env.cfg).prepare()


def test_a_second_driver_takes_the_lease_and_fences_the_first(env: Env) -> None:
    first, second = Job(env.cfg), Job(env.cfg)
    first.prepare()
    second.prepare()
    conn = connect(env.cfg.hbase)
    try:
        state = StateStore(conn, env.cfg.hbase.state_table)
        current = state.read_lease(env.name, "it")
        assert current is not None and current.epoch == 2
        assert first.committer is not None and second.committer is not None
        # the first driver's commit CAS now fails: its lease value is stale
        assert not state.compare_and_set_lease(env.name, "it", first.committer.lease,
                                               Lease(1, "123"))
        assert state.compare_and_set_lease(env.name, "it", second.committer.lease,
                                           second.committer.lease.after(int(time.time())))
    finally:
        conn.close()
