"""Events as the fold sees them (``Event``), and the shipped web model's record, ``WebEvent``,
with its Avro schema (the contract in docs/DESIGN.md, field order too): the demo producer,
the generator and the benchmarks write WebEvents; the job reads any model's records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

SCHEMA_RESOURCE = "schemas/web_event.avsc"


class Event(NamedTuple):
    """One decoded event of any model: its session, event time (epoch ms), sequence (None
    without ``events.sequence``) and the whole record by field name (what aggregates read)."""

    session_id: str
    ts: int
    seq: int | None
    record: dict[str, Any]


@dataclass(slots=True, unsafe_hash=True)
class WebEvent:
    """One web-server event, as produced to Kafka (value) under key ``session_id``.

    Treat it as immutable; it is not declared frozen because a frozen dataclass builds each
    instance through ``object.__setattr__`` per field: 1.3 us against 0.35 us, once per record
    decoded (about 15 % of a record's decode). ``unsafe_hash`` keeps it hashable."""

    session_id: str
    user_id: str
    seq: int
    ts: int
    event_type: str
    url: str
    status: int
    bytes: int
    referrer: str | None = None
    user_agent: str | None = None

    def as_event(self) -> Event:
        """The event as the web model's decoder gives it."""
        return Event(self.session_id, self.ts, self.seq, self.to_record())

    def to_record(self) -> dict[str, Any]:
        """The dict fastavro writes; keys in schema order."""
        return {
            "session_id": self.session_id, "user_id": self.user_id, "seq": self.seq,
            "ts": self.ts, "event_type": self.event_type, "url": self.url,
            "status": self.status, "bytes": self.bytes, "referrer": self.referrer,
            "user_agent": self.user_agent,
        }


@cache
def schema_json() -> dict[str, Any]:
    """The shipped schema file, parsed (not yet compiled by fastavro)."""
    text = resources.files("leakproof").joinpath(SCHEMA_RESOURCE).read_text("utf-8")
    parsed: dict[str, Any] = json.loads(text)
    return parsed
