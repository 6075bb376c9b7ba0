"""The summaries sink when no broker answers for a while: a client that cannot bootstrap is a
failed try that ``publish`` makes again within its budget, not the task's end (kafka-python's
clients replaced by in-memory stand-ins of our own; no network)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError
from kafka.future import Future

from leakproof.core import config
from leakproof.core.errors import PublishError
from leakproof.kafka import closed_sink
from leakproof.kafka.closed_sink import ClosedSink


class Producer:
    """What the sink calls of a transactional producer, keeping what it was asked."""

    def __init__(self, **_settings: Any) -> None:
        self.calls: list[str] = []
        self.sent: list[tuple[bytes, bytes | None]] = []

    def init_transactions(self) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send(self, _topic: str, key: bytes, value: bytes | None, headers: Any = None
             ) -> Future:
        self.sent.append((key, value))
        return Future().success(None)  # taken by the broker at once

    def flush(self) -> None:
        self.calls.append("flush")

    def send_offsets_to_transaction(self, _offsets: Any, _group: str) -> None:
        self.calls.append("marker")

    def commit_transaction(self) -> None:
        self.calls.append("commit")

    def close(self, timeout: float = 0) -> None:
        self.calls.append("close")


class Markers:
    """The marker group's reader: nothing published yet."""

    def __init__(self, **_settings: Any) -> None:
        pass

    def committed(self, _tp: Any, metadata: bool = False, timeout_ms: int = 0) -> None:
        return None

    def close(self) -> None:
        pass


def sink() -> ClosedSink:
    cfg = config.from_dict({"kafka": {"bootstrap_servers": "h:9092", "topic": "logs",
                                      "group_id": "g"},
                            "output": {"closed_sessions_topic": "summaries"}})
    return ClosedSink(cfg.kafka, cfg.output, 3)


def test_a_client_that_cannot_bootstrap_is_a_failed_try_not_a_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(make: Any, settings: dict[str, Any]) -> Any:
        raise KafkaTimeoutError("Unable to bootstrap from ['h:9092']")

    monkeypatch.setattr(closed_sink, "bootstrapped", unreachable)
    monkeypatch.setattr(closed_sink, "PUBLISH_BUDGET_S", 0.0)
    monkeypatch.setattr(closed_sink, "PUBLISH_BUDGET_CALLS", 0)  # no time to try again
    with pytest.raises(PublishError, match=r"no Kafka client could be made.*Unable to bootstrap"):
        sink().publish([(b"k", b"v")], "outbox-1", 10)


def test_publish_goes_on_once_the_broker_answers_again(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    made: list[Producer] = []
    failures = [2]  # the broker restarting: the first two producers cannot bootstrap
    monkeypatch.setattr(closed_sink, "PUBLISH_BUDGET_S", 30.0)

    def restarting(make: Any, settings: dict[str, Any]) -> Any:
        if make is KafkaProducer:
            if failures[0]:
                failures[0] -= 1
                raise KafkaTimeoutError("Unable to bootstrap from ['h:9092']")
            made.append(Producer(**settings))
            return made[-1]
        return Markers(**settings)

    monkeypatch.setattr(closed_sink, "bootstrapped", restarting)
    sink().publish([(b"k", b"v")], "outbox-1", 10)
    assert len(made) == 1 and made[0].sent == [(b"k", b"v")]
    assert made[0].calls == ["init", "begin", "flush", "marker", "commit"]


class Expiring(Producer):
    """A producer whose records outlive their delivery timeout: kafka-python fails their
    futures and leaves the transaction open, ready to commit."""

    def send(self, _topic: str, key: bytes, value: bytes | None, headers: Any = None
             ) -> Future:
        self.sent.append((key, value))
        return Future().failure(KafkaTimeoutError("Expiring 1 record(s): 120000 ms has passed"))

    def abort_transaction(self) -> None:
        self.calls.append("abort")


def test_records_the_broker_never_took_are_never_committed(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    made: list[Producer] = []
    monkeypatch.setattr(closed_sink, "PUBLISH_BUDGET_S", 30.0)
    monkeypatch.setattr("leakproof.kafka.closed_sink.time.sleep", lambda _s: None)

    def first_expires(make: Any, settings: dict[str, Any]) -> Any:
        if make is KafkaProducer:
            made.append((Expiring if not made else Producer)(**settings))
            return made[-1]
        return Markers(**settings)

    monkeypatch.setattr(closed_sink, "bootstrapped", first_expires)
    sink().publish([(b"k", b"v")], "outbox-1", 10)
    assert made[0].calls[:3] == ["init", "begin", "flush"]
    assert "marker" not in made[0].calls and "commit" not in made[0].calls
    assert made[1].calls == ["init", "begin", "flush", "marker", "commit"]  # sent again
