#!/usr/bin/env python3
"""The cells the job's stores write per session, counted (no network, no stack).

``process_range`` runs over the real stores on the in-memory tables (``testing``'s fakes,
which the store contract suite holds to HBase), every put's cells and every delete counted
by table and column family, for one partition's share of a bench topic cut into ranges as
the bench's batches cut it:

  python scripts/cells_per_session.py many     # MANY=1's shape: 123 500 events, 32 500 sessions
  python scripts/cells_per_session.py default  # make bench's: 250 000 events, 25 000 sessions

Figures, not assertions.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from leakproof.core.offsets import OffsetRange
from leakproof.kafka.records import KafkaRecord
from leakproof.model.compiled import compile_model
from leakproof.model.spec import web_model
from leakproof.task.process import Stores, process_range
from leakproof.testing.generator import GeneratorSpec, generate
from leakproof.testing.hbase_table import FakeTable, Journal
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
)

SHAPES = {  # (events, sessions, span_s, records a range)
    "many": (123_500, 32_500, 3600, 31_000),
    "default": (250_000, 25_000, None, 40_000),
}
counts: Counter[tuple[str, str]] = Counter()


def _family(column: bytes) -> str:
    family, _, rest = column.partition(b":")
    # family f: the fence (p), the seqs and the rest apart
    return f"{family.decode()}:{rest.split(b':')[0].decode()}" if family == b"f" else (
        family.decode())


def _counting() -> None:
    put, delete = FakeTable._put, FakeTable._delete

    def counted_put(self: Any, row: bytes, data: Any, ts: int | None) -> None:
        for column in data:
            counts[(self.name.decode(), f"put {_family(column)}")] += 1
        put(self, row, data, ts)

    def counted_delete(self: Any, row: bytes, columns: Any, ts: int | None) -> None:
        counts[(self.name.decode(), "delete")] += len(columns) if columns else 1
        delete(self, row, columns, ts)

    FakeTable._put, FakeTable._delete = counted_put, counted_delete  # type: ignore[method-assign]


def main() -> int:
    shape = sys.argv[1] if len(sys.argv) > 1 else "default"
    n_events, sessions, span_s, cut = SHAPES[shape]
    events = generate(GeneratorSpec(seed=1, events=n_events, sessions=sessions, span_s=span_s))
    _counting()
    journal = Journal()
    stores = Stores(FakeSessionRows(journal), FakePartitionRows(journal),
                    FakeDeadLetters(journal), FakeLeaseCheck(journal))
    by_value = {str(i).encode(): e for i, e in enumerate(events)}

    def decode(key: bytes | None, value: bytes | None, *, topic: str, partition: int,
               offset: int, timestamp: int, headers: Any = ()) -> Any:
        assert value is not None
        return by_value[value].as_event()

    records = [KafkaRecord(i, e.session_id.encode(), str(i).encode(), e.ts)
               for i, e in enumerate(events)]
    model = compile_model(web_model())
    for batch, start in enumerate(range(0, len(records), cut), start=1):
        chunk = records[start:start + cut]
        process_range(OffsetRange("t", 0, start, start + len(chunk)), chunk, decode, stores,
                      model, batch_ms=batch, epoch=1, close_after_ms=1_860_000, cell_ts=batch)
    print(f"{shape}: {len(records)} events, {sessions} sessions, ranges of {cut} records")
    per_table: Counter[str] = Counter()
    for (table, kind), n in sorted(counts.items()):
        per_table[table] += n
        print(f"  {table:18} {kind:12} {n:9} {n / sessions:7.2f} per session")
    for table, n in per_table.items():
        print(f"  {table:18} {'all':12} {n:9} {n / sessions:7.2f} per session")
    return 0


if __name__ == "__main__":
    sys.exit(main())
