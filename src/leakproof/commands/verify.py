"""Check HBase against the oracle: what Kafka holds, folded independently, field by field.

The topic is read back in full (every partition, offset order) so the oracle sees the exact
order the job saw; the events found there are first checked against the events regenerated
from the producer's seeds, so a loss between producer and topic is caught too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from leakproof import oracle
from leakproof.config import Config
from leakproof.driver.bounds import bound_offsets, clamp
from leakproof.errors import DecodeError
from leakproof.events import Event, schema_json
from leakproof.generator import GeneratorSpec, generate
from leakproof.hbase.connection import connect
from leakproof.hbase.dead_letters import DeadLetterStore
from leakproof.hbase.session_store import scan_readable
from leakproof.kafka.admin import KafkaMetadata, topic_bounds
from leakproof.kafka.reader import read_range
from leakproof.kafka.registry import decoder_for
from leakproof.offsets import OffsetRange


@dataclass
class Verdict:
    """The comparison's outcome; ``ok`` only for an exact match everywhere."""

    events: int = 0
    sessions: int = 0
    bad_records: int = 0
    dead_letters: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_topic(cfg: Config, until_ms: int | None = None
               ) -> tuple[dict[int, list[Event]], list[DecodeError]]:
    """Every record of the topic, decoded, per partition in offset order; with ``until_ms``
    only those a run bounded by ``--until-time`` reads (driver/bounds.py)."""
    bounds = topic_bounds(cfg.kafka)
    ends = {p: b.readable_end for p, b in bounds.items()}
    if until_ms is not None:
        meta = KafkaMetadata(cfg.kafka)
        try:
            by_time = meta.offsets_for_time(cfg.kafka.topic, bounds, until_ms)
        finally:
            meta.close()
        ends = clamp(ends, bound_offsets(cfg.kafka.topic, bounds, by_time=by_time))
    events: dict[int, list[Event]] = {p: [] for p in bounds}
    bad: list[DecodeError] = []
    decoder = decoder_for(cfg.model, cfg.input)
    for p in bounds:
        rng = OffsetRange(cfg.kafka.topic, p, bounds[p].log_start, ends[p])
        for rec in read_range(cfg.kafka, rng):
            try:
                events[p].append(decoder.decode(rec.key, rec.value, topic=rng.topic,
                                                partition=p, offset=rec.offset,
                                                timestamp=rec.timestamp, headers=rec.headers))
            except DecodeError as err:
                bad.append(err)
    return events, bad


def verify(cfg: Config, specs: Sequence[GeneratorSpec], until_ms: int | None = None
           ) -> Verdict:
    """Compare every session row and dead letter with what the topic and seeds imply (with
    ``until_ms``: what a run bounded by ``--until-time`` read of it)."""
    verdict = Verdict()
    per_partition, bad = read_topic(cfg, until_ms)
    # the seeds' events are WebEvents: compared field by field with the records read back
    # (a reader schema that evolved past the web schema adds fields the seeds never had)
    names = [f["name"] for f in schema_json()["fields"]]
    in_topic = Counter(tuple(e.record.get(n) for n in names)
                       for evs in per_partition.values() for e in evs)
    produced = Counter(tuple(w.to_record()[n] for n in names)
                       for spec in specs for w in generate(spec))
    verdict.events = sum(in_topic.values())
    verdict.bad_records = len(bad)
    if specs and in_topic != produced:
        missing = produced - in_topic
        extra = in_topic - produced
        verdict.problems.append(f"topic holds {sum(in_topic.values())} events, the seeds give "
                                f"{sum(produced.values())}: {sum(missing.values())} missing, "
                                f"{sum(extra.values())} extra")
    expected = oracle.expected_rows(per_partition, cfg.sessions.close_after_ms, cfg.model)
    conn = connect(cfg.hbase)
    try:
        actual = scan_readable(conn.table(cfg.hbase.sessions_table))
        dead = DeadLetterStore(conn.table(cfg.hbase.dead_letter_table)).scan(cfg.kafka.topic)
    finally:
        conn.close()
    verdict.sessions = len(actual)
    verdict.dead_letters = len(dead)
    verdict.problems += oracle.compare(expected, actual)[:50]
    want_dead = {(b.partition, b.offset) for b in bad}
    if set(dead) != want_dead:
        verdict.problems.append(
            f"dead letters: {len(want_dead - set(dead))} bad records not dead-lettered, "
            f"{len(set(dead) - want_dead)} dead letters for good records")
    for b in bad:
        cells = dead.get((b.partition, b.offset))
        if cells is not None and (cells.get(b"d:value") != b.value or cells.get(b"d:key") != b.key):
            verdict.problems.append(f"dead letter {b.partition}:{b.offset} does not hold the "
                                    f"raw bytes")
    return verdict
