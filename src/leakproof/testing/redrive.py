"""Fakes of a redrive's ports (``ports.redrive``): dead-letter rows, a broker and the
transactional target the copies go to."""


from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from leakproof.core.dead_letter import ALL, DeadLetter, RedriveMark, Selection, origin_of
from leakproof.core.errors import PublishError


class FakeDeadLetterRows:
    """``ports.redrive.DeadLetterRows``: the dead-letter rows as values, in row-key order;
    ``mark`` is a compare-and-set on the row's mark, as the checkAndPut is."""

    def __init__(self, letters: Iterable[DeadLetter]) -> None:
        self.rows = {(d.topic, d.partition, d.offset): d for d in letters}

    def letters(self, topic: str, selection: Selection = ALL, brief: bool = False
                ) -> Iterator[DeadLetter]:
        keys = sorted((k for k in self.rows if k[0] == topic), key=lambda k: (str(k[1]), k[2]))
        return selection.pick(self.rows[k] for k in keys)

    def mark(self, letter: DeadLetter, new: RedriveMark) -> bool:
        key = (letter.topic, letter.partition, letter.offset)
        if self.rows[key].mark != letter.mark:
            return False
        self.rows[key] = replace(self.rows[key], mark=new)
        return True


@dataclass
class FakeLogRecord:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    txn: str
    state: str  # open | committed | aborted


@dataclass
class FakeBroker:
    """Partitions of one topic written in transactions, the broker's way: a producer's init
    bumps its id's epoch, fencing older producers, and aborts what the id left open; a
    read_committed reader sees committed records only."""

    logs: dict[int, list[FakeLogRecord]] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)

    def committed(self, partition: int) -> list[tuple[int, FakeLogRecord]]:
        return [(o, r) for o, r in enumerate(self.logs.get(partition, []))
                if r.state == "committed"]


class FakeRedriveTarget:
    """``ports.redrive.RedriveTarget`` on a FakeBroker. ``crash``, called with
    "redrive_before_commit" between the sends and the commit, may raise to play a process
    killed there: its transaction then stays open until the next fence of its id."""

    def __init__(self, broker: FakeBroker, partition: int, txn_id: str,
                 crash: Callable[[str], None] = lambda _: None) -> None:
        self.broker, self.partition, self.txn_id = broker, partition, txn_id
        self._crash = crash
        self._epoch: int | None = None

    def fence(self) -> int:
        self._epoch = self.broker.epochs.get(self.txn_id, 0) + 1
        self.broker.epochs[self.txn_id] = self._epoch
        log = self.broker.logs.setdefault(self.partition, [])
        for rec in log:
            if rec.txn == self.txn_id and rec.state == "open":
                rec.state = "aborted"
        return len(log)

    def copies(self, from_offset: int, until_offset: int) -> dict[str, int]:
        found: dict[str, int] = {}
        for offset, rec in self.broker.committed(self.partition):
            name = origin_of(rec.headers)
            if from_offset <= offset < until_offset and name is not None:
                found.setdefault(name, offset)
        return found

    def send(self, records: Sequence[tuple[bytes | None, bytes | None,
                                           Sequence[tuple[str, bytes | None]]]]) -> list[int]:
        if self.broker.epochs.get(self.txn_id) != self._epoch:
            raise PublishError(f"{self.txn_id}: fenced by a newer producer")
        log = self.broker.logs.setdefault(self.partition, [])
        sent = [FakeLogRecord(k, v, tuple(h), self.txn_id, "open") for k, v, h in records]
        first = len(log)
        log.extend(sent)
        self._crash("redrive_before_commit")
        if self.broker.epochs.get(self.txn_id) != self._epoch:  # fenced while sending
            raise PublishError(f"{self.txn_id}: fenced by a newer producer")
        for rec in sent:
            rec.state = "committed"
        return list(range(first, first + len(sent)))

    def close(self) -> None:
        pass
