"""How a range's reads size their Kafka fetches (pure, and on the pinned kafka-python)."""

from __future__ import annotations

from kafka import KafkaConsumer

from leakproof.kafka import reader
from leakproof.kafka.reader import MIN_FETCH_BYTES, fetch_bytes
from leakproof.kafka.records import KafkaRecord

MIB = 1024 * 1024


def test_a_fetch_asks_for_what_the_rest_of_the_range_needs() -> None:
    assert fetch_bytes(4000, 150.0, 8 * MIB) == int(4000 * 150 * 1.25)
    # no size seen yet: the configured maximum, as kafka-python would ask
    assert fetch_bytes(4000, None, 8 * MIB) == 8 * MIB
    # never above the maximum, never below the floor (one more round trip is all it costs)
    assert fetch_bytes(400_000, 150.0, 8 * MIB) == 8 * MIB
    assert fetch_bytes(3, 150.0, 8 * MIB) == MIN_FETCH_BYTES
    # a maximum below the floor still wins
    assert fetch_bytes(3, 150.0, 64 * 1024) == 64 * 1024


def test_the_fetch_size_reaches_the_pinned_kafka_pythons_fetcher() -> None:
    # api_version given: the consumer is built without asking any broker
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 8),
                             group_id=None, max_partition_fetch_bytes=8 * MIB)
    try:
        reader._size_fetches(consumer, 300_000)
        # the private setting the fetcher reads at each fetch; were it gone after an
        # upgrade, reads would silently go back to full-size fetches
        assert consumer._fetcher.config["max_partition_fetch_bytes"] == 300_000
        assert consumer.config["max_partition_fetch_bytes"] == 8 * MIB
    finally:
        consumer.close()


def test_the_wire_size_comes_from_keys_and_values() -> None:
    records = [KafkaRecord(0, b"k" * 10, b"v" * 100, 0), KafkaRecord(1, None, b"v" * 300, 0)]
    assert reader._wire_size(records) == reader.RECORD_OVERHEAD + (10 + 100 + 300) / 2
