"""Live updates' latency (LATENCY=1 CLOSED=1 EMIT=update): from an event's Kafka timestamp to
the first update of its session that holds it being visible to a read_committed consumer of
the output topic -- the job's (published in its Kafka transactions) beside Structured
Streaming's nearest equivalent (update mode by session id into a Kafka sink).

An update holds a session's k-th record once its ``events`` count is k or more: the load is
made without duplicates or late events, so the count and the records of a session in its
partition's order go together."""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections import defaultdict
from dataclasses import replace

from kafka import KafkaConsumer

from leakproof.core import config
from leakproof.core.offsets import OffsetRange
from leakproof.kafka.admin import topic_bounds
from leakproof.kafka.reader import read_range


class UpdateWatch:
    """A read_committed consumer of ``topic`` in a thread of its own: per session key, when
    each update became visible (wall clock, ms) and the ``events`` count it held."""

    def __init__(self, cfg: config.Config, topic: str) -> None:
        self.seen: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        self.records = 0
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(
            topic, bootstrap_servers=cfg.kafka.bootstrap_servers, group_id=None,
            auto_offset_reset="earliest", isolation_level="read_committed",
            fetch_max_wait_ms=50)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            polled = self._consumer.poll(timeout_ms=200)
            now = time.time() * 1000
            for records in polled.values():
                for rec in records:
                    if rec.key is None or rec.value is None:  # a tombstone holds no count
                        continue
                    events = int(json.loads(rec.value)["events"])
                    counts, when = self.seen[rec.key.decode()]
                    if not counts or events > counts[-1]:  # an equal count adds nothing
                        counts.append(events)
                        when.append(now)
                    self.records += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._consumer.close()


def visible_latencies(cfg: config.Config, source: str,
                      watch: UpdateWatch) -> tuple[list[tuple[int, float]], int]:
    """Each source record's Kafka timestamp (ms) and the seconds until an update holding it
    was visible; and how many records no update seen holds (0 in a complete run)."""
    bounds = topic_bounds(replace(cfg.kafka, topic=source))
    out: list[tuple[int, float]] = []
    missing = 0
    for partition, b in bounds.items():
        nth: dict[str, int] = defaultdict(int)
        for rec in read_range(cfg.kafka, OffsetRange(source, partition, b.log_start,
                                                     b.log_end)):
            key = rec.key.decode() if rec.key is not None else ""
            nth[key] += 1
            counts, when = watch.seen.get(key, ([], []))
            i = bisect.bisect_left(counts, nth[key])
            if i == len(counts):
                missing += 1
            else:
                out.append((rec.timestamp, (when[i] - rec.timestamp) / 1000))
    return out, missing
