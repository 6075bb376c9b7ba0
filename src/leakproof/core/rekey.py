"""Re-keying an unkeyed topic (``input.rekey``): the names, the source header and the rules of
one stage task, apart from Kafka (pure; ``kafka/rekey.py`` does the Kafka work).

Each source partition is re-keyed by one transaction per batch: its records, each under its
session key in the partition Kafka's default partitioner gives that key on the internal topic,
and the source offset it reached, committed to the group ``<group>.rekey`` in the same
transaction. A record there carries ``leakproof.source`` = ``<topic>:<partition>:<offset>``,
the coordinates of the record it copies, so each source record is on the internal topic once
(at read_committed) and a dead letter of it can name where it came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from leakproof.core.moved_keys import home

SOURCE_HEADER = "leakproof.source"
MAX_RECORDS = 50_000  # a stage task's records per batch without a rate cap: one transaction
# How long a stage task rides out Kafka being away (a broker restarting, a leader moving)
# before it fails its batch: as long as an HBase outage is ridden out by default
OUTAGE_S = 120.0


def rekey_group(group: str) -> str:
    """The consumer group whose committed offsets say how far each source partition was
    re-keyed (written only inside the stage's transactions)."""
    return f"{group}.rekey"


def transactional_id(group: str, topic: str, partition: int) -> str:
    """The id every stage task of one source partition shares, whichever driver, executor or
    retry runs it: ``init_transactions`` under it fences each older copy and aborts the
    transaction it left open."""
    return f"leakproof-rekey-{group}-{topic}-{partition}"


def source_of(topic: str, partition: int, offset: int) -> bytes:
    """The ``leakproof.source`` header's value."""
    return f"{topic}:{partition}:{offset}".encode()


def parse_source(value: bytes | None) -> tuple[str, int, int] | None:
    """(topic, partition, offset) from a ``leakproof.source`` value; None if it is not one
    (topic names hold no ``:``)."""
    if not value:
        return None
    try:
        topic, partition, offset = value.decode().rsplit(":", 2)
        return topic, int(partition), int(offset)
    except ValueError:
        return None


def source_header(headers: Sequence[tuple[str, bytes | None]]) -> tuple[str, int, int] | None:
    """The source coordinates a record's headers carry, if any."""
    for name, value in headers:
        if name == SOURCE_HEADER:
            return parse_source(value)
    return None


def with_source(headers: Sequence[tuple[str, bytes | None]], topic: str, partition: int,
                offset: int) -> list[tuple[str, bytes | None]]:
    """The record's own headers and its source coordinates (one of its own of that name is
    replaced: the coordinates are the stage's to say)."""
    return [*((n, v) for n, v in headers if n != SOURCE_HEADER),
            (SOURCE_HEADER, source_of(topic, partition, offset))]


def placement(session_key: str | None, key: bytes | None, source_partition: int,
              partitions: int) -> tuple[bytes | None, int]:
    """The key and internal partition of one copied record.

    A decoded event goes under its session key, where Kafka's default partitioner puts it
    (the job checks keys are placed so: ``moved_keys``). A record that is not an event is
    forwarded under its own key (the job dead-letters it as it would have on the source):
    a keyed one where its key belongs, a null-keyed one to the source partition's own
    number, modulo the count (a fixed place, so a re-send would land beside the first)."""
    if session_key is not None:
        new = session_key.encode()
        return new, home(new, partitions)
    if key is not None:
        return key, home(key, partitions)
    return None, source_partition % partitions


def placer(source_partition: int, partitions: int
           ) -> Callable[[str | None, bytes | None], tuple[bytes | None, int]]:
    """``placement`` for one task's records (session key, record key), worked out once per
    session key: a session's events share their place, and murmur2 in Python is dear."""
    placed: dict[str, tuple[bytes | None, int]] = {}

    def place(session_key: str | None, key: bytes | None) -> tuple[bytes | None, int]:
        if session_key is None:
            return placement(None, key, source_partition, partitions)
        found = placed.get(session_key)
        if found is None:
            found = placed[session_key] = placement(session_key, None, source_partition,
                                                    partitions)
        return found

    return place


# how often a caught-up source partition's stage offset is committed again (alone, in a
# transaction): the group <group>.rekey never has members, so the broker expires an offset
# not committed for offsets.retention.minutes (7 days by default); an expired one would make
# the stage copy the partition again from its start, and the job count it twice
REFRESH_S = 3600.0


def stage_work(parts: Sequence[int], ends: Mapping[int, int], done: Mapping[int, int],
               refreshed: Mapping[int, float], now: float) -> list[tuple[int, int, bool]]:
    """The batch's stage tasks: (source partition, readable end, refresh only) for each
    partition with records not yet copied, and for each caught-up one whose offset this
    driver has not committed for ``REFRESH_S`` (never, at its start): that task copies
    nothing and commits the same offset again."""
    work = []
    for p in parts:
        if p not in done or done[p] < ends[p]:
            work.append((p, ends[p], False))
        elif now - refreshed.get(p, float("-inf")) >= REFRESH_S:
            work.append((p, ends[p], True))
    return work


def last_copy(records: Iterable[tuple[Sequence[tuple[str, bytes | None]], bytes | None, int]],
              topic: str, partition: int) -> tuple[int, bytes | None, int] | None:
    """Of ``records`` (headers, value, timestamp), the copy of ``topic``'s ``partition`` with
    the highest source offset: (that offset, its value, its timestamp); None if none is
    one. Where a stage whose committed offset is gone resumes -- after it, once the source
    still holds that very record (the copies may be an earlier topic's of that name)."""
    best: tuple[int, bytes | None, int] | None = None
    for headers, value, timestamp in records:
        source = source_header(headers)
        if source is not None and source[0] == topic and source[1] == partition and (
                best is None or source[2] > best[0]):
            best = (source[2], value, timestamp)
    return best


def stage_until(from_offset: int, readable_end: int, budget: int | None) -> int:
    """Where one stage task stops: the source's readable end, at most ``budget`` offsets on
    (None: ``MAX_RECORDS``), never below its start."""
    most = MAX_RECORDS if budget is None else budget
    return max(from_offset, min(readable_end, from_offset + most))


@dataclass(frozen=True)
class RekeyReport:
    """What one stage task did: the source range ``[from_offset, until_offset)`` it copied
    and committed, how many records, and how many of them were not events (forwarded under
    their own key, to be dead-lettered by the job)."""

    partition: int
    from_offset: int
    until_offset: int
    records: int = 0
    forwarded: int = 0
    committed: bool = True  # its offset committed in a transaction (False: nothing to do)


def totals(reports: Sequence[RekeyReport]) -> Mapping[str, int]:
    """A batch's stage counts, for its log line."""
    return {"records": sum(r.records for r in reports),
            "forwarded": sum(r.forwarded for r in reports),
            "offsets": sum(r.until_offset - r.from_offset for r in reports)}


@dataclass
class SourceRewind:
    """A rewind named in source offsets (``offsets rewind --to-source-offsets``), worked out
    over the internal topic: fed the records the job has read there (each internal
    partition's ``[log start, committed position)``, in offset order), it says where each
    internal partition must go back to so that every copy of a source record at or after
    its partition's target is read again.

    Records of other source partitions after that point are read again too: the fences
    keep that exact. Going forward cannot be said in these terms (an internal partition
    interleaves several source partitions: skipping one's records would skip the others'),
    nor going back past copies the internal topic no longer holds (its retention): both are
    refused (``problems``)."""

    topic: str
    targets: Mapping[int, int]  # source partition -> source offset
    # internal partition -> its first copy to read again
    back_to: dict[int, int] = field(default_factory=dict)
    # source partition -> the highest of its offsets read
    read: dict[int, int] = field(default_factory=dict)
    # (internal partition, source partition) -> the lowest source offset copied there
    lowest: dict[tuple[int, int], int] = field(default_factory=dict)

    def feed(self, internal_partition: int, offset: int,
             headers: Sequence[tuple[str, bytes | None]]) -> None:
        """One record read by the job from the internal topic."""
        source = source_header(headers)
        if source is None or source[0] != self.topic or source[1] not in self.targets:
            return
        _, partition, source_offset = source
        self.read[partition] = max(source_offset, self.read.get(partition, -1))
        self.lowest.setdefault((internal_partition, partition), source_offset)
        if source_offset >= self.targets[partition] and internal_partition not in self.back_to:
            self.back_to[internal_partition] = offset

    def positions(self, current: Mapping[int, int]) -> dict[int, int]:
        """Every internal partition's position after the rewind: back to its first copy to
        read again, the others where they are."""
        return {q: min(o, self.back_to.get(q, o)) for q, o in current.items()}

    def problems(self, trimmed: Iterable[int] = ()) -> list[str]:
        """Why this rewind cannot be done as asked (empty: it can). ``trimmed``: the internal
        partitions whose log start is above 0 (retention removed their oldest copies). The
        stage copies each source partition in order, so in such a partition the copies of a
        source partition that are gone are those below its lowest one still there: the
        rewind is safe there only at or above that copy -- and cannot be judged where none
        of that source partition's copies is left."""
        out = []
        cut = sorted(set(trimmed))
        for p, target in sorted(self.targets.items()):
            lows = {q: self.lowest.get((q, p)) for q in cut}
            unknown = [q for q, low in lows.items() if low is None]
            above = [low for low in lows.values() if low is not None and target < low]
            if target > self.read.get(p, -1) + 1:
                out.append(f"{self.topic} partition {p}: offset {target} is past what the job "
                           f"has read of it (up to {self.read.get(p, -1)}); under input.rekey "
                           f"a rewind only goes back")
            elif above:
                out.append(f"{self.topic} partition {p}: the copies of its offsets below "
                           f"{max(above)} are no longer all on the internal topic (its "
                           f"retention): name {max(above)} or above")
            elif unknown:
                out.append(f"{self.topic} partition {p}: internal partitions {unknown} lost "
                           f"their oldest records to retention and hold no copy of it left "
                           f"to tell which of its copies went")
        return out
