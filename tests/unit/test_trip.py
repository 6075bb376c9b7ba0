"""One record's trip on the code alone: its bytes parsed as a fetched batch's record area,
decoded by the real codec, folded and written by ``process_ranges`` over the fakes (the
real stores over ``FakeTable``), under ``leakproof.testing.trip``'s tracer. The stops are
counted and printed for both session rules, and no call goes up a floor. ``make trip``
follows a record the same way on the real stack, from the task's entry and Kafka's fetch."""

from __future__ import annotations

import sys
import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from leakproof.core import codec
from leakproof.core.events import WebEvent
from leakproof.core.gap_fold import GapRule
from leakproof.core.offsets import OffsetRange
from leakproof.kafka.records import read_records
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model
from leakproof.task.process import Rules, Stores, TaskBatch, process_ranges
from leakproof.testing.hbase_table import Journal
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
    FakeVisits,
)
from leakproof.testing.trip import MOMENTS, Tracer, files_of

T0 = 1_700_000_000_000
RECORDS_AT = 61  # a v2 record batch's header length: its records start there
STOPS_AT_MOST = {"id": 18, "gap": 20}
# where a new session's first record must go, on the code alone (a new visitor split by the
# gap has no session row to read: its listing is read instead)
MET = {
    "id": {"leakproof.kafka.records.read_records", "leakproof.core.codec.Decoder._event",
           "leakproof.hbase.session_store.SessionStore.read",
           "leakproof.core.sessions.PartitionFolder.feed", "leakproof.core.session_cells.to_cells"},
    "gap": {"leakproof.kafka.records.read_records", "leakproof.core.codec.Decoder._event",
            "leakproof.hbase.visit_store.VisitStore.read", "leakproof.core.gap_fold.GapFolder.feed",
            "leakproof.hbase.visit_store.VisitStore.add", "leakproof.core.session_cells.to_cells"},
}


def batch_of(event: WebEvent) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=event.ts, key=codec.encode_key(event),
                   value=codec.encode_value(event), headers=[])
    return bytes(builder.build())


def trip(by: str) -> Tracer:
    marker = f"MARK{uuid.uuid4().hex[:10]}"
    event = WebEvent(f"s-{marker}", "u1", 1, T0, "pageview", "/", 200, 512)
    buf = batch_of(event)
    journal = Journal()
    model = compile_model(web_model(), by_time=by == "gap")
    partitions = FakePartitionRows(journal)
    stores = Stores(FakeSessionRows(journal, model=model), partitions,
                    FakeDeadLetters(journal), FakeLeaseCheck(journal, held_by=1),
                    visits=FakeVisits(journal, partitions) if by == "gap" else None)
    decode = codec.Decoder(web_model()).decode
    rules = Rules(60_000, gap=GapRule(30_000) if by == "gap" else None)
    tracer = Tracer(marker)
    sys.setprofile(tracer)
    try:
        recs = read_records(buf, RECORDS_AT, 1, 0, event.ts)
        (report,) = process_ranges([(OffsetRange("t", 0, 0, 1), recs)], decode, stores,
                                   model, rules, TaskBatch(T0, 1, {0: T0}))
    finally:
        sys.setprofile(None)
    assert report.applied == 1, report
    return tracer


@pytest.mark.parametrize("by", ["id", "gap"])
def test_a_records_trip_meets_every_moment_within_its_stops_and_never_goes_up(by: str
                                                                             ) -> None:
    tracer = trip(by)
    for name in tracer.stops:
        print(f"  {name}" + (f"   <- {MOMENTS[name][0]}" if name in MOMENTS else ""))
    print(f"{by}: {len(tracer.stops)} stops in {len(files_of(tracer.stops))} files")
    missed = MET[by] - tracer.seen.keys()
    assert not missed, f"the record never reached {sorted(missed)}"
    assert not tracer.upward, f"calls up a floor: {list(tracer.upward)}"
    assert len(tracer.stops) <= STOPS_AT_MOST[by], list(tracer.stops)
