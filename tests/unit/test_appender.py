"""How ``Appender`` hands records to a producer: straight to its accumulator, each partition
added to the transaction once, the transaction's state checked every ``CHECK_EVERY``
records and after the flush, every record's future checked before the commit; through
``send`` for a record near the size limit, one with a null header value, and a producer
without those internals. The producer here records calls only, with kafka-python's own
futures; the real one is driven by the re-keying integration tests."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
)
from kafka.future import Future

from leakproof.kafka import acknowledged, appender
from leakproof.kafka.appender import Appender
from leakproof.kafka.rekey import lasting


class Txn:
    """A transaction manager's answers: open, failed (with its error) or no longer open."""

    def __init__(self) -> None:
        self.added: list[Any] = []
        self.last_error: Exception | None = None
        self.open = True

    def maybe_add_partition_to_transaction(self, tp: Any) -> None:
        self.added.append(tp)

    def _fail_if_not_ready_for_send(self) -> None:
        if self.last_error is not None:  # as kafka-python words it: the error as an arg
            raise KafkaError("Cannot perform send because at least one previous "
                             "transactional or idempotent request has failed with errors.",
                             self.last_error)
        if not self.open:
            raise IllegalStateError("Cannot call send in state READY")


class Accumulator:
    def __init__(self) -> None:
        self.appended: list[tuple[Any, ...]] = []
        self.futures: list[Future] = []

    def append(self, tp: Any, ts: int | None, key: Any, value: Any, headers: Any
               ) -> tuple[Future, bool, bool, bool]:
        self.appended.append((tp.partition, ts, key, value, headers))
        self.futures.append(Future())
        return self.futures[-1], False, len(self.appended) % 3 == 1, False  # new batches


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

    def send(self, topic: str, **kw: Any) -> Future:
        self.sent.append((topic, kw["partition"], kw["value"]))
        return Future().success(None)


def test_records_go_to_the_accumulator_each_partition_added_once() -> None:
    p = Producer()
    out = Appender(p, "t.internal")
    assert p.asked_for == []  # a task that copies nothing asks nothing
    for i in range(6):
        out.append(i % 2, b"k", b"v%d" % i, 1000 + i, [("h", b"x")])
    assert p.asked_for == ["t.internal"]  # the topic's metadata, once
    assert [tp.partition for tp in p._transaction_manager.added] == [0, 1]
    assert [a[3] for a in p._accumulator.appended] == [b"v%d" % i for i in range(6)]
    assert p._accumulator.appended[0] == (0, 1000, b"k", b"v0", [("h", b"x")])
    assert p._sender.woken == 2 and p.sent == []  # a wake-up per new batch; no send()
    for f in p._accumulator.futures:
        f.success(None)
    out.settled()


def test_records_send_must_judge_go_through_send() -> None:
    """Near the size limit -- key and headers counted -- or with a null header value."""
    p = Producer()
    out = Appender(p, "t.internal")
    room = 200_000 - appender.LARGE_ROOM
    out.append(1, None, b"x" * (room + 1), None, [])
    out.append(1, b"k" * 10, b"x" * (room - 20), None, [("h", b"y" * 11)])
    out.append(0, None, b"small", None, [("h", None)])
    out.append(0, b"k" * 10, b"x" * (room - 20), None, [("h", b"y" * 10)])  # fits
    assert [(part, len(v)) for _t, part, v in p.sent] == [(1, room + 1), (1, room - 20),
                                                          (0, 5)]
    assert len(p._accumulator.appended) == 1


def test_a_failed_transaction_stops_the_appends_and_a_fence_is_seen_as_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appender, "CHECK_EVERY", 4)
    p = Producer()
    out = Appender(p, "t.internal")
    p._transaction_manager.last_error = ProducerFencedError("fenced by a newer attempt")
    with pytest.raises(KafkaError) as raised:
        for _ in range(10):
            out.append(0, None, b"v", None, [])
    assert len(p._accumulator.appended) == 3  # found at the fourth record, not the tenth
    assert lasting(raised.value)  # a fence ends the task: a retry would fence back


def test_a_transaction_no_longer_open_stops_the_appends() -> None:
    """An epoch bumped under the transaction (kafka-python does so on some refusals): the
    state is no longer IN_TRANSACTION, though no error is set; send() refused then too."""
    p = Producer()
    out = Appender(p, "t.internal")
    out.append(0, None, b"v", None, [])
    p._transaction_manager.open = False
    with pytest.raises(IllegalStateError):
        out.settled()


def test_a_record_the_broker_never_took_stops_the_commit() -> None:
    """kafka-python fails a batch that outlived its delivery timeout without failing the
    transaction: its records' futures are the only witness."""
    p = Producer()
    out = Appender(p, "t.internal")
    for _ in range(3):
        out.append(0, None, b"v", None, [])
    first, second, third = p._accumulator.futures
    first.success(None)
    second.failure(KafkaTimeoutError("Expiring 1 record(s): 120000 ms has passed"))
    third.success(None)
    with pytest.raises(KafkaError, match="was not written") as raised:
        out.settled()
    assert isinstance(raised.value.__cause__, KafkaTimeoutError)
    with pytest.raises(KafkaTimeoutError, match="unacknowledged"):
        acknowledged([Future()])  # a flush that returned with one still out


def test_a_producer_without_the_internals_gets_send() -> None:
    p = Producer(internals=False)
    out = Appender(p, "t.internal")
    out.append(0, b"k", b"v", None, [])
    out.settled()
    assert not out.direct and p.sent == [("t.internal", 0, b"v")] and p.asked_for == []
