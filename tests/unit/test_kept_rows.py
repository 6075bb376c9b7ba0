"""Rows a worker keeps between ranges: taken only while the partition's writer token says no
one else wrote since; workers taking turns, crashes part way and keys that moved between
partitions all fold exactly as reading every row would."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from leakproof.core.config import JobConfig
from leakproof.core.events import Event, WebEvent
from leakproof.core.kept_rows import Delta, KeptRows, keepable, rewritten
from leakproof.core.offsets import OffsetRange
from leakproof.core.reports import TaskReport
from leakproof.core.sessions import SessionState
from leakproof.hbase.partition_store import writer_token
from leakproof.kafka.records import KafkaRecord
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model
from leakproof.task.kept_trail import SharedKeptRows, Trail, trail_root
from leakproof.task.process import Rules, Stores, TaskBatch, process_range, process_ranges
from leakproof.testing.generator import GeneratorSpec, generate
from leakproof.testing.hbase_table import Crash, Journal
from leakproof.testing.oracle import compare, expected_rows
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
)

CLOSE_MS = 600_000
MOST = JobConfig().kept_rows  # a worker's kept rows at most, unless job.kept_rows says
WEB = compile_model(web_model())
OPEN_ROW = b"open row image"  # what a store gives the cache: bytes it never looks into


# -- the pure rules ------------------------------------------------------------------------

def test_a_row_is_kept_only_open_and_fenced_by_its_own_partition_alone() -> None:
    def state(state: str = "open", **fences: int) -> SessionState:
        s = SessionState("s", state=state)
        s.fences = {k.replace("_", ":"): v for k, v in fences.items()}
        return s

    assert keepable(state(t_0=41), "t:0")
    assert keepable(state(), "t:0")  # nothing applied yet
    assert not keepable(state(t_0=41), "t:1")
    assert not keepable(state("closed", t_0=41), "t:0")
    assert not keepable(state(t_0=41, t_7=3), "t:0")
    assert not keepable(state(t_0=41, other_0=3), "t:0")


def test_the_token_is_the_writer_then_the_foreign_bump() -> None:
    assert writer_token({}) == b"/"
    assert writer_token({b"w:writer": b"aa"}) == b"aa/"
    assert writer_token({b"w:writer": b"aa", b"w:foreign": b"ff"}) == b"aa/ff"
    # a bump seen at load stays part of the token; one after it changes the token
    assert rewritten(b"aa/ff", b"bb") == b"bb/ff"
    assert rewritten(b"/", b"bb") == b"bb/"


def test_rows_are_taken_while_the_token_holds_and_all_dropped_when_it_changes() -> None:
    kept = KeptRows(MOST)
    assert kept.take("t:0", b"/", ["a"]) == {}  # nothing kept yet
    kept.keep("t:0", b"/", b"w1/", {"a": OPEN_ROW})
    assert kept.take("t:0", b"w1/", ["a", "b", "c"]) == {"a": OPEN_ROW}
    assert kept.take("t:1", b"w1/", ["a"]) == {}  # another partition's key
    # another writer's token: nothing taken, and the old rows never come back
    assert kept.take("t:0", b"w2/", ["a"]) == {}
    kept.keep("t:0", b"w2/", b"w3/", {"c": OPEN_ROW})
    assert kept.take("t:0", b"w3/", ["a", "c"]) == {"c": OPEN_ROW}


def test_keep_after_a_load_that_saw_another_token_drops_the_older_rows() -> None:
    kept = KeptRows(MOST)
    kept.keep("t:0", b"/", b"w1/", {"a": OPEN_ROW})
    # a range loaded under someone else's token (no take in between), then kept its own rows
    kept.keep("t:0", b"x9/", b"w2/", {"b": OPEN_ROW})
    assert kept.take("t:0", b"w2/", ["a", "b"]) == {"b": OPEN_ROW}


def test_rows_gone_are_forgotten_and_the_oldest_go_first() -> None:
    kept = KeptRows(most=2)
    kept.keep("t:0", b"/", b"w1/", {"a": OPEN_ROW, "b": OPEN_ROW})
    kept.keep("t:0", b"w1/", b"w2/", {}, gone=["a", "b"])
    assert kept.take("t:0", b"w2/", ["a", "b"]) == {}
    kept.keep("t:0", b"w2/", b"w3/", {"a": OPEN_ROW, "b": OPEN_ROW})
    kept.take("t:0", b"w3/", ["a"])  # a used last: b is the oldest
    kept.keep("t:0", b"w3/", b"w4/", {"c": OPEN_ROW})
    assert len(kept) == 2
    assert set(kept.take("t:0", b"w4/", ["a", "b", "c"])) == {"a", "c"}


def test_a_cache_of_no_rows_keeps_none_but_follows_the_token() -> None:
    kept = KeptRows(most=0)
    kept.keep("t:0", b"/", b"w1/", {"a": OPEN_ROW})
    assert len(kept) == 0 and kept.token("t:0") == b"w1/"
    assert kept.take("t:0", b"w1/", ["a"]) == {}


def test_a_row_taken_from_its_image_is_the_row_read_and_a_copy_a_fold_may_change() -> None:
    """The store's side of the cache: ``images`` of the rows it read or wrote; ``adopt`` of
    them, in another store over the same table, gives the rows a read would."""
    w = Workers(1, keep=False)
    events = [WebEvent("a", "u", i, 1_000 * i, "pageview", f"/{i}", 200, 10) for i in range(3)]
    w.run(0, [(OffsetRange("t", 0, 0, 3), as_records(events, "image"))], 1)
    reader = FakeSessionRows(Journal(), w.sessions.table)
    rows = reader.read(["a"])
    image = reader.images(["a", "b"])
    assert image.keys() == {"a"} and rows["a"].last_ts == 2_000
    other = FakeSessionRows(Journal(), w.sessions.table)
    taken = other.adopt(image)
    assert taken == rows
    taken["a"].last_ts = 0
    assert other.adopt(image) == rows


# -- the trail on the host's disk ----------------------------------------------------------

def delta(read: bytes, token: bytes, **rows: bytes | None) -> Delta:
    return Delta(read, token, dict(rows))


def test_the_trail_leads_back_from_the_token_to_the_one_a_worker_holds(tmp_path: Path) -> None:
    trail = Trail(tmp_path, depth=3)
    for read, token in ((b"/", b"a/"), (b"a/", b"b/"), (b"b/", b"c/")):
        trail.publish("t:0", delta(read, token, s=token))
    assert trail.since("t:0", b"c/", b"c/") == []
    assert [d.token for d in trail.since("t:0", b"c/", b"a/")] == [b"b/", b"c/"]
    assert [d.token for d in trail.since("t:0", b"c/", None)] == [b"a/", b"b/", b"c/"]
    assert trail.since("t:0", b"c/x", b"a/") == []  # a foreign bump since: no delta wrote it
    assert trail.since("t:1", b"c/", b"a/") == []  # another partition
    trail.publish("t:0", delta(b"c/", b"d/"))
    assert sorted(os.listdir(tmp_path / "t@0")) == ["b.", "c.", "d."]  # the newest three
    assert [d.token for d in trail.since("t:0", b"d/", None)] == [b"b/", b"c/", b"d/"]


def test_a_half_written_or_foreign_file_ends_the_trail(tmp_path: Path) -> None:
    trail = Trail(tmp_path)
    trail.publish("t:0", delta(b"/", b"a/", s=b"x"))
    trail.publish("t:0", delta(b"a/", b"b/", s=b"y"))
    (tmp_path / "t@0" / "b.").write_bytes(b"\xff\x00half")
    assert trail.since("t:0", b"b/", b"/") == []
    (tmp_path / "t@0" / "b.").write_bytes((tmp_path / "t@0" / "a.").read_bytes())
    assert trail.since("t:0", b"b/", b"/") == []  # a file that does not say it wrote b/


def test_a_worker_catches_up_from_the_trail_or_from_its_oldest_delta(tmp_path: Path) -> None:
    trail = Trail(tmp_path)
    one, two = SharedKeptRows(trail, MOST), SharedKeptRows(trail, MOST)
    row, changed = b"row image", b"row image, changed"
    one.keep("t:0", b"/", b"a/", {"x": row, "y": row})
    two.keep("t:0", b"a/", b"b/", {"x": changed}, gone=["y"])
    one.catch_up("t:0", b"b/")
    assert one.take("t:0", b"b/", ["x", "y"]) == {"x": changed}
    # a range that crashed after its mark (token c/, no delta), then one that wrote d/:
    # only d/'s rows are known; x and y are read
    two.keep("t:0", b"c/", b"d/", {"z": row})
    three = SharedKeptRows(trail, MOST)
    for worker in (three, one):
        worker.catch_up("t:0", b"d/")
        assert worker.take("t:0", b"d/", ["x", "y", "z"]) == {"z": row}


def test_a_run_keeps_its_trail_under_its_epoch_and_clears_older_epochs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path},/elsewhere")
    first = trail_root("sessions", "state", "g", epoch=3)
    other = trail_root("sessions", "state", "other group", epoch=3)
    assert first.parent == tmp_path / "leakproof-kept" and first.is_dir()
    assert oct(first.stat().st_mode & 0o777) == "0o700"
    later = trail_root("sessions", "state", "g", epoch=4)
    assert later.is_dir() and not first.exists() and other.is_dir()


# -- workers taking turns over one table ---------------------------------------------------

class Workers:
    """Several Python workers (each its own kept rows) over one set of in-memory tables."""

    def __init__(self, n: int, keep: bool = True, trail: Trail | None = None,
                 most: int = MOST) -> None:
        self.journal = Journal()
        self.sessions = FakeSessionRows(self.journal)
        self.partitions = FakePartitionRows(self.journal)
        self.kept: list[KeptRows | None] = [
            None if not keep else KeptRows(most) if trail is None
            else SharedKeptRows(trail, most) for _ in range(n)]

    def view(self) -> FakeSessionRows:
        """The session rows as a worker's range sees them: the same cells."""
        return FakeSessionRows(self.journal, self.sessions.table)

    def stores(self, view: FakeSessionRows, worker: int) -> Stores:
        """A range's stores in ``worker``: its own kept rows in front of the rows."""
        return Stores(view, self.partitions, FakeDeadLetters(self.journal),
                      FakeLeaseCheck(self.journal), kept=self.kept[worker])

    def run(self, worker: int, ranges: list[tuple[OffsetRange, list[KafkaRecord]]],
            batch_ms: int) -> list[TaskReport]:
        return process_ranges(ranges, decode, self.stores(self.view(), worker), WEB,
                              Rules(CLOSE_MS),
                              TaskBatch(batch_ms, 1, {r.partition: batch_ms for r, _ in ranges}))


BY_VALUE: dict[bytes, WebEvent] = {}


def decode(key: bytes | None, value: bytes | None, *, topic: str, partition: int,
           offset: int, timestamp: int, headers: object = ()) -> Event:
    assert value is not None
    return BY_VALUE[value].as_event()


def as_records(events: list[WebEvent], tag: str, start: int = 0) -> list[KafkaRecord]:
    out = []
    for i, e in enumerate(events):
        value = f"{tag}:{i}".encode()
        BY_VALUE[value] = e
        out.append(KafkaRecord(start + i, e.session_id.encode(), value, e.ts))
    return out


def spread_events() -> list[WebEvent]:
    """Sessions long against the ranges: most ranges touch rows an earlier range wrote."""
    return generate(GeneratorSpec(seed=21, events=3000, sessions=120, mean_think_s=60,
                                  late_fraction=0.03, duplicate_fraction=0.03))


@pytest.mark.parametrize("cut", [40, 150, 401])
@pytest.mark.parametrize("shared", [False, True])
def test_workers_taking_turns_at_random_fold_exactly(cut: int, shared: bool,
                                                     tmp_path: Path) -> None:
    events = spread_events()
    expected = expected_rows({0: [e.as_event() for e in events]}, CLOSE_MS, web_model())
    recs = as_records(events, f"turns{cut}")
    # (a trail deep enough for any run of turns: then every open row is taken)
    workers = Workers(3, trail=Trail(tmp_path, depth=1_000) if shared else None)
    turn, kept_rows, could = random.Random(cut), 0, 0
    for batch, i in enumerate(range(0, len(recs), cut)):
        chunk = recs[i:i + cut]
        cells = workers.sessions.cells
        could += sum(1 for sid in {BY_VALUE[r.value].session_id for r in chunk if r.value}
                     if sid in cells and cells[sid].get(b"s:state") == b"open")
        [report] = workers.run(turn.randrange(3), [(OffsetRange("t", 0, i, i + len(chunk)),
                                                    chunk)], batch)
        kept_rows += report.rows_kept
    assert compare(expected, workers.sessions.readable()) == []
    # alone, a worker takes the rows of ranges it ran itself; with the trail, every open row
    assert kept_rows == could if shared else 0 < kept_rows < could


def test_one_worker_takes_every_open_row_it_wrote_and_folds_exactly() -> None:
    events = spread_events()
    expected = expected_rows({0: [e.as_event() for e in events]}, CLOSE_MS, web_model())
    recs = as_records(events, "one")
    workers, taken = Workers(1), 0
    for batch, i in enumerate(range(0, len(recs), 200)):
        chunk = recs[i:i + 200]
        touched = {BY_VALUE[r.value].session_id for r in chunk if r.value is not None}
        cells = workers.sessions.cells
        open_before = {sid for sid in touched
                       if sid in cells and cells[sid].get(b"s:state") == b"open"}
        [report] = workers.run(0, [(OffsetRange("t", 0, i, i + len(chunk)), chunk)], batch)
        assert report.rows_kept == len(open_before), batch
        taken += report.rows_kept
    assert compare(expected, workers.sessions.readable()) == []
    assert taken > 0


@pytest.mark.parametrize("most", [0, 7, 40])
def test_a_worker_keeping_fewer_rows_than_are_open_reads_the_rest_and_folds_exactly(
        most: int) -> None:
    events = spread_events()
    expected = expected_rows({0: [e.as_event() for e in events]}, CLOSE_MS, web_model())
    recs = as_records(events, f"few{most}")
    workers, taken, could = Workers(1, most=most), 0, 0
    for batch, i in enumerate(range(0, len(recs), 200)):
        chunk = recs[i:i + 200]
        cells = workers.sessions.cells
        could += sum(1 for sid in {BY_VALUE[r.value].session_id for r in chunk if r.value}
                     if sid in cells and cells[sid].get(b"s:state") == b"open")
        [report] = workers.run(0, [(OffsetRange("t", 0, i, i + len(chunk)), chunk)], batch)
        taken += report.rows_kept
        assert len(workers.kept[0] or ()) <= most
    assert compare(expected, workers.sessions.readable()) == []
    assert taken == 0 if most == 0 else 0 < taken < could


@pytest.mark.parametrize("shared", [False, True])
def test_a_range_torn_part_way_is_replayed_exactly_by_the_same_or_another_worker(
        shared: bool, tmp_path: Path) -> None:
    events = spread_events()
    expected = expected_rows({0: [e.as_event() for e in events]}, CLOSE_MS, web_model())
    recs = as_records(events, "torn")
    workers, turn = Workers(2, trail=Trail(tmp_path) if shared else None), random.Random(5)
    for batch, i in enumerate(range(0, len(recs), 120), start=1):
        chunk = recs[i:i + 120]
        rng = OffsetRange("t", 0, i, i + len(chunk))
        touched = {BY_VALUE[r.value].session_id for r in chunk if r.value is not None}
        if batch % 3 == 0 and len(touched) > 1:  # half the rows land, then the process dies
            view = workers.view()
            view.tear_after = len(touched) // 2
            with pytest.raises(Crash):
                process_range(rng, chunk, decode, workers.stores(view, turn.randrange(2)), WEB,
                              batch_ms=batch, epoch=1, close_after_ms=CLOSE_MS, cell_ts=batch)
        workers.run(turn.randrange(2), [(rng, chunk)], batch)
    assert compare(expected, workers.sessions.readable()) == []


def moved(tag: str) -> list[WebEvent]:
    return [WebEvent("m", "u", i, 1_000 * i, "pageview", f"/{tag}/{i}", 200, 10)
            for i in range(6)]


@pytest.mark.parametrize("shared", [False, True])
def test_a_key_that_moved_partitions_is_never_taken_stale(shared: bool,
                                                          tmp_path: Path) -> None:
    # session m lives in partition 0 (worker 0 keeps its row), then its events come from
    # partition 1 (worker 1), then from partition 0 again: worker 0 must read m's row anew
    m = moved("a")
    for keep in (True, False):
        w = Workers(2, keep=keep, trail=Trail(tmp_path / str(keep)) if shared else None)
        w.run(0, [(OffsetRange("t", 0, 0, 2), as_records(m[:2], "mv0"))], 1)
        w.run(1, [(OffsetRange("t", 1, 0, 2), as_records(m[2:4], "mv1"))], 2)
        [report] = w.run(0, [(OffsetRange("t", 0, 2, 4), as_records(m[4:], "mv2", 2))], 3)
        assert report.rows_kept == 0
        row = w.sessions.readable()["m"]
        assert (row["events"], row["exit_url"]) == ("6", "/a/5"), keep


@pytest.mark.parametrize("shared", [False, True])
def test_a_row_written_by_another_partition_after_it_was_kept_is_not_taken(
        shared: bool, tmp_path: Path) -> None:
    # worker 0 keeps m from partition 0, twice; partition 1's range (worker 1) writes m and
    # bumps partition 0's token: worker 0's next range of partition 0 reads m again
    m = moved("b")
    w = Workers(2, trail=Trail(tmp_path) if shared else None)
    w.run(0, [(OffsetRange("t", 0, 0, 2), as_records(m[:2], "bump0"))], 1)
    [report] = w.run(0, [(OffsetRange("t", 0, 2, 3), as_records(m[2:3], "bump1", 2))], 2)
    assert report.rows_kept == 1
    before = w.partitions.state[("t", 0)].get(b"w:foreign")
    w.run(1, [(OffsetRange("t", 1, 0, 2), as_records(m[3:5], "bump2"))], 3)
    assert w.partitions.state[("t", 0)].get(b"w:foreign") != before
    [report] = w.run(0, [(OffsetRange("t", 0, 3, 4), as_records(m[5:], "bump3", 3))], 4)
    assert report.rows_kept == 0
    row = w.sessions.readable()["m"]
    assert (row["events"], row["exit_url"]) == ("6", "/b/5")


def test_a_task_of_several_partitions_takes_each_ones_rows_under_its_own_token() -> None:
    a = [WebEvent("a", "u", i, 1_000 * i, "pageview", f"/a/{i}", 200, 10) for i in range(4)]
    b = [WebEvent("b", "u", i, 1_000 * i, "click", f"/b/{i}", 200, 10) for i in range(4)]
    w = Workers(2)
    w.run(0, [(OffsetRange("t", 0, 0, 2), as_records(a[:2], "s0")),
              (OffsetRange("t", 1, 0, 2), as_records(b[:2], "s1"))], 1)
    w.run(1, [(OffsetRange("t", 1, 2, 3), as_records(b[2:3], "s2", 2))], 2)  # 1 moves on
    reports = w.run(0, [(OffsetRange("t", 0, 2, 4), as_records(a[2:], "s3", 2)),
                        (OffsetRange("t", 1, 3, 4), as_records(b[3:], "s4", 3))], 3)
    assert [r.rows_kept for r in reports] == [1, 0]
    rows = w.sessions.readable()
    assert (rows["a"]["events"], rows["b"]["events"], rows["b"]["clicks"]) == ("4", "4", "4")


def test_a_row_that_another_partition_closes_is_never_taken_open() -> None:
    # m's events come from partition 0, then from partition 1 (the key moved), then partition
    # 0's later events expire m there and close its row -- a write that bumps no token, so
    # partition 1 must not have kept m's row (it bears both fences) -- then m's next event
    # comes from partition 1: it must meet the closed row, as reading every row would
    m = moved("c")
    far = [WebEvent(f"o{i}", "u", 0, 10 * CLOSE_MS + i, "pageview", "/o", 200, 1)
           for i in range(2)]
    results = []
    for keep in (True, False):
        w = Workers(2, keep=keep)
        w.run(0, [(OffsetRange("t", 0, 0, 2), as_records(m[:2], "cl0"))], 1)
        w.run(1, [(OffsetRange("t", 1, 0, 2), as_records(m[2:4], "cl1"))], 2)
        [closing] = w.run(0, [(OffsetRange("t", 0, 2, 4), as_records(far, "cl2", 2))], 3)
        assert closing.closed == 1
        [report] = w.run(1, [(OffsetRange("t", 1, 2, 3), as_records(m[4:5], "cl3", 2))], 4)
        assert report.rows_kept == 0
        results.append(w.sessions.readable()["m"])
    assert results[0] == results[1]
    assert results[0]["state"] == "closed" and results[0]["late_events"] == "1"


def test_a_worker_keeps_as_many_rows_as_job_kept_rows_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from leakproof.core import config
    from leakproof.task import worker

    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    monkeypatch.setattr(worker, "_kept", {})
    cfg = config.from_dict({"kafka": {"bootstrap_servers": "h:9092", "topic": "t",
                                      "group_id": "g"}, "job": {"kept_rows": 3}})
    kept = worker._kept_rows(cfg, epoch=1)
    assert isinstance(kept, SharedKeptRows)
    kept.keep("t:0", b"/", b"w1/", {sid: OPEN_ROW for sid in "abcde"})
    assert set(kept.take("t:0", b"w1/", "abcde")) == {"c", "d", "e"}
