"""The event model a user declares (``events:`` and ``aggregates:``), read and checked.

``read_model`` turns the two YAML sections into a ``Model`` (frozen, hashable, picklable: it
travels to the executors inside the config, schema text and all) and checks it whole against
the reader schema before anything runs. Every error is a ConfigError naming the key, and for
a ``where`` the column, so a bad model stops the job at start, never on an executor. Keys and
choices are checked with the config's section reader (``config.reader``), as every section is.

Without ``events:`` / ``aggregates:`` the shipped web model applies (``models/web.yml``).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from leakproof.core.config.reader import no_unknown_keys, one_of
from leakproof.core.errors import ConfigError
from leakproof.model import schema as avro
from leakproof.model import where

Fn = Literal["count", "sum", "min", "max", "first", "last"]
Format = Literal["avro", "json", "confluent"]
KEY = "@key"
# cells every session row has whatever its model (family s), which no aggregate may take
BUILT_IN_CELLS = ("first_ts", "last_ts", "state", "late_events", "duplicates", "out_of_order")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FN_NEEDS: dict[str, tuple[avro.Kind, ...]] = {
    "sum": ("int", "float"),
    "min": ("int", "float", "string"),
    "max": ("int", "float", "string"),
    "first": ("int", "float", "string", "boolean"),
    "last": ("int", "float", "string", "boolean"),
    "count": ("int", "float", "string", "boolean", "bytes", "other"),
}
WEB_MODEL = "models/web.yml"
# events.format: confluent without events.schema: the reader schema is looked up in the
# registry when the job starts (``registry.resolve_schema``), and the model checked then
FROM_REGISTRY = "<the registry's latest schema of the topic>"


@dataclass(frozen=True)
class Aggregate:
    """One aggregate: the cell ``s:<name>``. ``fn`` is a built-in or ``module:Class``;
    ``options`` the Python aggregate's other keys, as JSON text (kept hashable)."""

    name: str
    fn: str
    field: str | None = None
    where: str | None = None
    options: str = "{}"

    @property
    def python(self) -> bool:
        return ":" in self.fn


@dataclass(frozen=True)
class Model:
    """What an event is and what a session row holds."""

    schema_text: str  # the reader schema, JSON
    schema_file: str  # where it came from, for messages
    format: Format
    session_key: str  # a field, or "@key"
    event_time: str
    sequence: str | None
    aggregates: tuple[Aggregate, ...]

    @property
    def schema(self) -> Any:
        return json.loads(self.schema_text)

    def fields(self) -> dict[str, avro.Field]:
        return avro.fields_of(self.schema)

    @property
    def time_unit(self) -> int:
        unit = avro.time_unit(self.fields()[self.event_time])
        assert unit is not None  # read_model checked it
        return unit


def read_model(events: Mapping[str, Any] | None, aggregates: Mapping[str, Any] | None,
               base: Path) -> Model:
    """The model the two sections declare (None: the section is absent), checked."""
    if events is None and aggregates is None:
        return web_model()
    if aggregates is None:
        raise ConfigError("'aggregates' is required with 'events': the cells of a session "
                          "row (for example {events: {fn: count}})")
    ev = dict(events or {})
    # events.registry is the input's (config.security reads it)
    no_unknown_keys(ev, "events", {"schema", "session_key", "event_time", "sequence", "format",
                                   "registry"})
    fmt = one_of(ev.get("format", "avro"), "events.format", Format)
    if fmt == "confluent" and ev.get("schema") is None:
        # the reader schema is the writer's own: the subject's latest at start
        text, source = "", FROM_REGISTRY
    else:
        text, source = _schema_text(ev.get("schema"), base)
    for key in ("session_key", "event_time"):
        if not isinstance(ev.get(key), str) or not ev[key]:
            raise ConfigError(f"'events.{key}' is required: the name of a field of {source}"
                              + (" (or @key for the Kafka record key)"
                                 if key == "session_key" else ""))
    seq = ev.get("sequence")
    if seq is not None and not isinstance(seq, str):
        raise ConfigError(f"'events.sequence' must be a field name, got {seq!r}")
    if not isinstance(aggregates, Mapping) or not aggregates:
        raise ConfigError("'aggregates' must be a mapping of cell name -> {fn: ..., ...} "
                          "with at least one aggregate")
    model = Model(text, source, fmt, ev["session_key"], ev["event_time"], seq,
                  tuple(_aggregate(name, spec) for name, spec in aggregates.items()))
    if model.schema_file != FROM_REGISTRY:
        check(model)
    return model


def with_schema(model: Model, text: str, source: str) -> Model:
    """A model waiting for its reader schema (``FROM_REGISTRY``) given it, and checked."""
    done = replace(model, schema_text=text, schema_file=source)
    check(done)
    return done


def _schema_text(path: Any, base: Path) -> tuple[str, str]:
    if path is None:
        return _web_schema_text(), "the shipped web_event.avsc"
    if not isinstance(path, str):
        raise ConfigError(f"'events.schema' must be a path to an .avsc file, got {path!r}")
    full = base / path
    try:
        text = full.read_text("utf-8")
        json.loads(text)
    except OSError as exc:
        raise ConfigError(f"'events.schema': cannot read {full}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"'events.schema': {full} is not JSON: {exc}") from exc
    return text, str(path)


def _aggregate(name: Any, spec: Any) -> Aggregate:
    key = f"aggregates.{name}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"'{key}': an aggregate's name is its cell's qualifier: letters, "
                          f"digits and _, not starting with a digit")
    if name in BUILT_IN_CELLS:
        raise ConfigError(f"'{key}': {name} is a built-in cell of every session row "
                          f"({', '.join(BUILT_IN_CELLS)}); choose another name")
    if not isinstance(spec, Mapping) or "fn" not in spec:
        raise ConfigError(f"'{key}' must be a mapping with 'fn' "
                          f"({', '.join(get_args(Fn))} or module:Class)")
    fn = spec["fn"]
    if not isinstance(fn, str) or (fn not in get_args(Fn) and ":" not in fn):
        raise ConfigError(f"'{key}.fn' must be one of {', '.join(get_args(Fn))} or "
                          f"\"module:Class\" (a Python aggregate), got {fn!r}")
    fld, cond = spec.get("field"), spec.get("where")
    if fld is not None and not isinstance(fld, str):
        raise ConfigError(f"'{key}.field' must be a field name, got {fld!r}")
    if cond is not None and not isinstance(cond, str):
        raise ConfigError(f"'{key}.where' must be an expression (text), got {cond!r}")
    extra = {k: v for k, v in spec.items() if k not in ("fn", "field", "where")}
    if ":" not in fn:  # a built-in takes no options; a Python aggregate's are its own
        no_unknown_keys(spec, key, {"fn", "field", "where"})
    try:
        options = json.dumps(extra, sort_keys=True)
    except TypeError as exc:
        raise ConfigError(f"'{key}': options must be plain YAML values: {exc}") from exc
    return Aggregate(name, fn, fld, cond, options)


def check(model: Model) -> None:
    """Every field the model names exists in the reader schema with a usable type, every
    ``where`` parses and type-checks, every Python aggregate loads."""
    source = model.schema_file
    try:
        fields = model.fields()
    except ValueError as exc:
        raise ConfigError(f"'events.schema': {source}: {exc}") from exc

    def field_of(key: str, name: str) -> avro.Field:
        f = fields.get(name)
        if f is None:
            raise ConfigError(f"'{key}': {source} has no field {name!r}; its fields: "
                              f"{', '.join(fields)}")
        return f

    if model.session_key != KEY:
        f = field_of("events.session_key", model.session_key)
        if f.kind not in ("string", "int"):
            raise ConfigError(f"'events.session_key': field {f.name!r} of {source} is "
                              f"{f.avro}; a session key is a string or a long")
    f = field_of("events.event_time", model.event_time)
    if avro.time_unit(f) is None:
        raise ConfigError(f"'events.event_time': field {f.name!r} of {source} is {f.avro}; "
                          f"event time is a long of epoch ms, or a timestamp-millis / "
                          f"timestamp-micros long")
    if model.sequence is not None:
        f = field_of("events.sequence", model.sequence)
        if f.kind != "int":
            raise ConfigError(f"'events.sequence': field {f.name!r} of {source} is {f.avro}; "
                              f"a sequence is an int or long counting up per session")
    for agg in model.aggregates:
        key = f"aggregates.{agg.name}"
        if agg.field is not None:
            f = field_of(f"{key}.field", agg.field)
            if not agg.python and f.kind not in _FN_NEEDS[agg.fn]:
                raise ConfigError(f"'{key}': {agg.fn} cannot take field {f.name!r}, which is "
                                  f"{f.avro} in {source}; {agg.fn} takes "
                                  f"{' / '.join(_FN_NEEDS[agg.fn])} fields")
        elif agg.fn in ("sum", "min", "max", "first", "last"):
            raise ConfigError(f"'{key}.field' is required for {agg.fn}")
        if agg.where is not None:
            try:
                where.check(where.parse(agg.where), fields)
            except where.WhereError as exc:
                raise ConfigError(f"'{key}.where': {exc}: {agg.where!r}") from exc
        if agg.python:
            load_python(agg, key)


def load_python(agg: Aggregate, key: str = "") -> Any:
    """The Python aggregate's instance: ``Class(**options)`` (ConfigError if it cannot be)."""
    key = key or f"aggregates.{agg.name}"
    module_name, _, class_name = agg.fn.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"'{key}.fn': cannot load {agg.fn}: {type(exc).__name__}: {exc}; "
                          f"ship the module with --py-files (or in the packed environment "
                          f"on YARN)") from exc
    missing = [m for m in ("initial", "apply", "to_text", "from_text")
               if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(f"'{key}.fn': {agg.fn} lacks {', '.join(missing)} (see "
                          f"leakproof.model.python_aggregate.PythonAggregate)")
    options = json.loads(agg.options)
    if agg.field is not None:
        options["field"] = agg.field
    try:
        return cls(**options)
    except Exception as exc:
        raise ConfigError(f"'{key}': {agg.fn}({agg.options}) failed: "
                          f"{type(exc).__name__}: {exc}") from exc


@cache
def _web_schema_text() -> str:
    return resources.files("leakproof").joinpath("schemas/web_event.avsc").read_text("utf-8")


@cache
def web_model() -> Model:
    """The shipped web model: what ``config.yml`` writes out, rows as ``web_sessions``."""
    data = yaml.safe_load(resources.files("leakproof").joinpath(WEB_MODEL).read_text("utf-8"))
    events = dict(data["events"])
    events.pop("schema", None)  # the packaged schema, wherever the package is
    return read_model(events, data["aggregates"], Path("."))
