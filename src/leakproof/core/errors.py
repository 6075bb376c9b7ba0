"""The exception tree: one root, a few per layer, each message saying what to do about it."""

from __future__ import annotations

from collections.abc import Sequence


class LeakproofError(Exception):
    """Root of every error leakproof raises on purpose."""


class ConfigError(LeakproofError):
    """A config file or value is wrong; the message names the YAML key and the valid values."""


class DecodeError(LeakproofError):
    """A Kafka record could not become a WebEvent; carries its coordinates and raw bytes
    (and, once the reader has added them, its timestamp and headers: all a redrive needs to
    send it back as it was).

    Decode errors never stop a partition: the task dead-letters the record and goes on.
    """

    def __init__(self, reason: str, *, kind: str, topic: str, partition: int, offset: int,
                 key: bytes | None, value: bytes | None, timestamp: int | None = None,
                 headers: Sequence[tuple[str, bytes | None]] = ()) -> None:
        super().__init__(f"{topic}:{partition}:{offset}: {reason}")
        self.reason = reason
        self.kind = kind  # short rule name (codec.py lists them), counted per batch
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp = timestamp  # the record's Kafka timestamp, ms
        self.headers = headers


class KeyDecodeError(DecodeError):
    """The record key is missing, not UTF-8, or does not match the payload's session_id."""


class ValueDecodeError(DecodeError):
    """The record value is missing, not a WebEvent, or a WebEvent with invalid fields."""


class OffsetError(LeakproofError):
    """Stored offsets cannot be used as they are: data loss, a recreated topic, a policy of none."""


class ForeignOffsets(OffsetError):
    """The commit store holds offsets leakproof did not write, or lost the ones it did."""


class DataLossError(OffsetError):
    """A stored offset is below the log start: retention deleted records never processed."""


class TablesOwned(LeakproofError):
    """Another job writes this table set: two jobs on one set of session rows lose updates."""


class CommitRefused(LeakproofError):
    """The offsets commit would break the chain: another driver, or a batch that did not finish."""


class KafkaReadError(LeakproofError):
    """A partition's offset range could not be read in full."""


class CoordinatorNotReady(KafkaReadError):
    """The consumer group's coordinator is not ready yet (normal on a new broker, and for a
    few seconds after a broker restart); the group commit is retried later."""


class GroupHasMembers(KafkaReadError):
    """Kafka refused an outside commit to a consumer group because the group has members of
    its own (someone subscribed with its group id): the classic coordinator and Kafka 4's
    new one (KIP-848) both refuse it while any member stays."""


class PublishError(LeakproofError):
    """The closed-session summaries could not be published (a transaction failed, was
    fenced or ran past its deadline); the range fails, and its outbox stays pending."""


class StoreError(LeakproofError):
    """HBase did not take a read or write; the batch fails and nothing later commits."""


class HBaseUnavailable(StoreError):
    """The Thrift server could not be reached (or dropped the connection): worth a retry."""


class TableMissing(StoreError):
    """A table the call names does not exist: a wrong ``hbase.table_prefix`` or table name,
    or tables never created. No retry brings it back, so none is made."""


class BatchFailed(LeakproofError):
    """A batch's output failed; the job stops so a supervisor can restart it from HBase."""


class KerberosError(LeakproofError):
    """A Kerberos login or authentication failed; the message names the principal, the
    keytab and the service, and what to check. ``transient``: the KDC could not be reached
    (worth retrying), as opposed to credentials that will never work."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class SchemaMismatch(LeakproofError):
    """A writer schema the reader schema cannot read: every record of it would be set aside,
    so the range stops instead (the batch is not committed)."""


class RegistryUnavailable(LeakproofError):
    """The schema registry cannot be reached: an outage, never a bad record."""


class RegistryRefused(LeakproofError):
    """The schema registry refused a call (credentials, a bad request): stop, naming it."""
