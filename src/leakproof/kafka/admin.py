"""What the driver asks Kafka each batch: the topic's partitions and their log bounds."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
from kafka.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    IllegalGenerationError,
    KafkaError,
    NotCoordinatorError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
)

from leakproof.core.config import KafkaConfig
from leakproof.core.errors import (
    CoordinatorNotReady,
    GroupHasMembers,
    KafkaReadError,
    LeakproofError,
)
from leakproof.core.offsets import HeldTransaction, LogBounds
from leakproof.kafka import bootstrapped, client_settings

log = logging.getLogger(__name__)

# A read of the cluster's metadata that fails makes a new admin client, at most this often
RENEW_S = 10.0


class KafkaMetadata:
    """A long-lived admin client on the driver; no consumer group is ever joined. Each
    instance is used by one thread (the planner's by Spark's job generator)."""

    def __init__(self, cfg: KafkaConfig) -> None:
        self._cfg = cfg
        self._renewed_at = -RENEW_S
        self._peek: Any = None  # a read_uncommitted consumer, made on first need
        with _refusals_noted() as refusals:
            try:
                self._admin = self._client()
            except KafkaError as exc:
                raise _unreachable(cfg, exc, refusals) from exc

    def _client(self) -> KafkaAdminClient:
        return bootstrapped(KafkaAdminClient, {
            "client_id": f"leakproof-driver-{self._cfg.group_id}", **admin_settings(self._cfg)})

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids, read fresh (partitions may be added while running)."""
        return self.describe(topic)[1]

    def describe(self, topic: str) -> tuple[str | None, list[int]]:
        """The topic's id and partition ids. The id changes when a topic is deleted and
        recreated under the same name -- the one sure sign, since the new log may already be
        longer than the offsets stored for the old one."""
        try:
            described = self._admin.describe_topics([topic])
        except KafkaError as exc:
            self._stale()
            raise KafkaReadError(f"cannot describe topic {topic}: {exc}") from exc
        for t in described:
            if t["name"] == topic:
                if t["error_code"]:
                    raise KafkaReadError(f"topic {topic} is not available (Kafka error "
                                         f"{t['error_code']}); does it exist?")
                topic_id = t.get("topic_id")
                return (str(topic_id) if topic_id else None,
                        sorted(p["partition_index"] for p in t["partitions"]))
        raise KafkaReadError(f"topic {topic} does not exist")

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's settings that differ from the broker's defaults (``cleanup.policy``,
        ``message.timestamp.type``, ...) as the broker reports them."""
        try:
            found = self._admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)])
        except KafkaError as exc:
            raise KafkaReadError(f"cannot read the settings of topic {topic}: {exc}") from exc
        settings = found.get("topic", {}).get(topic, {}) if isinstance(found, dict) else {}
        return {name: str(entry.get("value")) for name, entry in settings.items()
                if isinstance(entry, dict) and entry.get("value") is not None}

    def log_bounds(self, topic: str, partitions: Iterable[int]) -> dict[int, LogBounds]:
        """[log start, log end) per partition, and under ``read_committed`` the stable end:
        one ListOffsets round trip for each (two or three)."""
        tps = [TopicPartition(topic, p) for p in partitions]
        try:
            starts = self._admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
            ends = self._admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
            stable = (self._admin.list_partition_offsets(
                {tp: OffsetSpec.LATEST for tp in tps}, isolation_level="read_committed")
                if self._cfg.isolation_level == "read_committed" else None)
        except KafkaError as exc:
            self._stale()
            raise KafkaReadError(f"cannot list offsets of {topic}: {exc}") from exc
        return {tp.partition: LogBounds(starts[tp].offset, ends[tp].offset,
                                        None if stable is None else stable[tp].offset)
                for tp in tps}

    def open_transactions(self, topic: str, held: Mapping[int, int]
                          ) -> dict[int, HeldTransaction]:
        """For each partition held at a stable end (``held``: partition -> stable end), the
        open transaction there and when it began: the timestamp of its first record, read
        past the stable end with a read_uncommitted consumer. Best effort: a record that
        cannot be read in time gives ``since_ms`` None."""
        began = self.record_timestamps(topic, held)
        return {p: HeldTransaction(p, at, began.get(p)) for p, at in held.items()}

    def record_timestamps(self, topic: str, offsets: Mapping[int, int], wait_s: float = 2.0
                          ) -> dict[int, int | None]:
        """Per partition, the timestamp (epoch ms) of the first record at or after its offset
        in ``offsets``, read_uncommitted (an open transaction's first record counts). Best
        effort: None where no record could be read within ``wait_s``.

        First one small fetch for them all (the peek consumer reads at most 16 KiB a
        partition, 1 MiB a fetch). A partition whose first record batch that cut short (a
        producer's batches over 16 KiB, or the fetch's 1 MiB spent on the partitions before
        it) makes kafka-python raise for the whole poll, whose other records may then be
        lost; so on an error, and for whatever is still missing, each partition is read
        alone: the first partition of a fetch always gets its first batch whole.
        """
        found: dict[int, int | None] = {p: None for p in offsets}
        if not offsets:
            return found
        deadline = time.monotonic() + wait_s
        try:
            consumer = self._peek_consumer()
            self._read_first(consumer, topic, offsets, found, deadline, together=True)
            for p in [p for p, ts in found.items() if ts is None]:
                self._read_first(consumer, topic, {p: offsets[p]}, found, deadline)
        except KafkaError as exc:
            log.debug("could not read record timestamps on %s: %s", topic, exc)
        return found

    @staticmethod
    def _read_first(consumer: Any, topic: str, offsets: Mapping[int, int],
                    found: dict[int, int | None], deadline: float, together: bool = False
                    ) -> None:
        """Fill ``found`` with the timestamp of the first record at or after each offset,
        polling until ``deadline``; ``together``: stop at the first error (the caller reads
        the rest alone). A partition found is not paused: kafka-python 3.0 parks a paused
        partition's fetched records (KAFKA-7548), and after a later resume and seek it
        fetched nothing more for that partition (every such look-up waited the full time)."""
        tps = {p: TopicPartition(topic, p) for p in offsets}
        consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            consumer.seek(tp, offsets[p])
        while time.monotonic() < deadline and any(found[p] is None for p in offsets):
            try:
                polled = consumer.poll(timeout_ms=200)
            except KafkaError as exc:
                log.debug("record timestamps on %s: %s", topic, exc)
                if together:
                    return
                continue
            for tp, recs in polled.items():
                first = next((r for r in recs if r.offset >= offsets[tp.partition]), None)
                if first is not None and found[tp.partition] is None:
                    found[tp.partition] = int(first.timestamp)

    def _peek_consumer(self) -> Any:
        from kafka import KafkaConsumer

        if self._peek is None:
            settings = {k: v for k, v in client_settings(self._cfg).items()
                        if k in KafkaConsumer.DEFAULT_CONFIG}
            settings.update(client_id=f"leakproof-driver-{self._cfg.group_id}-peek",
                            group_id=None, enable_auto_commit=False, auto_offset_reset="none",
                            isolation_level="read_uncommitted",
                            max_partition_fetch_bytes=16 * 1024, fetch_max_bytes=1024 * 1024)
            self._peek = bootstrapped(KafkaConsumer, settings)
        return self._peek

    def offsets_for_time(self, topic: str, partitions: Iterable[int],
                         timestamp_ms: int) -> dict[int, int | None]:
        """Per partition, the first offset whose record timestamp is >= ``timestamp_ms``.

        None where no record is that new (the caller decides: usually the log end).
        """
        tps = [TopicPartition(topic, p) for p in partitions]
        try:
            found = self._admin.list_partition_offsets({tp: int(timestamp_ms) for tp in tps})
        except KafkaError as exc:
            raise KafkaReadError(f"cannot look up offsets by time on {topic}: {exc}") from exc
        return {tp.partition: (found[tp].offset if found[tp].offset >= 0 else None)
                for tp in tps}

    def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int],
                             note: str, coordinator_wait_s: float = 3.0) -> None:
        """Commit the offsets to the Kafka consumer group, with ``note`` as the metadata:
        the mirror for Kafka's own lag tools, or the commit of offsets.store: kafka.

        On a new broker the group's coordinator appears only after the first request for
        it: such retriable answers are retried for ``coordinator_wait_s``, then raised as
        CoordinatorNotReady.
        """
        from kafka.structs import OffsetAndMetadata

        commit = {TopicPartition(topic, p): OffsetAndMetadata(o, note, -1)
                  for p, o in offsets.items()}
        deadline = time.monotonic() + coordinator_wait_s
        while True:
            try:
                result = self._admin.alter_group_offsets(group, commit)
                failed = {tp.partition: err for tp, err in result.items()
                          if getattr(err, "errno", 0)}
            except KafkaError as exc:
                if not _coordinator_busy(exc):
                    raise
                failed = {-1: exc}
            if not failed:
                return
            if all(_member_refusal(e) for e in failed.values()):
                raise GroupHasMembers(
                    f"Kafka refused the commit to group {group}: the group has members of its "
                    f"own (a consumer subscribed with group id {group}), and Kafka takes no "
                    f"outside commit while it has any "
                    f"({_error_name(next(iter(failed.values())))})")
            if not all(_coordinator_busy(e) for e in failed.values()):
                raise KafkaReadError(f"group {group} offsets not mirrored: {failed}")
            if time.monotonic() > deadline:
                self._renew()
                raise CoordinatorNotReady(f"the coordinator of Kafka group {group} is not "
                                          f"ready yet ({next(iter(failed.values()))})")
            time.sleep(0.3)

    def group_offsets(self, group: str, topic: str, coordinator_wait_s: float = 30.0
                      ) -> dict[int, tuple[int, str]]:
        """The group's committed (offset, metadata) per partition of ``topic``.

        A broker started moments ago makes its offsets topic on the first group request and
        answers "no coordinator" until it has: such answers are retried for
        ``coordinator_wait_s`` (a job's first start on a new cluster must not fail on it).
        """
        deadline = time.monotonic() + coordinator_wait_s
        while True:
            try:
                groups = self._admin.list_group_offsets({group: None})
                break
            except KafkaError as exc:
                if not _coordinator_busy(exc) or time.monotonic() > deadline:
                    raise KafkaReadError(
                        f"cannot read the offsets of group {group}: {exc}") from exc
                time.sleep(0.3)
        return {tp.partition: (om.offset, om.metadata or "")
                for tp, om in groups.get(group, {}).items()
                if tp.topic == topic and om.offset >= 0}

    def group_ids(self) -> list[str]:
        """Every consumer group the cluster knows, by id."""
        try:
            return [str(g.get("group_id")) for g in self._admin.list_groups()]
        except KafkaError as exc:
            raise KafkaReadError(f"cannot list the Kafka groups: {exc}") from exc

    def group_state(self, group: str) -> dict[str, Any] | None:
        """The consumer group as Kafka's coordinator has it: ``state`` (``Empty``: no
        members; ``Stable`` and the rest: members), ``type`` (``classic`` or KIP-848's
        ``consumer``) and, for a classic group, its ``members`` (client id@host). None: the
        group does not exist (nothing committed to it yet)."""
        try:
            listed = [g for g in self._admin.list_groups() if g.get("group_id") == group]
            if not listed:
                return None
            found: dict[str, Any] = {"state": listed[0].get("group_state") or "unknown",
                                     "type": listed[0].get("group_type") or "classic",
                                     "members": None}
            if found["type"] == "classic":
                described = self._admin.describe_groups([group]).get(group, {})
                found["members"] = [f"{m.get('client_id')}@{m.get('client_host', '').lstrip('/')}"
                                    for m in described.get("members") or []]
        except KafkaError as exc:
            raise KafkaReadError(f"cannot describe Kafka group {group}: {exc}") from exc
        return found

    def _stale(self) -> None:
        """After a failed read of partitions or offsets: a new client, at most once every
        ``RENEW_S``. kafka-python's keeps the cluster view it last fetched until
        ``metadata_max_age_ms`` (5 minutes) unless an answer marks it stale: a view taken from
        a broker cut off from its peers named leaders it did not list (UnknownBrokerIdError),
        and after the cut healed every batch planned nothing until the view aged out."""
        now = time.monotonic()
        if now - self._renewed_at >= RENEW_S:
            self._renewed_at = now
            self._renew()

    def _renew(self) -> None:
        """A new admin client in place of this one. kafka-python's keeps asking the group
        coordinator it knew: a broker cut off from its peers answered NOT_COORDINATOR for
        minutes, and every batch's copy to the group waited out its retries on it. A new
        client finds the coordinator and the leaders afresh. (Only the thread that uses this
        instance calls it: no other holds the old client.)"""
        try:
            fresh = self._client()
        except KafkaError:
            log.debug("a new admin client could not be made; keeping the old", exc_info=True)
            return
        old, self._admin = self._admin, fresh
        try:
            old.close()
        except Exception:  # the old client is done with either way
            log.debug("closing the old admin client failed", exc_info=True)

    def close(self) -> None:
        if self._peek is not None:
            self._peek.close(autocommit=False)
        self._admin.close()


_COORDINATOR_BUSY = (CoordinatorNotAvailableError, NotCoordinatorError,
                     CoordinatorLoadInProgressError)


def topic_bounds(cfg: KafkaConfig) -> dict[int, LogBounds]:
    """Every partition of ``cfg.topic`` and its log's bounds, in one short-lived client."""
    meta = KafkaMetadata(cfg)
    try:
        return meta.log_bounds(cfg.topic, meta.partitions(cfg.topic))
    finally:
        meta.close()


# what an OffsetCommit from outside the group gets while the group has members: the classic
# protocol's answers, and the new coordinator's (KIP-848) for a consumer-protocol group
_MEMBER_REFUSALS = (UnknownMemberIdError, IllegalGenerationError, StaleMemberEpochError,
                    FencedMemberEpochError, RebalanceInProgressError)


def _member_refusal(err: object) -> bool:
    cls = err if isinstance(err, type) else type(err)
    return issubclass(cls, _MEMBER_REFUSALS)


def _error_name(err: object) -> str:
    return (err if isinstance(err, type) else type(err)).__name__


def _coordinator_busy(err: object) -> bool:
    """A group coordinator not found yet, moved, or still loading: worth waiting for."""
    cls = err if isinstance(err, type) else type(err)
    return issubclass(cls, _COORDINATOR_BUSY)


class _Refusals(logging.Handler):
    """Keeps the broker's SASL rejections: kafka-python logs them, retries, and in the end
    raises only a bootstrap timeout, which would send an operator looking for a network
    problem instead of a wrong password."""

    MARK = "SaslAuthenticationFailedError: "

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if self.MARK in text:
            self.seen.append(text.rsplit(self.MARK, 1)[1].strip())


@contextmanager
def _refusals_noted() -> Iterator[list[str]]:
    handler = _Refusals()
    logger = logging.getLogger("kafka")
    logger.addHandler(handler)
    try:
        yield handler.seen
    finally:
        logger.removeHandler(handler)


def _unreachable(cfg: KafkaConfig, exc: KafkaError, refusals: list[str]) -> KafkaReadError:
    """The start-up error, telling "nothing answers" from "it answers but will not let us
    in": a broker that accepts TCP yet fails the client is almost always a credentials or
    security_protocol mismatch (rarely, a broker still starting up)."""
    if not refusals and not any(_tcp_open(server) for server in
                                cfg.bootstrap_servers.split(",")):
        return KafkaReadError(f"cannot reach Kafka at {cfg.bootstrap_servers}: {exc}")
    settings = cfg.client_settings()
    said = refusals[-1] if refusals else str(exc)
    return KafkaReadError(
        f"Kafka at {cfg.bootstrap_servers} accepts connections but refused the client "
        f"(kafka.consumer: security_protocol {settings.get('security_protocol', 'PLAINTEXT')}"
        f", sasl_mechanism {settings.get('sasl_mechanism', '-')}, user "
        f"{settings.get('sasl_plain_username', '-')}): {said}. Check the credentials and "
        f"that security_protocol matches the broker's listener (or, if the broker is just "
        f"starting, try again)")


def _tcp_open(server: str) -> bool:
    host, _, port = server.strip().rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=3):
            return True
    except (OSError, ValueError):
        return False


def admin_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """The consumer passthrough settings an admin client understands (security, timeouts)."""
    allowed = set(KafkaAdminClient.DEFAULT_CONFIG)
    settings = {"reconnect_backoff_max_ms": 2000}  # as the reader: notice a restart soon
    settings.update({k: v for k, v in client_settings(cfg).items() if k in allowed})
    return settings


def create_topic(cfg: KafkaConfig, topic: str, partitions: int,
                 configs: dict[str, str] | None = None, replication_factor: int = -1) -> bool:
    """Create the topic if it does not exist; True if this call created it. Its copies:
    ``replication_factor``, or the brokers' ``default.replication.factor`` (-1)."""
    admin = bootstrapped(KafkaAdminClient, admin_settings(cfg))
    try:
        spec: dict[str, Any] = {"num_partitions": partitions,
                                "replication_factor": replication_factor}
        if configs:
            spec["configs"] = configs
        admin.create_topics({topic: spec}, wait_for_metadata=True)
        return True
    except TopicAlreadyExistsError:
        return False
    except KafkaError as exc:
        raise LeakproofError(f"cannot create topic {topic}: {exc}") from exc
    finally:
        admin.close()
