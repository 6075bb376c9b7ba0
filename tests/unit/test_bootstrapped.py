"""A kafka-python client is bootstrapped from the first of its servers that answers: each
server that accepts a connection alone, for its share of the bootstrap time, and a failed
try's network layer closed; when none accepts, kafka-python's own bootstrap over them all."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from leakproof.kafka import bootstrapped

SERVERS = ["127.0.0.1:9092", "127.0.0.2:9092", "127.0.0.3:9092"]


class NetLayer:
    def __init__(self, **configs: Any) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Cluster:
    """Stands in for a client class: answers from the servers in ``up``, times out on the
    others, as kafka-python's constructor does on a server that accepts and never answers."""

    def __init__(self, up: set[str]) -> None:
        self.up = up
        self.tries: list[tuple[str, int | None]] = []
        self.layers: list[NetLayer] = []

    def __call__(self, **settings: Any) -> dict[str, Any]:
        layer = settings["kafka_client"]()
        self.layers.append(layer)
        if len(settings["bootstrap_servers"]) > 1:
            raise ValueError("asked with every server at once")
        (server,) = settings["bootstrap_servers"]
        self.tries.append((server, settings.get("bootstrap_timeout_ms")))
        if server not in self.up:
            raise KafkaTimeoutError(f"Unable to bootstrap from {[server]}")
        return settings


def every(server: str) -> bool:
    return True


def test_one_server_is_asked_as_configured() -> None:
    cluster = Cluster({SERVERS[0]})
    settings = {"bootstrap_servers": SERVERS[:1], "kafka_client": NetLayer}
    assert bootstrapped(cluster, settings, every)["bootstrap_servers"] == SERVERS[:1]
    assert cluster.tries == [(SERVERS[0], None)]  # the settings untouched


def test_a_refusing_server_is_never_waited_on() -> None:
    for _ in range(20):
        cluster = Cluster({SERVERS[0], SERVERS[2]})
        bootstrapped(cluster, {"bootstrap_servers": SERVERS, "kafka_client": NetLayer},
                     lambda server: server != SERVERS[1])
        assert SERVERS[1] not in [s for s, _ in cluster.tries]
        assert len(cluster.tries) == 1


def test_none_accepting_kafka_python_waits_for_any() -> None:
    """Kafka starting, or gone: the configured bootstrap, over every server, unchanged."""
    cluster = Cluster(set())
    with pytest.raises(ValueError):  # the stand-in's way to say it was asked as configured
        bootstrapped(cluster, {"bootstrap_servers": SERVERS, "kafka_client": NetLayer},
                     lambda server: False)
    assert cluster.tries == []


def test_a_stalled_server_is_passed_over_and_its_try_closed() -> None:
    for _ in range(20):  # the order is random: every order ends at the answering server
        cluster = Cluster({SERVERS[2]})
        made = bootstrapped(cluster, {"bootstrap_servers": SERVERS, "kafka_client": NetLayer},
                            every)
        assert made["bootstrap_servers"] == [SERVERS[2]]
        assert all(ms == 10_000 for _, ms in cluster.tries)
        closed = [layer.closed for layer in cluster.layers]
        assert closed == [True] * (len(cluster.tries) - 1) + [False]


def test_the_time_is_shared_among_the_servers_that_accept() -> None:
    cluster = Cluster({SERVERS[0]})
    bootstrapped(cluster, {"bootstrap_servers": SERVERS, "kafka_client": NetLayer},
                 lambda server: server != SERVERS[1])
    assert {ms for _, ms in cluster.tries} == {15_000}


def test_a_failure_other_than_the_timeout_closes_the_try_and_is_raised() -> None:
    def refused(**settings: Any) -> None:
        settings["kafka_client"]()
        raise PermissionError("authentication failed")

    layers: list[NetLayer] = []

    def layer(**configs: Any) -> NetLayer:
        layers.append(NetLayer())
        return layers[-1]

    with pytest.raises(PermissionError):
        bootstrapped(refused, {"bootstrap_servers": SERVERS, "kafka_client": layer}, every)
    assert len(layers) == 1 and layers[0].closed


def test_the_probe_reads_servers_as_kafka_python_does() -> None:
    """A ``PROTOCOL://`` prefix, no port, IPv6 in brackets: read as kafka-python reads
    them, never refused for their spelling; one it cannot read is tried."""
    from leakproof.kafka import _address

    assert _address("SASL_SSL://broker1:9093") == ("broker1", 9093)
    assert _address("broker1") == ("broker1", 9092)
    assert _address("[::1]:9094") == ("::1", 9094)
    assert _address("broker1:not-a-port") is None


def test_no_server_answers_every_one_is_named() -> None:
    cluster = Cluster(set())
    with pytest.raises(KafkaTimeoutError, match="no server of") as failed:
        bootstrapped(cluster, {"bootstrap_servers": ",".join(SERVERS), "kafka_client": NetLayer,
                               "bootstrap_timeout_ms": 9_000}, every)
    assert all(server in str(failed.value) for server in SERVERS)
    assert sorted(s for s, _ in cluster.tries) == SERVERS
    assert {ms for _, ms in cluster.tries} == {5_000}  # a share never under five seconds
    assert all(layer.closed for layer in cluster.layers)
