"""Config: defaults, the shipped config.yml, and errors that name the key at fault."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from leakproof.core import config
from leakproof.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def minimal(**kafka: Any) -> dict[str, Any]:
    return {"kafka": {"bootstrap_servers": "h:9092", "topic": "t", "group_id": "g", **kafka}}


def test_shipped_config_loads_with_documented_values() -> None:
    cfg = config.load(ROOT / "config.yml")
    assert cfg.kafka.topic == "web-events"
    assert cfg.kafka.partitions is None
    assert cfg.hbase.offsets_table == "stream_kafka_offsets"
    assert cfg.sessions.close_after_ms == (1800 + 60) * 1000


def test_idle_advance_is_on_by_default_as_long_as_the_gap_and_null_turns_it_off() -> None:
    assert config.load(ROOT / "config.yml").sessions.idle_after_s == 1800
    assert config.from_dict(minimal()).sessions.idle_after_s == 1800
    gap = {"inactivity_gap_s": 30, "grace_s": 5}
    assert config.from_dict({**minimal(), "sessions": gap}).sessions.idle_after_s == 30
    assert config.from_dict({**minimal(), "sessions": {**gap, "idle_after_s": 10}}
                            ).sessions.idle_after_s == 10
    assert config.from_dict({**minimal(), "sessions": {**gap, "idle_after_s": None}}
                            ).sessions.idle_after_s is None
    with pytest.raises(ConfigError, match=r"'sessions\.idle_after_s' must be > 0, got -1"):
        config.from_dict({**minimal(), "sessions": {"idle_after_s": -1}})


def test_defaults_fill_optional_sections() -> None:
    cfg = config.from_dict(minimal())
    assert cfg.kafka.auto_offset_reset == "earliest"
    assert cfg.kafka.on_data_loss == "fail"
    assert cfg.hbase.port == 9090
    assert cfg.job.batch_interval_s == 2.0
    assert cfg.job.kept_rows == 50_000
    assert cfg.output.closed_sessions_topic is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**minimal(), "extra": 1}, "unknown key 'extra'"),
        (minimal(auto_offset_reset="smallest"), "'kafka.auto_offset_reset' = 'smallest' is not "
                                                "valid; use one of: earliest | latest | none"),
        (minimal(on_data_loss="ignore"), "use one of: fail | skip | earliest"),
        (minimal(partitions=[0, 0]), "lists a partition twice"),
        (minimal(partitions="some"), "'kafka.partitions' must be 'all' or a non-empty list"),
        (minimal(max_rate_per_partition=-1), "'kafka.max_rate_per_partition' must be >= 0"),
        (minimal(max_rate_per_partition=10, min_rate_per_partition=20),
         "'kafka.min_rate_per_partition' (20) must not exceed"),
        (minimal(consumer={"group_id": "x"}), "'kafka.consumer.group_id' is set by leakproof"),
        (minimal(colour="red"), "unknown key 'kafka.colour'"),
        ({"kafka": {"topic": "t", "group_id": "g"}}, "'kafka.bootstrap_servers' is required"),
        ({**minimal(), "hbase": {"transport": "ftp"}}, "use one of: buffered | framed | http"),
        ({**minimal(), "hbase": {"port": "9090"}}, "'hbase.port' must be an integer"),
        ({**minimal(), "job": {"batch_interval_s": 0}}, "'job.batch_interval_s' must be > 0"),
        ({**minimal(), "job": {"kept_rows": -1}}, "'job.kept_rows' must be >= 0, got -1"),
        ({**minimal(), "job": {"kept_rows": 1.5}}, "'job.kept_rows' must be an integer"),
        ({**minimal(), "sessions": {"grace_s": -1}}, "'sessions.grace_s' must be >= 0"),
        (minimal(topic="bad topic"), "'kafka.topic' = 'bad topic' has characters outside"),
        (minimal(group_id="a:b"), "'kafka.group_id' = 'a:b' has characters outside"),
        ({"kafka": None}, "'kafka' is required"),
    ],
)
def test_errors_name_the_key_and_valid_values(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.from_dict(data)
    assert message in str(err.value)


def test_on_data_loss_earliest_is_designs_name_for_skip() -> None:
    assert config.from_dict(minimal(on_data_loss="earliest")).kafka.on_data_loss == "skip"


def test_table_prefix_follows_happybase_rule() -> None:
    cfg = config.from_dict({**minimal(), "hbase": {"table_prefix": "t1"}})
    assert cfg.hbase.full_name(cfg.hbase.sessions_table) == "t1_web_sessions"


def test_secrets_stay_out_of_repr() -> None:
    cfg = config.from_dict(minimal(consumer={"sasl_plain_password": "canary-s3cret"}))
    assert "canary-s3cret" not in repr(cfg)
    assert cfg.kafka.client_settings()["sasl_plain_password"] == "canary-s3cret"


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        config.load(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("kafka: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        config.load(bad)


def test_config_yml_documents_every_key() -> None:
    """Each field of each config section appears in the shipped config.yml, by name."""
    import dataclasses
    import inspect

    text = (Path(__file__).resolve().parents[2] / "config.yml").read_text()
    sections = {"KafkaConfig": "kafka", "HBaseConfig": "hbase", "JobConfig": "job",
                "SessionsConfig": "sessions", "OutputConfig": "output", "InputConfig": "input",
                "OffsetsConfig": "offsets", "BackpressureConfig": "backpressure",
                "KerberosConfig": "security.kerberos"}
    missing = []
    for name, cls in inspect.getmembers(config, inspect.isclass):
        if name in sections and dataclasses.is_dataclass(cls):
            missing += [f"{sections[name]}.{f.name}" for f in dataclasses.fields(cls)
                        if f.name != "kerberos" and f"{f.name}:" not in text]
    from leakproof.core.config import Registry

    missing += [f"events.registry.{f.name}" for f in dataclasses.fields(Registry)
                if f.name not in text]
    assert missing == []
    assert "\nsecurity:\n  kerberos:" in text


def test_sessions_by_gap_and_its_maximum_duration() -> None:
    cfg = config.from_dict({**minimal(), "sessions": {"by": "gap", "max_duration_s": 7200,
                                                      "inactivity_gap_s": 600}})
    assert (cfg.sessions.by, cfg.sessions.gap_ms, cfg.sessions.max_duration_ms) == (
        "gap", 600_000, 7_200_000)
    with pytest.raises(ConfigError, match=re.escape(
            "'sessions.by' = 'visit' is not valid; use one of: id | gap")):
        config.from_dict({**minimal(), "sessions": {"by": "visit"}})
    with pytest.raises(ConfigError, match=re.escape(
            "'sessions.max_duration_s' cuts sessions split by an inactivity gap: it needs "
            "sessions.by: gap")):
        config.from_dict({**minimal(), "sessions": {"max_duration_s": 60}})
    with pytest.raises(ConfigError, match=re.escape("'sessions.max_duration_s' must be > 0")):
        config.from_dict({**minimal(), "sessions": {"by": "gap", "max_duration_s": 0}})


def test_by_gap_refuses_a_python_aggregate_that_cannot_merge() -> None:
    funnel = {"fn": "leakproof.model.python_aggregate:Funnel", "field": "url",
              "steps": ["/", "/cart"]}
    data = {**minimal(), "events": {"schema": str(ROOT / "src/leakproof/schemas/web_event.avsc"),
                                    "session_key": "session_id", "event_time": "ts"},
            "aggregates": {"funnel": funnel}}
    assert config.from_dict(data).model.aggregates[0].name == "funnel"  # by: id takes it
    with pytest.raises(ConfigError, match=re.escape("'aggregates.funnel.fn': leakproof.model."
                                          "python_aggregate:Funnel has no merge")):
        config.from_dict({**data, "sessions": {"by": "gap"}})
