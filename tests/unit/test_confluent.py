"""Registry-framed Avro (``events.format: confluent``) over an in-memory registry: the
frames of Confluent's and Cloudera's serializers (in the value and in a header), schema
evolution by registry id, the dead-letter kinds, and an unreachable registry as an outage,
never a dead letter."""

from __future__ import annotations

import copy
import io
import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
import pytest

from leakproof.core import config
from leakproof.core.codec import Decoder, encode_framed
from leakproof.core.config import Registry
from leakproof.core.errors import ConfigError, DecodeError, RegistryUnavailable, SchemaMismatch
from leakproof.core.events import WebEvent, schema_json
from leakproof.core.frames import describe
from leakproof.model.spec import FROM_REGISTRY, read_model, web_model, with_schema

pytestmark = pytest.mark.usefixtures("read_path")  # each test on both read paths

WEB_SCHEMA = str(resources.files("leakproof").joinpath("schemas/web_event.avsc"))
EVENT = WebEvent("s1", "u1", 3, 1_700_000_000_123, "click", "/a", 200, 512)
V2 = copy.deepcopy(schema_json())
V2["fields"].append({"name": "country", "type": "string", "default": "??"})
WHERE: dict[str, Any] = {"topic": "t", "partition": 1, "offset": 9}


def cid(schema_id: int) -> bytes:
    """Confluent's frame: magic byte 0, the 4-byte id."""
    return b"\x00" + schema_id.to_bytes(4, "big")


GUID = bytes(range(16))
V1_FRAMES = {"confluent": [cid(7), b"\x01" + GUID],
             "cloudera": [b"\x00" + (5).to_bytes(4, "big"),
                          b"\x01" + (3).to_bytes(8, "big") + (1).to_bytes(4, "big"),
                          b"\x02" + (5).to_bytes(8, "big"), b"\x03" + (5).to_bytes(4, "big")]}


def framed(schema_id: int, record: dict[str, Any], schema: Any) -> bytes:
    out = io.BytesIO()
    out.write(cid(schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def confluent_model(api: str = "confluent") -> Any:
    web = web_model()
    events = {"session_key": "session_id", "event_time": "ts", "sequence": "seq",
              "format": "confluent", "schema": WEB_SCHEMA,
              "registry": {"url": "http://127.0.0.1:1/apis/ccompat/v7",
                                                  "username": "u", "password": "s3cret-pw",
                                                  "api": api}}
    aggregates = {a.name: {k: v for k, v in (("fn", a.fn), ("field", a.field),
                                             ("where", a.where)) if v is not None}
                  for a in web.aggregates}
    return read_model(events, aggregates, Path("."))


class FakeRegistry:
    """Frames to schema texts; counts the look-ups; ``down``: every look-up is an outage."""

    def __init__(self) -> None:
        self.schemas = {cid(7): json.dumps(schema_json()), cid(8): json.dumps(V2)}
        for frames in V1_FRAMES.values():
            self.schemas.update((f, json.dumps(schema_json())) for f in frames)
        self.calls = 0
        self.down = False

    def __call__(self, frame: bytes) -> str | None:
        self.calls += 1
        if self.down:
            raise RegistryUnavailable("schema registry http://127.0.0.1:1 unreachable")
        return self.schemas.get(frame)


def test_framed_records_of_two_schema_versions_decode_and_ids_are_fetched_once() -> None:
    registry = FakeRegistry()
    decoder = Decoder(confluent_model(), lookup=registry)
    v1 = framed(7, EVENT.to_record(), schema_json())
    v2 = framed(8, {**EVENT.to_record(), "country": "NL"}, V2)
    for _ in range(3):
        assert decoder.decode(b"s1", v1, **WHERE) == EVENT.as_event()
        assert decoder.decode(b"s1", v2, **WHERE) == EVENT.as_event()  # resolved to the reader
    assert registry.calls == 2


@pytest.mark.parametrize(("api", "frame"), [(api, f) for api, frames in V1_FRAMES.items()
                                            for f in frames])
def test_every_frame_of_both_apis_decodes_in_the_value_and_in_a_header(api: str, frame: bytes
                                                                        ) -> None:
    registry = FakeRegistry()
    decoder = Decoder(confluent_model(api), lookup=registry, api=api)
    parsed = fastavro.parse_schema(schema_json())
    bare = encode_framed(EVENT.to_record(), b"", parsed)
    header = "__value_schema_id" if api == "confluent" else "value.schema.version.id"
    for _ in range(2):
        assert decoder.decode(b"s1", encode_framed(EVENT.to_record(), frame, parsed),
                              **WHERE) == EVENT.as_event()
        assert decoder.decode(b"s1", bare, headers=[("other", b"x"), (header, frame)],
                              **WHERE) == EVENT.as_event()
    assert registry.calls == 1  # one fetch per frame, wherever it travelled


def test_frames_are_named_as_their_registries_name_them() -> None:
    assert [describe(api, f) for api, fs in V1_FRAMES.items() for f in fs] == [
        "schema id 7", "schema GUID 00010203-0405-0607-0809-0a0b0c0d0e0f",
        "schema version id 5", "schema metadata id 3 version 1", "schema version id 5",
        "schema version id 5"]


@pytest.mark.parametrize(("api", "value", "headers", "reason"), [
    ("confluent", b"\x02" + bytes(20), (), "first byte 0x02, expected one of 0x00, 0x01"),
    ("confluent", b"\x01" + bytes(10), (), "protocol 1 needs a 17-byte header"),
    ("cloudera", b"\x04" + bytes(20), (), "first byte 0x04"),
    ("cloudera", b"\x02" + bytes(5), (), "protocol 2 needs a 9-byte header"),
    ("confluent", b"\x02", [("__value_schema_id", b"\x00\x01")], "header __value_schema_id"),
    ("cloudera", b"\x02", [("value.schema.version.id", b"")], "empty"),
])
def test_frames_an_api_does_not_know_are_unknown_magic(api: str, value: bytes,
                                                       headers: Any, reason: str) -> None:
    decoder = Decoder(confluent_model(api), lookup=FakeRegistry(), api=api)
    with pytest.raises(DecodeError) as err:
        decoder.decode(b"s1", value, headers=headers, **WHERE)
    assert err.value.kind == "unknown_magic" and reason in err.value.reason, err.value


@pytest.mark.parametrize(("value", "kind", "reason"), [
    (b"\x03" + bytes(20), "unknown_magic", "first byte 0x03"),
    (b"\x00\x00\x00", "unknown_magic", "needs a 5-byte header"),
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
    base: dict[str, Any] = {"session_key": "session_id", "event_time": "ts",
                            "format": "confluent", "schema": WEB_SCHEMA}
    agg = {"events": {"fn": "count"}}

    def loaded(registry: Any) -> config.Config:
        return config.from_dict({"kafka": {"bootstrap_servers": "k:9092", "topic": "t",
                                           "group_id": "g"},
                                 "events": {**base, "registry": registry},
                                 "aggregates": agg}, Path("."))

    cfg = loaded({"url": "http://127.0.0.1:1/apis/ccompat/v7", "username": "u",
                  "password": "s3cret-pw"})
    assert cfg.input.registry == Registry("http://127.0.0.1:1/apis/ccompat/v7", "u",
                                          "s3cret-pw", auth="basic")
    assert "s3cret-pw" not in repr(cfg) and "s3cret-pw" not in repr(cfg.input.registry)
    for registry, key in ((None, "events.registry.url"),
                          ({"url": "ftp://x"}, "events.registry.url"),
                          ({"url": "http://x", "username": "u"}, "events.registry.username"),
                          ({"url": "http://x", "pasword": "p"}, "events.registry.pasword"),
                          ({"url": "http://x", "outage_tolerance_s": -1},
                           "events.registry.outage_tolerance_s"),
                          ({"url": "http://x", "api": "karapace"}, "events.registry.api"),
                          ({"url": "http://x", "auth": "ntlm"}, "events.registry.auth"),
                          ({"url": "http://x", "auth": "basic"}, "events.registry.auth"),
                          ({"url": "http://x", "service_principal": "HTTP/x"},
                           "events.registry.service_principal")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            loaded(registry)


def test_spnego_takes_the_jobs_login_and_names_the_registrys_principal(tmp_path: Path) -> None:
    keytab = tmp_path / "job.keytab"
    keytab.write_bytes(b"\x05\x02")
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": "k:9092", "topic": "t", "group_id": "g"},
        "events": {"session_key": "session_id", "event_time": "ts", "format": "confluent",
                   "registry": {"url": "https://Reg.example:7790/api/v1", "api": "cloudera",
                                "auth": "kerberos"}},
        "aggregates": {"events": {"fn": "count"}}}
    with pytest.raises(ConfigError, match=r"'events\.registry\.auth' kerberos needs "
                                          r"'security\.kerberos'"):
        config.from_dict(doc, tmp_path)
    doc["security"] = {"kerberos": {"principal": "job@EXAMPLE.COM", "keytab": str(keytab)}}
    registry = config.from_dict(doc, tmp_path).input.registry
    assert registry is not None and registry.kerberos is not None
    assert registry.kerberos_service() == "HTTP/reg.example@EXAMPLE.COM"
    assert "keytab" not in repr(registry)


def test_without_a_schema_file_the_reader_is_the_registrys_and_is_checked_when_given() -> None:
    events = {"session_key": "session_id", "event_time": "ts", "format": "confluent",
              "registry": {"url": "http://127.0.0.1:1/apis/ccompat/v7"}}
    model = read_model(events, {"events": {"fn": "count"}}, Path("."))
    assert model.schema_file == FROM_REGISTRY
    done = with_schema(model, json.dumps(schema_json()), "t-value (the registry's latest)")
    assert "session_id" in done.fields()
    with pytest.raises(ConfigError, match=r"events\.event_time"):
        with_schema(replace(model, event_time="when"), json.dumps(schema_json()), "t-value")


def test_a_writer_without_a_field_the_reader_needs_stops_the_range_naming_it() -> None:
    """A producer removed a field (the registry's BACKWARD rule allows it): no record of its
    schema can be read, so decoding stops with the writer's id, the subject and the field,
    instead of dead-lettering every later record."""
    fewer = copy.deepcopy(schema_json())
    fewer["fields"] = [f for f in fewer["fields"] if f["name"] != "status"]
    registry = FakeRegistry()
    registry.schemas[cid(9)] = json.dumps(fewer)
    decoder = Decoder(confluent_model(), lookup=registry)
    record = {k: v for k, v in EVENT.to_record().items() if k != "status"}
    with pytest.raises(SchemaMismatch, match=r"schema id 9 \(subject t-value\) has no field "
                                             r"status.*default"):
        decoder.decode(b"s1", framed(9, record, fewer), **WHERE)
    assert decoder.decode(b"s1", framed(7, EVENT.to_record(), schema_json()),
                          **WHERE) == EVENT.as_event()  # the others still read
