"""``leakproof deadletters redrive``: send dead letters back to their source topic -- key,
value and headers as they were, plus the header naming their origin -- in Kafka
transactions, at a bounded rate, each record **once**, whatever crashes. The job then reads
the copies like any other record: their events reach their sessions exactly once through the
fences, and a copy that is still bad comes back as a new dead letter linked to its original.

Per partition of the dead letters (docs/DESIGN.md, "Re-driving dead letters", has the
argument):

1. fence: a producer of the partition's fixed transactional id starts; the broker fences
   every older one and aborts the transaction one left open; the partition's log end is read
   after that, once its stable end has reached it;
2. read the selected rows' marks (after the fence); for the rows an interrupted redrive
   marked ``pending``, read the partition from the lowest mark's ``scan_from`` to that end
   for copies carrying their origin: a row with a copy is marked ``sent``, never sent again;
3. in chunks (one transaction each, at most a second's worth at ``--rate``): mark each row
   ``pending`` (a checkAndPut from the mark it was read with; ``scan_from`` the end of step 1,
   or its older mark's if lower), send the chunk in one transaction and commit it, mark each
   row ``sent`` with its copy's offset.

A crash anywhere leaves each row either unmarked (nothing sent), ``pending`` (its copy
committed or not: step 2 of the next redrive tells which) or ``sent``.

Only the dead letters of offsets the job has committed are taken: a row at or past its
partition's committed offset belongs to a batch still in flight, whose replay may decode
the record after all (its cause fixed) and withdraw the row (``task.process``). Such rows
are left, counted in ``in_flight``, for a redrive after the job has committed them.

With ``input.rekey`` the job's dead letters sit on the internal topic, but a copy is sent to
the *source* partition its record was copied from (``Lanes``): the stage re-keys it like any
record, under the session key it finds now (a copy sent to the internal topic would keep
its old key and land where that key belongs, not where its session is). The steps above then
run per source partition, over the rows whose record came from it.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice

from leakproof.core.config import Config
from leakproof.core.dead_letter import PENDING, SENT, DeadLetter, RedriveMark, Selection
from leakproof.core.rekey import SOURCE_HEADER, source_header
from leakproof.ports.redrive import Copy, DeadLetterRows, RedriveTarget
from leakproof.testing.crashpoints import crash_point

log = logging.getLogger(__name__)

CHUNK_MAX = 500  # records per transaction at most
PROGRESS_S = 1.0  # a progress line at most this often


@dataclass
class RedriveReport:
    """What a redrive did (or, dry, would do): rows selected, sent now, found sent by an
    interrupted redrive (marked now), and left to another redrive that moved them first;
    and the rows the selection takes that it left, their batch still in flight."""

    selected: int = 0
    sent: int = 0
    found: int = 0
    taken: int = 0
    in_flight: int = 0
    by_partition: dict[int, int] = field(default_factory=dict)  # selected, per partition
    started: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        return self.sent + self.found + self.taken

    def line(self, topic: str) -> str:
        """The progress line."""
        took = max(time.monotonic() - self.started, 1e-9)
        rate = self.sent / took
        left = max(0, self.selected - self.done)
        eta = f"about {left / rate:.0f}s left" if rate and left else "done" if not left else ""
        pct = 100.0 * self.done / self.selected if self.selected else 100.0
        held = (f", {self.in_flight} left: their batch is not committed yet"
                if self.in_flight else "")
        return (f"redrive of {topic}: {self.done}/{self.selected} ({pct:.0f}%): {self.sent} "
                f"sent, {self.found} found sent already, {self.taken} taken by another "
                f"redrive{held}; {rate:.0f}/s; {eta}").rstrip("; ")

    def as_json(self) -> dict[str, object]:
        return {"selected": self.selected, "sent": self.sent, "found": self.found,
                "taken": self.taken, "in_flight": self.in_flight,
                "by_partition": dict(sorted(self.by_partition.items())),
                "seconds": round(time.monotonic() - self.started, 3)}


class Pace:
    """At most ``rate`` records a second, over the whole redrive (None: no limit)."""

    def __init__(self, rate: float | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate is not None and rate <= 0:
            raise ValueError("'rate' must be > 0")
        self.rate, self._clock, self._sleep = rate, clock, sleep
        self._start = clock()
        self._count = 0

    @property
    def chunk(self) -> int:
        """Records per transaction: a second's worth, at most CHUNK_MAX."""
        return CHUNK_MAX if self.rate is None else max(1, min(CHUNK_MAX, math.floor(self.rate)))

    def wait(self, records: int) -> None:
        """Count ``records`` as sent; sleep while ahead of the rate."""
        self._count += records
        if self.rate is not None:
            ahead = self._count / self.rate - (self._clock() - self._start)
            if ahead > 0:
                self._sleep(ahead)


# whether the source still holds a record: (partition, offset, value, timestamp) -> bool
Holds = Callable[[int, int, bytes | None, int | None], bool]


class Lanes:
    """Which partition each dead letter's copy goes to: the one its row names (a keyed
    topic), or, with ``source`` (``input.rekey``), the partition of ``source`` its record
    was copied from -- only while that partition still holds that very record (``holds``:
    same value and timestamp, the stage's own test of a record's identity). A source
    recreated under its name holds other records at those offsets: sending there would put
    a letter of the old topic into the new one, and a pending mark's scan would search a log
    that never held its copy. Each row is judged once (``left`` counts those left, by why)."""

    def __init__(self, source: str | None = None, holds: Holds | None = None) -> None:
        self.source, self._holds = source, holds
        self._judged: dict[tuple[int, int], int | None] = {}
        self.left: dict[str, int] = {}

    @property
    def rekeyed(self) -> bool:
        return self.source is not None

    def of(self, letter: DeadLetter) -> int | None:
        """The partition ``letter``'s copy goes to; None for a row that is left."""
        if self.source is None:
            return letter.partition
        at = (letter.partition, letter.offset)
        if at not in self._judged:
            self._judged[at] = self._judge(letter)
        return self._judged[at]

    def _judge(self, letter: DeadLetter) -> int | None:
        found = source_header(letter.headers)
        if found is None or found[0] != self.source:
            why = "it names no source record of " + str(self.source)
        elif self._holds is not None and not self._holds(found[1], found[2], letter.value,
                                                         letter.timestamp_ms):
            why = "the source no longer holds its record there (recreated, or trimmed)"
        else:
            return found[1]
        self.left[why] = self.left.get(why, 0) + 1
        return None

    def copy(self, letter: DeadLetter) -> Copy:
        """What is sent: the record as it was, with its origin (to the source: without the
        internal topic's source header, which the stage writes anew)."""
        headers = letter.copy_headers()
        if self.rekeyed:
            headers = [(n, v) for n, v in headers if n != SOURCE_HEADER]
        return letter.key, letter.value, headers


class Progress:
    """The report, said at most once a second and at the end."""

    def __init__(self, topic: str, report: RedriveReport, say: Callable[[str], None]) -> None:
        self._topic, self.report, self._say = topic, report, say
        self._last = 0.0

    def tick(self, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self._last >= PROGRESS_S:
            self._last = now
            self._say(self.report.line(self._topic))


def count(rows: DeadLetterRows, topic: str, selection: Selection,
          committed: Mapping[int, int] | None = None, lanes: Lanes | None = None
          ) -> RedriveReport:
    """The rows a redrive of ``selection`` takes, per partition they go to (read without
    their bytes where the lanes allow); with ``committed`` (each partition's committed
    offset) only those below it, the others counted in ``in_flight``."""
    lanes = lanes or Lanes()
    report = RedriveReport()
    for letter in _selected(rows, topic, selection, brief=not lanes.rekeyed):
        if not settled(letter, committed):
            report.in_flight += 1
            continue
        where = lanes.of(letter)
        if where is None:
            continue
        report.selected += 1
        report.by_partition[where] = report.by_partition.get(where, 0) + 1
    for why, n in sorted(lanes.left.items()):
        log.warning("%s: %d selected dead letters are left: %s; produce their fixed records "
                    "to %s by hand", topic, n, why, lanes.source)
    return report


def settled(letter: DeadLetter, committed: Mapping[int, int] | None) -> bool:
    """Whether the job committed the batch that read ``letter``'s record (None: taken as
    known to be so); a partition it never committed holds none."""
    return committed is None or letter.offset < committed.get(letter.partition, 0)


def redrive_partition(rows: DeadLetterRows, target: RedriveTarget, topic: str, partition: int,
                      selection: Selection, pace: Pace, progress: Progress,
                      now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                      committed: Mapping[int, int] | None = None,
                      lanes: Lanes | None = None) -> None:
    """The steps of the module docstring for the selected dead letters whose copies go to
    ``partition`` (with ``committed``: those below their partition's committed offset)."""
    report, txn = progress.report, target.txn_id
    lanes = lanes or Lanes()

    def mine(brief: bool = False) -> Iterator[DeadLetter]:
        if not lanes.rekeyed:  # a partition's rows: one scan of its key range
            only = replace(selection, partitions=frozenset({partition}))
            return _selected(rows, topic, only, brief)
        return (letter for letter in _selected(rows, topic, selection)
                if lanes.of(letter) == partition)

    # 1. fence every older producer of this partition's id; the end read after it
    end = target.fence()
    # 2. copies an interrupted redrive committed before the fence lie in [scan_from, end)
    pending = [letter.mark.scan_from for letter in mine(brief=True)
               if letter.mark is not None and letter.mark.state == PENDING
               and settled(letter, committed)]
    found = target.copies(min(pending), end) if pending else {}
    if found:
        log.info("%s partition %d: %d dead letters an interrupted redrive sent are in the "
                 "topic already; marking them sent", topic, partition, len(found))
    # 3. the rest in chunks: mark pending, one transaction, mark sent
    chunk: list[DeadLetter] = []
    for letter in mine():
        if not settled(letter, committed):
            continue  # its batch is in flight (``count`` told)
        if letter.origin in found:
            sent = RedriveMark(SENT, txn, now_ms(), copy_offset=found[letter.origin])
            if rows.mark(letter, sent):
                report.found += 1
            else:
                report.taken += 1
            continue
        chunk.append(letter)
        if len(chunk) >= pace.chunk:
            _send(rows, target, chunk, end, pace, progress, now_ms, lanes)
            chunk = []
    if chunk:
        _send(rows, target, chunk, end, pace, progress, now_ms, lanes)


def _send(rows: DeadLetterRows, target: RedriveTarget, chunk: list[DeadLetter], end: int,
          pace: Pace, progress: Progress, now_ms: Callable[[], int], lanes: Lanes) -> None:
    report, txn = progress.report, target.txn_id
    marked = []
    for letter in chunk:
        scan_from = end if letter.mark is None else min(end, letter.mark.scan_from)
        mark = RedriveMark(PENDING, txn, now_ms(), scan_from=scan_from)
        if rows.mark(letter, mark):
            marked.append(replace(letter, mark=mark))
        else:
            report.taken += 1  # another redrive moved it since it was read: its to finish
    crash_point("redrive_after_mark")
    if marked:
        offsets = target.send([lanes.copy(m) for m in marked])
        crash_point("redrive_after_commit")
        for letter, offset in zip(marked, offsets, strict=True):
            # False: a later redrive found the copy and marked it sent first; it is sent
            rows.mark(letter, RedriveMark(SENT, txn, now_ms(), copy_offset=offset))
        report.sent += len(marked)
    pace.wait(len(chunk))
    progress.tick()


def _selected(rows: DeadLetterRows, topic: str, selection: Selection, brief: bool = False
              ) -> Iterator[DeadLetter]:
    """The rows the selection takes that are not sent yet."""
    return rows.letters(topic, replace(selection, states=frozenset({"waiting", PENDING})),
                        brief)


def redrive(cfg: Config, selection: Selection, rate: float | None,
            say: Callable[[str], None], dry_run: bool = False) -> RedriveReport:
    """Re-drive the selected dead letters of ``cfg``'s topic (``dry_run``: count them and
    send nothing, mark nothing); progress through ``say``."""
    from leakproof.commands.dead_letters import current_source
    from leakproof.core.config import session_stage
    from leakproof.hbase.dead_letters import DeadLetterRows as HBaseRows
    from leakproof.kafka.redrive import SourceRecords, TransactionalPartition, transactional_id

    topic = cfg.kafka.topic  # where the copies go: with input.rekey, the source
    records = SourceRecords(cfg.kafka, topic) if cfg.input.rekey is not None else None
    lanes = Lanes(topic, records.holds) if records is not None else Lanes()
    name = current_source(cfg)  # the rows of the topic as it is now (recreated: tagged)
    committed = committed_offsets(session_stage(cfg))  # the job's: of the topic it reads
    rows = HBaseRows(cfg.hbase)
    try:
        planned = count(rows, name, selection, committed, lanes)
        if planned.in_flight:
            log.warning("%s: %d selected dead letters are at or past their partition's "
                        "committed offset (committed: %s): their batch is still in flight, "
                        "and its replay may decode them after all; not re-driving them now",
                        name, planned.in_flight, dict(sorted(committed.items())))
        if dry_run or not planned.selected:
            return planned
        progress = Progress(name, RedriveReport(planned.selected,
                                                 by_partition=planned.by_partition,
                                                 in_flight=planned.in_flight), say)
        pace = Pace(rate)
        table = cfg.hbase.full_name(cfg.hbase.dead_letter_table)
        for partition in sorted(planned.by_partition):
            target = TransactionalPartition(cfg.kafka, topic, partition,
                                            transactional_id(table, topic, partition))
            try:
                redrive_partition(rows, target, name, partition, selection, pace, progress,
                                  committed=committed, lanes=lanes)
            finally:
                target.close()
        progress.tick(final=True)
        return progress.report
    finally:
        rows.close()
        if records is not None:
            records.close()


def committed_offsets(cfg: Config) -> dict[int, int]:
    """Each partition's offset the job committed last (none yet: an empty map)."""
    from leakproof.commit_stores import open_store
    from leakproof.core.errors import TableMissing

    store = open_store(cfg)
    try:
        latest = store.latest()
    except TableMissing:  # the job never ran: nothing is committed
        latest = None
    finally:
        store.close()
    return dict(latest.offsets) if latest is not None else {}


def print_redrive(cfg: Config, selection: Selection, rate: float | None, dry_run: bool,
                  say: Callable[[str], None] = print,
                  progress: Callable[[str], None] = print) -> int:
    """``redrive``: the progress through ``progress``, the report through ``say`` (a dry
    run: what would go, and the first 20 of them)."""
    from leakproof.commands.dead_letters import HEADER, letters, line

    report = redrive(cfg, selection, rate, progress, dry_run=dry_run)
    if dry_run:
        rekey = cfg.input.rekey
        where = (f"of {rekey.internal_topic(cfg.kafka.topic)} to its source {cfg.kafka.topic}"
                 f" (by source partition)" if rekey is not None else f"of {cfg.kafka.topic} to it")
        say(f"would re-drive {report.selected} dead letters {where}"
            + (f", at most {rate:g} a second" if rate else "") + ": "
            + ", ".join(f"partition {p} {n}" for p, n in sorted(report.by_partition.items())))
        say(HEADER)
        going = replace(selection, states=frozenset({"waiting", PENDING}))
        for letter in islice(letters(cfg, going), 20):
            say(line(letter))
    say(json.dumps({**report.as_json(), "dry_run": dry_run}, sort_keys=True))
    return 0
