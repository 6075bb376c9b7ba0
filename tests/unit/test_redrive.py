"""Re-driving dead letters, each once whatever crashes: the marks, the copies' headers, the
selection and the pace with literals, then the redrive's steps over the fakes of
``leakproof.testing`` (a broker keeping transactions its way) with a crash at every point,
followed by a redrive run again."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from leakproof.cli import build_parser
from leakproof.commands import redrive as redrive_mod
from leakproof.commands.redrive import (
    Lanes,
    Pace,
    Progress,
    RedriveReport,
    count,
    redrive_partition,
)
from leakproof.core.dead_letter import (
    ALL,
    ORIGIN_HEADER,
    PENDING,
    SENT,
    DeadLetter,
    RedriveMark,
    Selection,
    decode_headers,
    encode_headers,
    origin_of,
    parse_origin,
    source,
)
from leakproof.core.errors import PublishError, ValueDecodeError
from leakproof.core.events import Event
from leakproof.core.gap_fold import GapFolder, GapRule, session_key
from leakproof.core.offsets import OffsetRange
from leakproof.core.reports import TaskReport
from leakproof.core.sessions import Outcome, PartitionFolder, PartitionState, SessionState
from leakproof.hbase.dead_letters import from_cells, row_key, to_cells
from leakproof.model.compiled import compile_model
from leakproof.model.spec import Model
from leakproof.task.process import Rules, Stores, TaskBatch, process_ranges
from leakproof.testing.hbase_table import Journal
from leakproof.testing.oracle import compare, expected_gap_rows_merged, expected_rows_merged
from leakproof.testing.redrive import FakeBroker, FakeDeadLetterRows, FakeRedriveTarget
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
    FakeVisits,
)

from .test_oracle_gap import PLAIN, SEQUENCED
from .test_process_range import Rec

TXN = "leakproof-redrive-dl-t-0"  # partition 0's, as ``attempt`` names them


def letter(offset: int, partition: int = 0, kind: str = "unknown_schema_id",
           mark: RedriveMark | None = None, ts: int = 1_000) -> DeadLetter:
    return DeadLetter("t", partition, offset, f"k{offset}".encode(), f"v{offset}".encode(),
                      (("trace", b"\x01"),), kind, "schema id 7 is not in the registry",
                      "ValueDecodeError", 5_000, ts, mark)


def test_a_mark_is_one_text_cell_read_back() -> None:
    pending = RedriveMark(PENDING, TXN, 1_700, scan_from=42)
    assert pending.encode() == f"pending from=42 at=1700 txn={TXN}".encode()
    assert RedriveMark.parse(pending.encode()) == pending
    sent = RedriveMark(SENT, TXN, 1_800, copy_offset=99)
    assert sent.encode() == f"sent copy=99 at=1800 txn={TXN}".encode()
    assert RedriveMark.parse(sent.encode()) == sent
    with pytest.raises(ValueError):
        RedriveMark.parse(b"gone at=1 txn=x")


def test_a_copy_keeps_its_headers_and_names_its_origin_once() -> None:
    assert parse_origin("web-events:3:120") == ("web-events", 3, 120)
    assert parse_origin("nonsense") is None and parse_origin("t:x:1") is None
    first = letter(7)
    assert first.copy_headers() == [("trace", b"\x01"), (ORIGIN_HEADER, b"t:0:7")]
    # a copy that was bad again and is re-driven once more names its nearest original
    again = DeadLetter("t", 0, 30, b"k", b"v", tuple(first.copy_headers()), "not_avro", "",
                       "ValueDecodeError", 0)
    assert again.copy_headers() == [("trace", b"\x01"), (ORIGIN_HEADER, b"t:0:30")]
    assert origin_of(again.copy_headers()) == "t:0:30"
    headers = [("a", b"\x00\xff"), ("a", None), ("b", b"")]
    assert decode_headers(encode_headers(headers)) == headers
    assert encode_headers(headers) == b'[["a", "00ff"], ["a", null], ["b", ""]]'


def test_the_row_keeps_the_record_its_time_its_headers_and_its_link() -> None:
    err = ValueDecodeError("schema id 7 is not in the registry", kind="unknown_schema_id",
                           topic="t", partition=2, offset=31, key=None, value=b"\x00\x07",
                           timestamp=1_234, headers=[("x", b"1"), (ORIGIN_HEADER, b"t:2:5")])
    cells = to_cells(err, 9_000)
    assert cells[b"d:timestamp"] == b"1234" and cells[b"d:redriven_from"] == b"t:2:5"
    back = from_cells(row_key("t", 2, 31), cells)
    assert (back.key, back.value, back.headers, back.timestamp_ms, back.redriven_from) == (
        None, b"\x00\x07", (("x", b"1"), (ORIGIN_HEADER, b"t:2:5")), 1_234, "t:2:5")
    assert (back.kind, back.batch_ms, back.state) == ("unknown_schema_id", 9_000, "waiting")
    cells[b"d:redrive"] = RedriveMark(SENT, TXN, 1, copy_offset=40).encode()
    assert from_cells(row_key("t", 2, 31), cells).state == SENT
    old = {k: v for k, v in cells.items() if k not in (b"d:timestamp", b"d:headers")}
    assert from_cells(row_key("t", 2, 31), old).time_ms == 9_000  # an older row: batch time


def test_selection() -> None:
    letters = [letter(1, 0, ts=100), letter(2, 1, "not_avro", ts=200),
               letter(3, 1, ts=300, mark=RedriveMark(SENT, TXN, 1, copy_offset=9))]

    def pick(s: Selection) -> list[int]:
        return [d.offset for d in s.pick(letters)]

    assert pick(Selection()) == [1, 2, 3]
    assert pick(Selection(kinds=frozenset({"not_avro"}))) == [2]
    assert pick(Selection(partitions=frozenset({1}), from_offset=3)) == [3]
    assert pick(Selection(since_ms=200, until_ms=300)) == [2]
    assert pick(Selection(until_offset=2)) == [1]
    assert pick(Selection(states=frozenset({"waiting"}))) == [1, 2]


def test_pace_sleeps_while_ahead_of_the_rate_and_sizes_the_transactions() -> None:
    now = [0.0]
    slept: list[float] = []
    pace = Pace(100.0, clock=lambda: now[0], sleep=slept.append)
    assert pace.chunk == 100 and Pace(None).chunk == 500 and Pace(0.5).chunk == 1
    pace.wait(100)
    now[0] = 0.25
    pace.wait(100)
    assert slept == [1.0, 1.75]
    with pytest.raises(ValueError):
        Pace(0)


def test_the_command_line() -> None:
    args = build_parser().parse_args(["deadletters", "redrive", "--config", "c", "--kind",
                                      "unknown_schema_id", "--partition", "3", "--since",
                                      "2026-01-01T00:00:00Z", "--rate", "50", "--dry-run"])
    assert (args.kind, args.partition, args.since, args.rate, args.dry_run) == (
        ["unknown_schema_id"], [3], 1_767_225_600_000, 50.0, True)
    args = build_parser().parse_args(["deadletters", "list", "--config", "c", "--state",
                                      "sent", "--until-offset", "10"])
    assert (args.state, args.until_offset, args.limit) == (["sent"], 10, 100)
    assert build_parser().parse_args(["deadletters", "show", "--config", "c", "2:31"]
                                     ).record == "2:31"


# -------------------------------------------------------------------------- the steps


class Crash(BaseException):
    """The process killed at a crash point (nothing after it runs)."""


def crasher(at: str | None, nth: int = 1) -> Callable[[str], None]:
    seen: Counter[str] = Counter()

    def crash(name: str) -> None:
        seen[name] += 1
        if name == at and seen[name] == nth:
            raise Crash(name)
    return crash


def attempt(rows: FakeDeadLetterRows, broker: FakeBroker, crash: Callable[[str], None],
            monkeypatch: pytest.MonkeyPatch, selection: Selection = ALL,
            rate: float = 2.0, lanes: Lanes | None = None) -> RedriveReport:
    """One redrive process over every partition with dead letters (a crash ends it)."""
    lanes = lanes or Lanes()
    monkeypatch.setattr(redrive_mod, "crash_point", crash)
    planned = count(rows, "t", selection, lanes=lanes)
    progress = Progress("t", RedriveReport(planned.selected), lambda _: None)
    pace = Pace(rate, sleep=lambda _: None)  # two a transaction
    for p in sorted(planned.by_partition):
        target = FakeRedriveTarget(broker, p, f"leakproof-redrive-dl-t-{p}", crash)
        redrive_partition(rows, target, "t", p, selection, pace, progress,
                          now_ms=itertools.count(1_000).__next__, lanes=lanes)
    return progress.report


def copies(broker: FakeBroker) -> Counter[str | None]:
    return Counter(origin_of(rec.headers) for p in broker.logs
                   for _, rec in broker.committed(p))


def every_letter_once(rows: FakeDeadLetterRows, broker: FakeBroker) -> None:
    """One committed copy per dead letter, with its bytes, and its row marked sent at it."""
    assert copies(broker) == Counter({d.origin: 1 for d in rows.rows.values()})
    for d in rows.rows.values():
        assert d.mark is not None and d.mark.state == SENT, d
        rec = broker.logs[d.partition][d.mark.copy_offset]
        assert (rec.key, rec.value, rec.state) == (d.key, d.value, "committed")
        assert rec.headers == tuple(d.copy_headers())


LETTERS = [letter(o, p) for p in (0, 1) for o in (3, 4, 8, 9, 12)]


def test_a_redrive_sends_each_letter_once_in_transactions_of_a_seconds_worth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows, broker = FakeDeadLetterRows(LETTERS), FakeBroker()
    report = attempt(rows, broker, crasher(None), monkeypatch)
    assert (report.selected, report.sent, report.found, report.taken) == (10, 10, 0, 0)
    every_letter_once(rows, broker)
    again = attempt(rows, broker, crasher(None), monkeypatch)  # nothing left to send
    assert (again.selected, again.sent) == (0, 0)
    every_letter_once(rows, broker)


@pytest.mark.parametrize("point", ["redrive_after_mark", "redrive_before_commit",
                                   "redrive_after_commit"])
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_a_redrive_killed_anywhere_and_run_again_sends_each_letter_once(
        monkeypatch: pytest.MonkeyPatch, point: str, nth: int) -> None:
    rows, broker = FakeDeadLetterRows(LETTERS), FakeBroker()
    with pytest.raises(Crash):
        attempt(rows, broker, crasher(point, nth), monkeypatch)
    in_flight = [d for d in rows.rows.values() if d.state == PENDING]
    # the chunk in flight (of 2 letters, the third 1): marked, its fate unknown to HBase
    assert len(in_flight) == (2 if nth < 3 else 1)
    report = attempt(rows, broker, crasher(None), monkeypatch)
    # a chunk committed before the kill is found in the topic, not sent again
    assert report.found == (len(in_flight) if point == "redrive_after_commit" else 0)
    every_letter_once(rows, broker)


def test_killed_again_while_resolving_and_then_run_to_the_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows, broker = FakeDeadLetterRows(LETTERS), FakeBroker()
    for point, nth in [("redrive_after_commit", 2), ("redrive_before_commit", 1),
                       ("redrive_after_mark", 2), ("redrive_after_commit", 1)]:
        with pytest.raises(Crash):
            attempt(rows, broker, crasher(point, nth), monkeypatch)
    attempt(rows, broker, crasher(None), monkeypatch)
    every_letter_once(rows, broker)


def test_an_older_redrive_fenced_by_a_newer_one_commits_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Redrive A marks its first chunk and stalls before sending; redrive B starts, fences
    A, finds A's marks with no copy, and sends everything; A wakes: its send is refused."""
    rows, broker = FakeDeadLetterRows(LETTERS[:4]), FakeBroker()
    monkeypatch.setattr(redrive_mod, "crash_point", lambda _: None)
    older = FakeRedriveTarget(broker, 0, TXN)
    end = older.fence()
    chunk = list(rows.letters("t"))[:2]
    for d in chunk:
        assert rows.mark(d, RedriveMark(PENDING, TXN, 1, scan_from=end))
    assert attempt(rows, broker, crasher(None), monkeypatch).sent == 4  # B
    with pytest.raises(PublishError, match="fenced"):
        older.send([(d.key, d.value, d.copy_headers()) for d in chunk])
    every_letter_once(rows, broker)


def test_a_row_another_redrive_moved_is_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rows, broker = FakeDeadLetterRows(LETTERS[:2]), FakeBroker()
    monkeypatch.setattr(redrive_mod, "crash_point", lambda _: None)
    stale = list(rows.letters("t"))
    rows.mark(stale[0], RedriveMark(SENT, "other", 1, copy_offset=0))  # after it was read
    target = FakeRedriveTarget(broker, 0, TXN)
    target.fence()
    progress = Progress("t", RedriveReport(2), lambda _: None)
    redrive_mod._send(rows, target, stale, 0, Pace(None), progress, lambda: 5, Lanes())
    assert (progress.report.sent, progress.report.taken) == (1, 1)
    assert copies(broker) == Counter({"t:0:4": 1})


def test_progress_lines() -> None:
    said: list[str] = []
    report = RedriveReport(10, sent=4, found=1)
    Progress("t", report, said.append).tick(final=True)
    assert said[0].startswith("redrive of t: 5/10 (50%): 4 sent, 1 found sent already, "
                              "0 taken by another redrive; ")


def test_the_report_counts_the_rows_left_in_flight() -> None:
    said: list[str] = []
    Progress("t", RedriveReport(4, sent=4, in_flight=3), said.append).tick(final=True)
    assert "another redrive, 3 left: their batch is not committed yet; " in said[0]
    assert RedriveReport(in_flight=3).as_json()["in_flight"] == 3


# ------------------------------------------------- only what the job committed goes


def test_rows_at_or_past_the_committed_offset_are_left_to_a_later_redrive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch still in flight may yet decode its records (the replay after a crash, once
    the cause is fixed): its dead letters are not sent; a partition never committed holds
    none that may go."""
    rows = FakeDeadLetterRows(LETTERS)  # offsets 3, 4, 8, 9, 12 of partitions 0 and 1
    committed = {0: 9}  # partition 0 committed up to 9 (exclusive); 1 never
    planned = count(rows, "t", ALL, committed)
    assert (planned.selected, planned.in_flight, planned.by_partition) == (3, 7, {0: 3})
    monkeypatch.setattr(redrive_mod, "crash_point", lambda _: None)
    broker = FakeBroker()
    progress = Progress("t", RedriveReport(planned.selected), lambda _: None)
    redrive_partition(rows, FakeRedriveTarget(broker, 0, TXN), "t", 0, ALL, Pace(None),
                      progress, committed=committed)
    assert copies(broker) == Counter({"t:0:3": 1, "t:0:4": 1, "t:0:8": 1})
    assert {d.offset for d in rows.rows.values() if d.state == "waiting"} == {9, 12, 3, 4, 8}
    assert [d.offset for d in rows.rows.values() if d.partition == 0 and d.state == SENT] == [
        3, 4, 8]
    # committed further: the rest of partition 0 goes, each once
    assert count(rows, "t", ALL, {0: 13}).selected == 2
    redrive_partition(rows, FakeRedriveTarget(broker, 0, TXN), "t", 0, ALL, Pace(None),
                      progress, committed={0: 13})
    assert copies(broker) == Counter({f"t:0:{o}": 1 for o in (3, 4, 8, 9, 12)})


# ---------------------------------------- a re-driven copy repairs: the fold's rules

CLOSE = 1_500  # close_after_ms: sessions close 1.5 s after their last event
GAP_MS = 1_000  # the inactivity gap, split by the gap


def seen(visit: str, at: int, path: str, n: int | None = None) -> Event:
    """An access-log event (``n``: its seq; None: the model has no sequence)."""
    record = {"visit": visit, "at": at, "n": n or 0, "method": "GET", "path": path,
              "code": 200, "size": 1, "latency_ms": 1.0, "cached": False, "account": None,
              "agent": None}
    return Event(visit, at, n, record)


def closed_row(sid: str, seqs: tuple[int, ...] = (), by_time: bool = False) -> SessionState:
    """A closed access-log session of one hit at 0..500 (fence at offset 5)."""
    m = compile_model(SEQUENCED if seqs else PLAIN, by_time)
    values, orders = m.initial()
    m.apply(values, orders, seen(sid, 500, "/a").record, 500 if by_time else 0)
    row = SessionState(sid, values, orders, first_ts=0, last_ts=500, state="closed",
                       fences={"t:0": 5})
    for n in seqs:
        row.seqs.add(n)
    return row


def hits(m: Model, s: SessionState) -> int:
    return int(s.values[[a.name for a in m.aggregates].index("hits")])


@pytest.mark.parametrize("fold_late", [False, True])
def test_a_redriven_event_folds_into_its_closed_session_whatever_late_says(
        fold_late: bool) -> None:
    """late: count or fold, a copy is folded into the closed session, a repair and not a
    late event; a plain late event is counted late, and folded only with ``late: fold``; a
    repeated seq stays a duplicate, an offset at or below the fence a replay."""
    m = compile_model(SEQUENCED)
    folder = PartitionFolder(m, "t:0", CLOSE, PartitionState(9_000, 5), {"a": closed_row(
        "a", (0,))}, fold_late=fold_late)
    assert folder.feed(4, seen("a", 600, "/x", 1), redriven=True) == Outcome.REPLAYED
    assert folder.feed(6, seen("a", 600, "/b", 1), redriven=True) == Outcome.APPLIED
    assert folder.feed(7, seen("a", 600, "/b", 1), redriven=True) == Outcome.DUPLICATE
    assert folder.feed(8, seen("a", 700, "/c", 2)) == Outcome.LATE
    a = folder.finish().touched["a"]
    assert (hits(SEQUENCED, a), a.late_events, a.duplicates, a.state) == (
        3 if fold_late else 2, 1, 1, "closed")
    assert a.last_ts == (700 if fold_late else 600)


def test_a_redriven_event_without_a_sequence_folds_each_time_it_comes() -> None:
    m = compile_model(PLAIN)
    folder = PartitionFolder(m, "t:0", CLOSE, PartitionState(9_000, 5),
                             {"a": closed_row("a")})
    assert folder.feed(6, seen("a", 600, "/b"), redriven=True) == Outcome.APPLIED
    assert folder.feed(7, seen("a", 600, "/b"), redriven=True) == Outcome.APPLIED  # again
    assert folder.feed(8, seen("a", 650, "/c")) == Outcome.LATE
    a = folder.finish().touched["a"]
    assert (hits(PLAIN, a), a.late_events, a.last_ts, a.state) == (3, 1, 600, "closed")


@pytest.mark.parametrize("fold_late", [False, True])
def test_split_by_the_gap_a_redriven_event_joins_its_closed_session(fold_late: bool) -> None:
    m = compile_model(PLAIN, by_time=True)
    key = session_key("a", 0)
    folder = GapFolder(m, "t:0", CLOSE, GapRule(GAP_MS), PartitionState(9_000, 5),
                       {key: replace(closed_row(key, by_time=True), session_id=key)},
                       fold_late=fold_late, first_offset=6)
    assert folder.feed(6, seen("a", 900, "/b"), redriven=True) == Outcome.APPLIED
    assert folder.feed(7, seen("a", 1_200, "/c")) == Outcome.LATE
    r = folder.finish()
    a = r.touched[key]
    assert (hits(PLAIN, a), a.late_events, a.last_ts, a.state) == (
        3 if fold_late else 2, 1, 1_200 if fold_late else 900, "closed")


# ----------------------------------- the job, a redrive's copies and the oracle agree


@dataclass
class Job:
    """One partition of topic ``t`` read by the job over the fakes, split by the gap or
    not; each record's value names its event, a header marks a re-driven copy."""

    gap: bool
    sequenced: bool
    journal: Journal = field(default_factory=Journal)
    sent: list[tuple[Event, bool]] = field(default_factory=list)
    bad: set[int] = field(default_factory=set)  # offsets that do not decode (yet)
    batch_ms: int = 1_000
    incarnation: str = ""  # a recreated topic's tag

    def __post_init__(self) -> None:
        self.m = SEQUENCED if self.sequenced else PLAIN
        self.compiled = compile_model(self.m, by_time=self.gap)
        self.sessions = FakeSessionRows(self.journal, model=self.compiled)
        self.partitions = FakePartitionRows(self.journal)
        self.visits = FakeVisits(self.journal, self.partitions)
        self.dead = FakeDeadLetters(self.journal)

    def decode(self, key: bytes | None, value: bytes | None, *, topic: str, partition: int,
               offset: int, **_: Any) -> Event:
        if offset in self.bad:
            raise ValueDecodeError("schema id 7 is not in the registry",
                                   kind="unknown_schema_id", topic=topic, partition=partition,
                                   offset=offset, key=key, value=value)
        return self.sent[offset][0]

    def produce(self, *events: Event, redriven: bool = False) -> tuple[int, int]:
        first = len(self.sent)
        self.sent += [(e, redriven) for e in events]
        return first, len(self.sent)

    def run(self, span: tuple[int, int]) -> TaskReport:
        """One range of offsets ``[from, until)``, as a batch (or its replay) reads it."""
        recs = [Rec(o, self.sent[o][0].session_id.encode(), str(o).encode(), -1,
                    ((ORIGIN_HEADER, b"t:0:%d" % o),) if self.sent[o][1] else ())
                for o in range(*span)]
        self.batch_ms += 1_000
        stores = Stores(self.sessions, self.partitions, self.dead,
                        FakeLeaseCheck(self.journal, held_by=1), None,
                        self.visits if self.gap else None)
        return process_ranges([(OffsetRange("t", 0, *span), recs)], self.decode, stores,
                              self.compiled,
                              Rules(CLOSE, gap=GapRule(GAP_MS) if self.gap else None),
                              TaskBatch(self.batch_ms, 1, {0: self.batch_ms},
                                        incarnation=self.incarnation))[0]

    def expected(self) -> dict[str, dict[str, str]]:
        """The oracle's rows: every record that decodes, the copies flagged."""
        read = [(o, e, again) for o, (e, again) in enumerate(self.sent) if o not in self.bad]
        stamped = {0: [(-1, e) for _, e, _ in read]}
        flagged = {0: [i for i, (_, _, again) in enumerate(read) if again]}
        if self.gap:
            return expected_gap_rows_merged(stamped, CLOSE, GAP_MS, self.m, redriven=flagged)
        return expected_rows_merged(stamped, CLOSE, self.m, redriven=flagged)


MODES = [pytest.param(gap, sequenced, id=f"{'gap' if gap else 'id'}-"
                      f"{'seq' if sequenced else 'plain'}")
         for gap in (False, True) for sequenced in (False, True)]


@pytest.mark.parametrize(("gap", "sequenced"), MODES)
def test_copies_redriven_after_their_sessions_closed_repair_them_exactly(
        gap: bool, sequenced: bool) -> None:
    """The plain recipe, ``late: count``: a bad hour dead-lettered, the sessions closed by
    later events, the cause fixed, the dead letters re-driven: every session exact."""
    job = Job(gap, sequenced)
    n = (lambda i: i) if sequenced else (lambda i: None)
    job.run(job.produce(seen("a", 0, "/a", n(0)), seen("b", 100, "/b", n(0))))
    bad = job.produce(seen("a", 400, "/a2", n(1)), seen("b", 500, "/b2", n(1)))
    job.bad |= set(range(*bad))
    job.run(bad)
    assert sorted(job.dead.rows) == [("t", 0, 2), ("t", 0, 3)]
    job.run(job.produce(seen("z", 9_000, "/z", n(0))))  # a and b close
    assert {k: r["state"] for k, r in job.sessions.readable().items() if k[0] != "z"} == {
        session_key("a", 0) if gap else "a": "closed",
        session_key("b", 100) if gap else "b": "closed"}
    # the cause fixed; the redrive sends copies (the records' events) with their origin
    copies = job.produce(job.sent[2][0], job.sent[3][0], redriven=True)
    report = job.run(copies)
    assert (report.late, report.applied) == (0, 2)
    rows = job.sessions.readable()
    assert compare(job.expected(), rows) == []
    a = rows[session_key("a", 0) if gap else "a"]
    assert (a["hits"], a["late_events"], a["last_ts"], a["state"]) == ("2", "0", "400",
                                                                       "closed")
    if sequenced:  # a copy sent twice (a producer's retry) is still a duplicate
        job.run(job.produce(job.sent[2][0], redriven=True))
        assert job.sessions.readable()[session_key("a", 0) if gap else "a"][
            "duplicates"] == "1"
        assert compare(job.expected(), job.sessions.readable()) == []


@pytest.mark.parametrize(("gap", "sequenced"), MODES)
def test_a_replay_that_decodes_a_dead_letter_withdraws_it(gap: bool, sequenced: bool) -> None:
    """The crash recipe: a batch dead-letters records, its driver dies before the commit,
    the cause is fixed, the replay decodes and folds them: their dead letters go, so no
    redrive counts them again."""
    job = Job(gap, sequenced)
    n = (lambda i: i) if sequenced else (lambda i: None)
    job.run(job.produce(seen("a", 0, "/a", n(0))))
    span = job.produce(seen("a", 200, "/a2", n(1)), seen("c", 300, "/c", n(0)),
                       seen("d", 400, "/d", n(0)))
    job.bad = {1, 2, 3}
    job.run(span)  # dead-lettered; not committed
    assert sorted(o for _, _, o in job.dead.rows) == [1, 2, 3]
    assert job.partitions.state[("t", 0)][b"w:dead_until"] == b"3"
    job.bad = set()
    report = job.run(span)  # the replay, the cause fixed
    assert "dead letters withdrawn" in job.journal.steps and report.withdrawn == 3
    assert job.dead.rows == {}
    rows = job.sessions.readable()
    assert compare(job.expected(), rows) == []
    assert rows[session_key("a", 0) if gap else "a"]["hits"] == "2"
    # the next batch starts past what was dead-lettered: no scan for rows to withdraw
    job.journal.steps.clear()
    job.run(job.produce(seen("e", 500, "/e", n(0))))
    assert "dead letters withdrawn" not in job.journal.steps


def test_a_withdrawal_leaves_the_rows_a_redrive_marked_and_the_offsets_not_named() -> None:
    store = FakeDeadLetters(Journal())
    store.write([ValueDecodeError("bad", kind="not_avro", topic="t", partition=0, offset=o,
                                  key=b"k", value=b"v") for o in (1, 2, 3, 4)], 1_000, ts=5)
    store.table.put(row_key("t", 0, 3), {b"d:redrive": b"sent copy=99 at=1 txn=x"})
    assert store.withdraw("t", 0, {2, 3}, ts=6) == 1
    assert sorted(o for _, _, o in store.rows) == [1, 3, 4]
    store.write([ValueDecodeError("bad", kind="not_avro", topic="t", partition=0, offset=2,
                                  key=b"k", value=b"v")], 1_000, ts=4)  # a zombie's late put
    assert sorted(o for _, _, o in store.rows) == [1, 3, 4]
    assert store.withdraw("t", 0, set(), ts=7) == 0


def test_a_replay_that_skips_a_decoded_record_as_applied_keeps_its_dead_letter() -> None:
    """Split by id, a session whose later event an earlier attempt applied has its fence
    past the dead-lettered record: the replay skips it, so its row stays for the redrive."""
    job = Job(gap=False, sequenced=True)
    span = job.produce(seen("a", 0, "/a", 0), seen("a", 100, "/b", 1))
    job.bad = {0}
    job.run(span)  # a's row: offset 1 applied, fence 1
    job.bad = set()
    report = job.run(span)
    assert (report.replayed, report.withdrawn) == (2, 0)
    assert sorted(job.dead.rows) == [("t", 0, 0)]
    # the redrive's copy then carries it: exact
    job.run(job.produce(job.sent[0][0], redriven=True))
    job.bad = {0}
    assert compare(job.expected(), job.sessions.readable()) == []


def test_the_oracle_folds_a_late_redriven_event_and_counts_it_not_late() -> None:
    events = {0: [(-1, seen("a", 0, "/a")), (-1, seen("z", 5_000, "/z")),
                  (-1, seen("a", 100, "/b")), (-1, seen("a", 200, "/c"))]}
    plain = expected_rows_merged(events, CLOSE, PLAIN)
    assert (plain["a"]["hits"], plain["a"]["late_events"]) == ("1", "2")
    again = expected_rows_merged(events, CLOSE, PLAIN, redriven={0: [3]})
    assert (again["a"]["hits"], again["a"]["late_events"], again["a"]["last_ts"]) == (
        "2", "1", "200")
    gap = expected_gap_rows_merged(events, CLOSE, GAP_MS, PLAIN, redriven={0: [2]})
    a = gap[session_key("a", 0)]
    assert (a["hits"], a["late_events"], a["last_ts"], a["state"]) == ("2", "1", "100",
                                                                       "closed")


# ------------------------------------------------------------ a recreated topic's rows


def test_a_recreated_topics_dead_letters_go_under_its_tag() -> None:
    """Its offsets start at 0 again: under the old name its rows would be the old ones,
    ``sent`` marks and all. Tagged as its fences are, they are its own, and so are their
    copies' origins."""
    assert source("web-events") == "web-events"
    assert source("web-events", "Ab12Cd34Ef56") == "web-events~Ab12Cd34Ef56"
    cells = to_cells(ValueDecodeError("bad", kind="not_avro", topic="t", partition=0, offset=3,
                                      key=b"k", value=b"v"), 1_000)
    back = from_cells(row_key(source("t", "ab12"), 0, 3), cells)
    assert (back.topic, back.partition, back.offset) == ("t~ab12", 0, 3)
    assert back.origin == "t~ab12:0:3" and parse_origin(back.origin) == ("t~ab12", 0, 3)
    assert row_key(source("t", "ab12"), 0, 3) == b"t~ab12:0:00000000000000000003"
    # the first topic's rows keep their keys
    assert row_key(source("t"), 0, 3) == b"t:0:00000000000000000003"


def test_the_job_writes_and_withdraws_a_recreated_topics_dead_letters_under_its_tag() -> None:
    job = Job(gap=False, sequenced=True, incarnation="ab12")
    job.dead.table.put(row_key("t", 0, 0), {b"d:kind": b"not_avro",  # the old topic's
                                            b"d:redrive": b"sent copy=9 at=1 txn=x"})
    span = job.produce(seen("a", 0, "/a", 0), seen("b", 10, "/b", 0))
    job.bad = {0, 1}
    job.run(span)
    assert sorted(job.dead.rows) == [("t", 0, 0), ("t~ab12", 0, 0), ("t~ab12", 0, 1)]
    job.bad = set()
    assert job.run(span).withdrawn == 2  # the replay, the cause fixed
    assert sorted(job.dead.rows) == [("t", 0, 0)]  # the old topic's row untouched
