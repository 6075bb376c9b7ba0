"""Kafka adapters: partition metadata and log bounds (driver), range reader (executors)."""

from __future__ import annotations

from typing import Any

from leakproof import kerberos
from leakproof.config import KafkaConfig


def client_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """The settings every kafka-python client gets; with SASL/GSSAPI this process first logs
    in from the keytab, since kafka-python takes the process's default Kerberos login."""
    if cfg.uses_gssapi and cfg.kerberos is not None:
        service = cfg.consumer.get("sasl_kerberos_service_name", "kafka")
        kerberos.login(cfg.kerberos, f"Kafka at {cfg.bootstrap_servers} (service {service})")
    return cfg.client_settings()
