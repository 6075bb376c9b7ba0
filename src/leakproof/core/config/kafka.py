"""``kafka:``: where the job reads (the topic, which partitions, the client's settings) and
what it does when offsets do not fit. Values under ``kafka.consumer`` pass through to
kafka-python (SASL, SSL); they are never shown by ``repr`` or in logs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from leakproof.core.config.reader import NAME_RE, TOPIC_RE, Section
from leakproof.core.config.security import KerberosConfig
from leakproof.core.errors import ConfigError

OffsetReset = Literal["earliest", "latest", "none"]
DataLossPolicy = Literal["fail", "skip"]
CompactedPolicy = Literal["refuse", "accept"]
IsolationLevel = Literal["read_committed", "read_uncommitted"]


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


def read_kafka(data: dict[str, Any]) -> KafkaConfig:
    s = Section(data, "kafka", KafkaConfig)
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
        topic=s.text("topic", pattern=TOPIC_RE),
        group_id=s.text("group_id", pattern=NAME_RE),
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
    s = Section(data, "kafka.backpressure", BackpressureConfig)
    return BackpressureConfig(
        enabled=s.flag("enabled"),
        initial_rate=s.number("initial_rate", minimum=0, integer=True),
        proportional=s.number("proportional", minimum=0),
        integral=s.number("integral", minimum=0),
        derived=s.number("derived", minimum=0),
        min_rate=s.number("min_rate", minimum=0, exclusive=True),
    )
