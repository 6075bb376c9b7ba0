"""YAML config -> frozen, validated config objects; this module re-exports them.

Every key is known: an unknown key, a missing required key or a bad value raises ConfigError
naming the dotted key and what would be valid. A section's module holds its dataclass and
its reader; a key left out takes the default written on the dataclass.

- ``load``: the whole file read (``Config``), each section by its module, and the checks
  that span sections;
- ``reader``: the section reader every section is read with (the model's ``events:`` /
  ``aggregates:`` too, in ``model.spec``), so every message has the same shape;
- ``kafka``: ``kafka:``, where the job reads and what it does when offsets do not fit;
  ``kafka.consumer`` passes through to kafka-python and never shows in ``repr`` or logs;
- ``hbase``: ``hbase:``, how the Thrift server is reached and the table names;
- ``offsets``: ``offsets:``, where committed offsets live;
- ``sessions``: ``sessions:``, how sessions are cut and closed, late events, retention;
- ``output``: ``output:``, the closed sessions' summaries topic;
- ``inputs``: ``input:``, how record values are read, and ``input.rekey``;
- ``job``: ``job:``, the Spark side of ``leakproof run`` and the metrics endpoint;
- ``security``: ``security.kerberos`` and the schema registries' settings.

Imports: the pure core only (``errors``, ``frames``, ``model``); no pyspark, kafka or
happybase (``tests/unit/test_layers.py`` checks).
"""

from __future__ import annotations

from leakproof.core.config.hbase import (
    HBaseAuth,
    HBaseConfig,
    SaslQop,
    ThriftProtocol,
    ThriftTransport,
)
from leakproof.core.config.inputs import InputConfig, Rekey
from leakproof.core.config.job import JobConfig
from leakproof.core.config.kafka import (
    BackpressureConfig,
    CompactedPolicy,
    DataLossPolicy,
    IsolationLevel,
    KafkaConfig,
    OffsetReset,
)
from leakproof.core.config.load import Config, from_dict, load, session_stage
from leakproof.core.config.offsets import OffsetsConfig, OffsetsStore
from leakproof.core.config.output import OutputConfig, SummaryFormat
from leakproof.core.config.security import KerberosConfig, Registry, RegistryAuth
from leakproof.core.config.sessions import IDLE_AFTER_GAP, LatePolicy, SessionsBy, SessionsConfig

__all__ = ["IDLE_AFTER_GAP", "BackpressureConfig", "CompactedPolicy", "Config", "DataLossPolicy",
           "HBaseAuth", "HBaseConfig", "InputConfig", "IsolationLevel", "JobConfig",
           "KafkaConfig", "KerberosConfig", "LatePolicy", "OffsetReset", "OffsetsConfig",
           "OffsetsStore", "OutputConfig", "Registry", "RegistryAuth", "Rekey", "SaslQop",
           "SessionsBy", "SessionsConfig", "SummaryFormat", "ThriftProtocol", "ThriftTransport",
           "from_dict", "load", "session_stage"]
