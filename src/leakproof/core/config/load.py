"""The whole config: a YAML file read, each section read by its module, and the checks that
span sections (a Kerberos login the others need, a model that gap sessions can merge).

The model is reached as ``spec.*`` at call time: ``model.spec`` reads its sections with
``config.reader``, so a process that imports the model first (an executor unpickling it)
comes through here while ``model.spec`` is still loading."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from leakproof.core.config.hbase import HBaseConfig, read_hbase
from leakproof.core.config.inputs import InputConfig, read_input
from leakproof.core.config.job import JobConfig, read_job
from leakproof.core.config.kafka import KafkaConfig, read_kafka
from leakproof.core.config.offsets import OffsetsConfig, read_offsets
from leakproof.core.config.output import OutputConfig, read_output
from leakproof.core.config.reader import mapping, no_unknown_keys
from leakproof.core.config.security import (
    KerberosConfig,
    events_registry,
    read_security,
    with_login,
)
from leakproof.core.config.sessions import SessionsConfig, read_sessions
from leakproof.core.errors import ConfigError
from leakproof.model import spec

if TYPE_CHECKING:
    from leakproof.model.spec import Model


def _web_model() -> Model:
    return spec.web_model()


@dataclass(frozen=True)
class Config:
    """The whole job's configuration."""

    kafka: KafkaConfig
    hbase: HBaseConfig
    job: JobConfig
    sessions: SessionsConfig
    output: OutputConfig
    # frozen, so one shared default is safe (ruff cannot see that across modules)
    input: InputConfig = InputConfig()  # noqa: RUF009
    offsets: OffsetsConfig = OffsetsConfig()  # noqa: RUF009
    kerberos: KerberosConfig | None = field(default=None, repr=False)
    model: Model = field(default_factory=_web_model, repr=False)


def load(path: str | Path) -> Config:
    """Read and validate a YAML config file."""
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    return from_dict(data or {}, base=Path(path).parent)


def from_dict(data: Any, base: Path | None = None) -> Config:
    """Validate a parsed YAML document; every error names the dotted key at fault.

    Relative file paths in it (``input.writer_schemas``, ``events.schema``) are read
    relative to ``base``. ``events:`` and ``aggregates:`` are the model (``model.spec``).
    """
    root = mapping(data, "")
    no_unknown_keys(root, "", {"kafka", "hbase", "job", "sessions", "output", "input", "offsets",
                           "security", "events", "aggregates"})
    kerberos = read_security(mapping(root.get("security", {}), "security"), base or Path.cwd())
    kafka = replace(read_kafka(mapping(root.get("kafka"), "kafka")), kerberos=kerberos)
    hbase = replace(read_hbase(mapping(root.get("hbase", {}), "hbase")), kerberos=kerberos)
    if kafka.uses_gssapi and kerberos is None:
        raise ConfigError("'kafka.consumer.sasl_mechanism' GSSAPI needs 'security.kerberos' "
                          "(principal and keytab): leakproof logs in from a keytab, never from "
                          "a ticket cache that would expire under a long-running job")
    if hbase.auth == "kerberos" and kerberos is None:
        raise ConfigError("'hbase.auth' kerberos needs 'security.kerberos' (principal and "
                          "keytab)")
    events = root.get("events")
    model = spec.read_model(events, root.get("aggregates"), base or Path.cwd())
    registry = events_registry(events.get("registry") if isinstance(events, Mapping) else None,
                               model.format, base or Path.cwd())
    if registry is not None:
        registry = with_login(registry, kerberos, "events.registry")
    inputs = replace(read_input(mapping(root.get("input", {}), "input"), base or Path.cwd()),
                     registry=registry)
    sessions = read_sessions(mapping(root.get("sessions", {}), "sessions"))
    if sessions.by == "gap":
        _mergeable(model)
    if inputs.rekey is not None:
        _rekeyable(inputs.rekey.field, model, sessions)
    return Config(
        kafka=kafka,
        hbase=hbase,
        kerberos=kerberos,
        job=read_job(mapping(root.get("job", {}), "job")),
        sessions=sessions,
        output=read_output(mapping(root.get("output", {}), "output"), registry, kerberos,
                           base or Path.cwd()),
        input=inputs,
        offsets=read_offsets(mapping(root.get("offsets", {}), "offsets")),
        model=model,
    )


def session_stage(cfg: Config) -> Config:
    """The config the session job runs with: with ``input.rekey``, the internal topic in
    place of the source (every partition of it, always read_committed: the stage's aborted
    transactions must never count), so its offsets rows, lease, fences and dead letters go
    by the internal topic's coordinates; without it, ``cfg`` itself. The result has no
    ``input.rekey`` (the internal topic is keyed), so taking it twice changes nothing."""
    rekey = cfg.input.rekey
    if rekey is None:
        return cfg
    return replace(cfg, kafka=replace(cfg.kafka, topic=rekey.internal_topic(cfg.kafka.topic),
                                      partitions=None, isolation_level="read_committed"),
                   input=replace(cfg.input, rekey=None))


def _rekeyable(field_name: str, model: Model, sessions: SessionsConfig) -> None:
    """Re-keying is exact only where the order of a session's events cannot change a row.

    The stage merges several source partitions into each internal one, so a session's events
    reach the job in the order the stage wrote them, not the producer's: refuse the settings
    whose rows would depend on that order (docs/DESIGN.md, "Unkeyed input")."""
    if model.session_key == spec.KEY:
        raise ConfigError("'input.rekey.field' needs 'events.session_key' to be that field: "
                          "@key (the Kafka key) is what re-keying replaces")
    if field_name != model.session_key:
        raise ConfigError(f"'input.rekey.field' = {field_name!r} differs from "
                          f"'events.session_key' = {model.session_key!r}: the job checks each "
                          f"re-keyed record's key against the session key, so they must name "
                          f"the same field")
    if model.sequence is not None:
        return
    if sessions.by == "id":
        raise ConfigError("'input.rekey' with 'sessions.by: id' needs 'events.sequence': "
                          "re-keying merges source partitions, so a session's events arrive "
                          "in the order the stage wrote them, not the producer's, and first / "
                          "last and late events would follow that order; give events.sequence "
                          "(first / last then go by it), or use sessions.by: gap with "
                          "sessions.late: fold")
    if sessions.late != "fold":
        raise ConfigError("'input.rekey' with 'sessions.by: gap' and 'sessions.late: count' "
                          "needs 'events.sequence': which events come late would follow the "
                          "order the stage wrote them, not the producer's; use sessions.late: "
                          "fold (rows then do not depend on arrival order), or give "
                          "events.sequence")
    if sessions.max_duration_s is not None:
        raise ConfigError("'input.rekey' with 'sessions.max_duration_s' needs "
                          "'events.sequence': the cuts follow the order the events arrive in, "
                          "which re-keying does not keep; leave max_duration_s out, or give "
                          "events.sequence")


def _mergeable(model: Model) -> None:
    """Sessions split by the gap merge when an event bridges two: every Python aggregate
    must say how (``merge``)."""
    for agg in model.aggregates:
        if agg.python and not callable(getattr(spec.load_python(agg), "merge", None)):
            raise ConfigError(f"'aggregates.{agg.name}.fn': {agg.fn} has no merge(value, "
                              f"other), which sessions.by: gap needs (two sessions an event "
                              f"bridges become one); add it, or use sessions.by: id")
