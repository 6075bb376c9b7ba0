#!/usr/bin/env python3
"""make bench-native: the native read path beside the pure-Python reference, in-process.

The per-record loops ``leakproof_native`` replaces, each timed on both paths over the same
bytes (the bench topic's events, from the generator's seed): a batch's record area into
``KafkaRecord`` tuples, a value's Avro into an Event (the decoder's fast path), and the
re-keying stage's copies into kafka-python's batches (``Appender``, record by record
against bulk), and the session rows' put requests (each session's row as the oracle folds
it, 5 000 cells a call, as ``SessionStore.write`` sends them). Best of ROUNDS (default 5)
in CPU microseconds per record, then the ratios. No network, no stack; figures, not
assertions.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from kafka.producer.record_accumulator import RecordAccumulator
from kafka.record.default_records import DefaultRecordBatchBuilder

from leakproof.core import native
from leakproof.core.codec import Decoder, encode_key, encode_value
from leakproof.hbase.wire import puts
from leakproof.kafka import appender
from leakproof.kafka.appender import Appender
from leakproof.kafka.records import read_records, read_records_pure
from leakproof.model.spec import web_model
from leakproof.testing.generator import GeneratorSpec, generate
from leakproof.testing.oracle import expected_rows

EVENTS = int(os.environ.get("EVENTS", "50000"))
N = EVENTS  # the records generated: a few more than asked (the generator's duplicates)
ROUNDS = int(os.environ.get("ROUNDS", "5"))


def best(fn: Callable[[], object]) -> float:
    """The fastest of ROUNDS runs, in CPU us per record."""
    times = []
    for _ in range(ROUNDS):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times) / N * 1e6


class _Txn:
    def maybe_add_partition_to_transaction(self, tp: Any) -> None:
        pass

    def _fail_if_not_ready_for_send(self) -> None:
        pass


class _Sender:
    def wakeup(self) -> None:
        pass


class _Producer:
    """kafka-python's own accumulator (512 KiB batches, as the stage's producer) behind a
    transaction and sender that answer at once."""

    def __init__(self) -> None:
        self.config = {"max_request_size": 1 << 20}
        self._accumulator = RecordAccumulator(batch_size=512 * 1024, compression_attrs=0,
                                              message_version=2, linger_ms=20)
        self._transaction_manager, self._sender = _Txn(), _Sender()

    def partitions_for(self, topic: str) -> set[int]:
        return {0}


def _put_calls(events: list[Any]) -> list[dict[bytes, dict[bytes, bytes]]]:
    """Each session's row as the oracle folds it (its ``s`` cells, a fence and its seqs), in
    calls of about 5 000 cells, as ``SessionStore.write`` sends a batch's new rows."""
    rows = expected_rows({0: [e.as_event() for e in events]}, 1_860_000, web_model())
    calls: list[dict[bytes, dict[bytes, bytes]]] = [{}]
    cells = 0
    for sid, row in rows.items():
        if cells >= 5000:
            calls.append({})
            cells = 0
        put = {b"s:" + k.encode(): v.encode() for k, v in row.items()}
        put.update({b"f:p:bench:0": b"%d" % len(calls), b"f:seqs": b"0-%s" % put[b"s:events"]})
        calls[-1][sid.encode()] = put
        cells += len(put)
    return calls


def main() -> int:
    if native.module() is None:
        print("leakproof_native is not installed (make native): nothing to compare")
        return 1
    global N
    events = generate(GeneratorSpec(seed=1, events=EVENTS, sessions=EVENTS // 10))
    N = len(events)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, e in enumerate(events):
        builder.append(i, timestamp=e.ts, key=encode_key(e), value=encode_value(e), headers=[])
    area = bytes(builder.build())[61:]
    first_ts = events[0].ts
    records = read_records_pure(area, 0, N, 0, first_ts)
    assert read_records(area, 0, N, 0, first_ts) == records
    copies: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]] = [
        (r.key, r.value, r.timestamp, [("leakproof.source", b"bench:0:%d" % r.offset)])
        for r in records]
    rows = []

    def records_pure() -> None:
        read_records_pure(area, 0, N, 0, first_ts)

    def records_native() -> None:
        read_records(area, 0, N, 0, first_ts)

    rows.append(("record area -> KafkaRecord", best(records_pure), best(records_native)))

    def decoding(decoder: Decoder) -> Callable[[], None]:
        def run() -> None:
            decode = decoder.decode
            for r in records:
                decode(r.key, r.value, topic="t", partition=0, offset=r.offset,
                       timestamp=r.timestamp)
        return run

    fast_decoder = Decoder(web_model())
    os.environ[native.ENV] = "0"
    native.module.cache_clear()
    pure_decoder = Decoder(web_model())
    del os.environ[native.ENV]
    native.module.cache_clear()
    assert fast_decoder._native is not None and pure_decoder._native is None
    rows.append(("value -> Event (decode)", best(decoding(pure_decoder)),
                 best(decoding(fast_decoder))))

    def copying(bulk: bool) -> Callable[[], None]:
        def run() -> None:
            out = Appender(_Producer(), "bench.internal")
            out.bulk = bulk and out.bulk
            for key, value, ts, headers in copies:
                out.append(0, key, value, ts, headers)
            out.check()
        return run

    assert appender.bulk_fits()
    rows.append(("copy into the transaction's batches", best(copying(False)),
                 best(copying(True))))
    calls = _put_calls(events)

    def encoding(encode: Callable[..., bytes]) -> Callable[[], None]:
        def run() -> None:
            for i, rows_of_call in enumerate(calls):
                encode(b"bench_web_sessions", rows_of_call, first_ts, i)
        return run

    rows.append(("session rows -> put requests", best(encoding(puts.encode_mutate_rows)),
                 best(encoding(puts.encode_request))))
    print(f"{N} bench events, best of {ROUNDS}, CPU us per record:")
    print(f"  {'step':40} {'pure':>8} {'native':>8} {'ratio':>7}")
    for name, pure, fast in rows:
        print(f"  {name:40} {pure:8.2f} {fast:8.2f} {fast / pure:7.2f}")
    total_pure, total_fast = sum(r[1] for r in rows[:2]), sum(r[2] for r in rows[:2])
    print(f"  {'read + decode':40} {total_pure:8.2f} {total_fast:8.2f} "
          f"{total_fast / total_pure:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
