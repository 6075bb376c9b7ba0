"""Re-driving dead letters, each once whatever crashes: the marks, the copies' headers, the
selection and the pace with literals, then the redrive's steps over the fakes of
``leakproof.testing`` (a broker keeping transactions its way) with a crash at every point,
followed by a redrive run again."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import pytest

from leakproof.cli import build_parser
from leakproof.commands import redrive as redrive_mod
from leakproof.commands.redrive import Pace, Progress, RedriveReport, count, redrive_partition
from leakproof.dead_letter import (
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
)
from leakproof.errors import PublishError, ValueDecodeError
from leakproof.hbase.dead_letters import from_cells, row_key, to_cells
from leakproof.testing import FakeBroker, FakeDeadLetterRows, FakeRedriveTarget

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
            rate: float = 2.0) -> RedriveReport:
    """One redrive process over every partition with dead letters (a crash ends it)."""
    monkeypatch.setattr(redrive_mod, "crash_point", crash)
    planned = count(rows, "t", selection)
    progress = Progress("t", RedriveReport(planned.selected), lambda _: None)
    pace = Pace(rate, sleep=lambda _: None)  # two a transaction
    for p in sorted(planned.by_partition):
        target = FakeRedriveTarget(broker, p, f"leakproof-redrive-dl-t-{p}", crash)
        redrive_partition(rows, target, "t", p, selection, pace, progress,
                          now_ms=itertools.count(1_000).__next__)
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
    redrive_mod._send(rows, target, stale, 0, Pace(None), progress, lambda: 5)
    assert (progress.report.sent, progress.report.taken) == (1, 1)
    assert copies(broker) == Counter({"t:0:4": 1})


def test_progress_lines() -> None:
    said: list[str] = []
    report = RedriveReport(10, sent=4, found=1)
    Progress("t", report, said.append).tick(final=True)
    assert said[0].startswith("redrive of t: 5/10 (50%): 4 sent, 1 found sent already, "
                              "0 taken by another redrive; ")
