"""A dead letter as operators and the redrive see it (pure): the record as Kafka had it, why
it was set aside, and where a redrive took it.

A re-driven record goes back to its source topic and partition with its key, value and
headers as they were, plus the header ``leakproof.redriven-from: <topic>:<partition>:<offset>``
naming the dead letter it came from (one such header: a copy of a copy names its nearest
original, and the dead-letter rows link the rest of the chain). A copy that is still bad is
dead-lettered again, its row's ``d:redriven_from`` naming that origin.

A redrive marks each dead-letter row before it sends the record (``d:redrive``, a
``RedriveMark``), so that a redrive started after any crash knows where a copy may already
be: see ``commands/redrive.py`` and docs/DESIGN.md, "Re-driving dead letters".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

ORIGIN_HEADER = "leakproof.redriven-from"
PENDING, SENT = "pending", "sent"
Headers = Sequence[tuple[str, bytes | None]]


def source(topic: str, incarnation: str = "") -> str:
    """The name a topic's dead letters go under -- their row keys' first part and their
    copies' origin header: the topic's, or ``<topic>~<tag>`` for a topic recreated under the
    same name (``tag`` its incarnation, as its fences carry it: ``sessions.fence_key``).
    A recreated topic's offsets start again at 0: under the old name its dead letters
    would take the old ones' rows and their redrive marks."""
    return f"{topic}~{incarnation}" if incarnation else topic


def origin(topic: str, partition: int, offset: int) -> str:
    """The origin header's value: the coordinates of the record a copy was made of."""
    return f"{topic}:{partition}:{offset}"


def parse_origin(text: str) -> tuple[str, int, int] | None:
    """``origin``'s value read back (None: not one)."""
    topic, _, rest = text.rpartition(":")
    topic, _, partition = topic.rpartition(":")
    if not topic or not partition.isdigit() or not rest.isdigit():
        return None
    return topic, int(partition), int(rest)


def origin_of(headers: Headers) -> str | None:
    """The origin a record's headers name (the last such header), or None."""
    found = None
    for name, value in headers:
        if name == ORIGIN_HEADER and value is not None:
            found = value.decode("utf-8", errors="replace")
    return found


def encode_headers(headers: Headers) -> bytes:
    """Headers as the dead-letter row keeps them: JSON ``[[name, hex value or null], ...]``,
    in order (names may repeat; values are bytes)."""
    return json.dumps([[name, None if value is None else value.hex()]
                       for name, value in headers]).encode()


def decode_headers(raw: bytes | None) -> list[tuple[str, bytes | None]]:
    if not raw:
        return []
    return [(str(name), None if value is None else bytes.fromhex(value))
            for name, value in json.loads(raw)]


@dataclass(frozen=True)
class RedriveMark:
    """A dead-letter row's redrive state (the cell ``d:redrive``, one text value, so one
    checkAndPut moves it).

    ``pending``: a redrive with transactional id ``txn`` is sending it; a committed copy, if
    any, is at or after offset ``scan_from`` of the record's partition. ``sent``: its copy
    is at ``copy_offset``. ``at_ms``: when the mark was made.
    """

    state: str
    txn: str
    at_ms: int
    scan_from: int = 0
    copy_offset: int = -1

    def encode(self) -> bytes:
        where = (f"from={self.scan_from}" if self.state == PENDING
                 else f"copy={self.copy_offset}")
        return f"{self.state} {where} at={self.at_ms} txn={self.txn}".encode()

    @classmethod
    def parse(cls, raw: bytes) -> RedriveMark:
        state, *fields = raw.decode().split(" ")
        values = dict(f.split("=", 1) for f in fields)
        if state not in (PENDING, SENT):
            raise ValueError(f"not a redrive mark: {raw!r}")
        return cls(state, values["txn"], int(values["at"]), int(values.get("from", 0)),
                   int(values.get("copy", -1)))


@dataclass(frozen=True)
class DeadLetter:
    """One dead-letter row, read back. ``topic`` is the name its row goes under (``source``:
    with a recreated topic's tag). ``timestamp_ms`` is the record's Kafka timestamp (None in
    rows written before it was kept: then ``time_ms`` is the batch's)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    kind: str
    error: str
    error_type: str
    batch_ms: int
    timestamp_ms: int | None = None
    mark: RedriveMark | None = None
    redriven_from: str | None = None

    @property
    def origin(self) -> str:
        """What a copy of it names in its origin header."""
        return origin(self.topic, self.partition, self.offset)

    @property
    def time_ms(self) -> int:
        return self.batch_ms if self.timestamp_ms is None else self.timestamp_ms

    @property
    def state(self) -> str:
        """``waiting`` (never re-driven), ``pending`` or ``sent``."""
        return "waiting" if self.mark is None else self.mark.state

    def copy_headers(self) -> list[tuple[str, bytes | None]]:
        """Its headers for a copy: as they were, an older origin header replaced by its own."""
        return [*((n, v) for n, v in self.headers if n != ORIGIN_HEADER),
                (ORIGIN_HEADER, self.origin.encode())]


@dataclass(frozen=True)
class Selection:
    """Which dead letters a command takes. Empty fields take all; ``since_ms`` / ``until_ms``
    and ``from_offset`` / ``until_offset`` are half-open ranges ``[from, until)``."""

    kinds: frozenset[str] = frozenset()
    partitions: frozenset[int] = frozenset()
    since_ms: int | None = None
    until_ms: int | None = None
    from_offset: int = 0
    until_offset: int | None = None
    states: frozenset[str] = frozenset()

    def matches(self, letter: DeadLetter) -> bool:
        return ((not self.kinds or letter.kind in self.kinds)
                and (not self.partitions or letter.partition in self.partitions)
                and (self.since_ms is None or letter.time_ms >= self.since_ms)
                and (self.until_ms is None or letter.time_ms < self.until_ms)
                and letter.offset >= self.from_offset
                and (self.until_offset is None or letter.offset < self.until_offset)
                and (not self.states or letter.state in self.states))

    def pick(self, letters: Iterable[DeadLetter]) -> Iterator[DeadLetter]:
        return (letter for letter in letters if self.matches(letter))


ALL = Selection()
