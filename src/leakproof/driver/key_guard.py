"""The driver's side of the partitions-added rule (``moved_keys`` has the rule itself).

The planning thread owns it: it starts from the record kept beside the lease, and for each
plan says whether the batch runs as one task (keys may be in two partitions) and whether its
ranges must check their keys. The record is written before any task of the batch runs, so a
restart keeps the rule. The output thread's news -- a batch found keys in a partition the
default partitioner does not give them -- reaches it through ``RunControl.keys_moved``, the
one object the two threads share.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from leakproof.core.moved_keys import KeyMoves
from leakproof.driver.batch import BatchPlan
from leakproof.ports.driver import TopicRecords

log = logging.getLogger(__name__)


class KeyMoveGuard:
    """What keys moving between partitions ask of each batch's tasks."""

    def __init__(self, store: TopicRecords, topic: str, settle_s: float) -> None:
        self._store = store
        self._topic = topic
        self._settle_s = settle_s
        self._moves = store.key_moves()
        self._mixing = False

    @property
    def moves(self) -> KeyMoves:
        return self._moves

    def start(self, now_ms: int, *, first_run: bool, partitions_added: bool) -> None:
        """At start: a first run checks keys (a growth under its backlog is unseen); a
        stored offsets row lacking partitions means they were added while the job was down."""
        if first_run:
            self._note(self._moves.first_run(now_ms))
        elif partitions_added:
            self._note(self._moves.added(now_ms))

    def plan(self, plan: BatchPlan, now_ms: int, moved_at_ms: int | None) -> BatchPlan:
        """``plan`` with ``one_task`` and ``check_keys_in`` set; ``moved_at_ms``: when an
        earlier batch found keys moved (None: none did since the last plan)."""
        moves = self._moves.added(now_ms) if plan.appeared else self._moves
        if moved_at_ms is not None:
            moves = moves.added(moved_at_ms)
        moves = moves.settled(now_ms, round(self._settle_s * 1000),
                              {p: b.log_end for p, b in plan.bounds.items()})
        self._note(moves)
        starts = {r.partition: r.from_offset for r in plan.work}
        mixing = moves.mixing(starts)
        checks = len(plan.bounds) if not mixing and moves.checking(starts) else None
        if mixing != self._mixing:
            self._mixing = mixing
            if mixing:
                log.info("partitions were added to %s: a session may have records in two "
                         "partitions, so batches run as one task until records written "
                         "%.0fs after that are reached", self._topic, self._settle_s)
            else:
                log.info("%s: keys no longer move between partitions; batches run as "
                         "several tasks again", self._topic)
        return replace(plan, one_task=mixing, check_keys_in=checks,
                       owners_in=len(plan.bounds) if moves.grown else None)

    def _note(self, moves: KeyMoves) -> None:
        if moves != self._moves:
            self._store.record_key_moves(moves)  # before any task: a restart keeps the rule
            self._moves = moves
