"""Confluent-framed Avro (``events.format: confluent``) over an in-memory registry: the
framing, schema evolution by registry id, the dead-letter kinds, and an unreachable registry
as an outage, never a dead letter."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from leakproof.codec import Decoder
from leakproof.errors import ConfigError, DecodeError, RegistryUnavailable
from leakproof.events import WebEvent, schema_json
from leakproof.model.spec import Registry, read_model, web_model

EVENT = WebEvent("s1", "u1", 3, 1_700_000_000_123, "click", "/a", 200, 512)
V2 = copy.deepcopy(schema_json())
V2["fields"].append({"name": "country", "type": "string", "default": "??"})
WHERE: dict[str, Any] = {"topic": "t", "partition": 1, "offset": 9}


def framed(schema_id: int, record: dict[str, Any], schema: Any) -> bytes:
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def confluent_model() -> Any:
    web = web_model()
    events = {"session_key": "session_id", "event_time": "ts", "sequence": "seq",
              "format": "confluent", "registry": {"url": "http://127.0.0.1:1/apis/ccompat/v7",
                                                  "username": "u", "password": "s3cret-pw"}}
    aggregates = {a.name: {k: v for k, v in (("fn", a.fn), ("field", a.field),
                                             ("where", a.where)) if v is not None}
                  for a in web.aggregates}
    return read_model(events, aggregates, Path("."))


class FakeRegistry:
    """Ids to schema texts; counts the look-ups; ``down``: every look-up is an outage."""

    def __init__(self) -> None:
        self.schemas = {7: json.dumps(schema_json()), 8: json.dumps(V2)}
        self.calls = 0
        self.down = False

    def __call__(self, schema_id: int) -> str | None:
        self.calls += 1
        if self.down:
            raise RegistryUnavailable("schema registry http://127.0.0.1:1 unreachable")
        return self.schemas.get(schema_id)


def test_framed_records_of_two_schema_versions_decode_and_ids_are_fetched_once() -> None:
    registry = FakeRegistry()
    decoder = Decoder(confluent_model(), lookup=registry)
    v1 = framed(7, EVENT.to_record(), schema_json())
    v2 = framed(8, {**EVENT.to_record(), "country": "NL"}, V2)
    for _ in range(3):
        assert decoder.decode(b"s1", v1, **WHERE) == EVENT.as_event()
        assert decoder.decode(b"s1", v2, **WHERE) == EVENT.as_event()  # resolved to the reader
    assert registry.calls == 2


@pytest.mark.parametrize(("value", "kind", "reason"), [
    (b"\x01" + bytes(20), "unknown_magic", "magic byte 0x01"),
    (b"\x00\x00\x00", "unknown_magic", "short value"),
    (framed(99, EVENT.to_record(), schema_json()), "unknown_schema_id", "schema id 99"),
    (framed(7, EVENT.to_record(), schema_json()) + b"\x00", "trailing_bytes", "left over"),
    (framed(7, EVENT.to_record(), schema_json())[:9], "not_avro", "not a record"),
    (b"", "empty_value", "empty"),
])
def test_bad_framing_is_dead_lettered_by_kind(value: bytes, kind: str, reason: str) -> None:
    decoder = Decoder(confluent_model(), lookup=FakeRegistry())
    with pytest.raises(DecodeError) as err:
        decoder.decode(b"s1", value, **WHERE)
    assert err.value.kind == kind and reason in err.value.reason, err.value
    assert (err.value.partition, err.value.offset) == (1, 9)


def test_an_unreachable_registry_is_an_outage_not_a_bad_record() -> None:
    registry = FakeRegistry()
    registry.down = True
    decoder = Decoder(confluent_model(), lookup=registry)
    with pytest.raises(RegistryUnavailable):
        decoder.decode(b"s1", framed(7, EVENT.to_record(), schema_json()), **WHERE)
    registry.down = False  # back: the same record decodes
    assert decoder.decode(b"s1", framed(7, EVENT.to_record(), schema_json()),
                          **WHERE) == EVENT.as_event()


def test_registry_settings_are_checked_and_the_password_never_shows() -> None:
    model = confluent_model()
    assert model.registry == Registry("http://127.0.0.1:1/apis/ccompat/v7", "u", "s3cret-pw")
    assert "s3cret-pw" not in repr(model) and "s3cret-pw" not in repr(model.registry)
    base = {"session_key": "session_id", "event_time": "ts", "format": "confluent"}
    agg = {"events": {"fn": "count"}}
    for registry, key in ((None, "events.registry.url"),
                          ({"url": "ftp://x"}, "events.registry.url"),
                          ({"url": "http://x", "username": "u"}, "events.registry.username"),
                          ({"url": "http://x", "pasword": "p"}, "events.registry.pasword"),
                          ({"url": "http://x", "outage_tolerance_s": -1},
                           "events.registry.outage_tolerance_s")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            read_model({**base, "registry": registry}, agg, Path("."))
