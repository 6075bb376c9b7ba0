"""``process_ranges``: what one Spark task does with its offset ranges, over the ports.

1. read each range's records, in offset order, and decode each (undecodable: a dead letter);
2. load: the partitions' watermarks, the touched sessions' rows (or the ones this worker
   kept from the partition's last range, while no one else wrote it: ``kept_rows``), and the
   open sessions that may expire in each range (``index.load``);
3. fold each range's events into its sessions (fences skip what an earlier attempt applied;
   a re-driven dead letter's copy folds even into a closed session);
4. (with a retention, the closed sessions past it join the rows to delete, and those it
   closes are indexed in the pending marks: ``task.sweep``)
   if this driver still holds the lease: the pending marks with fresh writer tokens (with
   the outboxes, with an output topic, and the highest offset each range dead-letters),
   then the session rows, aggregate and fence in one put per row;
5. the dead letters; in a replay of offsets an earlier attempt dead-lettered, the rows of
   records it now decoded and took into account (not skipped as replays) are withdrawn:
   their cause was fixed in between, and left there a redrive would count them again;
6. the open-session indexes, then the watermarks -- last, so neither runs ahead of the
   session rows (``index.save``); the touched rows are kept for the partitions' next ranges;
7. each range's closed sessions' summaries (or every change, ``output.emit``), in one Kafka
   transaction with its outbox's marker (``task.publish``).

The ranges of a task go through steps 2-6 together, one store call per step for all of them
(a wide topic's task carries hundreds of small ranges, and a call costs HBase and the
Thrift server more than a small range's rows do). For each partition the order of its writes
is the order above, as if its range ran alone; a range's fence, state and report stay its
own. Ranges that share a session row (a key that moved when partitions were added) never go
through a step together: the later one loads after the earlier one's writes.

Any failure raises: the batch fails and its offsets are not committed. Every step is
idempotent, so the replay of the ranges after a crash anywhere leaves the same rows. Every
cell is written at the batch's cell timestamp (``cell_clock``), so a write that lands late
-- a timed-out call the server still applies, a stalled attempt -- never hides a newer one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from leakproof.core import open_index
from leakproof.core.dead_letter import source
from leakproof.core.errors import CommitRefused
from leakproof.core.gap_fold import GapRule
from leakproof.core.kept_rows import KeptRows, new_token
from leakproof.core.moved_keys import home, placed
from leakproof.core.offsets import OffsetRange, named
from leakproof.core.open_index import IndexChanges
from leakproof.core.outbox import Outbox, outbox_id
from leakproof.core.reports import TaskReport
from leakproof.core.sessions import (
    NO_WATERMARK,
    FoldResult,
    MayClose,
    Outcome,
    PartitionFolder,
    fence_key,
)
from leakproof.model.compiled import CompiledModel
from leakproof.ports.task import (
    DeadLetters,
    Decode,
    LeaseCheck,
    Mark,
    PartitionRows,
    Record,
    SessionRows,
    SummarySink,
    Visits,
)
from leakproof.task import index
from leakproof.task.kept_sessions import KeptSessions, foreign, keep_after
from leakproof.task.publish import owed, publish
from leakproof.task.read import ReadRange, apart, read_range
from leakproof.task.session_keys import SessionKeys, keys_for
from leakproof.task.sweep import Swept, SweptRange, sweep
from leakproof.testing.crashpoints import crash_point


@dataclass(frozen=True)
class Stores:
    """Where a range's results go; ``summaries`` (a source partition's summary sink) only
    with an output topic; ``kept``: the worker's kept rows, put in front of ``sessions``
    (``task.kept_sessions``; None: every touched row is read)."""

    sessions: SessionRows
    partitions: PartitionRows
    dead_letters: DeadLetters
    lease: LeaseCheck
    summaries: Callable[[int], SummarySink] | None = None
    visits: Visits | None = None  # sessions split by the gap: each visitor's sessions
    kept: KeptRows | None = None


@dataclass(frozen=True)
class Rules:
    """The session rules a range folds by (the config's ``sessions:``), the same in every
    batch.

    ``lead_ms`` (the grace): an event moves the watermark at most that far past its
    record's Kafka timestamp (``sessions.lead_of``; None: no bound). ``fold_late``: late
    events are folded in too (``sessions.late: fold``). With ``gap`` an event's key is a
    visitor's, its events split into sessions by that rule (``task.session_keys.ByGap``,
    over ``stores.visits``). ``retention_ms``: ``sessions.retention_days``
    (``task.sweep``; None: kept for ever)."""

    close_after_ms: int
    lead_ms: int | None = None
    fold_late: bool = False
    gap: GapRule | None = None
    retention_ms: int | None = None


@dataclass(frozen=True)
class TaskBatch:
    """What the driver tells a task of the batch its ranges belong to.

    ``epoch`` is the driver's lease epoch: a task of a driver that another one has replaced
    (a zombie) refuses to write, so it cannot overwrite rows the new driver has advanced.
    ``cell_ts`` is the HBase timestamp of every cell each partition's range writes
    (``cell_clock``): the driver's, growing with batch and epoch, so a write that lands
    late -- a retried call's first copy, a zombie that passed the lease check -- never
    hides a newer one. A step writing several ranges at once writes at the greatest of
    theirs: a later step (a range after them in the batch) always has a greater one.
    With ``placed_in`` (the topic's partition count) a range holding a key that Kafka's
    default partitioner puts in another partition writes nothing: its report counts those
    keys in ``moved_keys`` and the driver runs it again alone (``moved_keys``).
    ``incarnation`` tags the fences of a topic recreated under the same name
    (``sessions.fence_key``). With ``owners_in`` (the partition count of a topic that grew)
    a session whose key Kafka's default partitioner now gives another partition closes only
    once that partition's stored watermark has passed it too (``sessions.PartitionFolder``):
    until then it stays in this partition's index and gets an entry in its owner's, so
    whichever runs once the owner has passed it closes it. Every index entry of such a topic
    is checked against its row. ``idle``: the partitions silent for
    ``sessions.idle_after_s``, with how long (ms, the driver's clock): an empty range of one
    is an idle tick, moving its watermark on by that silence (``task.index``)."""

    batch_ms: int
    epoch: int
    cell_ts: Mapping[int, int]
    placed_in: int | None = None
    incarnation: str = ""
    owners_in: int | None = None
    idle: Mapping[int, int] = field(default_factory=dict)


def process_range(rng: OffsetRange, records: Iterable[Record], decode: Decode, stores: Stores,
                  model: CompiledModel, *, batch_ms: int, epoch: int, close_after_ms: int,
                  cell_ts: int, placed_in: int | None = None) -> TaskReport:
    """``process_ranges`` of one range, its cells written at timestamp ``cell_ts``."""
    return process_ranges([(rng, records)], decode, stores, model, Rules(close_after_ms),
                          TaskBatch(batch_ms, epoch, {rng.partition: cell_ts}, placed_in))[0]


def process_ranges(work: Iterable[tuple[OffsetRange, Iterable[Record]]], decode: Decode,
                   stores: Stores, model: CompiledModel, rules: Rules, batch: TaskBatch
                   ) -> list[TaskReport]:
    """Steps 1-7 of the module docstring for ranges of one topic, in order; returns each
    range's counts and timings."""
    ranges = [read_range(rng, records, decode, rules.lead_ms) for rng, records in work]
    if len({r.rng.topic for r in ranges}) > 1:
        raise ValueError("process_ranges takes the ranges of one topic")
    if (placed_in := batch.placed_in) is not None:  # a decoded event's key is its session id
        for r in ranges:
            r.report.moved_keys = sum(not placed(sid.encode(), r.rng.partition, placed_in)
                                      for sid in r.touched)
    for step in apart([r for r in ranges if not r.report.moved_keys]):
        _steps(step, stores, model, rules, batch)
    return [r.report for r in ranges]


@dataclass(frozen=True)
class _Step:
    """Ranges going through steps 2-7 together, with what each step of theirs reads:
    their topic, the session rule's seam, the worker's kept rows in front of the session
    rows, and the cell timestamp they all write at (the greatest of theirs: a later step,
    a range after them in the batch, always has a greater one)."""

    ranges: list[ReadRange]
    stores: Stores
    model: CompiledModel
    rules: Rules
    batch: TaskBatch
    keys: SessionKeys
    kept: KeptSessions
    topic: str
    ts: int


def _steps(ranges: list[ReadRange], stores: Stores, model: CompiledModel, rules: Rules,
           batch: TaskBatch) -> None:
    """Steps 2-7 for ranges of distinct partitions that touch no session in common."""
    step = _Step(ranges, stores, model, rules, batch,
                 keys_for(rules.gap, stores.sessions, stores.visits),
                 KeptSessions(stores.sessions, stores.kept), ranges[0].rng.topic,
                 max(batch.cell_ts[r.rng.partition] for r in ranges))
    t0 = time.monotonic()
    reachable, wanted, loaded = _load(step)  # 2
    if len(ranges) > 1 and _overlap([ld.sessions() for ld in loaded]):
        # a session found in one range's index is touched or owed by another: each alone
        for r in ranges:
            _steps([r], stores, model, rules, batch)
        return
    shares = _shares([r.report.records for r in ranges])
    load_s = time.monotonic() - t0
    started = [ld.state.watermark for ld in loaded]  # the fold moves it on in place
    results, decoded = _fold_all(ranges, loaded, wanted, model, rules, batch, step.keys)  # 3
    for r, share in zip(ranges, shares, strict=True):
        r.report.fold_s += load_s * share
    t2 = time.monotonic()
    swept = _sweep(step, loaded, results, started)  # 4, with a retention
    outboxes, tokens = _write(step, reachable, loaded, results, swept)  # 4 and 5
    _withdraw(step, decoded)  # 5
    _save(step, loaded, results, swept, tokens)  # 6
    write_s = time.monotonic() - t2
    for r, result, outbox, share, gone in zip(ranges, results, outboxes, shares, swept,
                                              strict=True):
        r.report.write_s = write_s * share
        if outbox is not None and stores.summaries is not None:  # 7
            r.report.publish_s = publish(stores.summaries(r.rng.partition), stores.sessions,
                                         stores.partitions, model, r.rng, outbox, result,
                                         step.ts)
            r.report.write_s += r.report.publish_s
        _report(r.report, result, gone)
    crash_point("task_done")  # every write of these ranges made (fault tests wait for it)


def _load(step: _Step) -> tuple[list[frozenset[str]], list[index.Wanted], list[index.Loaded]]:
    """Step 2: the sessions each range may reach, what it asks of the index, and what the
    load read (completed by the session rule)."""
    batch, owners_in, keys = step.batch, step.batch.owners_in, step.keys
    reachable = keys.reach(step.ranges)
    wanted = [index.Wanted(r.rng.partition, sessions,
                           max((e.ts if lead is None else min(e.ts, lead)
                                for _, e, lead in r.events), default=NO_WATERMARK),
                           None if r.rng.count else batch.idle.get(r.rng.partition))
              for r, sessions in zip(step.ranges, reachable, strict=True)]
    # what the load moves (an old layout's index) at the lowest: if the step is cut into
    # ranges that each write at their own, none of their deletes can leave a moved entry
    first_ts = min(batch.cell_ts[r.rng.partition] for r in step.ranges)
    loaded = index.load(step.stores.partitions, step.stores.sessions, step.kept, step.topic,
                        step.rules.close_after_ms, wanted, ts=first_ts,
                        incarnation=batch.incarnation,
                        owner_of=None if owners_in is None else
                        (lambda sid: home(keys.key_of(sid).encode(), owners_in)))
    keys.complete(reachable, loaded)
    return reachable, wanted, loaded


def _sweep(step: _Step, loaded: Sequence[index.Loaded], results: Sequence[FoldResult],
           started: Sequence[int]) -> list[Swept]:
    """With a retention, the closed sessions past each range's cut join its removals
    (``task.sweep``), from the watermark the range started from."""
    rules, topic = step.rules, step.topic
    if rules.retention_ms is None:
        return [Swept()] * len(step.ranges)
    return sweep(step.stores.partitions, step.stores.sessions, topic,
                 [SweptRange(r.rng.partition,
                             fence_key(topic, r.rng.partition, step.batch.incarnation),
                             r.rng.from_offset, ld, result, wm)
                  for r, ld, result, wm in zip(step.ranges, loaded, results, started,
                                               strict=True)],
                 rules.retention_ms, rules.close_after_ms,
                 deleting=step.batch.owners_in is None)


def _write(step: _Step, reachable: Sequence[frozenset[str]], loaded: Sequence[index.Loaded],
           results: Sequence[FoldResult], swept: Sequence[Swept]
           ) -> tuple[list[Outbox | None], list[bytes]]:
    """Step 4 and the dead letters of step 5: the lease, the pending marks (with the
    outboxes and writer tokens, returned), the session rows and what the session rule
    writes around them.

    Thrift1 has no multi-column check-and-mutate, so the lease check narrows the zombie
    window to the time between this read and the writes; the fences keep a zombie's late
    writes from counting twice."""
    stores, batch, ts, topic, ranges = step.stores, step.batch, step.ts, step.topic, step.ranges
    holder = stores.lease.epoch()
    if holder != batch.epoch:
        raise CommitRefused(f"{named([r.rng for r in ranges])}: the driver lease is at epoch "
                            f"{holder}, this driver's is {batch.epoch}; not writing")
    crash_point("task_after_lease_check")
    tokens = [new_token() for _ in ranges]
    outboxes: list[Outbox | None] = [None] * len(ranges)
    if stores.summaries is not None:
        outboxes = [owed(stores.summaries(r.rng.partition), ld.stored.outbox, result,
                         outbox_id(batch.batch_ms, r.rng.from_offset, r.rng.until_offset,
                                   batch.epoch), ts)
                    for r, ld, result in zip(ranges, loaded, results, strict=True)]
    # A row written before a stop moves its session on while its old index entry stays: the
    # replay reads the row, not the entry, so only the mark says to check that entry later.
    # The writer tokens go first too: from here on no worker may trust the rows it kept for
    # these partitions, nor for the others whose fences the touched rows bear.
    stores.partitions.begin_writes(topic, [
        Mark(r.rng.partition, max(_pending(result), ld.stored.check_below), outbox, token,
             max(ld.stored.dead_until, r.dead[-1].offset) if r.dead else -1, gone.retain)
        for r, ld, result, outbox, token, gone in zip(ranges, loaded, results, outboxes,
                                                      tokens, swept, strict=True)],
        foreign(((topic, r.rng.partition), ld.rows.values())
                for r, ld in zip(ranges, loaded, strict=True)), ts=ts)
    step.keys.before_rows(results, ts)
    stores.sessions.write([s for result in results for s in result.touched.values()],
                          close=[sid for result in results for sid in result.closed_untouched],
                          ts=ts, replaced={sid for result in results for sid in result.replaced})
    crash_point("task_after_sessions")
    step.keys.after_rows(reachable, loaded, results, ts)
    stores.dead_letters.write([err for r in ranges for err in r.dead], batch.batch_ms, ts=ts,
                              incarnation=batch.incarnation)
    return outboxes, tokens


def _withdraw(step: _Step, decoded: Sequence[Sequence[int]]) -> None:
    """The rest of step 5: the dead letters of records this attempt took into account."""
    for r, offsets in zip(step.ranges, decoded, strict=True):
        if offsets:
            r.report.withdrawn = step.stores.dead_letters.withdraw(
                source(step.topic, step.batch.incarnation), r.rng.partition, offsets,
                ts=step.ts)


def _save(step: _Step, loaded: Sequence[index.Loaded], results: Sequence[FoldResult],
          swept: Sequence[Swept], tokens: Sequence[bytes]) -> None:
    """Step 6: the indexes (the owners' entries for sessions left open here first), then
    the watermarks; then the rows written are kept for the partitions' next ranges."""
    topic, ts, batch, ranges = step.topic, step.ts, step.batch, step.ranges
    _hand_over(step.stores.partitions, topic, results, batch.owners_in,
               step.rules.close_after_ms, ts, step.keys.key_of)
    index.save(step.stores.partitions, topic,
               [(r.rng.partition, ld, result, r.newest_record_ts)
                for r, ld, result in zip(ranges, loaded, results, strict=True)], ts=ts,
               swept=[(gone.cut, gone.forget, gone.held) for gone in swept])
    if step.keys.keeps_rows:
        step.kept.keep([keep_after(fence_key(topic, r.rng.partition, batch.incarnation),
                                   ld.stored.writer, token, result)
                        for r, ld, result, token in zip(ranges, loaded, results, tokens,
                                                        strict=True)])


def _report(report: TaskReport, result: FoldResult, swept: Swept) -> None:
    report.applied, report.replayed = result.applied, result.replayed
    report.late, report.duplicates = result.late, result.duplicates
    report.sessions, report.closed = len(result.touched), len(result.closed_now)
    report.retired = swept.count


def _fold_all(step: Sequence[ReadRange], loaded: Sequence[index.Loaded],
              wanted: Sequence[index.Wanted], model: CompiledModel, rules: Rules,
              batch: TaskBatch, keys: SessionKeys
              ) -> tuple[list[FoldResult], list[list[int]]]:
    """Step 3 for each range of a step, over what its load read (its state moved on in
    place): the fold's results, and per range the offsets whose dead letters are withdrawn
    (``_fold``)."""
    # each range's watermark after this step: an owner in the same step counts with it
    after = {w.partition: max(ld.state.watermark, w.newest_ts)
             for w, ld in zip(wanted, loaded, strict=True)}
    topic, close_after_ms = step[0].rng.topic, rules.close_after_ms
    results, decoded = [], []
    for r, ld in zip(step, loaded, strict=True):
        t1 = time.monotonic()
        owners = {p: max(mark, after.get(p, mark)) for p, mark in ld.owner_watermarks.items()}
        may_close = _may_close(r.rng.partition, batch.owners_in, owners, close_after_ms,
                               keys.key_of)
        folder = keys.folder(model, fence_key(topic, r.rng.partition, batch.incarnation),
                             close_after_ms, ld, may_close, rules.fold_late,
                             rules.retention_ms, r.rng.from_offset)
        decoded.append(_fold(folder, r, ld.stored.dead_until))
        folder.advance(ld.idle_watermark)
        results.append(folder.finish())
        r.report.expiring = len(ld.found)
        r.report.rows_kept = ld.kept
        r.report.fold_s = time.monotonic() - t1
    return results, decoded


def _fold(folder: PartitionFolder, r: ReadRange, dead_until: int) -> list[int]:
    """Step 3 for one range: its events fed to its folder, in offset order. Returns the
    offsets whose dead letters an earlier attempt wrote and this one took into account
    (not skipped as replays): their rows are withdrawn in step 5. The usual range -- no
    re-driven copies, nothing dead-lettered at or past its start -- feeds with nothing more
    per event."""
    redriven = r.redriven
    if dead_until >= r.rng.from_offset:  # an earlier attempt dead-lettered
        taken = [offset for offset, event, lead in r.events
                 if folder.feed(offset, event, lead, offset in redriven) is not Outcome.REPLAYED]
        return [o for o in taken if o <= dead_until]
    if redriven:
        for offset, event, lead in r.events:
            folder.feed(offset, event, lead, offset in redriven)
    else:
        for offset, event, lead in r.events:
            folder.feed(offset, event, lead)
    return []


def _may_close(partition: int, owners_in: int | None, owner_watermarks: Mapping[int, int],
               close_after_ms: int, key_of: Callable[[str], str] = str) -> MayClose | None:
    """Whether a session expired in ``partition`` may close: one whose key Kafka's default
    partitioner now gives another partition (a decoded event's key, ``key_of`` the
    session's) only once that partition's stored watermark has passed it too."""
    if owners_in is None:
        return None

    def may_close(sid: str, last_ts: int) -> bool:
        owner = home(key_of(sid).encode(), owners_in)
        return owner == partition or owner_watermarks.get(owner, NO_WATERMARK) > \
            last_ts + close_after_ms
    return may_close


def _hand_over(partitions: PartitionRows, topic: str, results: Sequence[FoldResult],
               owners_in: int | None, close_after_ms: int, ts: int,
               key_of: Callable[[str], str] = str) -> None:
    """An entry in its owner's index for each session a range left open for its owner."""
    if owners_in is None or not any(r.deferred for r in results):
        return
    width = open_index.bucket_width(close_after_ms)
    changes: dict[int, IndexChanges] = {}
    for result in results:
        for sid, last_ts in result.deferred.items():
            changes.setdefault(home(key_of(sid).encode(), owners_in), IndexChanges()).put(
                open_index.bucket_of(last_ts, width), sid, last_ts)
    partitions.hand_over(topic, sorted(changes.items()), ts=ts)


def _pending(result: FoldResult) -> int:
    """A range's pending mark: above every index entry its writes may leave stale -- its
    watermark, and the last_ts of every session it wrote or removed (an event ahead of its
    record's timestamp moves the watermark less than its session)."""
    return max([result.partition.watermark,
                *(s.last_ts + 1 for s in (*result.touched.values(), *result.removed.values()))])


def _overlap(sets: Sequence[set[str]]) -> bool:
    return sum(map(len, sets)) != len(set().union(*sets))


def _shares(records: Sequence[int]) -> list[float]:
    """Each range's share of a step's common time: by records (equal when none has any)."""
    total = sum(records)
    return [n / total for n in records] if total else [1 / len(records)] * len(records)
