"""A driver's start, in the order that makes it safe, shared by the job and the unit tests'
driver rig so both start the same way.

0. claim the table set: one job writes it (another one running is refused, one that is
   not is fenced and its tables taken over: ``takeover`` says where this one starts, or
   refuses what would strand another topic's open sessions);
   and check the model: rows written under another model are refused (``fingerprint``);
1. take the lease (a new epoch: an older driver's commits are refused from here on);
2. read how far earlier holders' cell timestamps may go -- after the take, so a reservation
   of the old holder that lands later is refused -- and start the cell clock above it;
3. read the newest committed batch (on a takeover, the previous writer's) and plan every
   partition's start from it and the topic id kept beside the lease (a recreated topic is
   refused here, until a rewind accepts it);
4. pin the first topic's id (its fences carry no incarnation tag; a recreated topic's get
   their own, so none of its records is taken for a replay of the old one's), record the
   topic id, then begin committing from that start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from leakproof.core.cell_clock import CellClock
from leakproof.core.config import HBaseConfig
from leakproof.core.errors import ConfigError, KafkaReadError, StoreError, TablesOwned
from leakproof.core.lease import Lease
from leakproof.core.offsets import CommittedBatch, StartPlan
from leakproof.core.sessions import incarnation_of
from leakproof.driver.committing import Committer
from leakproof.driver.planning import Planner
from leakproof.hbase.connection import (
    ConnectionSlot,
    ensure_tables,
    family_advice,
    judge_families,
    ttl_refusal,
)
from leakproof.model.fingerprint import beyond_force, changes, only_added
from leakproof.ports.driver import CommitStore, GroupMirror, LeaseStore, TableRecords, TableSet

log = logging.getLogger(__name__)


def prepare_tables(cfg: HBaseConfig) -> None:
    """The job's tables made if missing, and refused if a family carries a TTL (cells
    written once would expire under live sessions); missing Bloom filters or block cache
    are told with the shell command that adds them."""
    conns = ConnectionSlot(cfg)
    created = conns.call("create tables", lambda c: ensure_tables(c, cfg))
    advice, refusals = conns.call("read table settings", lambda c: judge_families(
        c, cfg, family_advice, ttl_refusal))
    conns.reset()
    if refusals:
        raise StoreError("; ".join(refusals))
    if created:
        log.info("created HBase tables %s", ", ".join(created))
    for command in advice:
        log.warning("an HBase table without a Bloom filter or block cache makes every "
                    "session row read go to disk; in the HBase shell: %s", command)


def check_output_topic(describe: Callable[[str], object], topic: str | None) -> None:
    """The summaries' topic exists before Spark starts: a send to a missing one waits out
    every transaction deadline (about two minutes) before it fails the batch, saying only
    that it timed out. ``describe`` is the admin client's (it raises ``KafkaReadError``)."""
    if topic is None:
        return
    try:
        describe(topic)
    except KafkaReadError as exc:
        raise ConfigError(f"output.closed_sessions_topic: {exc}. leakproof does not create "
                          f"it: create {topic} first (cleanup.policy=compact keeps the "
                          f"latest summary per session)") from exc


def check_model(leases: TableRecords, model: str) -> None:
    """Record the model the first time; refuse one whose meaning differs from the rows'.
    A recorded meaning of an older version (without the session settings) that agrees is
    recorded again, complete (``fingerprint``: it is read as the configured settings)."""
    recorded = leases.recorded_model()
    if recorded is None:
        leases.record_model(model)
        return
    found = changes(recorded, model)
    if not found:
        if recorded != model:
            leases.record_model(model)
        return
    stuck = beyond_force(found, model)
    raise ConfigError(
        f"the event model or session settings changed over existing session rows: "
        f"{'; '.join(map(str, found))}. Folded on, every open session would mix both "
        f"meanings. Either give the job new tables (a new hbase.table_prefix) and reprocess "
        f"from the start (leakproof sessions diff compares the two), or"
        + (" record the added aggregates with `leakproof model accept --config <this "
           "config>` (their cells count the events applied from then on)"
           if only_added(found) else
           " restore the config; `leakproof model accept --force` records it anyway"
           if not stuck else
           " restore the config (`leakproof model accept --force` cannot take it: "
           + "; ".join(stuck) + ")")
        + ".")


def takeover(topic: str, group: str, owner: str | None, tables: TableSet
             ) -> CommittedBatch | None:
    """Where a job about to write a table set another job wrote last must start: the
    offsets follow the tables, not the group. ``owner``: ``tables.owner()``, read by the
    caller, which checks that the claim takes the tables over from that same job.

    The session rows hold exactly the events up to that job's last commit. A job of the
    same topic (a new group: blue/green, a renamed group) starts there -- not at its own
    group's older offsets, nor by ``auto_offset_reset``, which would skip (``latest``)
    or count again (``earliest``) what the tables already hold -- so it returns that commit
    (None: no takeover, or nothing committed by it). A job of another topic can never close
    the sessions the old topic left open (only its own partitions' watermarks close them):
    refused while there are any, naming the way out.
    """
    if owner is None or owner == f"{topic}:{group}":
        return None
    other_topic, _, other_group = owner.rpartition(":")
    if other_topic != topic:
        still_open = tables.open_sessions(other_topic)
        if still_open:
            raise TablesOwned(
                f"the tables were written by the job of topic {other_topic} (group "
                f"{other_group}), which left {still_open} sessions open; a job of topic "
                f"{topic} never closes them, so they would stay open for good. Run that job "
                f"on until they close (with sessions.idle_after_s its quiet partitions close "
                f"them; `leakproof run --config <its config> --until-idle S`, S past the "
                f"inactivity gap and grace), or give this job its own hbase.table_prefix")
        return None
    head = tables.head_of(topic, other_group)
    if head is not None:
        log.warning("taking the tables over from group %s of %s: starting where its last "
                    "commit (batch %d) left them, %s; this group's own offsets and "
                    "kafka.auto_offset_reset are not used (they would skip or count again "
                    "what the session rows hold)", other_group, topic, head.batch_ms,
                    dict(sorted(head.offsets.items())))
    return head


@dataclass(frozen=True)
class Started:
    """What a started driver holds: its lease, where it starts, its committer and clock."""

    lease: Lease
    latest: CommittedBatch | None
    start: StartPlan
    committer: Committer
    clock: CellClock
    incarnation: str = ""  # the fence tag of the topic read (sessions.fence_key)


def start_driver(topic: str, group: str, *, leases: LeaseStore, store: CommitStore,
                 tables: TableSet, planner: Planner, mirror: GroupMirror | None, holder: str,
                 now_ms: int, model: str | None = None) -> Started:
    """The steps of the module docstring; any of them may refuse (a LeakproofError).
    ``model``: the configured model's ``fingerprint.meaning`` (None: not checked)."""
    judged = tables.owner()
    inherited = takeover(topic, group, judged, tables)  # 0
    taken_from = leases.claim_tables(now_ms)
    if taken_from != (judged if judged != f"{topic}:{group}" else None):
        raise TablesOwned(f"the tables of {topic}:{group} changed hands while this job "
                          f"started (now taken from {taken_from}, judged {judged}); start "
                          f"it again")
    if taken_from:
        log.warning("took the tables over from the job of %s (not running): it is fenced "
                    "and may no longer write them", taken_from)
    if model is not None:
        check_model(leases, model)
    lease = leases.take(holder)  # 1
    if not leases.owns_tables():  # taken over by another job while this one started
        raise TablesOwned(f"the tables of {topic}:{group} were taken over by another job "
                          f"while this one started; it does not write them")
    clock = CellClock.start(now_ms, leases.cell_ts_bound())  # 2
    latest = inherited if inherited is not None else store.latest()  # 3
    recorded = leases.topic_id()
    start = planner.start(latest, recorded)
    first = leases.first_topic_id(recorded or planner.topic_id)  # 4
    if planner.topic_id:
        leases.record_topic_id(planner.topic_id)
    committer = Committer(topic, group, store, leases, mirror)
    committer.begin(lease, latest, start, planner.topic_id)
    return Started(lease, latest, start, committer, clock,
                   incarnation_of(planner.topic_id, first))
