"""How ``Appender`` hands records to a producer: straight to its accumulator, each partition
added to the transaction once, the transaction's state checked every ``CHECK_EVERY``
records and when asked; through ``send`` for a record near the size limit and for a
producer without those internals. The producer here records calls only; the real one is
driven by the re-keying integration tests."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaError

from leakproof.kafka import appender
from leakproof.kafka.appender import Appender


class Txn:
    def __init__(self) -> None:
        self.added: list[Any] = []
        self.failed = False
        self.last_error = None

    def maybe_add_partition_to_transaction(self, tp: Any) -> None:
        self.added.append(tp)

    def has_error(self) -> bool:
        return self.failed


class Accumulator:
    def __init__(self) -> None:
        self.appended: list[tuple[Any, ...]] = []

    def append(self, tp: Any, ts: int | None, key: Any, value: Any, headers: Any
               ) -> tuple[None, bool, bool, bool]:
        self.appended.append((tp.partition, ts, key, value, headers))
        return None, False, len(self.appended) % 3 == 1, False  # a new batch now and then


class Sender:
    def __init__(self) -> None:
        self.woken = 0

    def wakeup(self) -> None:
        self.woken += 1


class Producer:
    def __init__(self, internals: bool = True) -> None:
        self.config = {"max_request_size": 200_000}
        self.sent: list[tuple[Any, ...]] = []
        self.asked_for: list[str] = []
        if internals:
            self._accumulator, self._transaction_manager = Accumulator(), Txn()
            self._sender = Sender()

    def partitions_for(self, topic: str) -> set[int]:
        self.asked_for.append(topic)
        return {0, 1}

    def send(self, topic: str, **kw: Any) -> None:
        self.sent.append((topic, kw["partition"], kw["value"]))


def test_records_go_to_the_accumulator_each_partition_added_once() -> None:
    p = Producer()
    out = Appender(p, "t.internal")
    for i in range(6):
        out.append(i % 2, b"k", b"v%d" % i, 1000 + i, [("h", b"x")])
    out.check()
    assert p.asked_for == ["t.internal"]  # the topic's metadata, once
    assert [tp.partition for tp in p._transaction_manager.added] == [0, 1]
    assert [a[3] for a in p._accumulator.appended] == [b"v%d" % i for i in range(6)]
    assert p._accumulator.appended[0] == (0, 1000, b"k", b"v0", [("h", b"x")])
    assert p._sender.woken == 2 and p.sent == []  # a wake-up per new batch; no send()


def test_a_record_near_the_size_limit_goes_through_send() -> None:
    p = Producer()
    out = Appender(p, "t.internal")
    big = b"x" * (200_000 - appender.LARGE_ROOM + 1)
    out.append(1, None, big, None, [])
    assert p.sent == [("t.internal", 1, big)]
    assert p._accumulator.appended == []


def test_a_failed_transaction_stops_the_appends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appender, "CHECK_EVERY", 4)
    p = Producer()
    out = Appender(p, "t.internal")
    p._transaction_manager.failed = True
    with pytest.raises(KafkaError, match="cannot be committed"):
        for _ in range(10):
            out.append(0, None, b"v", None, [])
    assert len(p._accumulator.appended) == 3  # found at the fourth record, not the tenth
    with pytest.raises(KafkaError):
        out.check()


def test_a_producer_without_the_internals_gets_send() -> None:
    p = Producer(internals=False)
    out = Appender(p, "t.internal")
    out.append(0, b"k", b"v", None, [])
    out.check()
    assert not out.direct and p.sent == [("t.internal", 0, b"v")] and p.asked_for == []
