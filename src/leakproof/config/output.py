"""``output:``: the optional outputs besides HBase (the closed sessions' summaries, as JSON
or registry-framed Avro)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from leakproof.config.reader import TOPIC_RE, Section, mapping
from leakproof.config.security import KerberosConfig, Registry, read_registry, with_login
from leakproof.errors import ConfigError

SummaryFormat = Literal["json", "avro"]


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
    return OutputConfig(
        closed_sessions_topic=s.text("closed_sessions_topic", pattern=TOPIC_RE, optional=True),
        transactional=s.flag("transactional"),
        transaction_timeout_s=s.number("transaction_timeout_s", minimum=0, exclusive=True),
        format=fmt, registry=registry)
