"""Kafka adapters over kafka-python; this module holds the settings every client gets (the
Kerberos login, the IO loop's stall threshold and count) and the idempotent producer's.

- ``admin``: what the driver asks Kafka (partitions, log bounds, open transactions, record
  times, offsets for a time) and a consumer group's offsets (``offsets.store: kafka``,
  ``kafka.mirror_group_offsets``);
- ``reader``: one partition's offset range read in offset order, on a cached consumer
  (executors);
- ``lean_fetch``: kafka-python's fetcher, reading each fetched batch with ``records``;
- ``records``: a v2 record batch's records read in one pass (no kafka-python import);
- ``closed_sink``: the closed sessions' summaries, published in one transaction per range
  (executors);
- ``redrive``: a redrive's way back to the source topic, in transactions
  (``ports.redrive.RedriveTarget``);
- ``rekey``: the re-keying stage's Kafka work (``input.rekey``): a source partition's
  records copied onto the internal topic under their session keys, in one transaction;
- ``registry``: the schema registry's client (over ``urllib``, no kafka-python) and the
  decoders of record values.

Imports: the pure core and ``ports``, and of its own floor (the adapters) only the login,
``kerberos``; never ``hbase/``, ``task``, ``driver``, ``commands`` or ``cli``
(``leakproof.floors``, checked by ``tests/unit/test_layers.py``). This module imports
kafka-python only inside its functions.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from leakproof import kerberos
from leakproof.config import KafkaConfig

# kafka-python's IO loop warns when one step of a task holds it longer than its threshold
# (0.1 s). On two busy cores a step waits that long for the GIL whenever the calling thread
# is encoding records, so ``leakproof produce`` warned five times a run about nothing that
# mattered. A step held a full second is a real stall: warned, and counted (``stalls``).
STALL_S = 1.0
_SELECTOR_LOG = "kafka.net.selector"


class _StallCounter(logging.Filter):
    """Counts the IO loop's slow-step warnings as they pass (they still reach the log)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING and "blocking the event loop" in record.getMessage():
            with self._lock:
                self.count += 1
        return True


_stalls = _StallCounter()


def stalls() -> int:
    """How many times a Kafka client's IO loop stalled past ``STALL_S`` in this process."""
    return _stalls.count


def _net_client() -> Any:
    """kafka-python's documented ``kafka_client`` hook, with the slow-step threshold set."""
    from kafka.net.compat import KafkaNetClient

    logger = logging.getLogger(_SELECTOR_LOG)
    if _stalls not in logger.filters:
        logger.addFilter(_stalls)
    return functools.partial(KafkaNetClient, slow_task_threshold_secs=STALL_S)


def client_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """The settings every kafka-python client gets; with SASL/GSSAPI this process first logs
    in from the keytab, since kafka-python takes the process's default Kerberos login."""
    if cfg.uses_gssapi and cfg.kerberos is not None:
        service = cfg.consumer.get("sasl_kerberos_service_name", "kafka")
        kerberos.login(cfg.kerberos, f"Kafka at {cfg.bootstrap_servers} (service {service})")
    return {**cfg.client_settings(), "kafka_client": _net_client()}


def producer_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """kafka-python producer settings: the passthrough keys a producer knows (kafka.consumer
    may hold consumer ones), idempotent, acks from every replica, batched."""
    from kafka import KafkaProducer

    allowed = set(KafkaProducer.DEFAULT_CONFIG)
    settings = {k: v for k, v in client_settings(cfg).items() if k in allowed}
    settings.update(enable_idempotence=True, acks="all", linger_ms=20, batch_size=512 * 1024,
                    max_request_size=2 * 1024 * 1024)
    return settings
