"""Step 1 of a task's ranges (``task.process``): each range's records read in offset order
and decoded, and the ranges cut into runs that may go through the later steps together."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from leakproof.core.dead_letter import origin_of
from leakproof.core.errors import DecodeError
from leakproof.core.events import Event
from leakproof.core.offsets import OffsetRange
from leakproof.core.reports import TaskReport
from leakproof.core.sessions import lead_of
from leakproof.ports.task import Decode, Record


@dataclass
class ReadRange:
    """One range on its way through the steps."""

    rng: OffsetRange
    report: TaskReport
    events: list[tuple[int, Event, int | None]]  # offset, event, lead (``read_range``)
    dead: list[DecodeError]
    touched: frozenset[str]
    newest_record_ts: int = -1  # the newest Kafka timestamp among its records
    # the offsets of its events whose records are re-driven dead letters: they fold even
    # into a closed session (``sessions.PartitionFolder.feed``)
    redriven: frozenset[int] = frozenset()


def read_range(rng: OffsetRange, records: Iterable[Record], decode: Decode,
               lead_ms: int | None = None) -> ReadRange:
    """Each event of one range with its offset and how far it may move the watermark
    (``sessions.lead_of``; None: its event time); what does not decode, its dead letters."""
    report = TaskReport(rng.partition, rng.from_offset, rng.until_offset)
    t0 = time.monotonic()
    events: list[tuple[int, Event, int | None]] = []
    dead: list[DecodeError] = []
    keep, topic, partition = events.append, rng.topic, rng.partition
    newest = -1
    redriven: set[int] = set()
    for rec in records:  # once per record: locals only
        if rec.timestamp > newest:
            newest = rec.timestamp
        try:
            event = decode(rec.key, rec.value, topic=topic, partition=partition,
                           offset=rec.offset, timestamp=rec.timestamp, headers=rec.headers)
            keep((rec.offset, event, None if lead_ms is None else lead_of(rec.timestamp,
                                                                          lead_ms)))
            if rec.headers and origin_of(rec.headers) is not None:
                redriven.add(rec.offset)
        except DecodeError as err:
            err.timestamp, err.headers = rec.timestamp, rec.headers  # its dead letter keeps them
            dead.append(err)
            report.dead_letter_kinds[err.kind] = report.dead_letter_kinds.get(err.kind, 0) + 1
    report.records = len(events) + len(dead)
    report.read_s = time.monotonic() - t0
    return ReadRange(rng, report, events, dead, frozenset(e.session_id for _, e, _ in events),
                     newest, frozenset(redriven))


def apart(ranges: Sequence[ReadRange]) -> list[list[ReadRange]]:
    """``ranges`` cut, in order, into runs that may go through the steps together: no two
    of a run share a partition or a touched session."""
    runs: list[list[ReadRange]] = []
    current: list[ReadRange] = []
    partitions: set[int] = set()
    touched: set[str] = set()
    for r in ranges:
        if current and (r.rng.partition in partitions or not touched.isdisjoint(r.touched)):
            runs.append(current)
            current, partitions, touched = [], set(), set()
        current.append(r)
        partitions.add(r.rng.partition)
        touched |= r.touched
    if current:
        runs.append(current)
    return runs
