"""YAML config -> frozen, validated config objects.

Every key is known: an unknown key, a missing required key or a bad value raises ConfigError
naming the dotted key and what would be valid. Values under ``kafka.consumer`` pass through to
kafka-python (SASL, SSL); they are never shown by ``repr`` or in logs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import yaml

from leakproof.config_keys import no_unknown_keys, one_of
from leakproof.errors import ConfigError
from leakproof.frames import Api
from leakproof.model.spec import Model, load_python, read_model, web_model

OffsetReset = Literal["earliest", "latest", "none"]
DataLossPolicy = Literal["fail", "skip"]
CompactedPolicy = Literal["refuse", "accept"]
IsolationLevel = Literal["read_committed", "read_uncommitted"]
ThriftTransport = Literal["buffered", "framed", "http"]
ThriftProtocol = Literal["binary", "compact"]
HBaseAuth = Literal["none", "kerberos"]
SaslQop = Literal["auth", "auth-int", "auth-conf"]
OffsetsStore = Literal["hbase", "kafka", "zookeeper"]
SummaryFormat = Literal["json", "avro"]
SessionsBy = Literal["id", "gap"]  # gap: a visitor's events split into sessions by the gap
LatePolicy = Literal["count", "fold"]  # fold: also folded in, the summary published again
RegistryAuth = Literal["none", "basic", "kerberos"]

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class BackpressureConfig:
    """Spark's PID rate estimator (spark.streaming.backpressure.*), off by default."""

    enabled: bool = False
    initial_rate: int = 0  # events/s per partition for the first batch; 0 = no extra cap
    proportional: float = 1.0
    integral: float = 0.2
    derived: float = 0.0
    min_rate: float = 100.0  # events/s for the whole job: the estimate never goes below


@dataclass(frozen=True)
class KerberosConfig:
    """The job's Kerberos identity: a principal and its keytab (never a ticket cache, so a job
    that runs for weeks logs in again by itself whenever its tickets expire)."""

    principal: str
    keytab: str  # absolute, or a file shipped with --files (found in the working directory)
    krb5_conf: str | None = None  # None: the system's (/etc/krb5.conf or $KRB5_CONFIG)

    @property
    def realm(self) -> str:
        return self.principal.rpartition("@")[2]


@dataclass(frozen=True)
class Registry:
    """A schema registry (``events.registry``): where writer schemas of ``events.format:
    confluent`` records are fetched. ``api`` is the registry's REST API and the frames its
    serializers write (``leakproof.frames``). The password never reaches a repr; the url is
    shown without any user info."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    outage_tolerance_s: float = 120.0
    timeout_s: float = 10.0
    api: Api = "confluent"
    auth: RegistryAuth = "none"
    service_principal: str | None = None  # SPNEGO's target; default HTTP/<url host>
    # From ``security.kerberos`` (the job's login), not a key of its own.
    kerberos: KerberosConfig | None = field(default=None, repr=False, compare=False)

    def kerberos_service(self) -> str:
        """The registry's full principal name for SPNEGO (``HTTP/host@REALM``)."""
        assert self.kerberos is not None
        name = self.service_principal or f"HTTP/{(urlsplit(self.url).hostname or '').lower()}"
        return name if "@" in name else f"{name}@{self.kerberos.realm}"




@dataclass(frozen=True)
class KafkaConfig:
    """Where to read: the topic, which partitions, and what to do when offsets do not fit."""

    bootstrap_servers: str
    topic: str
    group_id: str
    partitions: tuple[int, ...] | None = None  # None = all, re-read every batch
    auto_offset_reset: OffsetReset = "earliest"
    on_data_loss: DataLossPolicy = "fail"
    # refuse: a source topic with cleanup.policy compact stops the start (its cleaner deletes
    # records before they are read, and the reader cannot tell such holes from a compacted
    # backlog); accept: the operator knows and accepts that loss
    on_compacted_topic: CompactedPolicy = "refuse"
    # read_committed: records of aborted transactions are never read, and ranges stop at the
    # last stable offset. read_uncommitted reads every record a producer sent, aborted ones
    # too: only for topics that no transactional producer writes.
    isolation_level: IsolationLevel = "read_committed"
    max_rate_per_partition: int = 0  # events/s; 0 = no cap
    min_rate_per_partition: int = 0
    consumer: Mapping[str, Any] = field(default_factory=dict, repr=False)
    read_timeout_s: float = 60.0
    mirror_group_offsets: bool = True  # also commit to the Kafka group, for its lag tools
    # After partitions are added: how long until every producer writes with the new count
    # (its metadata.max.age.ms, five minutes by default, and a margin): ``moved_keys``.
    partitions_settle_s: float = 330.0
    backpressure: BackpressureConfig = field(default_factory=BackpressureConfig)
    # From ``security.kerberos``, not a key of its own: the login for SASL/GSSAPI.
    kerberos: KerberosConfig | None = field(default=None, repr=False, compare=False)

    @property
    def uses_gssapi(self) -> bool:
        return str(self.consumer.get("sasl_mechanism", "")).upper() == "GSSAPI"

    def client_settings(self) -> dict[str, Any]:
        """kafka-python settings every consumer, producer and admin client gets."""
        return {"bootstrap_servers": self.bootstrap_servers.split(","), **self.consumer}


@dataclass(frozen=True)
class HBaseConfig:
    """How to reach the HBase Thrift1 server, and the table names (behind ``table_prefix``)."""

    host: str = "127.0.0.1"
    port: int = 9090
    # ``http``: Thrift over HTTP (the server's hbase.regionserver.thrift.http), the only
    # Thrift1 transport HBase can serve over TLS (hbase.thrift.ssl.enabled).
    transport: ThriftTransport = "buffered"
    protocol: ThriftProtocol = "binary"
    # ``kerberos``: log in as security.kerberos.principal. Over ``buffered`` that is SASL/GSSAPI
    # (the server's hbase.thrift.security.qop); over ``http`` it is SPNEGO.
    auth: HBaseAuth = "none"
    sasl_qop: SaslQop = "auth-conf"  # the least accepted
    # The Thrift server's principal; None: hbase/<host> (buffered) or HTTP/<host> (http),
    # in the realm of security.kerberos.principal.
    service_principal: str | None = None
    tls: bool = False  # https; only with transport: http
    tls_ca_file: str | None = None  # None: the system's trusted CAs
    table_prefix: str | None = None
    timeout_ms: int = 60000
    # How long an HBase outage is ridden out (calls retried with backoff, later batches queue
    # behind the waiting one) before the batch fails and the job stops; 0 = fail at once.
    outage_tolerance_s: float = 120.0
    offsets_ttl_days: float = 30.0  # TTL of the offsets table's rows when it is created; 0 = none
    sessions_table: str = "web_sessions"
    dead_letter_table: str = "web_events_dead_letter"
    offsets_table: str = "stream_kafka_offsets"
    state_table: str = "leakproof_state"
    kerberos: KerberosConfig | None = field(default=None, repr=False, compare=False)

    def kerberos_service(self) -> str:
        """The Thrift server's full principal name (``service/host@REALM``)."""
        assert self.kerberos is not None
        name = self.service_principal or (
            f"{'HTTP' if self.transport == 'http' else 'hbase'}/{self.host.lower()}")
        return name if "@" in name else f"{name}@{self.kerberos.realm}"

    def full_name(self, table: str) -> str:
        """The name HBase knows: happybase joins prefix and name with ``_``."""
        return f"{self.table_prefix}_{table}" if self.table_prefix else table


@dataclass(frozen=True)
class JobConfig:
    """The Spark side: batch clock and master for ``leakproof run``."""

    batch_interval_s: float = 2.0
    master: str = "local[2]"
    app_name: str = "leakproof"
    # A stop (SIGTERM, SIGINT, `leakproof stop`) lets the batch in flight finish and commit for
    # at most this long; a batch still running then is abandoned uncommitted (exit 0 all the
    # same: a restart replays it). Keep it under the supervisor's kill timeout.
    stop_timeout_s: float = 30.0
    metrics_port: int = 0  # > 0: Prometheus metrics at http://<metrics_host>:<port>/metrics
    metrics_host: str = "127.0.0.1"
    # a Prometheus file-based service-discovery target for the endpoint, written at start and
    # removed at the end (the driver moves with every YARN attempt); null: none
    metrics_sd_file: str | None = None
    # extra Spark settings for `leakproof run` (spark-submit's --conf wins), e.g.
    # {"spark.ui.port": "4050"} (the UI is on unless {"spark.ui.enabled": "false"})
    spark_conf: dict[str, str] = field(default_factory=dict)


# ``sessions.idle_after_s`` left out: the inactivity gap (a value no user can write: > 0)
IDLE_AFTER_GAP = -1.0


@dataclass(frozen=True)
class SessionsConfig:
    """When a session closes: partition watermark > last_ts + inactivity_gap + grace."""

    inactivity_gap_s: float = 1800.0
    grace_s: float = 60.0
    # a partition the job has read nothing of for this long, by its own clock, has its
    # watermark moved on by that silence, so its sessions close too (``IDLE_AFTER_GAP``,
    # the default: as long as the inactivity gap); None: never
    idle_after_s: float | None = IDLE_AFTER_GAP
    # sessions by their id, or a visitor's events split by the gap (``gap``, cut at
    # ``max_duration_s`` if set); a late event counted (``count``), or counted and folded
    # into its session (``fold``)
    by: SessionsBy = "id"
    late: LatePolicy = "count"
    max_duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.idle_after_s == IDLE_AFTER_GAP:  # left out: silent as long as the gap
            object.__setattr__(self, "idle_after_s", self.inactivity_gap_s)

    @property
    def close_after_ms(self) -> int:
        return round((self.inactivity_gap_s + self.grace_s) * 1000)

    @property
    def gap_ms(self) -> int:
        return round(self.inactivity_gap_s * 1000)

    @property
    def max_duration_ms(self) -> int | None:
        return None if self.max_duration_s is None else round(self.max_duration_s * 1000)


@dataclass(frozen=True)
class OffsetsConfig:
    """Where committed offsets live (the job's source of truth for where to resume).

    ``hbase``: the offsets table of docs/DESIGN.md, one row per batch (history, audit, rewind).
    ``kafka``: the consumer group ``kafka.group_id`` (Kafka's lag tools read it directly).
    ``zookeeper``: ``/consumers/<group>/offsets/<topic>/<partition>`` on ``zookeeper_hosts``.
    The driver lease stays in HBase whatever the store, so two drivers are still fenced.
    """

    store: OffsetsStore = "hbase"
    zookeeper_hosts: str = "127.0.0.1:2181"


@dataclass(frozen=True)
class InputConfig:
    """How record values are read (codec.py has the rules).

    ``writer_schemas`` holds the JSON text of each evolved writer schema (the files are read
    when the config loads, so executors need no copy of them).
    """

    writer_schemas: tuple[str, ...] = ()
    max_ahead_s: float = 86400.0  # 0 = no check
    # ``events.registry``: where writer schemas of ``events.format: confluent`` are fetched
    registry: Registry | None = None

    @property
    def max_ahead_ms(self) -> int:
        return round(self.max_ahead_s * 1000)


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


@dataclass(frozen=True)
class Config:
    """The whole job's configuration."""

    kafka: KafkaConfig
    hbase: HBaseConfig
    job: JobConfig
    sessions: SessionsConfig
    output: OutputConfig
    input: InputConfig = InputConfig()
    offsets: OffsetsConfig = OffsetsConfig()
    kerberos: KerberosConfig | None = field(default=None, repr=False)
    model: Model = field(default_factory=web_model, repr=False)


# --------------------------------------------------------------------------- loading


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
    root = _section(data, "")
    no_unknown_keys(root, "", {"kafka", "hbase", "job", "sessions", "output", "input", "offsets",
                           "security", "events", "aggregates"})
    kerberos = _security(_section(root.get("security", {}), "security"), base or Path.cwd())
    kafka = replace(_kafka(_section(root.get("kafka"), "kafka")), kerberos=kerberos)
    hbase = replace(_hbase(_section(root.get("hbase", {}), "hbase")), kerberos=kerberos)
    if kafka.uses_gssapi and kerberos is None:
        raise ConfigError("'kafka.consumer.sasl_mechanism' GSSAPI needs 'security.kerberos' "
                          "(principal and keytab): leakproof logs in from a keytab, never from "
                          "a ticket cache that would expire under a long-running job")
    if hbase.auth == "kerberos" and kerberos is None:
        raise ConfigError("'hbase.auth' kerberos needs 'security.kerberos' (principal and "
                          "keytab)")
    events = root.get("events")
    model = read_model(events, root.get("aggregates"), base or Path.cwd())
    registry = _events_registry(events.get("registry") if isinstance(events, Mapping) else None,
                                model.format, base or Path.cwd())
    if registry is not None:
        registry = _with_login(registry, kerberos, "events.registry")
    inputs = replace(_input(_section(root.get("input", {}), "input"), base or Path.cwd()),
                     registry=registry)
    sessions = _sessions(_section(root.get("sessions", {}), "sessions"))
    if sessions.by == "gap":
        _mergeable(model)
    return Config(
        kafka=kafka,
        hbase=hbase,
        kerberos=kerberos,
        job=_job(_section(root.get("job", {}), "job")),
        sessions=sessions,
        output=_output(_section(root.get("output", {}), "output"), registry, kerberos,
                       base or Path.cwd()),
        input=inputs,
        offsets=_offsets(_section(root.get("offsets", {}), "offsets")),
        model=model,
    )


def _mergeable(model: Model) -> None:
    """Sessions split by the gap merge when an event bridges two: every Python aggregate
    must say how (``merge``)."""
    for agg in model.aggregates:
        if agg.python and not callable(getattr(load_python(agg), "merge", None)):
            raise ConfigError(f"'aggregates.{agg.name}.fn': {agg.fn} has no merge(value, "
                              f"other), which sessions.by: gap needs (two sessions an event "
                              f"bridges become one); add it, or use sessions.by: id")


def _section(value: Any, key: str) -> dict[str, Any]:
    if value is None and key:
        raise ConfigError(f"'{key}' is required (a mapping)")
    if not isinstance(value, dict):
        raise ConfigError(f"'{key or '<top level>'}' must be a mapping, got {type(value).__name__}")
    return value


class _Section:
    """One YAML mapping read into the dataclass ``cls``: unknown keys are refused, and a key
    left out takes the default written on ``cls``'s field (the one place defaults live)."""

    def __init__(self, data: Mapping[str, Any], prefix: str, cls: type) -> None:
        # ``kerberos`` fields are filled from security.kerberos, never from their own key
        no_unknown_keys(data, prefix, {f.name for f in fields(cls)} - {"kerberos"})
        self.data = data
        self.prefix = prefix
        self._defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def get(self, name: str) -> Any:
        return self.data.get(name, self._defaults.get(name))

    def text(self, name: str, *, pattern: re.Pattern[str] | None = None,
            optional: bool = False) -> Any:
        value = self.get(name)
        if value is None:
            if optional:
                return None
            raise ConfigError(f"'{self.key(name)}' is required")
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"'{self.key(name)}' must be a non-empty string, got {value!r}")
        if pattern is not None and not pattern.match(value):
            raise ConfigError(f"'{self.key(name)}' = {value!r} has characters outside "
                              f"{pattern.pattern}")
        return value

    def choice(self, name: str, choices: Any, aliases: tuple[str, ...] = ()) -> Any:
        """A value among the ``Literal`` type ``choices`` (the dataclass field's own type,
        so the valid values are written once), or one of ``aliases``."""
        valid = (*get_args(choices), *aliases)
        value = self.get(name)
        if value not in valid:
            raise ConfigError(f"'{self.key(name)}' = {value!r} is not valid; use one of: "
                              f"{' | '.join(valid)}")
        return value

    def number(self, name: str, *, minimum: float, integer: bool = False,
               exclusive: bool = False) -> Any:
        value = self.get(name)
        kind = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ConfigError(f"'{self.key(name)}' must be "
                              f"{'an integer' if integer else 'a number'}, got {value!r}")
        if value < minimum or (exclusive and value == minimum):
            op = ">" if exclusive else ">="
            raise ConfigError(f"'{self.key(name)}' must be {op} {minimum}, got {value!r}")
        return value

    def flag(self, name: str) -> bool:
        value = self.get(name)
        if not isinstance(value, bool):
            raise ConfigError(f"'{self.key(name)}' must be true or false, got {value!r}")
        return value

    def section(self, name: str) -> dict[str, Any]:
        return _section(self.data.get(name, {}), self.key(name))


def _kafka(data: dict[str, Any]) -> KafkaConfig:
    s = _Section(data, "kafka", KafkaConfig)
    raw_parts = data.get("partitions", "all")
    partitions: tuple[int, ...] | None
    if raw_parts == "all":
        partitions = None
    elif (isinstance(raw_parts, list) and raw_parts
          and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw_parts)):
        if len(set(raw_parts)) != len(raw_parts):
            raise ConfigError(f"'kafka.partitions' lists a partition twice: {raw_parts}")
        partitions = tuple(sorted(raw_parts))
    else:
        raise ConfigError(f"'kafka.partitions' must be 'all' or a non-empty list of partition "
                          f"ids (integers >= 0), got {raw_parts!r}")
    consumer = data.get("consumer") or {}
    if not isinstance(consumer, dict) or not all(isinstance(k, str) for k in consumer):
        raise ConfigError("'kafka.consumer' must be a mapping of kafka-python settings")
    reserved = sorted(set(consumer) & {"bootstrap_servers", "group_id", "enable_auto_commit",
                                       "auto_offset_reset", "key_deserializer",
                                       "value_deserializer", "isolation_level"})
    if "isolation_level" in reserved:
        raise ConfigError("'kafka.consumer.isolation_level' is not read: set "
                          "'kafka.isolation_level' (read_committed | read_uncommitted)")
    if reserved:
        raise ConfigError(f"'kafka.consumer.{reserved[0]}' is set by leakproof itself; remove it")
    max_rate = s.number("max_rate_per_partition", minimum=0, integer=True)
    min_rate = s.number("min_rate_per_partition", minimum=0, integer=True)
    if max_rate and min_rate > max_rate:
        raise ConfigError(f"'kafka.min_rate_per_partition' ({min_rate}) must not exceed "
                          f"'kafka.max_rate_per_partition' ({max_rate})")
    return KafkaConfig(
        bootstrap_servers=s.text("bootstrap_servers"),
        topic=s.text("topic", pattern=_TOPIC_RE),
        group_id=s.text("group_id", pattern=_NAME_RE),
        partitions=partitions,
        auto_offset_reset=s.choice("auto_offset_reset", OffsetReset),
        # docs/DESIGN.md calls the skipping policy `earliest`; both names are accepted.
        on_data_loss="skip" if s.choice("on_data_loss", DataLossPolicy, ("earliest",))
        != "fail" else "fail",
        on_compacted_topic=s.choice("on_compacted_topic", CompactedPolicy),
        isolation_level=s.choice("isolation_level", IsolationLevel),
        max_rate_per_partition=max_rate,
        min_rate_per_partition=min_rate,
        consumer=dict(consumer),
        read_timeout_s=s.number("read_timeout_s", minimum=0, exclusive=True),
        mirror_group_offsets=s.flag("mirror_group_offsets"),
        partitions_settle_s=s.number("partitions_settle_s", minimum=0),
        backpressure=_backpressure(s.section("backpressure")),
    )


def _backpressure(data: dict[str, Any]) -> BackpressureConfig:
    s = _Section(data, "kafka.backpressure", BackpressureConfig)
    return BackpressureConfig(
        enabled=s.flag("enabled"),
        initial_rate=s.number("initial_rate", minimum=0, integer=True),
        proportional=s.number("proportional", minimum=0),
        integral=s.number("integral", minimum=0),
        derived=s.number("derived", minimum=0),
        min_rate=s.number("min_rate", minimum=0, exclusive=True),
    )


_TABLES = ("sessions_table", "dead_letter_table", "offsets_table", "state_table")


def _hbase(data: dict[str, Any]) -> HBaseConfig:
    s = _Section(data, "hbase", HBaseConfig)
    names = {k: s.text(k, pattern=_NAME_RE) for k in _TABLES}
    if len(set(names.values())) != len(names):
        raise ConfigError(f"'hbase.*_table' names must differ, got {names}")
    transport = s.choice("transport", ThriftTransport)
    auth = s.choice("auth", HBaseAuth)
    tls = s.flag("tls")
    if auth == "kerberos" and transport == "framed":
        raise ConfigError("'hbase.auth' kerberos needs 'hbase.transport' buffered (SASL) or "
                          "http (SPNEGO): HBase's Thrift server refuses SASL over framed")
    if tls and transport != "http":
        raise ConfigError("'hbase.tls' needs 'hbase.transport' http: HBase's Thrift1 server "
                          "serves TLS only in HTTP mode (hbase.thrift.ssl.enabled)")
    return HBaseConfig(
        host=s.text("host"),
        port=s.number("port", minimum=1, integer=True),
        transport=transport,
        protocol=s.choice("protocol", ThriftProtocol),
        auth=auth,
        sasl_qop=s.choice("sasl_qop", SaslQop),
        service_principal=s.text("service_principal", optional=True),
        tls=tls,
        tls_ca_file=s.text("tls_ca_file", optional=True),
        table_prefix=s.text("table_prefix", pattern=_NAME_RE, optional=True),
        timeout_ms=s.number("timeout_ms", minimum=1, integer=True),
        outage_tolerance_s=s.number("outage_tolerance_s", minimum=0),
        offsets_ttl_days=s.number("offsets_ttl_days", minimum=0),
        **names,
    )


def _job(data: dict[str, Any]) -> JobConfig:
    s = _Section(data, "job", JobConfig)
    interval = s.number("batch_interval_s", minimum=0, exclusive=True)
    if round(interval * 1000) < 1:
        raise ConfigError(f"'job.batch_interval_s' must be at least 0.001, got {interval}")
    port = s.number("metrics_port", minimum=0, integer=True)
    if port > 65535:
        raise ConfigError(f"'job.metrics_port' must be 0 (off) or a TCP port <= 65535, "
                          f"got {port}")
    sd_file = s.text("metrics_sd_file", optional=True)
    if sd_file is not None and not port:
        raise ConfigError("'job.metrics_sd_file' names the endpoint of 'job.metrics_port', "
                          "which is 0 (off): set a port, or metrics_sd_file: null")
    spark_conf = data.get("spark_conf") or {}
    if not isinstance(spark_conf, dict) or not all(
            isinstance(k, str) and k.startswith("spark.") for k in spark_conf):
        raise ConfigError(f"'job.spark_conf' must map spark.* keys to values, got {spark_conf!r}")
    return JobConfig(batch_interval_s=interval, master=s.text("master"),
                     stop_timeout_s=s.number("stop_timeout_s", minimum=0, exclusive=True),
                     spark_conf={k: str(v).lower() if isinstance(v, bool) else str(v)
                                 for k, v in spark_conf.items()},
                     app_name=s.text("app_name"), metrics_port=port,
                     metrics_host=s.text("metrics_host"),
                     metrics_sd_file=sd_file)


def _sessions(data: dict[str, Any]) -> SessionsConfig:
    s = _Section(data, "sessions", SessionsConfig)
    return SessionsConfig(
        inactivity_gap_s=s.number("inactivity_gap_s", minimum=0, exclusive=True),
        grace_s=s.number("grace_s", minimum=0),
        idle_after_s=(IDLE_AFTER_GAP if "idle_after_s" not in data
                      else None if data["idle_after_s"] is None
                      else s.number("idle_after_s", minimum=0, exclusive=True)),
        by=(by := s.choice("by", SessionsBy)),
        late=s.choice("late", LatePolicy),
        max_duration_s=_max_duration(s, data.get("max_duration_s"), by),
    )


def _max_duration(s: _Section, value: Any, by: str) -> float | None:
    if value is None:
        return None
    if by != "gap":
        raise ConfigError(f"'sessions.max_duration_s' cuts sessions split by an inactivity "
                          f"gap: it needs sessions.by: gap (valid: id, gap; got {by!r}), or "
                          f"null")
    return float(s.number("max_duration_s", minimum=0, exclusive=True))


def _input(data: dict[str, Any], base: Path) -> InputConfig:
    s = _Section(data, "input", InputConfig)
    paths = data.get("writer_schemas") or []
    if not isinstance(paths, list) or not all(isinstance(x, str) and x for x in paths):
        raise ConfigError(f"'input.writer_schemas' must be a list of .avsc file paths, "
                          f"got {paths!r}")
    texts = []
    for i, name in enumerate(paths):
        path = base / name
        try:
            text = path.read_text("utf-8")
            json.loads(text)
        except OSError as exc:
            raise ConfigError(f"'input.writer_schemas[{i}]': cannot read {path}: "
                              f"{exc.strerror}") from exc
        except ValueError as exc:
            raise ConfigError(f"'input.writer_schemas[{i}]': {path} is not JSON: {exc}") from exc
        texts.append(text)
    return InputConfig(writer_schemas=tuple(texts), max_ahead_s=s.number("max_ahead_s", minimum=0))


_PRINCIPAL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")


def _security(data: dict[str, Any], base: Path) -> KerberosConfig | None:
    no_unknown_keys(data, "security", {"kerberos"})
    raw = data.get("kerberos")
    if raw is None:
        return None
    s = _Section(_section(raw, "security.kerberos"), "security.kerberos", KerberosConfig)
    principal = s.text("principal")
    if not _PRINCIPAL_RE.match(principal):
        raise ConfigError(f"'security.kerberos.principal' must be a full principal name "
                          f"(name@REALM or service/host@REALM), got {principal!r}")

    def path(name: str) -> str | None:
        value = s.text(name, optional=name == "krb5_conf")
        if value is None:
            return None
        found = base / value
        # A relative path that is not there now may be a file shipped with --files.
        return str(found.resolve()) if found.exists() else value

    keytab = path("keytab")
    assert keytab is not None
    return KerberosConfig(principal=principal, keytab=keytab, krb5_conf=path("krb5_conf"))


def _offsets(data: dict[str, Any]) -> OffsetsConfig:
    s = _Section(data, "offsets", OffsetsConfig)
    return OffsetsConfig(store=s.choice("store", OffsetsStore),
                         zookeeper_hosts=s.text("zookeeper_hosts"))


def _events_registry(data: Any, fmt: str, base: Path) -> Registry | None:
    if fmt != "confluent":
        if data is not None:
            raise ConfigError("'events.registry' is only read with 'events.format: confluent'")
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get("url"), str):
        raise ConfigError("'events.registry.url' is required with 'events.format: confluent' "
                          "(for example http://127.0.0.1:8081/apis/ccompat/v7)")
    return _read_registry(data, "events.registry", base)


def _read_registry(data: Mapping[str, Any], key: str, base: Path) -> Registry:
    """A registry's settings under ``key`` (``events.registry``, ``output.registry``)."""
    if not isinstance(data.get("url"), str):
        raise ConfigError(f"'{key}.url' is required (for example "
                          f"http://127.0.0.1:8081/apis/ccompat/v7)")
    no_unknown_keys(data, key, {"url", "username", "password", "ca_file", "outage_tolerance_s",
                                "timeout_s", "api", "auth", "service_principal"})
    url = data["url"].rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"'{key}.url' must start with http:// or https://")
    if (data.get("username") is None) != (data.get("password") is None):
        raise ConfigError(f"'{key}.username' and '{key}.password' go together (HTTP "
                          f"basic auth)")
    api = one_of(data.get("api", "confluent"), f"{key}.api", Api)
    auth = one_of(data.get("auth", "basic" if data.get("username") is not None else "none"),
                  f"{key}.auth", RegistryAuth)
    if (auth == "basic") != (data.get("username") is not None):
        raise ConfigError(f"'{key}.auth' basic needs '{key}.username' and 'password', and "
                          f"they are read with basic only")
    principal = data.get("service_principal")
    if principal is not None and (auth != "kerberos" or not isinstance(principal, str)):
        raise ConfigError(f"'{key}.service_principal' is a principal name, read with "
                          f"'{key}.auth: kerberos' only")
    ca = data.get("ca_file")
    if ca is not None:
        ca = str(base / ca)
        if not Path(ca).is_file():
            raise ConfigError(f"'{key}.ca_file': no such file {ca}")
    numbers: dict[str, float] = {}
    for name, default in (("outage_tolerance_s", 120.0), ("timeout_s", 10.0)):
        value = data.get(name, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"'{key}.{name}' must be a number >= 0, got {value!r}")
        numbers[name] = float(value)
    return Registry(url, data.get("username"), data.get("password"), ca,
                    numbers["outage_tolerance_s"], numbers["timeout_s"], api=api, auth=auth,
                    service_principal=principal)


def _with_login(registry: Registry, kerberos: KerberosConfig | None, key: str) -> Registry:
    """``registry`` with the job's login when it authenticates with Kerberos (SPNEGO)."""
    if registry.auth != "kerberos":
        return registry
    if kerberos is None:
        raise ConfigError(f"'{key}.auth' kerberos needs 'security.kerberos' (principal and "
                          f"keytab)")
    return replace(registry, kerberos=kerberos)


def _output(data: dict[str, Any], events_registry: Registry | None,
            kerberos: KerberosConfig | None, base: Path) -> OutputConfig:
    registry_data = data.get("registry")
    s = _Section(data, "output", OutputConfig)
    fmt = s.choice("format", SummaryFormat)
    registry = None
    if registry_data is not None:
        if fmt != "avro":
            raise ConfigError("'output.registry' is only read with 'output.format: avro'")
        registry = _read_registry(_section(registry_data, "output.registry"),
                                  "output.registry", base)
        if registry.api != "confluent":
            raise ConfigError("'output.registry.api' must be confluent: summaries are "
                              "registered and framed the Confluent way")
        registry = _with_login(registry, kerberos, "output.registry")
    elif fmt == "avro":
        registry = events_registry
        if registry is None or registry.api != "confluent":
            raise ConfigError("'output.format: avro' needs 'output.registry.url' (or "
                              "'events.registry' with api confluent) to register the "
                              "summary schema in")
    return OutputConfig(
        closed_sessions_topic=s.text("closed_sessions_topic", pattern=_TOPIC_RE, optional=True),
        transactional=s.flag("transactional"),
        transaction_timeout_s=s.number("transaction_timeout_s", minimum=0, exclusive=True),
        format=fmt, registry=registry)
