"""Check HBase against the oracle: what Kafka holds, folded independently, field by field.

The topic is read back in full (every partition, offset order) so the oracle sees the exact
order the job saw; the events found there are first checked against the events regenerated
from the producer's seeds, so a loss between producer and topic is caught too. Dead letters a
redrive sent back count through their copies, each exactly once (``verify``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from leakproof.commands.dead_letters import current_source
from leakproof.core.config import Config, session_stage
from leakproof.core.dead_letter import SENT, RedriveMark, origin, origin_of, parse_origin
from leakproof.core.errors import DecodeError
from leakproof.core.events import Event, schema_json
from leakproof.core.offsets import OffsetRange
from leakproof.core.rekey import SOURCE_HEADER, rekey_group
from leakproof.driver.bounds import bound_offsets, clamp
from leakproof.hbase.connection import connect
from leakproof.hbase.dead_letters import REDRIVE, DeadLetterStore
from leakproof.hbase.session_store import scan_readable
from leakproof.hbase.state_store import HBaseLeaseStore
from leakproof.kafka.admin import KafkaMetadata
from leakproof.kafka.reader import read_range
from leakproof.kafka.records import KafkaRecord
from leakproof.kafka.registry import decoder_for
from leakproof.testing import oracle
from leakproof.testing.generator import GeneratorSpec, generate


@dataclass
class Verdict:
    """The comparison's outcome; ``ok`` only for an exact match everywhere."""

    events: int = 0
    sessions: int = 0
    bad_records: int = 0
    dead_letters: int = 0
    redriven: int = 0  # dead letters whose copy a redrive sent back to the topic
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class TopicRead:
    """The topic as ``verify`` reads it: each partition's events with their offsets, the
    records that are not events, and the re-driven copies (origin -> (partition, record) of
    each copy that names it)."""

    events: dict[int, list[tuple[int, Event]]]
    bad: list[DecodeError]
    copies: dict[str, list[tuple[int, KafkaRecord]]]
    # each event's record timestamp, beside ``events`` (sessions whose keys moved are
    # merged by it: ``oracle.expected_rows_merged``, ``oracle.expected_gap_rows_merged``)
    stamps: dict[int, list[int]] = field(default_factory=dict)


PROGRESS_S = 5.0  # how often a long verify says how far it got

Say = Callable[[str], None]


def read_topic(cfg: Config, until_ms: int | None = None
               ) -> tuple[dict[int, list[Event]], list[DecodeError]]:
    """Every record of the topic, decoded, per partition in offset order; with ``until_ms``
    only those a run bounded by ``--until-time`` reads (driver/bounds.py)."""
    got = read_records(cfg, until_ms)
    return {p: [e for _, e in evs] for p, evs in got.events.items()}, got.bad


def read_records(cfg: Config, until_ms: int | None = None, say: Say | None = None
                 ) -> TopicRead:
    """``read_topic``, with each event's offset and the re-driven copies; ``say`` hears how
    far the reading got every ``PROGRESS_S`` seconds."""
    meta = KafkaMetadata(cfg.kafka)
    try:
        bounds = meta.log_bounds(cfg.kafka.topic, meta.partitions(cfg.kafka.topic))
        by_time = (None if until_ms is None else
                   meta.offsets_for_time(cfg.kafka.topic, bounds, until_ms))
    finally:
        meta.close()
    ends = {p: b.readable_end for p, b in bounds.items()}
    if by_time is not None:
        ends = clamp(ends, bound_offsets(cfg.kafka.topic, bounds, by_time=by_time))
    got = TopicRead({p: [] for p in bounds}, [], {}, {p: [] for p in bounds})
    decoder = decoder_for(cfg.model, cfg.input)
    total = sum(ends[p] - b.log_start for p, b in bounds.items())
    read, told = 0, time.monotonic()
    for p in bounds:
        rng = OffsetRange(cfg.kafka.topic, p, bounds[p].log_start, ends[p])
        for rec in read_range(cfg.kafka, rng):
            read += 1
            if say is not None and read % 1000 == 0 and time.monotonic() - told >= PROGRESS_S:
                told = time.monotonic()
                say(f"read {read} of {total} records of {cfg.kafka.topic} "
                    f"({100 * read / total:.0f}%, partition {p})")
            came_from = origin_of(rec.headers) if rec.headers else None
            if came_from is not None:
                got.copies.setdefault(came_from, []).append((p, rec))
            try:
                got.events[p].append((rec.offset, decoder.decode(
                    rec.key, rec.value, topic=rng.topic, partition=p, offset=rec.offset,
                    timestamp=rec.timestamp, headers=rec.headers)))
                got.stamps[p].append(rec.timestamp)
            except DecodeError as err:
                got.bad.append(err)
    return got


def verify(cfg: Config, specs: Sequence[GeneratorSpec], until_ms: int | None = None,
           say: Say | None = None) -> Verdict:
    """Compare every session row and dead letter with what the topic and seeds imply (with
    ``until_ms``: what a run bounded by ``--until-time`` read of it).

    A record a redrive sent back (a copy naming it is in the topic) was a dead letter when
    the job read it, whatever it decodes to now: its events count through its copy, so the
    oracle folds the copy -- even into a closed session, as the job does -- and takes the
    record as a dead letter. Each such record must have one copy, carrying its bytes, and
    each row marked re-driven a copy (the rows of the topic as it is now: a recreated
    topic's go under its tag, ``dead_letter.source``). ``say`` hears
    each step and, while the topic is read, how far it got.
    """
    verdict = Verdict()
    tell = say or (lambda _text: None)
    copied: list[str] = []
    rekeyed = cfg.input.rekey is not None
    if cfg.input.rekey is not None:
        # the stage first (each source record on the internal topic once), then the job
        # against the internal topic it read, as for any topic
        copied = rekey_check(cfg, tell)
        cfg = session_stage(cfg)
    topic = cfg.kafka.topic
    tell(f"reading {topic} back in full")
    got = read_records(cfg, until_ms, say)
    tell(f"read {sum(map(len, got.events.values()))} events and {len(got.bad)} bad records; "
         f"folding them with the oracle")
    name = current_source(cfg)  # what its dead letters go under (recreated: tagged)
    redriven = {(p, o) for t, p, o in filter(None, map(parse_origin, got.copies)) if t == name}
    stamped = {p: [(ts, e) for (offset, e), ts in zip(evs, got.stamps[p], strict=True)
                   if (p, offset) not in redriven] for p, evs in got.events.items()}
    per_partition = {p: [e for _, e in seq] for p, seq in stamped.items()}
    # the copies among them fold even into a closed session, whatever sessions.late says
    copy_at = {(p, rec.offset) for found in got.copies.values() for p, rec in found}
    again = {p: [i for i, offset in enumerate(o for o, _ in evs if (p, o) not in redriven)
                 if (p, offset) in copy_at] for p, evs in got.events.items()}
    bad = got.bad
    verdict.redriven = len(redriven)
    verdict.events = sum(map(len, per_partition.values()))
    verdict.bad_records = len(bad)
    verdict.problems += _seed_problems(per_partition, specs)
    expected = _expected(cfg, stamped, again)
    tell(f"{len(expected)} sessions expected; reading the session rows and dead letters "
         f"from HBase")
    conn = connect(cfg.hbase)
    try:
        actual = scan_readable(conn.table(cfg.hbase.sessions_table))
        dead = DeadLetterStore(conn.table(cfg.hbase.dead_letter_table)).scan(name)
    finally:
        conn.close()
    verdict.sessions = len(actual)
    verdict.dead_letters = len(dead)
    verdict.problems += oracle.compare(expected, actual)[:50]
    verdict.problems += _dead_letter_problems(bad, redriven, dead)
    verdict.problems += _redrive_problems(name, got.copies, dead, whole=until_ms is None,
                                          rekeyed=rekeyed)
    verdict.problems += copied
    if (out := cfg.output.closed_sessions_topic) is not None:
        tell(f"reading the summaries on {out} at read_committed")
        verdict.problems += oracle.summary_problems(
            read_summaries(cfg, out), actual, updates=cfg.output.updates,
            json_values=cfg.output.format == "json", held=cfg.output.every_ms is not None)
    return verdict


def _seed_problems(per_partition: dict[int, list[Event]], specs: Sequence[GeneratorSpec]
                   ) -> list[str]:
    """The topic's events against the seeds': the seeds' events are WebEvents, compared
    field by field with the records read back (a reader schema that evolved past the web
    schema adds fields the seeds never had)."""
    if not specs:
        return []
    names = [f["name"] for f in schema_json()["fields"]]
    in_topic = Counter(tuple(e.record.get(n) for n in names)
                       for evs in per_partition.values() for e in evs)
    produced = Counter(tuple(w.to_record()[n] for n in names)
                       for spec in specs for w in generate(spec))
    if in_topic == produced:
        return []
    missing, extra = produced - in_topic, in_topic - produced
    return [f"topic holds {sum(in_topic.values())} events, the seeds give "
            f"{sum(produced.values())}: {sum(missing.values())} missing, "
            f"{sum(extra.values())} extra"]


def _expected(cfg: Config, stamped: dict[int, list[tuple[int, Event]]],
              again: dict[int, list[int]]) -> dict[str, dict[str, str]]:
    """The oracle's rows for the topic's (record timestamp, event) pairs per partition,
    ``again`` the places of re-driven copies."""
    if cfg.sessions.by == "gap":
        # a visitor's sessions split by the gap; partitions merged by record timestamp, as
        # after partitions were added too
        return oracle.expected_gap_rows_merged(
            stamped, cfg.sessions.close_after_ms, cfg.sessions.gap_ms, cfg.model,
            max_duration_ms=cfg.sessions.max_duration_ms,
            fold_late=cfg.sessions.late == "fold", redriven=again,
            retention_ms=cfg.sessions.retention_ms)
    # once partitions were added, the job closes a session only in its key's partition
    grown = HBaseLeaseStore(cfg.hbase, cfg.kafka.topic, cfg.kafka.group_id).key_moves().grown
    return oracle.expected_rows_merged(stamped, cfg.sessions.close_after_ms, cfg.model,
                                       len(stamped) if grown else None,
                                       fold_late=cfg.sessions.late == "fold",
                                       redriven=again, retention_ms=cfg.sessions.retention_ms)


def _dead_letter_problems(bad: Sequence[DecodeError], redriven: set[tuple[int, int]],
                          dead: dict[tuple[int, int], dict[bytes, bytes]]) -> list[str]:
    """Every bad record dead-lettered with its raw bytes (and the records a redrive sent
    back), no dead letter for a good one."""
    problems = []
    want = {(b.partition, b.offset) for b in bad} | redriven
    if set(dead) != want:
        problems.append(f"dead letters: {len(want - set(dead))} bad records not "
                        f"dead-lettered, {len(set(dead) - want)} dead letters for good records")
    for b in bad:
        cells = dead.get((b.partition, b.offset))
        if cells is not None and (cells.get(b"d:value") != b.value or cells.get(b"d:key") != b.key):
            problems.append(f"dead letter {b.partition}:{b.offset} does not hold the raw bytes")
    return problems


def read_summaries(cfg: Config, topic: str
                   ) -> Iterator[tuple[bytes | None, bytes | None,
                                       Sequence[tuple[str, bytes | None]]]]:
    """Every record of the summaries ``topic`` a read_committed consumer sees: key, value,
    headers, each partition in offset order (a key's records are in one partition)."""
    kafka = replace(cfg.kafka, isolation_level="read_committed")
    meta = KafkaMetadata(kafka)
    try:
        bounds = meta.log_bounds(topic, meta.partitions(topic))
    finally:
        meta.close()
    for p, b in sorted(bounds.items()):
        for rec in read_range(kafka, OffsetRange(topic, p, b.log_start, b.readable_end)):
            yield rec.key, rec.value, rec.headers or ()


KEY_KINDS = frozenset({"null_key", "key_mismatch"})  # dead letters for the key alone


def rekey_check(cfg: Config, tell: Say) -> list[str]:
    """``oracle.rekey_problems`` over the source topic (every record below the offsets the
    group ``<group>.rekey`` committed, its session key found by the model's decoder without
    the key check) and the internal topic read in full at read_committed."""
    assert cfg.input.rekey is not None
    source, internal = cfg.kafka.topic, cfg.input.rekey.internal_topic(cfg.kafka.topic)
    inner = session_stage(cfg)
    meta = KafkaMetadata(cfg.kafka)
    try:
        parts = meta.partitions(source)
        bounds = meta.log_bounds(source, parts)
        committed = meta.group_offsets(rekey_group(cfg.kafka.group_id), source)
        inner_meta = KafkaMetadata(inner.kafka)
        try:
            inner_bounds = inner_meta.log_bounds(internal, inner_meta.partitions(internal))
        finally:
            inner_meta.close()
    finally:
        meta.close()
    tell(f"checking that {internal} holds each record of {source} the stage committed once")
    decoder = decoder_for(cfg.model, cfg.input, key_checked=False)
    records: dict[tuple[int, int], tuple[bytes | None, bytes | None, str | None]] = {}
    for p in parts:
        until = committed.get(p, (bounds[p].log_start, ""))[0]
        for rec in read_range(cfg.kafka, OffsetRange(source, p, bounds[p].log_start, until)):
            try:
                sid: str | None = decoder.decode(
                    rec.key, rec.value, topic=source, partition=p, offset=rec.offset,
                    timestamp=rec.timestamp, headers=rec.headers).session_id
            except DecodeError:
                sid = None
            records[p, rec.offset] = (rec.key, rec.value, sid)
    # the copies the job dead-lettered: a record the stage could not decode then (a schema
    # registered since) was forwarded under its own key, whatever it decodes to now
    conn = connect(inner.hbase)
    try:
        dead = DeadLetterStore(conn.table(inner.hbase.dead_letter_table)).scan(
            current_source(inner))
    finally:
        conn.close()
    copies, forwarded = [], set()
    for p, b in inner_bounds.items():
        for rec in read_range(inner.kafka, OffsetRange(internal, p, b.log_start,
                                                       b.readable_end)):
            came_from = next((v.decode() for n, v in rec.headers or () if n == SOURCE_HEADER
                              and v is not None), None)
            copies.append((p, rec.key, rec.value, came_from))
            # ... unless the job dead-lettered it for its key alone: then it decoded the
            # value the stage could not, moments later, which no late schema explains
            kind = dead.get((p, rec.offset), {}).get(b"d:kind", b"").decode()
            if kind and kind not in KEY_KINDS and came_from is not None:
                forwarded.add(came_from)
    return oracle.rekey_problems(records, copies, len(inner_bounds), forwarded)


def _redrive_problems(topic: str, copies: dict[str, list[tuple[int, KafkaRecord]]],
                      dead: dict[tuple[int, int], dict[bytes, bytes]], whole: bool,
                      rekeyed: bool = False) -> list[str]:
    """Each re-driven dead letter copied once with its bytes; each row marked sent copied
    (``whole``: the topic was read to its end, so every copy was seen). ``rekeyed``: the
    copies were sent to the source and re-keyed, so only their values are the letters'
    (the key is the stage's, which ``rekey_check`` judges)."""
    problems = []
    for name, found in sorted(copies.items()):
        if len(found) > 1:
            problems.append(f"dead letter {name} re-driven {len(found)} times: copies at "
                            + ", ".join(f"{p}:{rec.offset}" for p, rec in found))
        coordinates = parse_origin(name)
        cells = dead.get(coordinates[1:]) if coordinates and coordinates[0] == topic else None
        _, copy = found[0]
        if cells is not None and ((not rekeyed and cells.get(b"d:key") != copy.key)
                                  or cells.get(b"d:value") != copy.value):
            what = "value" if rekeyed else "key and value"
            problems.append(f"the copy of dead letter {name} does not carry its {what}")
    if whole:
        for (p, offset), cells in sorted(dead.items()):
            mark = cells.get(REDRIVE)
            if mark and RedriveMark.parse(mark).state == SENT and \
                    origin(topic, p, offset) not in copies:
                problems.append(f"dead letter {topic}:{p}:{offset} is marked re-driven, but no "
                                f"copy of it is in the topic")
    return problems[:50]
