"""What the driver needs from Kafka and HBase, as protocols (leakproof.testing has fakes).

The real ones: ``kafka.admin.KafkaMetadata`` (Metadata, GroupMirror),
``hbase.state_store.HBaseLeaseStore`` (LeaseStore) and the three of ``commit_stores``
(CommitStore), which ``offsets.store`` chooses between.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from leakproof.core.lease import Lease
from leakproof.core.moved_keys import KeyMoves
from leakproof.core.offsets import CommittedBatch, Gap, HeldTransaction, LogBounds
from leakproof.core.runs import RunState

__all__ = ["REQUIRED_AUDIT", "CommitStore", "DriverLease", "GroupMirror", "LeaseStore",
           "Metadata", "RunRecord", "RunState", "TableRecords", "TableSet", "TopicRecords"]

# The audit keys every commit store gives back from ``latest()``, because the start-up
# checks read them. epoch: the lease epoch of the driver that committed; topic_id: Kafka's
# id of the topic the offsets belong to (absent only where the broker has no topic ids).
REQUIRED_AUDIT = ("epoch", "topic_id")


class CommitStore(Protocol):
    """Committed batches for one topic and group: where the job resumes from.

    The job calls ``put`` only after the batch's tasks succeeded and the lease check passed;
    ``offsets rewind`` writes through it too, so a rewind lands where the next run reads.
    ``keeps_history`` says whether rows older than the newest can be named (``get``).
    """

    name: str
    keeps_history: bool

    def latest(self) -> CommittedBatch | None: ...

    def get(self, batch_ms: int) -> CommittedBatch | None:
        """The batch committed at ``batch_ms``, if the store still holds it."""
        ...

    def put(self, batch_ms: int, offsets: Mapping[int, int],
            audit: Mapping[str, str]) -> None: ...

    def history(self, limit: int) -> list[CommittedBatch]: ...

    def close(self) -> None: ...


class Metadata(Protocol):
    """The topic as the broker sees it now."""

    def describe(self, topic: str) -> tuple[str | None, list[int]]:
        """Kafka's topic id (None where the broker has none) and the partition ids."""
        ...

    def log_bounds(self, topic: str, partitions: Iterable[int]) -> dict[int, LogBounds]: ...

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's own settings (those that differ from the broker's defaults)."""
        ...

    def open_transactions(self, topic: str, held: Mapping[int, int]
                          ) -> dict[int, HeldTransaction]:
        """The open transaction at each held partition's stable end, and when it began."""
        ...

    def record_timestamps(self, topic: str, offsets: Mapping[int, int]
                          ) -> dict[int, int | None]:
        """The timestamp (epoch ms) of the first record at or after each partition's
        offset; None where it could not be read."""
        ...

    def offsets_for_time(self, topic: str, partitions: Iterable[int],
                         timestamp_ms: int) -> dict[int, int | None]:
        """Per partition, the first offset whose record timestamp is at or after
        ``timestamp_ms`` (None: no record is that new)."""
        ...

    def close(self) -> None: ...


class GroupMirror(Protocol):
    """Where each commit is copied for Kafka's own lag tools (the consumer group)."""

    def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int],
                             note: str) -> None: ...

    def close(self) -> None: ...


class RunRecord(Protocol):
    """A durable record of the running driver, read and written by ``leakproof stop``."""

    def read(self) -> RunState | None: ...

    def heartbeat(self, epoch: int, where: str) -> RunState | None:
        """Say this driver is alive; returns the record as it stands (with any stop request)."""
        ...

    def request_stop(self, epoch: int) -> None: ...

    def stopped(self, epoch: int, detail: str) -> None: ...


class TableSet(Protocol):
    """What a job about to take a table set over must know of the job that wrote it last:
    who that is, where it got to, and whether it leaves sessions open (``startup.takeover``).
    """

    def owner(self) -> str | None:
        """``<topic>:<group>`` of the job that writes the table set (None: none yet)."""
        ...

    def head_of(self, topic: str, group: str) -> CommittedBatch | None:
        """That job's newest commit, from the state table's copy (whatever its store)."""
        ...

    def open_sessions(self, topic: str) -> int:
        """How many sessions the open-session index of ``topic``'s partitions holds."""
        ...

    def close(self) -> None: ...


class DriverLease(Protocol):
    """The driver lease of one topic and group: who may commit, and how far its cells'
    timestamps may go."""

    def take(self, tag: str) -> Lease:
        """Bump the epoch: from now on only this lease may commit."""
        ...

    def holder(self) -> Lease | None: ...

    def compare_and_set(self, expected: Lease, new: Lease) -> bool: ...

    def cell_ts_bound(self) -> int:
        """Above every cell timestamp an earlier holder may have used (``cell_clock``)."""
        ...

    def reserve_cell_ts(self, epoch: int, until: int) -> bool:
        """Record how far the cell timestamps of ``epoch`` may go, while it holds the
        lease; False: it does not any more."""
        ...


class TopicRecords(Protocol):
    """What the job keeps of the topic it reads: its Kafka id, the data skipped, the keys
    moved when partitions were added."""

    def record_gap(self, gap: Gap) -> None: ...

    def topic_id(self) -> str | None:
        """Kafka's id of the topic this topic and group's offsets belong to (None: unknown).

        Kept beside the lease, in HBase whatever the commit store: deleting a topic also
        deletes its consumer-group offsets, so a Kafka-group store alone cannot tell a
        recreated topic from a first run.
        """
        ...

    def record_topic_id(self, topic_id: str) -> None: ...

    def first_topic_id(self, candidate: str | None) -> str | None:
        """The id of the topic whose session fences carry no incarnation tag (the first the
        job read): ``candidate`` when none is recorded yet, then that for good."""
        ...

    def key_moves(self) -> KeyMoves:
        """When batches may run as several tasks again after partitions were added."""
        ...

    def record_key_moves(self, moves: KeyMoves) -> None: ...


class TableRecords(Protocol):
    """What the table set records of its writers: the one job that owns it, and the
    meaning of the model its session rows were written under."""

    def recorded_model(self) -> str | None:
        """The meaning of the model the session rows were written under (None: unknown)."""
        ...

    def record_model(self, meaning: str) -> None: ...

    def claim_tables(self, now_ms: int) -> str | None:
        """Make this topic and group the one job that writes its table set; returns the job
        it took them over from (None: none), raises TablesOwned while another one runs."""
        ...

    def owns_tables(self) -> bool:
        """Whether this topic and group still own the table set (a start re-checks it once
        it holds its lease: another job may have taken a starting one's tables over)."""
        ...


class LeaseStore(DriverLease, TopicRecords, TableRecords, Protocol):
    """The driver's rows of the state table for one topic and group, by concern: the lease
    (``DriverLease``), the topic's records (``TopicRecords``) and the table set's
    (``TableRecords``), kept together in one store since they share its row and its
    connection; a function that needs one concern names that one."""

    def close(self) -> None: ...
