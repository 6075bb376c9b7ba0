"""Gap sessions (``sessions.by: gap``) read again over the same tables: a rewind to the
start, to the middle or forward, another group from the earliest offset. Each row's mark
(the span below the first offset of the range that wrote it) says what was folded before;
see DESIGN, "The mark: re-reads of committed offsets". Random re-reads with crashes are in
``test_gap_fold`` (``rewinding_run``)."""

from __future__ import annotations

import pytest

from leakproof.core.gap_fold import session_key
from leakproof.testing.hbase_table import Crash

from .test_gap_fold import Rig, ev


def test_a_rewind_over_the_same_tables_folds_nothing_again() -> None:
    """c's first session is written by both ranges: the second's row keeps only its own
    offsets explicitly, the first range's as the span below its first offset (its mark)."""
    rig = Rig()
    rig.run([ev("c", 0, "/a"), ev("c", 500, "/b"), ev("d", 100)])
    rig.run([ev("c", 900, "/c"), ev("c", 5_000, "/d")])
    clean = rig.sessions.readable()
    assert rig.sessions.cells[session_key("c", 0)][b"f:t:t:0"] == b"0-3"
    assert rig.sessions.cells[session_key("d", 100)][b"f:t:t:0"] == b"2"
    for start in (0, 2, 4, 0):  # to 0, to the middle, to the last offset, to 0 again
        report = rig.run(rig.sent[start:], start=start)
        assert (report.replayed, report.applied) == (len(rig.sent) - start, 0), start
        assert rig.sessions.readable() == clean == rig.expected()


def test_a_rewind_reads_what_is_new_once_and_the_old_not_again() -> None:
    rig = Rig()
    rig.run([ev("c", 0), ev("c", 500)])
    rig.run([ev("c", 900)])
    rig.sent += [ev("c", 1_300), ev("c", 400, "/between")]  # produced, not read yet
    report = rig.run(rig.sent, start=0)  # rewound to 0: three old offsets, two new
    assert (report.replayed, report.applied) == (3, 2)
    assert rig.sessions.readable()[session_key("c", 0)]["hits"] == "5"
    assert rig.sessions.readable() == rig.expected()


def test_a_mark_never_goes_down() -> None:
    """c:0 is written by the range from 2 (mark 0-1); after a rewind to 0 a new page of c
    at 5 rewrites it: the mark stays, the new offset joins it one by one."""
    rig = Rig()
    rig.run([ev("d", 0), ev("d", 100)])
    rig.run([ev("c", 0), ev("c", 500)])
    rig.run([ev("e", 0)])
    cell = session_key("c", 0)
    assert rig.sessions.cells[cell][b"f:t:t:0"] == b"0-3"
    rig.sent.append(ev("c", 900))
    report = rig.run(rig.sent, start=0)
    assert (report.replayed, report.applied) == (5, 1)
    assert rig.sessions.cells[cell][b"f:t:t:0"] == b"0-3,5"
    rig.run([ev("c", 1_000)])  # the range from 6: everything below is committed
    assert rig.sessions.cells[cell][b"f:t:t:0"] == b"0-6"
    assert rig.sessions.readable() == rig.expected()


@pytest.mark.parametrize("torn", [0, 1])
def test_a_torn_put_after_a_rewind_is_replayed_exactly(torn: int) -> None:
    """The range after a rewind to 0 writes two rows, one landing: its replay skips the
    committed offsets by the marks and the uncommitted one that landed by its offset."""
    rig = Rig()
    rig.run([ev("c", 0), ev("d", 0)])
    rig.run([ev("c", 300), ev("d", 300)])
    rig.sent += [ev("c", 600), ev("d", 600)]
    rig.sessions.tear_after = torn
    with pytest.raises(Crash):
        rig.run(rig.sent, start=0)
    rig.run(rig.sent, start=0)
    assert rig.sessions.readable() == rig.expected()


def test_a_merge_carries_both_marks() -> None:
    """A late page bridges c's two sessions, written by ranges with different firsts: the
    merged row carries the higher mark and the other's offsets above it."""
    rig = Rig(fold_late=True)
    rig.run([ev("c", 0), ev("c", 1_800)])
    rig.run([ev("c", 2_000)])  # the second session, rewritten with its mark at 2
    rig.run([ev("c", 900, "/bridge")])
    assert rig.sessions.cells[session_key("c", 0)][b"f:t:t:0"] == b"0-3"
    clean = rig.sessions.readable()
    report = rig.run(rig.sent, start=0)
    assert report.replayed == 4 and rig.sessions.readable() == clean == rig.expected()


def test_a_re_read_asks_only_the_rows_that_reach_the_event_so_range_cuts_do_not_matter(
) -> None:
    """Offsets 2 and 3 were skipped by a rewind forward to 4, whose rows carry the mark
    0..3; a rewind back to 0 then reads them. d's event at 50 s is far from every row of d:
    no row of d could hold it, so it folds, however the re-reading range is cut (c's at
    500 ms lies inside the row that carries the mark: skipped, as the DESIGN says)."""
    for cut in (0, 3):
        rig = Rig()
        rig.run([ev("c", 0), ev("d", 0)])  # offsets 0, 1 committed
        rig.sent += [ev("c", 500, "/skipped-near"), ev("d", 50_000, "/skipped-far")]
        rig.sent += [ev("c", 600), ev("d", 600)]
        rig.run(rig.sent[4:6], start=4)  # a rewind forward to 4: the rows' marks 0..3
        report = rig.run(rig.sent[cut:], start=cut)  # then back to `cut`
        hits = {k: v["hits"] for k, v in rig.sessions.readable().items()}
        assert hits["d:0000000050000"] == "1", (cut, hits)
        assert report.applied == 1, cut
