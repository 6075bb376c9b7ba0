"""The bench's own logic: batches grouped by what the region server did meanwhile, a
batch's CPU floor, CPU by process per M events, and the note on an HBase that holds many
tables before a run."""

from __future__ import annotations

from pathlib import Path

from bench import (
    LEFTOVER_TABLES,
    batch_floor,
    batches_beside_store_work,
    leftover_note,
    per_million,
    percentiles,
    store_work,
)

HBASE = """\
2026-11-26T17:00:10,500 INFO  [MemStoreFlusher.0] regionserver.HRegion: Finished flush of \
dataSize ~40.88 MB/42869445, heapSize ~113.61 MB/119126784, currentSize=8.07 MB/8464255 for \
3ed3806ef1c4017b15bbe84ae656d082 in 1500ms, sequenceid=203, compaction requested=false
2026-11-26T17:00:11,000 INFO  [master:store-Flusher] regionserver.HRegion: Finished flush of \
dataSize ~1.76 MB/1842096, heapSize ~2.08 MB/2180648, currentSize=0 B/0 for \
1595e783b53d99cd5eef43b6debb2682 in 900ms, sequenceid=3221, compaction requested=false
2026-11-26T17:00:12,000 INFO  [MemStoreFlusher.1] regionserver.HRegion: Finished flush of \
dataSize ~114.56 KB/117310, heapSize ~204.59 KB/209504, currentSize=0 B/0 for 1588230740 in \
52ms, sequenceid=589, compaction requested=false
2026-11-26T17:00:20,000 INFO  [RS:0;127.0.0.1:16020-longCompactions-0] \
regionserver.CompactSplit: Completed compaction region=t_web_sessions,,1.3ed3., \
storeName=3ed3/s, priority=12, startTime=1795701250234; duration=6sec
2026-11-26T17:00:30,000 INFO  [RS:0;127.0.0.1:16020-shortCompactions-0] \
regionserver.CompactSplit: Completed compaction region=t_web_sessions,,1.3ed3., \
storeName=3ed3/s, priority=13, startTime=1795701250234; duration=0sec
"""


def batch(clock: str, total: float) -> str:
    return (f"2026-11-26 {clock} INFO leakproof.stream: batch 1 | p0:0->10 | records 10 "
            f"(applied 10, replayed 0, late 0, duplicate 0, dead 0) | sessions 1 closed 0 | "
            f"lag 0 | 10 ev/s | read 0.01s fold 0.01s write 0.01s commit 0.01s "
            f"total {total:.2f}s | cached consumer 1/1 rows 0/1")


def test_flushes_and_compactions_are_read_but_not_hbases_own_tables(tmp_path: Path) -> None:
    log = tmp_path / "hbase.out"
    log.write_text(HBASE)
    spans = store_work(log)
    assert [(round(e - s, 3), kind) for s, e, kind in spans] == [
        (1.5, "flush"), (6.0, "compaction"), (1.0, "compaction")]  # 0 s counts as 1


def test_batches_are_grouped_by_what_overlapped_them_after_the_warm_up(tmp_path: Path
                                                                       ) -> None:
    hbase, job = tmp_path / "hbase.out", tmp_path / "job.log"
    hbase.write_text(HBASE)
    job.write_text("\n".join([
        "2026-11-26 17:00:00,000 INFO leakproof.driver.job: streaming",
        batch("17:00:02,000", 1.0),   # 01-02: in the warm-up
        batch("17:00:10,000", 1.5),   # 08.5-10: overlaps the flush (09.0-10.5)
        batch("17:00:13,000", 1.0),   # 12-13: nothing (meta's flush and the master's left out)
        batch("17:00:16,000", 2.0),   # 14-16: inside the compaction (14-20)
        batch("17:00:26,000", 1.0),   # 25-26: nothing
    ]))
    assert batches_beside_store_work(job, hbase, warmup_s=5) == (
        "alone: 2 batches, mean 1.00s, max 1.00s; "
        "beside flush: 1 batches, mean 1.50s, max 1.50s; "
        "beside compaction: 1 batches, mean 2.00s, max 2.00s")


def test_no_hbase_log_is_said_not_guessed(tmp_path: Path) -> None:
    job = tmp_path / "job.log"
    job.write_text(batch("17:00:02,000", 1.0))
    assert batches_beside_store_work(job, tmp_path / "absent.out", 30) == (
        "no local HBase log to compare with")


def test_a_crowded_hbase_is_named_before_the_figures_and_an_ordinary_one_is_not() -> None:
    assert leftover_note(4) is None
    assert leftover_note(LEFTOVER_TABLES) is None
    note = leftover_note(412)
    assert note is not None
    assert "412 tables" in note and "make stack-down WIPE=1" in note


def test_a_batchs_floor_is_its_records_cpu_over_the_cores_the_load_leaves() -> None:
    per_m = {"python workers": 20.0, "hbase": 15.0, "kafka": 5.0,
             "bench producer": 4.0, "bench script": 1.0}
    # 2 s of 25 000 ev/s: 50 000 records at 40 us = 2.0 CPU s; the load takes 0.125 cores;
    # the last of a batch's records waited 0.99 of its 2 s interval: 1.98 + 1.07
    assert batch_floor(per_m, 25_000, 2.0, 2) == (
        "a batch of 50000 records costs 2.00 CPU s (40.0 us an event, all but the bench's "
        "load): at least 1.07s on 2 cores less the load's 0.12; records sent evenly, so p99 "
        "at least 3.05s")


def test_a_load_that_takes_every_core_leaves_no_floor() -> None:
    assert batch_floor({"python workers": 1.0, "bench producer": 1e6}, 2.0, 1.0, 2) \
        .endswith("no core left on 2 cores less the load's 2.00")


def test_cpu_by_process_is_per_million_events_busiest_first() -> None:
    assert list(per_million({"kafka": 0.5, "hbase": 3.0, "python workers": 2.0}, 500_000)
                .items()) == [("hbase", 6.0), ("python workers", 4.0), ("kafka", 1.0)]


def test_a_run_no_longer_than_its_warm_up_says_so(tmp_path: Path) -> None:
    hbase, job = tmp_path / "hbase.out", tmp_path / "job.log"
    hbase.write_text(HBASE)
    job.write_text(batch("17:00:02,000", 1.0))
    assert batches_beside_store_work(job, hbase, 30) == "no batch after the warm-up"
    assert percentiles([]) == "no records"
