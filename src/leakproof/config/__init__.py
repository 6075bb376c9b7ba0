"""YAML config -> frozen, validated config objects.

Every key is known: an unknown key, a missing required key or a bad value raises ConfigError
naming the dotted key and what would be valid. Each section has its module (its dataclass and
its reader), all read with ``config.reader``, the model's ``events:`` / ``aggregates:`` too
(``model.spec``); ``config.load`` reads the whole file. Values under ``kafka.consumer`` pass
through to kafka-python (SASL, SSL); they are never shown by ``repr`` or in logs.
"""

from __future__ import annotations

from leakproof.config.hbase import HBaseAuth, HBaseConfig, SaslQop, ThriftProtocol, ThriftTransport
from leakproof.config.inputs import InputConfig
from leakproof.config.job import JobConfig
from leakproof.config.kafka import (
    BackpressureConfig,
    CompactedPolicy,
    DataLossPolicy,
    IsolationLevel,
    KafkaConfig,
    OffsetReset,
)
from leakproof.config.load import Config, from_dict, load
from leakproof.config.offsets import OffsetsConfig, OffsetsStore
from leakproof.config.output import OutputConfig, SummaryFormat
from leakproof.config.security import KerberosConfig, Registry, RegistryAuth
from leakproof.config.sessions import IDLE_AFTER_GAP, LatePolicy, SessionsBy, SessionsConfig

__all__ = ["IDLE_AFTER_GAP", "BackpressureConfig", "CompactedPolicy", "Config", "DataLossPolicy",
           "HBaseAuth", "HBaseConfig", "InputConfig", "IsolationLevel", "JobConfig",
           "KafkaConfig", "KerberosConfig", "LatePolicy", "OffsetReset", "OffsetsConfig",
           "OffsetsStore", "OutputConfig", "Registry", "RegistryAuth", "SaslQop", "SessionsBy",
           "SessionsConfig", "SummaryFormat", "ThriftProtocol", "ThriftTransport", "from_dict",
           "load"]
