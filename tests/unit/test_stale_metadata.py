"""The driver's admin client after a failed read of the cluster's metadata: a new client, at
most once every ``RENEW_S`` (kafka-python keeps a stale view of leaders for five minutes).
And a group's offsets read from a broker whose group coordinator is not there yet: asked
again for a while, not failed at the first answer. The clients are stand-ins: only which one
answers, how often one is made or asked, is judged."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.errors import CoordinatorNotAvailableError, UnknownBrokerIdError

from leakproof.core.errors import KafkaReadError
from leakproof.kafka import admin


class Client:
    """An admin client that answers from its view, or fails as a stale one does."""

    def __init__(self, stale: bool) -> None:
        self.stale, self.closed = stale, False

    def list_partition_offsets(self, specs: dict[Any, Any], **_kw: Any) -> dict[Any, Any]:
        if self.stale:
            raise UnknownBrokerIdError("1")
        return {tp: type("Found", (), {"offset": 7})() for tp in specs}

    def close(self) -> None:
        self.closed = True


def test_a_stale_view_is_replaced_at_most_once_per_period(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    made: list[Client] = []

    def fresh(_self: Any) -> Client:
        made.append(Client(stale=len(made) < 1))  # the first new one still sees the cut
        return made[-1]

    monkeypatch.setattr(admin.KafkaMetadata, "_client", fresh)
    meta = admin.KafkaMetadata.__new__(admin.KafkaMetadata)
    meta._cfg = type("Cfg", (), {"isolation_level": "read_uncommitted"})()
    meta._peek, meta._renewed_at = None, -admin.RENEW_S
    first = meta._admin = Client(stale=True)

    with pytest.raises(KafkaReadError, match="UnknownBrokerIdError"):
        meta.log_bounds("t", [0])
    assert len(made) == 1 and first.closed  # renewed at the first failure
    clock[0] += admin.RENEW_S / 2
    with pytest.raises(KafkaReadError):
        meta.log_bounds("t", [0])
    assert len(made) == 1  # not again within the period
    clock[0] += admin.RENEW_S
    with pytest.raises(KafkaReadError):
        meta.log_bounds("t", [0])
    assert len(made) == 2  # the period over: another
    assert meta.log_bounds("t", [0])[0].log_end == 7  # the fresh view answers


class NewBroker:
    """A broker making its offsets topic: no group coordinator for the first ``busy`` asks."""

    def __init__(self, busy: int) -> None:
        self.busy, self.asked = busy, 0

    def list_group_offsets(self, specs: dict[str, Any]) -> dict[str, Any]:
        self.asked += 1
        if self.asked <= self.busy:
            raise CoordinatorNotAvailableError("offsets topic not made yet")
        found = type("Found", (), {"offset": 42, "metadata": "m"})()
        return {"g": {TopicPartition("t", 0): found, TopicPartition("other", 0): found}}


def test_a_group_read_waits_for_a_new_brokers_coordinator(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    meta = admin.KafkaMetadata.__new__(admin.KafkaMetadata)
    meta._admin = NewBroker(busy=3)
    assert meta.group_offsets("g", "t") == {0: (42, "m")}  # asked again, not failed
    meta._admin = NewBroker(busy=10**6)
    with pytest.raises(KafkaReadError, match="CoordinatorNotAvailable"):
        meta.group_offsets("g", "t", coordinator_wait_s=5.0)  # but not for ever
    assert 5.0 < clock[0] < 30.0
