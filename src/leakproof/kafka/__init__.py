"""Kafka adapters: partition metadata and log bounds (driver), range reader and the
closed-session sink (executors)."""

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


def producer_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """kafka-python producer settings: the passthrough keys a producer knows (kafka.consumer
    may hold consumer ones), idempotent, acks from every replica, batched."""
    from kafka import KafkaProducer

    allowed = set(KafkaProducer.DEFAULT_CONFIG)
    settings = {k: v for k, v in client_settings(cfg).items() if k in allowed}
    settings.update(enable_idempotence=True, acks="all", linger_ms=20, batch_size=512 * 1024,
                    max_request_size=2 * 1024 * 1024)
    return settings
