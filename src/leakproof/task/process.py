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

from leakproof import open_index
from leakproof.crashpoints import crash_point
from leakproof.dead_letter import origin_of, source
from leakproof.errors import CommitRefused, DecodeError
from leakproof.events import Event
from leakproof.gap_fold import (
    GapFolder,
    GapRule,
    candidates,
    listed_last,
    session_key,
    start_of,
    visitor_of,
)
from leakproof.kept_rows import KeptRows, new_token
from leakproof.model.compiled import CompiledModel
from leakproof.moved_keys import home, placed
from leakproof.offsets import OffsetRange, named
from leakproof.open_index import IndexChanges
from leakproof.outbox import Outbox, outbox_id
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
from leakproof.reports import TaskReport
from leakproof.sessions import (
    NO_WATERMARK,
    FoldResult,
    MayClose,
    Outcome,
    PartitionFolder,
    fence_key,
    lead_of,
)
from leakproof.task import index
from leakproof.task.kept_sessions import KeptSessions, foreign, keep_after
from leakproof.task.publish import owed, publish
from leakproof.task.sweep import Swept, SweptRange, sweep


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


@dataclass
class _Range:
    """One range on its way through the steps."""

    rng: OffsetRange
    report: TaskReport
    events: list[tuple[int, Event, int | None]]  # offset, event, lead (``_read``)
    dead: list[DecodeError]
    touched: frozenset[str]
    newest_record_ts: int = -1  # the newest Kafka timestamp among its records
    # the offsets of its events whose records are re-driven dead letters: they fold even
    # into a closed session (``sessions.PartitionFolder.feed``)
    redriven: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Rules:
    """The session rules a range folds by (the config's ``sessions:``), the same in every
    batch.

    ``lead_ms`` (the grace): an event moves the watermark at most that far past its
    record's Kafka timestamp (``sessions.lead_of``; None: no bound). ``fold_late``: late
    events are folded in too (``sessions.late: fold``). With ``gap`` an event's key is a
    visitor's, its events split into sessions by that rule (``gap_fold``): the load reads
    the visitors' rows (``stores.visits``) first, and the writes list new sessions there
    before their rows, and delete the rows of sessions merged away (or whose start moved)
    after them. ``retention_ms``: ``sessions.retention_days`` (``task.sweep``; None: kept
    for ever)."""

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
    ranges = [_read(rng, records, decode, rules.lead_ms) for rng, records in work]
    if len({r.rng.topic for r in ranges}) > 1:
        raise ValueError("process_ranges takes the ranges of one topic")
    if (placed_in := batch.placed_in) is not None:  # a decoded event's key is its session id
        for r in ranges:
            r.report.moved_keys = sum(not placed(sid.encode(), r.rng.partition, placed_in)
                                      for sid in r.touched)
    for step in _apart([r for r in ranges if not r.report.moved_keys]):
        _steps(step, stores, model, rules, batch)
    return [r.report for r in ranges]


def _read(rng: OffsetRange, records: Iterable[Record], decode: Decode,
          lead_ms: int | None = None) -> _Range:
    """Step 1 for one range: each event with its offset and how far it may move the
    watermark (``sessions.lead_of``; None: its event time)."""
    report = TaskReport(rng.partition, rng.from_offset, rng.until_offset)
    t0 = time.monotonic()
    events: list[tuple[int, Event, int | None]] = []
    dead: list[DecodeError] = []
    keep, topic, partition = events.append, rng.topic, rng.partition
    newest = -1
    redriven: set[int] = set()
    for rec in records:  # once per record: locals only
        if rec.timestamp > newest:
            newest = rec.timestamp
        try:
            event = decode(rec.key, rec.value, topic=topic, partition=partition,
                           offset=rec.offset, timestamp=rec.timestamp, headers=rec.headers)
            keep((rec.offset, event, None if lead_ms is None else lead_of(rec.timestamp,
                                                                          lead_ms)))
            if rec.headers and origin_of(rec.headers) is not None:
                redriven.add(rec.offset)
        except DecodeError as err:
            err.timestamp, err.headers = rec.timestamp, rec.headers  # its dead letter keeps them
            dead.append(err)
            report.dead_letter_kinds[err.kind] = report.dead_letter_kinds.get(err.kind, 0) + 1
    report.records = len(events) + len(dead)
    report.read_s = time.monotonic() - t0
    return _Range(rng, report, events, dead, frozenset(e.session_id for _, e, _ in events),
                  newest, frozenset(redriven))


def _apart(ranges: Sequence[_Range]) -> list[list[_Range]]:
    """``ranges`` cut, in order, into runs that may go through the steps together: no two
    of a run share a partition or a touched session."""
    runs: list[list[_Range]] = []
    current: list[_Range] = []
    partitions: set[int] = set()
    touched: set[str] = set()
    for r in ranges:
        if current and (r.rng.partition in partitions or not touched.isdisjoint(r.touched)):
            runs.append(current)
            current, partitions, touched = [], set(), set()
        current.append(r)
        partitions.add(r.rng.partition)
        touched |= r.touched
    if current:
        runs.append(current)
    return runs


def _steps(step: list[_Range], stores: Stores, model: CompiledModel, rules: Rules,
           batch: TaskBatch) -> None:
    """Steps 2-7 for ranges of distinct partitions that touch no session in common."""
    close_after_ms, gap, cell_ts = rules.close_after_ms, rules.gap, batch.cell_ts
    incarnation, owners_in = batch.incarnation, batch.owners_in
    kept = KeptSessions(stores.sessions, stores.kept)  # the worker's kept rows in front
    topic = step[0].rng.topic
    ts = max(cell_ts[r.rng.partition] for r in step)
    # what the load moves (an old layout's index) at the lowest: if the step is cut into
    # ranges that each write at their own, none of their deletes can leave a moved entry
    first_ts = min(cell_ts[r.rng.partition] for r in step)
    # 2. load
    t0 = time.monotonic()
    key_of: Callable[[str], str] = visitor_of if gap is not None else str
    listed: dict[str, dict[int, int]] = {}
    reachable = (_reachable(stores.visits, step, gap, listed) if gap is not None
                 else [r.touched for r in step])
    wanted = [index.Wanted(r.rng.partition, sessions,
                           max((e.ts if lead is None else min(e.ts, lead)
                                for _, e, lead in r.events), default=NO_WATERMARK),
                           None if r.rng.count else batch.idle.get(r.rng.partition))
              for r, sessions in zip(step, reachable, strict=True)]
    loaded = index.load(stores.partitions, stores.sessions, kept, topic, close_after_ms, wanted,
                        ts=first_ts, incarnation=incarnation,
                        owner_of=None if owners_in is None else
                        (lambda sid: home(key_of(sid).encode(), owners_in)))
    if gap is not None:
        _complete(stores.visits, stores.sessions, gap, reachable, loaded, listed)
    if len(step) > 1 and _overlap([ld.sessions() for ld in loaded]):
        # a session found in one range's index is touched or owed by another: each alone
        for r in step:
            _steps([r], stores, model, rules, batch)
        return
    shares = _shares([r.report.records for r in step])
    load_s = time.monotonic() - t0
    # 3. fold
    started = [ld.state.watermark for ld in loaded]  # the fold moves it on in place
    results, decoded = _fold_all(step, loaded, wanted, model, rules, batch, key_of)
    for r, share in zip(step, shares, strict=True):
        r.report.fold_s += load_s * share
    t2 = time.monotonic()
    swept = ([Swept()] * len(step) if rules.retention_ms is None else
             sweep(stores.partitions, stores.sessions, topic,
                   [SweptRange(r.rng.partition, fence_key(topic, r.rng.partition, incarnation),
                               r.rng.from_offset, ld, result, wm)
                    for r, ld, result, wm in zip(step, loaded, results, started, strict=True)],
                   rules.retention_ms, close_after_ms, deleting=owners_in is None))
    # 4. the lease, the outboxes, the session rows. (Thrift1 has no multi-column
    # check-and-mutate, so the lease check narrows the zombie window to the time between this
    # read and the writes; the fences keep a zombie's late writes from counting twice.)
    holder = stores.lease.epoch()
    if holder != batch.epoch:
        raise CommitRefused(f"{named([r.rng for r in step])}: the driver lease is at epoch "
                            f"{holder}, this driver's is {batch.epoch}; not writing")
    crash_point("task_after_lease_check")
    tokens = [new_token() for _ in step]
    outboxes: list[Outbox | None] = [None] * len(step)
    if stores.summaries is not None:
        outboxes = [owed(stores.summaries(r.rng.partition), ld.stored.outbox, result,
                         outbox_id(batch.batch_ms, r.rng.from_offset, r.rng.until_offset,
                                   batch.epoch), ts)
                    for r, ld, result in zip(step, loaded, results, strict=True)]
    # A row written before a stop moves its session on while its old index entry stays: the
    # replay reads the row, not the entry, so only the mark says to check that entry later.
    # The writer tokens go first too: from here on no worker may trust the rows it kept for
    # these partitions, nor for the others whose fences the touched rows bear.
    stores.partitions.begin_writes(topic, [
        Mark(r.rng.partition, max(_pending(result), ld.stored.check_below), outbox, token,
             max(ld.stored.dead_until, r.dead[-1].offset) if r.dead else -1, gone.retain)
        for r, ld, result, outbox, token, gone in zip(step, loaded, results, outboxes, tokens,
                                                      swept, strict=True)],
        foreign(((topic, r.rng.partition), ld.rows.values())
                for r, ld in zip(step, loaded, strict=True)), ts=ts)
    if stores.visits is not None and (listing := _listing(results, listed, gap)):
        stores.visits.add(listing, ts=ts)  # every row listed before it is written
    stores.sessions.write([s for result in results for s in result.touched.values()],
                          close=[sid for result in results for sid in result.closed_untouched],
                          ts=ts, replaced={sid for result in results for sid in result.replaced})
    crash_point("task_after_sessions")
    removed = [sid for result in results for sid in result.removed]
    if stores.visits is not None or removed:  # then the rows merged away or swept, and
        stores.sessions.remove(removed, ts=ts)  # their listings
        crash_point("task_after_session_deletes")
    if stores.visits is not None:
        stores.visits.drop(_unlisted(reachable, loaded, results), ts=ts)
    # 5. dead letters
    stores.dead_letters.write([err for r in step for err in r.dead], batch.batch_ms, ts=ts,
                              incarnation=incarnation)
    for r, offsets in zip(step, decoded, strict=True):
        if offsets:
            r.report.withdrawn = stores.dead_letters.withdraw(
                source(topic, incarnation), r.rng.partition, offsets, ts=ts)
    # 6. the indexes (the owners' entries for sessions left open here first), then the
    # watermarks
    _hand_over(stores.partitions, topic, results, owners_in, close_after_ms, ts, key_of)
    index.save(stores.partitions, topic,
               [(r.rng.partition, ld, result, r.newest_record_ts)
                for r, ld, result in zip(step, loaded, results, strict=True)], ts=ts,
               swept=[(gone.cut, gone.forget, gone.held) for gone in swept])
    if gap is None:  # split by the gap, rows come and go under new keys: none is kept
        kept.keep([keep_after(fence_key(topic, r.rng.partition, incarnation),
                              ld.stored.writer, token, result)
                   for r, ld, result, token in zip(step, loaded, results, tokens, strict=True)])
    write_s = time.monotonic() - t2
    for r, result, outbox, share in zip(step, results, outboxes, shares, strict=True):
        r.report.write_s = write_s * share
        # 7. the summaries, read from the rows as they now stand, in one transaction
        if outbox is not None and stores.summaries is not None:
            r.report.publish_s = publish(stores.summaries(r.rng.partition), stores.sessions,
                                         stores.partitions, model, r.rng, outbox, result, ts)
            r.report.write_s += r.report.publish_s
        r.report.applied, r.report.replayed = result.applied, result.replayed
        r.report.late, r.report.duplicates = result.late, result.duplicates
        r.report.sessions, r.report.closed = len(result.touched), len(result.closed_now)
    for r, gone in zip(step, swept, strict=True):
        r.report.retired = gone.count
    crash_point("task_done")  # every write of these ranges made (fault tests wait for it)


def _fold_all(step: Sequence[_Range], loaded: Sequence[index.Loaded],
              wanted: Sequence[index.Wanted], model: CompiledModel, rules: Rules,
              batch: TaskBatch, key_of: Callable[[str], str]
              ) -> tuple[list[FoldResult], list[list[int]]]:
    """Step 3 for each range of a step, over what its load read (its state moved on in
    place): the fold's results, and per range the offsets whose dead letters are withdrawn
    (``_fold``)."""
    # each range's watermark after this step: an owner in the same step counts with it
    after = {w.partition: max(ld.state.watermark, w.newest_ts)
             for w, ld in zip(wanted, loaded, strict=True)}
    topic, close_after_ms, gap = step[0].rng.topic, rules.close_after_ms, rules.gap
    results, decoded = [], []
    for r, ld in zip(step, loaded, strict=True):
        t1 = time.monotonic()
        owners = {p: max(mark, after.get(p, mark)) for p, mark in ld.owner_watermarks.items()}
        may_close = _may_close(r.rng.partition, batch.owners_in, owners, close_after_ms,
                               key_of)
        key = fence_key(topic, r.rng.partition, batch.incarnation)
        folder = (PartitionFolder(model, key, close_after_ms, ld.state, ld.rows, may_close,
                                  rules.fold_late, rules.retention_ms) if gap is None else
                  GapFolder(model, key, close_after_ms, gap, ld.state, ld.rows, may_close,
                            rules.fold_late, r.rng.from_offset, rules.retention_ms))
        decoded.append(_fold(folder, r, ld.stored.dead_until))
        folder.advance(ld.idle_watermark)
        results.append(folder.finish())
        r.report.expiring = len(ld.found)
        r.report.rows_kept = ld.kept
        r.report.fold_s = time.monotonic() - t1
    return results, decoded


def _fold(folder: PartitionFolder | GapFolder, r: _Range, dead_until: int) -> list[int]:
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


def _reachable(visits: Visits | None, step: Sequence[_Range], rule: GapRule,
               listed: dict[str, dict[int, int]]) -> list[frozenset[str]]:
    """Split by the gap: each range's sessions its events may reach, as the visitors' rows
    list them (one read for the step, left in ``listed``)."""
    assert visits is not None  # a gap rule comes with its visitors' store
    listed.update(visits.read({e.session_id for r in step for _, e, _ in r.events}))
    out = []
    for r in step:
        times: dict[str, list[int]] = {}
        for _, e, _ in r.events:
            times.setdefault(e.session_id, []).append(e.ts)
        out.append(frozenset(session_key(visitor, start) for visitor, ts in times.items()
                             for start in candidates(listed.get(visitor, {}), ts, rule)))
    return out


def _complete(visits: Visits | None, store: SessionRows, rule: GapRule,
              reachable: Sequence[frozenset[str]], loaded: Sequence[index.Loaded],
              listed: dict[str, dict[int, int]]) -> None:
    """Split by the gap: the rows a range's fold must also see, read into its ``Loaded``.

    - A listed session without a row: another attempt of this range (a speculative copy, a
      zombie) may have moved or merged it since the listing was read. It lists the session
      that took it in before deleting the row, so reading the visitor's row again finds it.
    - A session a pending outbox owes, or one the index would close after a crash (an entry
      checked against its row): it may be a row a stopped range merged into another and did
      not get to delete; with its visitor's sessions read, the fold sees what absorbed it,
      deletes it and owes its key a tombstone, instead of publishing or closing it.
    Repeated while new keys come up (a few rounds at most)."""
    assert visits is not None
    done: set[str] = set().union(*reachable)
    asked: dict[str, tuple[int, list[int]]] = {}  # visitor -> (its range, times near which)

    def ask(i: int, sid: str) -> None:
        asked.setdefault(visitor_of(sid), (i, []))[1].append(start_of(sid))

    for i, (sessions, ld) in enumerate(zip(reachable, loaded, strict=True)):
        for sid in sorted(sessions - ld.rows.keys()):
            ask(i, sid)
        for sid in ld.stored.outbox.owed():
            ask(i, sid)
        for e in ld.found:
            if e.session_id not in ld.rows and e.last_ts < ld.stored.check_below:
                ask(i, e.session_id)
    for _ in range(8):
        if not asked:
            return
        fresh = visits.read(asked)
        listed.update(fresh)
        wanted = {session_key(visitor, start): i for visitor, (i, times) in asked.items()
                  for start in candidates(fresh.get(visitor, {}), times, rule)
                  if session_key(visitor, start) not in done}
        done |= wanted.keys()
        found = store.read(wanted)
        asked = {}
        for sid, i in sorted(wanted.items()):
            row = found.get(sid)
            if row is None:
                ask(i, sid)
            else:
                loaded[i].rows.setdefault(sid, row)
                loaded[i].before.setdefault(sid, row)


def _listing(results: Sequence[FoldResult], listed: Mapping[str, Mapping[int, int]],
             rule: GapRule | None) -> dict[str, dict[int, int]]:
    """The sessions the ranges write that their visitors' rows do not list yet, or list
    with a last_ts they have passed: each with its last_ts rounded up (``listed_last``), so
    a session's entry is written when it starts and then about once per eight gaps."""
    assert rule is not None
    out: dict[str, dict[int, int]] = {}
    for result in results:
        for s in result.touched.values():
            visitor = visitor_of(s.session_id)
            if listed.get(visitor, {}).get(s.first_ts, -1) < s.last_ts:
                out.setdefault(visitor, {})[s.first_ts] = listed_last(s.last_ts, rule)
    return out


def _unlisted(reachable: Sequence[frozenset[str]], loaded: Sequence[index.Loaded],
              results: Sequence[FoldResult]) -> dict[str, list[int]]:
    """The listings to drop: sessions removed, and those listed without a row (a range that
    stopped before dropping them) -- unless written again now."""
    written = {sid for result in results for sid in result.touched}
    gone = {sid for result in results for sid in result.removed}
    for sessions, ld in zip(reachable, loaded, strict=True):
        gone |= sessions - ld.rows.keys()
    out: dict[str, list[int]] = {}
    for sid in sorted(gone - written):
        out.setdefault(visitor_of(sid), []).append(start_of(sid))
    return out


def _overlap(sets: Sequence[set[str]]) -> bool:
    return sum(map(len, sets)) != len(set().union(*sets))


def _shares(records: Sequence[int]) -> list[float]:
    """Each range's share of a step's common time: by records (equal when none has any)."""
    total = sum(records)
    return [n / total for n in records] if total else [1 / len(records)] * len(records)
