"""A driver's start, in the order that makes it safe, shared by the job and the unit tests'
driver rig so both start the same way.

0. claim the table set: one job writes it (another one running is refused, one that is
   not is fenced and its tables taken over);
   and check the model: rows written under another model are refused (``fingerprint``);
1. take the lease (a new epoch: an older driver's commits are refused from here on);
2. read how far earlier holders' cell timestamps may go -- after the take, so a reservation
   of the old holder that lands later is refused -- and start the cell clock above it;
3. read the newest committed batch and plan every partition's start from it and the topic
   id kept beside the lease (a recreated topic is refused here, until a rewind accepts it);
4. pin the first topic's id (its fences carry no incarnation tag; a recreated topic's get
   their own, so none of its records is taken for a replay of the old one's), record the
   topic id, then begin committing from that start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from leakproof.cell_clock import CellClock
from leakproof.config import HBaseConfig
from leakproof.driver.committing import Committer
from leakproof.driver.planning import Planner
from leakproof.errors import ConfigError, StoreError, TablesOwned
from leakproof.hbase.connection import (
    ConnectionSlot,
    ensure_tables,
    family_advice,
    judge_families,
    ttl_refusal,
)
from leakproof.lease import Lease
from leakproof.model.fingerprint import changes, only_added
from leakproof.offsets import CommittedBatch, StartPlan
from leakproof.ports.driver import CommitStore, GroupMirror, LeaseStore
from leakproof.sessions import incarnation_of

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


def check_model(leases: LeaseStore, model: str) -> None:
    """Record the model the first time; refuse one whose meaning differs from the rows'."""
    recorded = leases.recorded_model()
    if recorded is None:
        leases.record_model(model)
        return
    found = changes(recorded, model)
    if found:
        raise ConfigError(
            f"the event model changed over existing session rows: {'; '.join(map(str, found))}. "
            f"Folded on, every open session would mix both meanings. Either give the job new "
            f"tables (a new hbase.table_prefix) and reprocess from the start (leakproof "
            f"sessions diff compares the two), or"
            + (" record the added aggregates with `leakproof model accept --config <this "
               "config>` (their cells count the events applied from then on)"
               if only_added(found) else
               " restore the model; `leakproof model accept --force` records it anyway")
            + ".")


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
                 planner: Planner, mirror: GroupMirror | None, holder: str, now_ms: int,
                 model: str | None = None) -> Started:
    """The steps of the module docstring; any of them may refuse (a LeakproofError).
    ``model``: the configured model's ``fingerprint.meaning`` (None: not checked)."""
    taken_from = leases.claim_tables(now_ms)  # 0
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
    latest = store.latest()  # 3
    recorded = leases.topic_id()
    start = planner.start(latest, recorded)
    first = leases.first_topic_id(recorded or planner.topic_id)  # 4
    if planner.topic_id:
        leases.record_topic_id(planner.topic_id)
    committer = Committer(topic, group, store, leases, mirror)
    committer.begin(lease, latest, start, planner.topic_id)
    return Started(lease, latest, start, committer, clock,
                   incarnation_of(planner.topic_id, first))
