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
- ``appender``: records into an open transaction without ``send``'s per-record checks
  (the stage's copies);
- ``registry``: the schema registry's client (over ``urllib``, no kafka-python) and the
  decoders of record values.

Every kafka-python client is made through ``bootstrapped``: from the first of its servers
that answers, not from one picked at random (a stalled broker would fail it).

Imports: the pure core and ``ports``, and of its own floor (the adapters) only the login,
``kerberos``; never ``hbase/``, ``task``, ``driver``, ``commands`` or ``cli``
(``leakproof.floors``, checked by ``tests/unit/test_layers.py``). This module imports
kafka-python only inside its functions.
"""

from __future__ import annotations

import functools
import logging
import random
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from leakproof.core.config import KafkaConfig
from leakproof.security import kerberos

log = logging.getLogger(__name__)

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


T = TypeVar("T")
BOOTSTRAP_TIMEOUT_MS = 30_000  # kafka-python's default: what every try at once may take


def bootstrapped(make: Callable[..., T], settings: dict[str, Any],
                 accepts: Callable[[str], bool] | None = None) -> T:
    """``make(**settings)`` (a kafka-python client), bootstrapped from the first of its
    servers that answers.

    kafka-python bootstraps from one server picked at random and gives that one the whole
    ``bootstrap_timeout_ms``. A broker that is stalled (SIGSTOP, a hung host, a full disk:
    its socket accepts, it never answers) fails one construction in three on a three-node
    cluster, though the other two are up -- and a failed construction fails its task. Here
    the servers that accept a connection are tried alone, in random order, sharing that
    time (a dead one, refusing, costs nothing); the client learns every broker from the
    first answer (metadata) and, once bootstrapped, never reads its bootstrap list again
    (kafka-python 3). When none accepts (Kafka starting, or gone), or the client goes
    through a proxy, kafka-python's own bootstrap waits for any of them."""
    from kafka.errors import KafkaTimeoutError

    servers = settings.get("bootstrap_servers", [])
    servers = servers.split(",") if isinstance(servers, str) else list(servers)
    if len(servers) < 2 or settings.get("proxy_url"):
        return make(**settings)
    accepting = [s for s in random.sample(servers, len(servers)) if (accepts or _accepts)(s)]
    if not accepting:
        return make(**settings)
    share = max(settings.get("bootstrap_timeout_ms", BOOTSTRAP_TIMEOUT_MS) // len(accepting),
                5_000)
    failure: Exception | None = None
    made: list[Any] = []  # the clients' network layers, closed when their construction fails
    factory = settings.get("kafka_client") or _net_client()

    def client(*args: Any, **kwargs: Any) -> Any:
        made.append(factory(*args, **kwargs))
        return made[-1]

    for server in accepting:
        try:
            return make(**{**settings, "bootstrap_servers": [server],
                           "bootstrap_timeout_ms": share, "kafka_client": client})
        except KafkaTimeoutError as exc:  # in these constructors: only the bootstrap's
            failure = exc
            _close(made)
        except BaseException:
            _close(made)  # its IO loop and sockets, or they outlive the failure
            raise
    assert failure is not None
    raise type(failure)(f"no server of {servers} answered within {share} ms: "
                        f"{failure}") from failure


def _close(made: list[Any]) -> None:
    while made:
        made.pop().close()


def _accepts(server: str) -> bool:
    """Whether ``server`` accepts a TCP connection within a second (one whose address
    cannot be read is tried all the same)."""
    address = _address(server)
    if address is None:
        return True
    try:
        socket.create_connection(address, timeout=1.0).close()
    except OSError:
        return False
    return True


def _address(server: str) -> tuple[str, int] | None:
    """``server``'s host and port as kafka-python reads them (a ``PROTOCOL://`` prefix
    dropped, 9092 when no port is given, IPv6 in brackets); None if it cannot."""
    from kafka.cluster import collect_hosts

    try:
        ((host, port, _),) = collect_hosts([server])
    except ValueError:
        return None
    return str(host), int(port)


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


def close_now(producer: Any, txn_id: str | None) -> None:
    """Close ``producer`` at once, its unsent batches dropped. kafka-python's
    ``close(timeout=0)`` flushes first and raises while any batch is unacknowledged, before
    it stops the sender: its I/O thread would go on retrying a dead producer's requests
    (each refused by the broker: an older epoch). The sender is then stopped directly."""
    try:
        producer.close(timeout=0)
    except Exception:
        log.debug("closing producer %s failed; stopping its sender", txn_id, exc_info=True)
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            sender.force_close()


def acknowledged(futures: list[Any]) -> None:
    """Raise unless every sent record's future says the broker took it. Call after a flush,
    before a commit: kafka-python fails a batch that outlived ``delivery_timeout_ms`` (a
    partition that took no writes for two minutes) without failing the transaction, whose
    commit would then take the offsets and the markers without those records."""
    from kafka.errors import KafkaError, KafkaTimeoutError

    for future in futures:
        if not future.is_done:
            raise KafkaTimeoutError("a record of the transaction is still unacknowledged "
                                    "after the flush; not committing")
        if future.exception is not None:
            raise KafkaError(f"a record of the transaction was not written "
                             f"({type(future.exception).__name__}: {future.exception}); "
                             f"not committing") from future.exception
