"""Bad input on the real stack: every kind has its rule, its count, and the rest stays exact.

Each partition gets the same mix: records that must be dead-lettered (with their kind in the
progress line and in the dead-letter row) and odd records that must decode (an evolved writer
schema, both schemaless and single-object; an unknown event_type; a record near the broker's
1 MiB limit; a producer-retry duplicate). The oracle then judges every session row.
"""

from __future__ import annotations

import io
import json
import random
import re
import time
from collections import Counter
from typing import Any

import fastavro
import pytest

from leakproof.commands.produce import send_raw
from leakproof.commands.verify import read_topic
from leakproof.core import codec, config
from leakproof.core.events import WebEvent, schema_json
from leakproof.testing.generator import DEFAULT_START_TS, GeneratorSpec, generate
from leakproof.testing.oracle import expected_rows

from .helpers import Env, progress_lines

pytestmark = pytest.mark.integration

EVOLVED = {**schema_json(), "fields": [*schema_json()["fields"],
                                       {"name": "country", "type": "string", "default": "??"}]}
OTHER_SCHEMA = {"type": "record", "name": "Ping", "fields": [
    {"name": "host", "type": "string"}, {"name": "rtt_ms", "type": "double"}]}


def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def event(sid: str, seq: int, **changes: Any) -> WebEvent:
    base = WebEvent(sid, "u-" + sid, seq, DEFAULT_START_TS + 1000 * seq, "pageview",
                    f"https://shop.example.com/{seq}", 200, 100 + seq)
    return WebEvent(**{**base.to_record(), **changes})


def mixed_records(sid: str, rnd: random.Random) -> tuple[list[tuple[bytes | None, bytes | None]],
                                                         Counter[str]]:
    """(key, value) pairs for one partition, and the dead-letter kinds they must give."""
    key = sid.encode()
    good = codec.encode_value(event(sid, 0))
    now = int(time.time() * 1000)
    dead = [
        # random bytes (led by 0x01: a negative string length, so the kind is always the same)
        ((b"x", b"\x01" + rnd.randbytes(63)), "not_avro"),
        ((key, good[:9]), "not_avro"),  # truncated Avro
        ((key, b""), "empty_value"),
        ((key, None), "tombstone"),
        ((None, good), "null_key"),
        ((b"someone-else", good), "key_mismatch"),
        ((key, good.replace(b"u-", b"\xff-", 1)), "invalid_utf8"),
        ((key, avro(OTHER_SCHEMA, {"host": "h", "rtt_ms": 1.5})), "not_avro"),  # other schema
        ((key, good + b"trailing"), "trailing_bytes"),
        ((key, b"\x01" + rnd.randbytes(899_999)), "not_avro"),  # near the broker's max size
        ((key, codec.encode_value(event(sid, 9, ts=now + 3 * 86_400_000))), "future_ts"),
        ((key, codec.encode_value(event(sid, 9, ts=-5))), "invalid_field"),  # negative ts
        ((key, b"\xc3\x01" + rnd.randbytes(8) + good), "unknown_schema"),
    ]
    decodable = [
        (key, good),
        (key, avro(EVOLVED, {**event(sid, 1).to_record(), "country": "NL"})),  # evolved
        (key, codec.encode_single_object({**event(sid, 2).to_record(), "country": "DE"},
                                         EVOLVED)),
        (key, codec.encode_value(event(sid, 3, event_type="scroll"))),  # unknown event_type
        (key, codec.encode_value(event(sid, 4, url="https://x/" + "a" * 900_000))),  # big
        (key, codec.encode_value(event(sid, 2))),  # seq 2 again: a producer retry
    ]
    records = [r for r, _ in dead] + decodable
    rnd.shuffle(records)
    records.remove((key, good))
    records.insert(0, (key, good))  # seq 0 first, so entry_url is deterministic either way
    return records, Counter(kind for _, kind in dead)


def test_every_kind_of_bad_input_has_its_rule_and_count(env: Env) -> None:
    schema_file = env.tmp / "web_event_v2.avsc"
    schema_file.write_text(json.dumps(EVOLVED))
    evolved = env.variant("evolved", input={"writer_schemas": [str(schema_file)],
                                            "max_ahead_s": 3600})
    cfg = config.load(evolved)
    spec = GeneratorSpec(seed=501, events=8_000, sessions=800, duplicate_fraction=0.01)
    want: Counter[str] = Counter()
    for p in range(4):
        records, kinds = mixed_records(f"odd-{p}", random.Random(p))
        send_raw(cfg.kafka, env.name, records, partition=p)
        want += kinds
    env.produce(spec)  # after the odd records, whose event times are the earliest
    more = GeneratorSpec(seed=502, events=4_000, sessions=400, duplicate_fraction=0.01,
                         start_ts=DEFAULT_START_TS + 1_800_000)
    env.produce(more)

    out = env.run("--until-idle", "4", "--log-format", "json", config=evolved)
    batches = progress_lines(out.stderr)
    got: Counter[str] = Counter()
    for b in batches:
        got.update(b["dead_letter_kinds"])
    assert got == want  # the progress lines count each kind

    # the oracle over what the topic holds (decoded with the same rules) and HBase
    env.verify(config=evolved)
    per_partition, bad = read_topic(cfg)
    assert Counter(b.kind for b in bad) == want
    in_topic = Counter(tuple(e.record.values()) for evs in per_partition.values() for e in evs
                       if not e.session_id.startswith("odd-"))
    sent = Counter(tuple(e.to_record().values()) for e in [*generate(spec), *generate(more)])
    assert in_topic == sent  # nothing else decoded
    expected = expected_rows(per_partition, env.cfg.sessions.close_after_ms, env.cfg.model)
    # the 4 events of unknown types are folded, each counted in its session's unknown_types
    assert sum(int(r["unknown_types"]) for r in expected.values()) == 4
    dups = sum(int(r["duplicates"]) for r in expected.values())
    assert dups > 4 and sum(b["duplicates"] for b in batches) == dups
    conn = env.hbase()
    try:
        rows = list(conn.table("web_events_dead_letter").scan(row_prefix=f"{env.name}:".encode()))
        odd = conn.table("web_sessions").row(b"odd-0")
    finally:
        conn.close()
    assert len(rows) == sum(want.values())
    assert all(re.match(rb"^[^:]+:\d+:\d{20}$", k) for k, _ in rows)
    assert Counter(c[b"d:kind"].decode() for _, c in rows) == want
    assert all(c[b"d:error"] and c[b"d:batch_time"].isdigit() for _, c in rows)
    assert max(len(c.get(b"d:value", b"")) for _, c in rows) == 900_000  # raw bytes kept
    # the odd session: seq 0..4 applied once each, the repeat of seq 2 a duplicate
    assert (odd[b"s:events"], odd[b"s:duplicates"], odd[b"s:unknown_types"]) == (b"5", b"1",
                                                                                b"1")
    assert odd[b"f:seqs"] == b"0-4"
