"""What a range needs from HBase and Kafka, as protocols.

The real ones: ``hbase.session_store.SessionStore`` (SessionRows), ``hbase.partition_store.
PartitionStore`` (PartitionRows), ``hbase.dead_letters.DeadLetterStore`` (DeadLetters),
``hbase.partition_store.LeaseReader`` (LeaseCheck) and ``kafka.closed_sink.ClosedSink``
(SummarySink). ``leakproof.testing`` has a fake of each.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from leakproof.core.errors import DecodeError
from leakproof.core.events import Event
from leakproof.core.open_index import Entry, IndexChanges
from leakproof.core.outbox import Outbox
from leakproof.core.sessions import NO_WATERMARK, PartitionState, SessionState
from leakproof.core.summaries import Encode, EncodeUpdate, Headers

__all__ = [
    "DeadLetters",
    "Decode",
    "LeaseCheck",
    "Mark",
    "PartitionRows",
    "PartitionSave",
    "Record",
    "SessionRows",
    "StoredPartition",
    "SummarySink",
    "Visits",
]


class Record(Protocol):
    """One Kafka record of the range, in offset order (``kafka.records.KafkaRecord``)."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...

    @property
    def timestamp(self) -> int: ...


class Decode(Protocol):
    """A record's event, or DecodeError naming its kind (``codec.Decoder.decode``)."""

    def __call__(self, key: bytes | None, value: bytes | None, *, topic: str, partition: int,
                 offset: int, timestamp: int, headers: Sequence[tuple[str, bytes | None]] = ()
                 ) -> Event: ...


class StoredPartition(NamedTuple):
    """A partition's state row: its watermark; the cutoff its last range closed below (the
    index holds no entry under it); below what an index entry may be stale, so must be
    checked against its session row (0: none may be); its outbox; its writer token
    (``kept_rows``: whose kept rows still hold); the width of its index's buckets (0:
    not recorded -- a row written before the width was kept); and the Kafka timestamp of
    the newest record it read with the watermark then (-1: none), from which an idle
    partition's watermark moves on by the silence the driver measured
    (``sessions.idle_after_s``; the timestamp only says a record was read);
    ``dead_until``: the highest offset a range of it ever dead-lettered (-1: none), so a
    replay knows when an earlier attempt may have dead-lettered a record it now decodes."""

    state: PartitionState
    cutoff: int
    check_below: int = 0
    outbox: Outbox = Outbox()
    writer: bytes = b""
    width: int = 0
    record_ts: int = -1
    record_wm: int = NO_WATERMARK
    dead_until: int = -1
    swept: int = 0  # the retention sweep's cut so far: no indexed session below it is left
    held: int = -1  # but in buckets from this one (-1: none), kept until committed


class Mark(NamedTuple):
    """What a range puts in its partition's row before it writes a session row: its pending
    mark (its watermark), its outbox if any, a fresh writer token, and -- before it writes
    dead letters -- the highest offset it dead-letters (``StoredPartition.dead_until``,
    never lowered; -1: it writes none, the cell is left as it is); and with a retention the
    sessions it closes, by bucket of last_ts, for the sweep to find (``retention``): put
    before their rows, so no crash leaves a closed row the sweep cannot find."""

    partition: int
    pending: int
    outbox: Outbox | None
    writer: bytes
    dead_until: int = -1
    retain: Mapping[int, Mapping[str, int]] = {}


class SessionRows(Protocol):
    """The session rows: aggregate and fences of a row in one atomic put."""

    def read(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        """The rows that exist among ``session_ids``, whole."""
        ...

    def read_expiry(self, session_ids: Iterable[str]) -> dict[str, SessionState]:
        """Only last_ts and state of the rows that exist among ``session_ids``."""
        ...

    def write(self, rows: Iterable[SessionState], close: Iterable[str] = (), *, ts: int,
              replaced: Collection[str] = ()) -> None:
        """Each row's changed cells with its fences in one put at timestamp ``ts``;
        ``close`` marks expired sessions closed; ``replaced``: rows a new session of the
        same key takes over (``sessions``: its old one forgotten), whose cells the new one
        does not write are deleted first."""
        ...

    def remove(self, session_ids: Iterable[str], *, ts: int) -> None:
        """Delete the rows of sessions merged into another or whose start moved (split by
        the gap), at timestamp ``ts``: after every row that absorbed them was written."""
        ...

    def images(self, session_ids: Iterable[str]) -> dict[str, bytes]:
        """Each row among ``session_ids`` this store read or wrote, as HBase now holds it,
        in bytes only ``adopt`` reads (the kept-rows cache holds them between ranges)."""
        ...

    def adopt(self, images: Mapping[str, bytes]) -> dict[str, SessionState]:
        """Rows known from their ``images`` instead of read: decoded, and taken for what
        HBase holds."""
        ...


class Visits(Protocol):
    """Each visitor's sessions (``sessions.by: gap``): their starts and last_ts, so a range
    finds the sessions its events may reach without a scan. A session row is always
    listed: ``add`` comes before the rows, ``drop`` after their deletes."""

    def read(self, visitors: Iterable[str]) -> dict[str, dict[int, int]]:
        """visitor -> {first_ts: last_ts} of its listed sessions (visitors with none left
        out)."""
        ...

    def add(self, sessions: Mapping[str, Mapping[int, int]], *, ts: int) -> None:
        """List (or update) sessions: visitor -> {first_ts: last_ts}, at timestamp ``ts``."""
        ...

    def drop(self, sessions: Mapping[str, Iterable[int]], *, ts: int) -> None:
        """Unlist sessions (visitor -> first_ts) whose rows are gone, at timestamp ``ts``."""
        ...


class PartitionSave(NamedTuple):
    """What a range leaves in its partition's rows: the index changes, then the watermark
    and the cutoff it closed below, keeping ``check_below`` (what the read said) and the
    width its index's buckets have (0: leave it unrecorded)."""

    partition: int
    state: PartitionState
    changes: IndexChanges
    cutoff: int
    check_below: int
    width: int = 0
    record_ts: int = -1  # the newest record's Kafka timestamp, and the watermark then
    record_wm: int = NO_WATERMARK
    # the retention sweep's cut after the range (0: unchanged), the retention index's
    # entries it is done with (bucket -> sessions), deleted before the watermark, and the
    # lowest bucket below the cut still listing a session it kept (-1: none)
    swept: int = 0
    forget: Mapping[int, Collection[str]] = {}
    held: int = -1


class PartitionRows(Protocol):
    """Source partitions' state: watermark, open-session index, outbox. Reads and writes
    take several partitions of a topic at once (one task's ranges), each in one call."""

    def read_partitions(self, topic: str, partitions: Sequence[int], width: int, *, ts: int
                        ) -> dict[int, StoredPartition]:
        """Each partition's state row; a row of an older layout is moved into the index
        first, its cells written at timestamp ``ts``."""
        ...

    def scan_open(self, topic: str, partition: int, since: int, before: int) -> list[Entry]:
        """The index entries in buckets that start below ``before``."""
        ...

    def write_partitions(self, topic: str, saves: Sequence[PartitionSave], *, ts: int
                         ) -> None:
        """Every save's index puts, then every save's deletes, then the watermarks: none
        ahead of its index; then the pending marks are cleared. All at timestamp ``ts``."""
        ...

    def begin_writes(self, topic: str, marks: Sequence[Mark],
                     foreign: Sequence[tuple[str, int]] = (), *, ts: int) -> None:
        """Before any session row: each range's ``Mark`` (its watermark: no index entry its
        writes may leave stale is newer), and a fresh ``w:foreign`` token for each (topic,
        partition) in ``foreign``: partitions whose fence a row about to be written bears."""
        ...

    def outbox_published(self, topic: str, partition: int, outbox_id: str, *, ts: int
                         ) -> None: ...

    def watermarks(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """Other partitions' stored watermarks, read only (``NO_WATERMARK``: none yet)."""
        ...

    def hand_over(self, topic: str, changes: Sequence[tuple[int, IndexChanges]], *, ts: int
                  ) -> None:
        """Entries put in other partitions' indexes (sessions whose keys moved there and
        that only their watermark may close), at timestamp ``ts``."""
        ...

    def scan_retained(self, topic: str, partition: int, since: int, before: int
                      ) -> list[Entry]:
        """The retention index's entries in buckets from ``since`` (the last sweep's cut)
        that start below ``before`` (``retention.cut``): closed sessions, by last_ts."""
        ...


class LeaseCheck(Protocol):
    """The driver lease's epoch now (None: no driver ever held it)."""

    def epoch(self) -> int | None: ...


class DeadLetters(Protocol):
    def write(self, errors: Iterable[DecodeError], batch_ms: int, *, ts: int,
              incarnation: str = "") -> None:
        """One row per undecodable record, keyed by topic (tagged with ``incarnation``, a
        recreated topic's: ``dead_letter.source``), partition and offset, its cells at
        timestamp ``ts``."""
        ...

    def withdraw(self, topic: str, partition: int, offsets: Collection[int], *, ts: int
                 ) -> int:
        """Delete, at timestamp ``ts``, the dead letters among ``offsets`` of the partition
        that no redrive has marked (``topic``: the name they go under, ``dead_letter.
        source``): an earlier attempt of the range wrote them, and this one decoded their
        records. Returns how many went."""
        ...


class SummarySink(Protocol):
    """The closed-session summaries of one source partition (Kafka, in transactions);
    ``encode`` makes a summary's record value (``leakproof.core.summaries``; None: JSON);
    ``updates``: every change goes out, open sessions' too (``output.emit: update``), each
    value made by ``encode_update`` (None: JSON); ``every_ms``: an open session's at most
    once per that many ms (``output.emit: {every_s: N}``; None: every change)."""

    encode: Encode | None
    updates: bool
    encode_update: EncodeUpdate | None
    every_ms: int | None

    def published(self, outbox_id: str) -> bool:
        """Whether the outbox ``outbox_id`` went out (its commit marker says so)."""
        ...

    def publish(self, records: Sequence[tuple[bytes, bytes | None]], outbox_id: str,
                until_offset: int, headers: Sequence[Headers] = ()) -> None:
        """``records`` (key, value; None: a tombstone) and the outbox's marker: all
        committed, or none. ``headers``: none, or one list per record, in order."""
        ...
