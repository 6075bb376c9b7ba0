"""``leakproof model check``: the model against its schema, then against the topic.

How a user debugs a model before the first run: the newest ``sample`` records (spread over
the partitions) are read, decoded and folded exactly as the job would fold them into empty
session rows -- nothing is committed, nothing is written anywhere -- and the rows they would
give are returned with the records that would be dead letters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leakproof.core.config import Config
from leakproof.core.errors import DecodeError
from leakproof.core.offsets import OffsetRange
from leakproof.core.session_cells import readable, to_cells
from leakproof.core.sessions import PartitionFolder, PartitionState, fence_key
from leakproof.kafka.admin import topic_bounds
from leakproof.kafka.reader import read_range
from leakproof.kafka.registry import decoder_for
from leakproof.model.compiled import CompiledModel, compile_model


@dataclass
class Sample:
    """What the newest records would give."""

    model: CompiledModel
    records: int = 0
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    dead: list[DecodeError] = field(default_factory=list)


def sample(cfg: Config, n: int) -> Sample:
    """Fold the newest ``n`` records of the topic (about n / partitions from each)."""
    model = compile_model(cfg.model, by_time=cfg.sessions.by == "gap")
    out = Sample(model)
    if n <= 0:
        return out
    bounds = topic_bounds(cfg.kafka)
    each = -(-n // max(1, len(bounds)))
    decoder = decoder_for(cfg.model, cfg.input)
    for p in bounds:
        end = bounds[p].readable_end
        rng = OffsetRange(cfg.kafka.topic, p, max(bounds[p].log_start, end - each), end)
        folder = PartitionFolder(model, fence_key(rng.topic, p), cfg.sessions.close_after_ms,
                                 PartitionState(), {})
        for rec in read_range(cfg.kafka, rng):
            out.records += 1
            try:
                event = decoder.decode(rec.key, rec.value, topic=rng.topic, partition=p,
                                       offset=rec.offset, timestamp=rec.timestamp,
                                       headers=rec.headers)
            except DecodeError as err:
                out.dead.append(err)
                continue
            folder.feed(rec.offset, event)
        for sid, s in folder.finish().touched.items():
            out.rows[sid] = readable(to_cells(s, model))
    return out
