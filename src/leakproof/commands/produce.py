"""Putting events on the topic: keyed by session_id through an idempotent producer.

The idempotent producer (acks=all, at most 5 in flight, sequence numbers per partition) keeps
each partition's order even when a request is retried, so a session's events reach the job in
the order they were sent. Topic creation lives here too, for the CLI and the demo.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafka import KafkaProducer
from kafka.errors import KafkaError

from leakproof.core import codec
from leakproof.core.config import KafkaConfig, Registry
from leakproof.core.errors import LeakproofError
from leakproof.core.events import WebEvent, schema_json
from leakproof.kafka import bootstrapped, producer_settings


@dataclass(frozen=True)
class ProduceReport:
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


# A paced send sleeps once it is this far ahead, not after every record: at 8 000 records/s
# that was ~60 000 sleeps and wake-ups per 80 000 records against ~3 400, and 68 against 65
# CPU us per record. Records still leave in linger_ms batches, so Kafka sees no difference.
PACE_S = 0.005


# how often a long send says how far it got (``progress``), and how many records apart it
# looks at the clock for that
PROGRESS_S = 5.0
_CLOCK_EVERY = 1000

Progress = Callable[[int, float], None]  # (records sent so far, seconds since the start)


class Undelivered:
    """The records a producer gave up on after its retries (its errback, on the producer's
    I/O thread): ``flush`` returns all the same, so without this a send that lost a batch
    would report every record as sent."""

    def __init__(self) -> None:
        self.count = 0
        self.first: BaseException | None = None

    def __call__(self, exc: BaseException) -> None:
        self.count += 1
        self.first = self.first or exc

    def check(self, topic: str, sent: int) -> None:
        """Raise, naming how many of ``sent`` records never reached ``topic``, if any."""
        if self.count:
            raise LeakproofError(
                f"producing to {topic}: {self.count} of {sent} records were not written "
                f"({type(self.first).__name__}: {self.first})") from self.first


def send_raw(cfg: KafkaConfig, topic: str,
             records: Iterable[tuple[bytes | None, bytes | None]],
             rate: float | None = None, partition: int | None = None,
             progress: Progress | None = None) -> ProduceReport:
    """Send (key, value) byte pairs in order; ``rate`` in records/s (None = as fast as can be);
    ``progress`` is told how far it got every ``PROGRESS_S`` seconds."""
    producer = bootstrapped(KafkaProducer, producer_settings(cfg))
    started = time.monotonic()
    told = started
    sent = 0
    undelivered = Undelivered()
    try:
        for key, value in records:
            producer.send(topic, key=key, value=value, partition=partition
                          ).add_errback(undelivered)
            sent += 1
            if rate:
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > PACE_S:
                    time.sleep(ahead)
            if progress is not None and sent % _CLOCK_EVERY == 0:
                now = time.monotonic()
                if now - told >= PROGRESS_S:
                    told = now
                    progress(sent, now - started)
        producer.flush()
        undelivered.check(topic, sent)
    except KafkaError as exc:
        raise LeakproofError(f"producing to {topic} failed after {sent} records: {exc}") from exc
    finally:
        producer.close()
    return ProduceReport(sent, time.monotonic() - started)


def send_events(cfg: KafkaConfig, topic: str, events: Iterable[WebEvent],
                rate: float | None = None, progress: Progress | None = None) -> ProduceReport:
    """Send WebEvents: key = session_id, value = schemaless Avro."""
    return send_raw(cfg, topic, ((codec.encode_key(e), codec.encode_value(e)) for e in events),
                    rate, progress=progress)


def send_confluent(cfg: KafkaConfig, topic: str, events: Iterable[WebEvent], registry: Registry,
                   rate: float | None = None, progress: Progress | None = None
                   ) -> ProduceReport:
    """Send WebEvents registry-framed: the shipped schema is registered under
    ``<topic>-value`` (the registry's usual subject; registering again gives the same id),
    and each value carries its id in the Confluent wire format."""
    from leakproof.kafka.registry import client

    schema_id = client(registry).register(f"{topic}-value",
                                          json.dumps(schema_json(), separators=(",", ":")))
    parsed = codec.parsed_schema()
    return send_raw(cfg, topic, ((codec.encode_key(e),
                                  codec.encode_confluent(e.to_record(), schema_id, parsed))
                                 for e in events), rate, progress=progress)
