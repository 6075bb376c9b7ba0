"""What the operator's commands print: ``offsets lag`` as a table like Kafka's
consumer-groups tool (JSON with --json), and progress lines of a long ``produce``."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError
from kafka.future import Future

from leakproof.cli import build_parser
from leakproof.commands import produce
from leakproof.commands.lag import lag_table
from leakproof.core.config import KafkaConfig
from leakproof.core.errors import LeakproofError

FOUND: dict[str, Any] = {
    "topic": "web", "group": "lp", "total_lag": 140, "lag_s": 42.46, "batch_ms": 1_700,
    "committed_ms": 1_800, "age_s": 3.25,
    "partitions": [
        {"partition": 0, "committed": 100, "log_end": 240, "lag": 140, "lag_s": 42.46,
         "stable_end": 240, "state": "behind"},
        {"partition": 1, "committed": None, "log_end": 0, "lag": 0, "lag_s": 0.0,
         "stable_end": 0, "state": "caught up"},
        {"partition": 12, "committed": 7, "log_end": 9, "lag": 2, "lag_s": None,
         "stable_end": 7, "state": "held by open transaction", "held_s": 95.0}],
    "mirror": {"group": "lp", "state": "in step"},
}


def test_offsets_lag_is_a_table_like_kafka_consumer_groups() -> None:
    lines = lag_table(FOUND).splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                "LOG-END-OFFSET", "LAG", "LAG-SECONDS", "STABLE-END", "STATE"]
    assert lines[1].split() == ["lp", "web", "0", "100", "240", "140", "42.5", "240", "behind"]
    assert lines[2].split() == ["lp", "web", "1", "-", "0", "0", "0.0", "0", "caught", "up"]
    assert lines[3].split()[:7] == ["lp", "web", "12", "7", "9", "2", "-"]
    assert lines[3].endswith("held by open transaction (95s)")
    assert lines[0].index("PARTITION") == lines[3].index("12")  # columns line up
    assert "newest commit: batch 1700, 3.2s ago" in lines
    assert "total lag: 140 records, oldest unread record 42.5s old" in lines
    assert lines[-1] == "Kafka group mirror (lp): in step"


def test_offsets_lag_json_is_for_scripts() -> None:
    args = build_parser().parse_args(["offsets", "lag", "--config", "c.yml", "--json"])
    assert args.json is True
    assert build_parser().parse_args(["offsets", "lag", "--config", "c.yml"]).json is False


def test_a_long_produce_says_how_far_it_got(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    class Producer:
        def __init__(self, **_settings: Any) -> None:
            pass

        def send(self, topic: str, **record: Any) -> Future:
            sent.append(record)
            return Future().success(None)

        def flush(self) -> None:
            pass

        def close(self) -> None:
            pass

    monkeypatch.setattr(produce, "KafkaProducer", Producer)
    monkeypatch.setattr(produce, "PROGRESS_S", 0.0)  # say it at every chance
    told: list[int] = []
    report = produce.send_raw(KafkaConfig("127.0.0.1:9092", "t", "g"), "t",
                              [(b"k", b"v")] * 2500, progress=lambda n, _s: told.append(n))
    assert report.records == 2500 == len(sent)
    assert told == [1000, 2000]  # the clock is read every 1000 records


def test_a_produce_that_lost_records_fails_naming_how_many(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python's flush returns after a batch failed for good (its retries or delivery
    timeout spent): the command counts those records as lost, never as sent."""
    pending: list[Future] = []

    class Producer:
        def __init__(self, **_settings: Any) -> None:
            pass

        def send(self, topic: str, **record: Any) -> Future:
            pending.append(Future())
            return pending[-1]

        def flush(self) -> None:  # the sender's verdicts, then flush returns as usual
            for i, future in enumerate(pending):
                if i % 4 == 3:
                    future.failure(KafkaTimeoutError("Batch for t-0 expired"))
                else:
                    future.success(None)

        def close(self) -> None:
            pass

    monkeypatch.setattr(produce, "KafkaProducer", Producer)
    with pytest.raises(LeakproofError, match=r"t: 25 of 100 records were not written "
                                             r"\(KafkaTimeoutError: .*expired"):
        produce.send_raw(KafkaConfig("127.0.0.1:9092", "t", "g"), "t", [(b"k", b"v")] * 100)
