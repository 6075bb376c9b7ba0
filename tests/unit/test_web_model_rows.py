"""The web model, now written as config (config.yml and the shipped default), gives rows
byte-identical to those the fold wrote when the model was code (golden/web_rows.json)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

from leakproof.core import config
from leakproof.core.codec import Decoder, encode_key, encode_value
from leakproof.core.events import WebEvent
from leakproof.core.offsets import OffsetRange
from leakproof.kafka.records import KafkaRecord
from leakproof.model.compiled import compile_model
from leakproof.model.spec import Model, web_model
from leakproof.task.process import Stores, process_range
from leakproof.testing.generator import GeneratorSpec, generate
from leakproof.testing.hbase_table import Journal
from leakproof.testing.task_ports import (
    FakeDeadLetters,
    FakeLeaseCheck,
    FakePartitionRows,
    FakeSessionRows,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden") / "web_rows.json"


def fold_seeded_topic(model: Model) -> dict[str, dict[bytes, bytes]]:
    """The golden topic (seed 11, 6 000 events, every 97th of an unknown type, two
    partitions by the byte sum of the session id) in ranges of 700, as when it was recorded."""
    events = generate(GeneratorSpec(seed=11, events=6000, sessions=500, mean_think_s=120,
                                    late_fraction=0.05, duplicate_fraction=0.03))
    events = [replace(e, event_type="scroll") if i % 97 == 0 else e
              for i, e in enumerate(events)]
    compiled = compile_model(model)
    journal = Journal()
    sessions = FakeSessionRows(journal, model=compiled)
    stores = Stores(sessions, FakePartitionRows(journal), FakeDeadLetters(journal),
                    FakeLeaseCheck(journal))
    decode = Decoder(model).decode
    parts: dict[int, list[WebEvent]] = {0: [], 1: []}
    for e in events:
        parts[sum(e.session_id.encode()) % 2].append(e)
    for p, evs in parts.items():
        recs = [KafkaRecord(i, encode_key(e), encode_value(e), e.ts) for i, e in enumerate(evs)]
        for b, i in enumerate(range(0, len(recs), 700)):
            chunk = recs[i:i + 700]
            process_range(OffsetRange("web", p, i, i + len(chunk)), chunk, decode, stores,
                          compiled, batch_ms=b + 1, epoch=1, close_after_ms=600_000,
                          cell_ts=b + 1)
    return sessions.cells


def golden() -> dict[str, dict[bytes, bytes]]:
    raw = json.loads(GOLDEN.read_text())
    return {sid: {base64.b64decode(k): base64.b64decode(v) for k, v in cells.items()}
            for sid, cells in raw.items()}


def test_the_shipped_web_model_writes_the_rows_it_wrote_as_code() -> None:
    want = golden()
    got = fold_seeded_topic(web_model())
    assert len(want) == 500
    assert got.keys() == want.keys()
    for sid in want:
        assert got[sid] == want[sid], sid


def test_config_yml_writes_out_the_shipped_web_model() -> None:
    cfg = config.load(ROOT / "config.yml")
    shipped = web_model()
    assert cfg.model.aggregates == shipped.aggregates
    assert (cfg.model.session_key, cfg.model.event_time, cfg.model.sequence, cfg.model.format) \
        == (shipped.session_key, shipped.event_time, shipped.sequence, shipped.format)
    assert cfg.model.fields() == shipped.fields()
