"""One range's steps over the in-memory fakes: write order, fences, crashes and replays,
zombie tasks, the closed summaries. Literal events, literal expectations."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from leakproof.core.errors import CommitRefused, DecodeError
from leakproof.core.events import Event, WebEvent
from leakproof.core.moved_keys import home
from leakproof.core.offsets import OffsetRange
from leakproof.core.outbox import with_digest
from leakproof.core.reports import TaskReport
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model
from leakproof.task.process import Rules, Stores, TaskBatch, process_range, process_ranges
from leakproof.testing.hbase_table import Crash, Journal
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
    FakeSummarySink,
)

CLOSE_MS = 60_000  # sessions.close_after: inactivity gap + grace
MIN = 60_000


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()


def ev(sid: str, seq: int, ts: int, kind: str = "pageview") -> WebEvent:
    return WebEvent(sid, "u-" + sid, seq, ts, kind, f"/{sid}/{seq}", 200, 100)


def decode(key: bytes | None, value: bytes | None, *, topic: str, partition: int,
           offset: int, timestamp: int, headers: object = ()) -> Event:
    """The fake wire format: a key into EVENTS; a null value is a tombstone."""
    if value is None:
        raise DecodeError("null value", kind="tombstone", topic=topic, partition=partition,
                          offset=offset, key=key, value=value)
    return EVENTS[value].as_event()


EVENTS: dict[bytes, WebEvent] = {}


def records(*events: WebEvent | None, start: int = 0) -> list[Rec]:
    out = []
    for i, e in enumerate(events):
        if e is None:
            out.append(Rec(start + i, b"k", None))
            continue
        value = f"{e.session_id}:{e.seq}".encode()
        EVENTS[value] = e
        out.append(Rec(start + i, e.session_id.encode(), value))
    return out


@dataclass
class Rig:
    journal: Journal = field(default_factory=Journal)
    with_output: bool = False

    def __post_init__(self) -> None:
        self.sessions = FakeSessionRows(self.journal)
        self.partitions = FakePartitionRows(self.journal)
        self.dead = FakeDeadLetters(self.journal)
        self.lease = FakeLeaseCheck(self.journal, held_by=1)
        self.sink = FakeSummarySink(self.journal)

    def run(self, recs: list[Rec], *, epoch: int = 1, batch_ms: int = 1_000) -> TaskReport:
        rng = OffsetRange("t", 0, recs[0].offset, recs[-1].offset + 1)
        stores = Stores(self.sessions, self.partitions, self.dead, self.lease,
                        (lambda p: self.sink) if self.with_output else None)
        return process_range(rng, recs, decode, stores, compile_model(web_model()),
                             batch_ms=batch_ms, epoch=epoch, close_after_ms=CLOSE_MS,
                             cell_ts=batch_ms)

    def run_many(self, work: list[tuple[int, list[Rec]]], *, batch_ms: int = 1_000,
                 placed_in: int | None = None, owners_in: int | None = None
                 ) -> list[TaskReport]:
        """Ranges of several partitions as one task runs them (``process_ranges``)."""
        stores = Stores(self.sessions, self.partitions, self.dead, self.lease,
                        (lambda p: self.sink) if self.with_output else None)
        return process_ranges(
            [(OffsetRange("t", p, recs[0].offset, recs[-1].offset + 1), recs)
             for p, recs in work],
            decode, stores, compile_model(web_model()), Rules(CLOSE_MS),
            TaskBatch(batch_ms, 1, {p: batch_ms for p, _ in work}, placed_in=placed_in,
                      owners_in=owners_in))

    def state(self) -> tuple[object, ...]:
        """Everything a range leaves behind, but the journal, the outbox, the mark a crashed
        range leaves (entries below it are checked against their rows for good) and the
        writer tokens (random)."""
        wm = {k: {c: v for c, v in row.items()
                  if not c.startswith(b"w:outbox")
                  and c not in (b"w:check_below", b"w:writer", b"w:foreign")}
              for k, row in self.partitions.state.items()}
        return (self.sessions.readable(), wm, self.partitions.index, self.dead.rows,
                [ids for ids, _ in self.sink.committed])


FIRST = records(ev("a", 0, 0), ev("b", 0, 1_000), None, ev("a", 1, 2_000))
SECOND = records(ev("b", 1, 10 * MIN - 1), ev("c", 0, 10 * MIN), start=4)  # a closes


def clean() -> Rig:
    rig = Rig()
    rig.run(FIRST)
    rig.run(SECOND, batch_ms=2_000)
    return rig


def test_write_order_and_counts() -> None:
    rig = Rig(with_output=True)
    report = rig.run(FIRST)
    assert rig.journal.steps == ["lease", "pending", "sessions", "dead letters",  # none closed
                                 "index puts", "index deletes", "watermark"]
    assert (report.records, report.applied, report.sessions, report.dead_letters) == (4, 3, 2, 1)
    assert rig.dead.rows == {("t", 0, 2): "tombstone"}
    assert rig.sessions.readable()["a"]["events"] == "2"
    assert rig.partitions.index[("t", 0)] == {0: {"b": 1_000}, 1_875: {"a": 2_000}}  # by last_ts
    assert rig.partitions.state[("t", 0)][b"w:watermark"] == b"2000"
    # the second range closes a (b is touched again, c is new): its outbox before the rows,
    # the summaries after the watermark
    rig.journal.steps.clear()
    report = rig.run(SECOND, batch_ms=2_000)
    assert rig.journal.steps == ["lease", "pending, outbox", "sessions", "dead letters",
                                 "index puts", "index deletes", "watermark",
                                 "publish", "outbox published"]
    assert report.closed == 1
    assert [(ids, [k for k, _ in recs]) for ids, recs in rig.sink.committed] == [
        (with_digest("2000:4-6:1", ["a"]), [b"a"])]


def test_a_crash_between_the_session_rows_and_the_index_is_replayed_exactly() -> None:
    for step in ("dead letters", "index puts", "index deletes", "watermark"):
        rig = Rig()
        rig.run(FIRST)
        rig.journal.crash_at = step
        with pytest.raises(Crash):
            rig.run(SECOND, batch_ms=2_000)
        again = rig.run(SECOND, batch_ms=3_000)  # the restarted driver replays the range
        assert again.replayed == 2 and again.applied == 0, step  # the fences hold them
        assert rig.state() == clean().state(), step


def test_a_replay_after_a_partial_write_of_the_session_rows() -> None:
    rig = Rig()
    rig.sessions.tear_after = 1  # a written, b not
    with pytest.raises(Crash):
        rig.run(FIRST)
    again = rig.run(FIRST, batch_ms=2_000)
    assert (again.replayed, again.applied) == (2, 1)  # a's two events fenced, b's applied
    rig.run(SECOND, batch_ms=3_000)
    assert rig.state() == clean().state()


def test_an_index_entry_a_torn_write_left_behind_does_not_close_its_session_early() -> None:
    rig = Rig()
    rig.run(records(ev("m", 0, 0)))  # m's index entry: last_ts 0, bucket 0
    moved = records(ev("m", 1, 5_000), ev("n", 0, 5_000), start=1)
    rig.sessions.tear_after = 1  # m's row moves on to 5 000; its entry still says 0
    with pytest.raises(Crash):
        rig.run(moved, batch_ms=2_000)
    rig.run(moved, batch_ms=3_000)  # the replay reads m's row as it now stands
    # the watermark passes 0 + close, not 5 000 + close: m must stay open
    rig.run(records(ev("o", 0, CLOSE_MS + 1_000), start=3), batch_ms=4_000)
    assert rig.sessions.readable()["m"]["state"] == "open"


def test_a_zombie_task_writes_nothing() -> None:
    rig = Rig()
    rig.lease.held_by = 2  # a newer driver took the lease
    with pytest.raises(CommitRefused, match="lease is at epoch 2, this driver's is 1"):
        rig.run(FIRST, epoch=1)
    assert rig.journal.steps == ["lease"]
    assert rig.sessions.cells == {} and rig.partitions.state == {} and rig.dead.rows == {}


def test_each_closed_summary_once_across_crashes_in_publishing() -> None:
    # the transaction dies with the process before its commit: nothing is seen; the replay
    # publishes what the outbox owes
    rig = Rig(with_output=True)
    rig.run(FIRST)
    rig.journal.crash_at = "publish"
    with pytest.raises(Crash):
        rig.run(SECOND, batch_ms=2_000)
    assert rig.sink.committed == []
    rig.run(SECOND, batch_ms=3_000)
    assert [k for _, recs in rig.sink.committed for k, _ in recs] == [b"a"]
    # committed, then the process dies before it notes so: the replay finds the marker and
    # publishes nothing again
    rig = Rig(with_output=True)
    rig.run(FIRST)
    rig.journal.crash_at = "outbox published"
    with pytest.raises(Crash):
        rig.run(SECOND, batch_ms=2_000)
    rig.run(SECOND, batch_ms=3_000)
    assert [k for _, recs in rig.sink.committed for k, _ in recs] == [b"a"]
    summary = rig.sink.committed[0][1][0][1]
    assert summary is not None
    assert b'"events": "2"' in summary and b'"state": "closed"' in summary


def test_a_late_event_for_a_closed_session_publishes_it_again() -> None:
    rig = Rig(with_output=True)
    rig.run(FIRST)
    rig.run(SECOND, batch_ms=2_000)
    late = records(ev("a", 2, 3_000), start=6)
    report = rig.run(late, batch_ms=3_000)
    assert report.late == 1
    assert [k for _, recs in rig.sink.committed for k, _ in recs] == [b"a", b"a"]
    assert b'"late_events": "1"' in (rig.sink.committed[1][1][0][1] or b"")


# Several partitions' ranges in one task: one store call per step, each partition's rows as
# if its range ran alone.
P1_FIRST = records(ev("x", 0, 0), ev("y", 0, 500))
P1_SECOND = records(ev("y", 1, 10 * MIN), start=2)  # x closes
P2_FIRST = records(ev("q", 0, 100), None)


def alone(*batches: list[tuple[int, list[Rec]]]) -> Rig:
    """Each batch's ranges one at a time, each in its own call."""
    rig = Rig()
    for n, batch in enumerate(batches):
        for p, recs in batch:
            rig.run_many([(p, recs)], batch_ms=1_000 * (n + 1))
    return rig


def test_a_task_of_three_partitions_makes_one_call_per_step_and_the_rows_of_three() -> None:
    rig = Rig()
    first = rig.run_many([(0, FIRST), (1, P1_FIRST), (2, P2_FIRST)])
    assert rig.journal.steps == ["lease", "pending", "sessions", "dead letters",
                                 "index puts", "index deletes", "watermark"]
    assert [(r.partition, r.records, r.applied, r.dead_letters) for r in first] == [
        (0, 4, 3, 1), (1, 2, 2, 0), (2, 2, 1, 1)]
    second = rig.run_many([(0, SECOND), (1, P1_SECOND)], batch_ms=2_000)
    assert [(r.partition, r.closed) for r in second] == [(0, 1), (1, 1)]
    expected = alone([(0, FIRST), (1, P1_FIRST), (2, P2_FIRST)], [(0, SECOND), (1, P1_SECOND)])
    assert rig.state() == expected.state()
    assert rig.sessions.readable()["x"]["state"] == "closed"
    assert rig.dead.rows == {("t", 0, 2): "tombstone", ("t", 2, 1): "tombstone"}


def test_ranges_that_touch_one_session_go_through_the_steps_one_after_the_other() -> None:
    # a key that moved when partitions were added: "a" in partition 0, then in partition 5
    moved = records(ev("a", 2, 3_000), ev("z", 0, 3_000), start=10)
    rig = Rig()
    rig.run_many([(0, FIRST), (5, moved)])
    assert rig.journal.steps == 2 * ["lease", "pending", "sessions", "dead letters",
                                     "index puts", "index deletes", "watermark"]
    assert rig.sessions.readable()["a"]["events"] == "3"  # nothing lost to a stale read
    assert rig.state() == alone([(0, FIRST), (5, moved)]).state()


def test_a_range_holding_a_key_placed_in_another_partition_writes_nothing() -> None:
    # of 2 partitions Kafka's default partitioner puts "a" in 0, "s2c7-0082da684a5a" in 1
    other = "s2c7-0082da684a5a"
    ours = records(ev("a", 0, 0), ev("a", 1, 1_000))
    mixed = records(ev(other, 0, 0), ev("a", 2, 2_000), start=5)  # "a" written under 1
    rig = Rig()
    reports = rig.run_many([(0, ours), (1, mixed)], placed_in=2)
    assert [(r.partition, r.moved_keys) for r in reports] == [(0, 0), (1, 1)]
    assert rig.sessions.readable()["a"]["events"] == "2"
    assert other not in rig.sessions.readable()
    assert ("t", 1) not in rig.partitions.state  # no mark, no watermark
    # the driver then runs it alone, unchecked: as if each range had run by itself
    assert rig.run_many([(1, mixed)])[0].applied == 2
    assert rig.state() == alone([(0, ours)], [(1, mixed)]).state()
    assert rig.sessions.readable()["a"]["events"] == "3"


def test_a_session_one_range_closes_and_another_touches_is_not_read_before_its_close() -> None:
    # "a" is open in partition 0's index; partition 5 (a moved key) touches it in the batch
    # in which partition 0 closes it: partition 0's close lands before partition 5 reads
    rig = Rig()
    rig.run_many([(0, FIRST)])
    moved = records(ev("a", 2, 10 * MIN + 1), start=10)
    rig.journal.steps.clear()
    rig.run_many([(0, SECOND), (5, moved)], batch_ms=2_000)
    assert rig.journal.steps.count("sessions") == 2
    expected = alone([(0, FIRST)], [(0, SECOND), (5, moved)])
    assert rig.state() == expected.state()


def test_a_task_of_several_partitions_crashed_at_any_step_is_replayed_exactly() -> None:
    clean_rig = alone([(0, FIRST), (1, P1_FIRST)], [(0, SECOND), (1, P1_SECOND), (2, P2_FIRST)])
    for step in ("pending", "sessions", "dead letters", "index puts", "index deletes",
                 "watermark"):
        rig = Rig()
        rig.run_many([(0, FIRST), (1, P1_FIRST)])
        rig.journal.crash_at = step
        with pytest.raises(Crash):
            rig.run_many([(0, SECOND), (1, P1_SECOND), (2, P2_FIRST)], batch_ms=2_000)
        again = rig.run_many([(0, SECOND), (1, P1_SECOND), (2, P2_FIRST)], batch_ms=3_000)
        assert sum(r.applied for r in again) + sum(r.replayed for r in again) == 4, step
        assert rig.state() == clean_rig.state(), step
    rig = Rig()
    rig.run_many([(0, FIRST), (1, P1_FIRST)])
    rig.sessions.tear_after = 1  # one row of the second batch written, the others not
    with pytest.raises(Crash):
        rig.run_many([(0, SECOND), (1, P1_SECOND), (2, P2_FIRST)], batch_ms=2_000)
    rig.run_many([(0, SECOND), (1, P1_SECOND), (2, P2_FIRST)], batch_ms=3_000)
    assert rig.state() == clean_rig.state()


def test_each_partition_of_a_task_publishes_its_own_summaries_after_every_watermark() -> None:
    rig = Rig(with_output=True)
    rig.run_many([(0, FIRST), (1, P1_FIRST)])
    rig.journal.steps.clear()
    rig.run_many([(0, SECOND), (1, P1_SECOND)], batch_ms=2_000)
    assert rig.journal.steps == ["lease", "pending, outbox", "sessions", "dead letters",
                                 "index puts", "index deletes", "watermark",
                                 "publish", "outbox published", "publish", "outbox published"]
    assert [[k for k, _ in recs] for _, recs in rig.sink.committed] == [[b"a"], [b"x"]]


def test_a_changed_gap_never_closes_a_session_through_an_entry_of_the_old_width() -> None:
    """The index keeps the bucket width it was cut with: under a wider gap, a session's
    entry from before the change is still deleted when the session moves on, so it cannot
    close the session early later."""
    rig, t0 = Rig(), 1_767_225_600_000
    stores = Stores(rig.sessions, rig.partitions, rig.dead, rig.lease, None)

    def run(recs: list[Rec], close_after_ms: int, batch_ms: int) -> TaskReport:
        rng = OffsetRange("t", 0, recs[0].offset, recs[-1].offset + 1)
        return process_range(rng, recs, decode, stores, compile_model(web_model()),
                             batch_ms=batch_ms, epoch=1, close_after_ms=close_after_ms,
                             cell_ts=batch_ms)

    run(records(ev("x", 0, t0)), 1_860_000, 1_000)  # gap 1 800 s + grace
    run(records(ev("x", 1, t0 + 1_000_000), start=1), 3_660_000, 2_000)  # gap now 3 600 s
    run(records(ev("y", 0, t0 + 3_700_000), start=2), 3_660_000, 3_000)
    report = run(records(ev("x", 2, t0 + 1_500_000), start=3), 3_660_000, 4_000)
    x = rig.sessions.readable()["x"]
    assert (report.applied, report.late) == (1, 0)
    assert (x["events"], x["state"]) == ("3", "open")
    assert rig.partitions.state[("t", 0)][b"w:width"] == b"58125"  # 1 860 000 / 32


def key_with_homes(*homes: tuple[int, int]) -> str:
    """A session id Kafka's default partitioner puts in partition p of n, for each (p, n)."""
    return next(sid for i in range(10_000) if all(
        home((sid := f"k{i}").encode(), n) == p for p, n in homes))


def test_a_session_whose_key_moved_closes_by_its_owners_watermark_not_its_old_partitions(
        ) -> None:
    """A topic grown from 2 to 4 partitions: x's first events sit in partition 0, its next
    ones in partition 2. Partition 0's own traffic passes x's last event there by more than
    the gap while x goes on in partition 2: partition 0 leaves x open (its owner's watermark
    has not passed it), and every later event of x counts; partition 2 closes it in the
    end, and partition 0 then drops its entry."""
    x, y = key_with_homes((0, 2), (2, 4)), key_with_homes((0, 4))
    rig = Rig(with_output=True)
    rig.run_many([(0, records(ev(x, 0, 0), ev(x, 1, 10_000)))], owners_in=4)
    later = records(*(ev(x, i, i * 20_000) for i in range(2, 22)), start=0)
    reports = rig.run_many([(0, records(ev(y, 0, 5 * MIN), start=2)), (2, later)],
                           batch_ms=2_000, owners_in=4)
    assert [(r.partition, r.applied, r.late, r.closed) for r in reports] == [
        (0, 1, 0, 0), (2, 20, 0, 0)]
    row = rig.sessions.readable()[x]
    assert (row["events"], row["late_events"], row["state"]) == ("22", "0", "open")
    assert rig.sink.committed == []  # no early summary
    assert any(x in cells for cells in rig.partitions.index[("t", 0)].values())  # deferred
    assert int(rig.partitions.state[("t", 0)][b"w:cutoff"]) <= 10_000  # still scanned
    # partition 2's own watermark closes x, exactly once; partition 0 then forgets it
    z = key_with_homes((2, 4))
    done = rig.run_many([(2, records(ev(z, 0, 30 * MIN), start=20))], batch_ms=3_000,
                        owners_in=4)
    assert done[0].closed == 1 and rig.sessions.readable()[x]["state"] == "closed"
    rig.run_many([(0, records(ev(y, 1, 5 * MIN + 1), start=3))], batch_ms=4_000,
                 owners_in=4)
    assert not any(x in cells for cells in rig.partitions.index.get(("t", 0), {}).values())
    assert sum(key == x.encode() for _, recs in rig.sink.committed for key, _ in recs) == 1


def test_without_partitions_added_the_old_partition_closes_it_early() -> None:
    """The same events on a topic never seen growing: the old rule, for contrast."""
    x, y = key_with_homes((0, 2), (2, 4)), key_with_homes((0, 4))
    rig = Rig()
    rig.run_many([(0, records(ev(x, 0, 0), ev(x, 1, 10_000)))])
    later = records(*(ev(x, i, i * 20_000) for i in range(2, 22)), start=0)
    reports = rig.run_many([(0, records(ev(y, 0, 5 * MIN), start=2)), (2, later)],
                           batch_ms=2_000)
    assert [(r.partition, r.closed, r.late) for r in reports] == [(0, 1, 0), (2, 0, 20)]


def test_an_idle_partitions_watermark_moves_on_by_its_silence_from_its_newest_record() -> None:
    """An idle tick (``sessions.idle_after_s``) moves the watermark the newest record left on
    by how long the driver has read nothing of the partition -- never by the age of that
    record's Kafka timestamp: here the records are an hour old (a mirrored topic keeps its
    event times), and a tick a second after the read closes nothing; a minute of silence
    closes the session, ``inactivity_gap + grace`` after its last event."""
    rig = Rig(with_output=True)
    stores = Stores(rig.sessions, rig.partitions, rig.dead, rig.lease, lambda p: rig.sink)
    t0 = 1_767_225_600_000
    recs = [replace(r, timestamp=t0 + 5) for r in records(ev("a", 0, t0), ev("a", 1, t0 + 5))]
    now = t0 + 3_600_000  # the job reads them an hour after their timestamps

    def run(work: list[Rec], batch_ms: int, start: int = 0,
            idle: dict[int, int] | None = None) -> TaskReport:
        rng = OffsetRange("t", 0, start, start + len(work))
        return process_ranges([(rng, work)], decode, stores, compile_model(web_model()),
                              Rules(CLOSE_MS), TaskBatch(batch_ms, 1, {0: batch_ms},
                                                         idle=idle or {}))[0]

    run(recs, now)
    assert rig.partitions.state[("t", 0)][b"w:record_ts"] == str(t0 + 5).encode()
    assert run([], now + 1_000, start=2, idle={0: 1_000}).closed == 0  # just read
    assert run([], now + 1_000, start=2).closed == 0  # an empty range alone: no tick
    assert rig.partitions.state[("t", 0)][b"w:watermark"] == str(t0 + 5 + 1_000).encode()
    assert run([], now + 30_000, start=2, idle={0: 30_000}).closed == 0  # at t0 + 30 s
    assert rig.sessions.readable()["a"]["state"] == "open"
    assert run([], now + 61_000, start=2, idle={0: 61_000}).closed == 1  # past gap + grace
    assert rig.sessions.readable()["a"]["state"] == "closed"
    assert [key for _, recs_ in rig.sink.committed for key, _ in recs_] == [b"a"]
    # the record's anchor stays: a later tick moves on from the same newest record
    assert rig.partitions.state[("t", 0)][b"w:record_wm"] == str(t0 + 5).encode()
