"""``output:``: the optional outputs besides HBase (the closed sessions' summaries, as JSON
or registry-framed Avro)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from leakproof.core.config.reader import TOPIC_RE, Section, mapping
from leakproof.core.config.security import KerberosConfig, Registry, read_registry, with_login
from leakproof.core.errors import ConfigError

SummaryFormat = Literal["json", "avro"]
EmitWord = Literal["close", "update"]


@dataclass(frozen=True)
class EmitEvery:
    """``output.emit: {every_s: N}``: as ``update``, each open session at most once per N
    seconds while it changes (its close always at once)."""

    every_s: float


Emit = EmitWord | EmitEvery


@dataclass(frozen=True)
class OutputConfig:
    """Optional outputs besides HBase.

    ``closed_sessions_topic``: each closed session's summary, keyed by session id. Published
    in one Kafka transaction per range (``transactional``), so a ``read_committed`` consumer
    sees each summary once per change; ``transactional: false`` is for brokers that forbid
    transactions (then a crash may publish a summary twice). ``transaction_timeout_s`` bounds
    every transaction call.
    """

    closed_sessions_topic: str | None = None
    transactional: bool = True
    transaction_timeout_s: float = 30.0
    # json: the row's family s as text. avro: typed, registry-framed (magic 0 + id), under a
    # schema derived from the model and registered as <closed_sessions_topic>-value in
    # ``registry`` (``output.registry``, else ``events.registry``).
    format: SummaryFormat = "json"
    registry: Registry | None = None
    # close: a summary when a session closes, and again when a late fold changes it.
    # update: in every range that changed the session, open or closed. EmitEvery: as
    # update, an open session at most once per every_s (outbox.throttled). Each summary
    # record carries headers leakproof.version / leakproof.final; but close, the value
    # holds them too (JSON keys, Avro fields; close keeps the value as it always was).
    emit: Emit = "close"

    @property
    def updates(self) -> bool:
        """Open sessions' summaries go out too, each with its version and final."""
        return self.emit != "close"

    @property
    def every_ms(self) -> int | None:
        """``{every_s: N}``: N in ms; else None."""
        return round(self.emit.every_s * 1000) if isinstance(self.emit, EmitEvery) else None


def read_output(data: dict[str, Any], events_registry: Registry | None,
            kerberos: KerberosConfig | None, base: Path) -> OutputConfig:
    registry_data = data.get("registry")
    s = Section(data, "output", OutputConfig)
    fmt = s.choice("format", SummaryFormat)
    registry = None
    if registry_data is not None:
        if fmt != "avro":
            raise ConfigError("'output.registry' is only read with 'output.format: avro'")
        registry = read_registry(mapping(registry_data, "output.registry"),
                                  "output.registry", base)
        if registry.api != "confluent":
            raise ConfigError("'output.registry.api' must be confluent: summaries are "
                              "registered and framed the Confluent way")
        registry = with_login(registry, kerberos, "output.registry")
    elif fmt == "avro":
        registry = events_registry
        if registry is None or registry.api != "confluent":
            raise ConfigError("'output.format: avro' needs 'output.registry.url' (or "
                              "'events.registry' with api confluent) to register the "
                              "summary schema in")
    emit = _emit(s)
    return OutputConfig(
        closed_sessions_topic=s.text("closed_sessions_topic", pattern=TOPIC_RE, optional=True),
        transactional=s.flag("transactional"),
        transaction_timeout_s=s.number("transaction_timeout_s", minimum=0, exclusive=True),
        format=fmt, registry=registry, emit=emit)


def _emit(s: Section) -> Emit:
    """``output.emit``: close | update | {every_s: N} with N > 0."""
    value = s.get("emit")
    if isinstance(value, dict):
        every = Section(value, "output.emit", EmitEvery)
        if "every_s" not in value:
            raise ConfigError("'output.emit.every_s' is required in the mapping form "
                              "{every_s: N}")
        return EmitEvery(every.number("every_s", minimum=0, exclusive=True))
    if value not in get_args(EmitWord):
        raise ConfigError(f"'output.emit' = {value!r} is not valid; use one of: close | "
                          f"update | {{every_s: N}}")
    word: EmitWord = value
    return word
