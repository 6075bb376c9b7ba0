"""The driver's rows in the job's state table: lease, topic id, gaps, run record.

Rows (the partitions' ``wm:`` and ``op:`` rows of the same table are ``partition_store``'s):
- ``lease:<topic>:<group>`` family ``l``, cell ``holder`` = a Lease (``<epoch>:<tag>``):
  every offsets commit is a checkAndPut on it, so a second driver fences the first; beside
  it ``topic_id`` and ``moved_since`` / ``moved_until`` / ``moved_checks`` (the
  ``moved_keys.KeyMoves`` record: when batches may run as several tasks again, and up to
  where a first run checks where keys sit).
- ``owner`` family ``l``, cell ``job`` = ``<topic>:<group>``: the one job that writes this
  table set (``claim_tables``); a second job is refused while the owner runs.
- ``model`` family ``l``, cell ``meaning``: the event model the session rows were written
  under (``model.fingerprint``).
- ``topic:<topic>`` family ``l``, cell ``first_id``: the Kafka id of the topic the session
  fences without an incarnation tag belong to (``sessions.incarnation_of``), set once.
- ``gap:<topic>:<group>:<partition>:<stored offset>`` family ``g``: data lost to retention.
- ``last:<topic>:<group>`` family ``l``: a TTL-free copy of the newest commit (commit_stores).
- ``run:<topic>:<group>`` family ``l``: the running driver's heartbeat, ``leakproof stop``
  requests, and how the run ended (runs.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import happybase

from leakproof.core.cell_clock import CellClock
from leakproof.core.config import HBaseConfig
from leakproof.core.errors import CommitRefused, TablesOwned
from leakproof.core.lease import FIRST_EPOCH, Lease
from leakproof.core.moved_keys import KeyMoves
from leakproof.core.offsets import CommittedBatch, Gap
from leakproof.core.runs import RUNNING, STOPPED, RunState, stale_after_ms
from leakproof.hbase.connection import ConnectionSlot, check_and_put
from leakproof.ports.driver import REQUIRED_AUDIT


def lease_row(topic: str, group: str) -> bytes:
    return f"lease:{topic}:{group}".encode()


def last_row(topic: str, group: str) -> bytes:
    """The row of the TTL-free copy of a topic and group's newest commit."""
    return f"last:{topic}:{group}".encode()


def decode_last(cells: Mapping[bytes, bytes]) -> CommittedBatch | None:
    """A ``last:`` row's cells -> the commit it copies (None: no copy yet)."""
    if not cells or b"l:batch_ms" not in cells:
        return None
    return CommittedBatch(
        int(cells[b"l:batch_ms"]),
        {int(k[len(b"l:p"):]): int(v) for k, v in cells.items() if k.startswith(b"l:p")},
        {k: cells[f"l:{k}".encode()].decode() for k in REQUIRED_AUDIT
         if f"l:{k}".encode() in cells})


LEASE_COLUMN = b"l:holder"
CELL_TS_COLUMN = b"l:cell_ts_until"  # how far the holder's cell timestamps may go (cell_clock)
TOPIC_ID_COLUMN = b"l:topic_id"  # beside the lease: the topic the offsets belong to
MOVED_COLUMNS = (b"l:moved_since", b"l:moved_until", b"l:moved_checks")  # moved_keys


def read_lease_epoch(table: happybase.Table, topic: str, group: str) -> int | None:
    """The epoch of the driver that holds the lease (None: no driver ever ran)."""
    cells: dict[bytes, bytes] = table.row(lease_row(topic, group), columns=[LEASE_COLUMN])
    raw = cells.get(LEASE_COLUMN)
    return Lease.parse(raw).epoch if raw else None


class StateStore:
    """Reads and writes of the state table on one happybase connection."""

    def __init__(self, conn: happybase.Connection, table_name: str) -> None:
        self._conn = conn
        self._name = table_name
        self._table = conn.table(table_name)

    # -- leases --------------------------------------------------------------------------

    def read_lease(self, topic: str, group: str) -> Lease | None:
        cells: dict[bytes, bytes] = self._table.row(lease_row(topic, group), columns=[LEASE_COLUMN])
        raw = cells.get(LEASE_COLUMN)
        return Lease.parse(raw) if raw else None

    def lease_epoch(self, topic: str, group: str) -> int | None:
        """The epoch of the driver that holds the lease (None: no driver ever ran)."""
        holder = self.read_lease(topic, group)
        return holder.epoch if holder else None

    def bump_epoch(self, topic: str, group: str, tag: str, attempts: int = 20) -> Lease:
        """Take the lease with the next epoch; returns the new holder.

        A running driver rewrites the holder cell at every commit, so a read-then-CAS can
        lose to it: read again and retry. Whoever bumps last holds the lease; every older
        epoch is fenced at its next commit or task.
        """
        for _ in range(attempts):
            current = self.read_lease(topic, group)
            lease = current.successor(tag) if current else Lease(FIRST_EPOCH, tag)
            if self.compare_and_set_lease(topic, group, current, lease):
                return lease
            time.sleep(0.05)
        raise CommitRefused(f"could not take the lease of {topic}:{group} in {attempts} "
                            f"attempts: the holder cell keeps changing")

    def compare_and_set_lease(self, topic: str, group: str, expected: Lease | None,
                              new: Lease) -> bool:
        """Set the holder cell only if it still holds ``expected`` (None: no holder yet)."""
        return check_and_put(self._conn, self._name, lease_row(topic, group), LEASE_COLUMN,
                             expected.encode() if expected else None, new.encode())

    def cell_ts_bound(self, topic: str, group: str) -> int:
        """Above every cell timestamp a driver before this one may have used: the newest
        reservation (``cell_clock``) or, before there was any, the holder cell's own
        timestamp (the region server's clock when this driver took the lease), with a margin
        for the skew between region servers if a driver held it before
        (``CellClock.bound``)."""
        cells = self._table.row(lease_row(topic, group), columns=[LEASE_COLUMN, CELL_TS_COLUMN],
                                include_timestamp=True)
        reserved = int(cells[CELL_TS_COLUMN][0]) if CELL_TS_COLUMN in cells else None
        holder, holder_ts = cells.get(LEASE_COLUMN, (b"", 0))
        first = not holder or Lease.parse(holder).epoch == FIRST_EPOCH  # no driver before
        return CellClock.bound(reserved, int(holder_ts), predecessor=not first)

    def reserve_cell_ts(self, topic: str, group: str, epoch: int, until: int,
                        attempts: int = 20) -> bool:
        """Record ``until`` as the reservation of the driver of ``epoch``, only while it
        holds the lease (a check-and-put on the holder cell: a reservation that lands after
        another driver took over is refused). False: the lease has moved on."""
        for _ in range(attempts):
            holder = self.read_lease(topic, group)
            if holder is None or holder.epoch != epoch:
                return False
            if check_and_put(self._conn, self._name, lease_row(topic, group), LEASE_COLUMN,
                             holder.encode(), str(until).encode(), put_column=CELL_TS_COLUMN):
                return True
            time.sleep(0.05)  # the holder moved: a commit of this driver, or a new driver
        raise CommitRefused(f"could not record the cell timestamps of {topic}:{group} in "
                            f"{attempts} attempts: the holder cell keeps changing")

    def read_topic_id(self, topic: str, group: str) -> str | None:
        cells = self._table.row(lease_row(topic, group), columns=[TOPIC_ID_COLUMN])
        raw = cells.get(TOPIC_ID_COLUMN)
        return raw.decode() if raw else None

    def write_topic_id(self, topic: str, group: str, topic_id: str) -> None:
        self._table.put(lease_row(topic, group), {TOPIC_ID_COLUMN: topic_id.encode()})

    def claim_tables(self, topic: str, group: str, now_ms: int, stale_ms: int) -> str | None:
        """Make ``topic:group`` the job that writes this table set. Returns the job it took
        the tables over from (None: it held them, or nobody did); raises TablesOwned while
        another job runs (its heartbeat younger than ``stale_ms``). Taking over bumps the
        old job's lease epoch, so a driver of it that is only slow is fenced at its next
        commit or task -- after the owner cell is ours, so a driver of it that was only
        starting finds the tables taken (``owns_tables``) once it holds its lease."""
        row, column, mine = b"owner", b"l:job", f"{topic}:{group}".encode()
        for _ in range(20):
            owner = self._table.row(row, columns=[column]).get(column)
            if owner == mine:
                return None
            if owner is not None:
                other_topic, _, other_group = owner.decode().rpartition(":")
                run = _run_state(self._table.row(_run_row(other_topic, other_group)))
                if run is not None and run.alive(now_ms, stale_ms):
                    raise TablesOwned(
                        f"the tables of this job (state table {self._name}) are written by "
                        f"the job of topic {other_topic}, group {other_group}, which runs "
                        f"(heartbeat {(now_ms - run.heartbeat_ms) / 1000:.0f} s ago, on "
                        f"{run.where or 'an unknown host'}): two jobs writing one set of "
                        f"session rows lose updates. Give this job its own hbase.table_prefix, "
                        f"or stop that one first (leakproof stop with its config)")
            if check_and_put(self._conn, self._name, row, column, owner, mine):
                if owner is None:
                    return None
                previous = str(owner.decode())
                other_topic, _, other_group = previous.rpartition(":")
                self.bump_epoch(other_topic, other_group, f"tables taken by {topic}:{group}")
                return previous
            time.sleep(0.05)  # another start claimed them in between: look again
        raise TablesOwned(f"could not claim the tables of {topic}:{group}: the owner cell "
                          f"keeps changing (another job starting at the same time?)")

    def owns_tables(self, topic: str, group: str) -> bool:
        """Whether ``topic:group`` is (still) the job that writes this table set."""
        owner = self._table.row(b"owner", columns=[b"l:job"]).get(b"l:job")
        return bool(owner == f"{topic}:{group}".encode())

    def table_owner(self) -> str | None:
        owner = self._table.row(b"owner", columns=[b"l:job"]).get(b"l:job")
        return owner.decode() if owner else None

    def read_last_commit(self, topic: str, group: str) -> CommittedBatch | None:
        return decode_last(self._table.row(last_row(topic, group)))

    def open_sessions(self, topic: str) -> int:
        """The entries of ``topic``'s open-session index rows (``op:<topic>:...``)."""
        prefix = f"op:{topic}:".encode()
        return sum(len(cells) for _, cells in self._table.scan(row_prefix=prefix,
                                                              columns=[b"o"]))

    def read_model(self) -> str | None:
        raw = self._table.row(b"model", columns=[b"l:meaning"]).get(b"l:meaning")
        return raw.decode() if raw else None

    def write_model(self, meaning: str) -> None:
        self._table.put(b"model", {b"l:meaning": meaning.encode()})

    def pin_first_topic_id(self, topic: str, candidate: str | None) -> str | None:
        """The id of the topic whose fences carry no incarnation tag: ``candidate`` if none
        was recorded yet (set once, by check-and-put: two racing starts agree)."""
        row, column = f"topic:{topic}".encode(), b"l:first_id"
        raw = self._table.row(row, columns=[column]).get(column)
        if raw is None and candidate:
            if check_and_put(self._conn, self._name, row, column, None, candidate.encode()):
                return candidate
            raw = self._table.row(row, columns=[column]).get(column)
        return raw.decode() if raw else None

    def read_key_moves(self, topic: str, group: str) -> KeyMoves:
        cells = self._table.row(lease_row(topic, group), columns=list(MOVED_COLUMNS))
        return KeyMoves.from_text(*(cells.get(c, b"").decode() for c in MOVED_COLUMNS))

    def write_key_moves(self, topic: str, group: str, moves: KeyMoves) -> None:
        self._table.put(lease_row(topic, group), {
            c: v.encode() for c, v in zip(MOVED_COLUMNS, moves.to_text(), strict=True)})

    # -- gaps ----------------------------------------------------------------------------

    def record_gap(self, topic: str, group: str, gap: Gap) -> None:
        row = f"gap:{topic}:{group}:{gap.partition}:{gap.stored:020d}".encode()
        self._table.put(row, {b"g:stored": str(gap.stored).encode(),
                              b"g:resumed_at": str(gap.resumed_at).encode(),
                              b"g:lost": str(gap.resumed_at - gap.stored).encode(),
                              b"g:recorded_ms": str(int(time.time() * 1000)).encode()})

    def gaps(self, topic: str, group: str) -> list[dict[str, str]]:
        prefix = f"gap:{topic}:{group}:".encode()
        return [{"row": k.decode(), **{c[2:].decode(): v.decode() for c, v in cells.items()}}
                for k, cells in self._table.scan(row_prefix=prefix)]


class HBaseTableSet:
    """The state table's account of who writes a table set (``ports.driver.TableSet``)."""

    def __init__(self, cfg: HBaseConfig) -> None:
        self._cfg = cfg
        self._conns = ConnectionSlot(cfg)

    def _state(self, conn: happybase.Connection) -> StateStore:
        return StateStore(conn, self._cfg.state_table)

    def owner(self) -> str | None:
        return self._conns.call("table owner", lambda c: self._state(c).table_owner())

    def head_of(self, topic: str, group: str) -> CommittedBatch | None:
        return self._conns.call("offsets read", lambda c: self._state(c).read_last_commit(
            topic, group))

    def open_sessions(self, topic: str) -> int:
        return self._conns.call("open sessions", lambda c: self._state(c).open_sessions(topic))

    def close(self) -> None:
        self._conns.reset()


class HBaseLeaseStore:
    """The driver's side of the state table for one topic and group: the lease and the gap
    records, each call retried on fresh connections while an HBase outage is tolerated."""

    def __init__(self, cfg: HBaseConfig, topic: str, group: str) -> None:
        self._cfg = cfg
        self._topic, self._group = topic, group
        self._conns = ConnectionSlot(cfg)
        self._inherited_bound = 0  # claim_tables: the cell timestamps of a job taken over

    def _state(self, conn: happybase.Connection) -> StateStore:
        return StateStore(conn, self._cfg.state_table)

    def take(self, tag: str) -> Lease:
        return self._conns.call("lease take", lambda c: self._state(c).bump_epoch(
            self._topic, self._group, tag))

    def holder(self) -> Lease | None:
        return self._conns.call("lease check", lambda c: self._state(c).read_lease(
            self._topic, self._group))

    def compare_and_set(self, expected: Lease, new: Lease) -> bool:
        return self._conns.call("lease check-and-set", lambda c: self._state(c)
                                .compare_and_set_lease(self._topic, self._group, expected, new))

    def cell_ts_bound(self) -> int:
        """Above this group's earlier drivers' cell timestamps, and above those of the job
        it took the tables over from: the same rows' cells must keep their order."""
        own = self._conns.call("cell timestamps", lambda c: self._state(c).cell_ts_bound(
            self._topic, self._group))
        return max(own, self._inherited_bound)

    def reserve_cell_ts(self, epoch: int, until: int) -> bool:
        return self._conns.call("cell timestamps", lambda c: self._state(c).reserve_cell_ts(
            self._topic, self._group, epoch, until))

    def record_gap(self, gap: Gap) -> None:
        self._conns.call("record gap", lambda c: self._state(c).record_gap(
            self._topic, self._group, gap))

    def topic_id(self) -> str | None:
        return self._conns.call("topic id", lambda c: self._state(c).read_topic_id(
            self._topic, self._group))

    def record_topic_id(self, topic_id: str) -> None:
        self._conns.call("topic id", lambda c: self._state(c).write_topic_id(
            self._topic, self._group, topic_id))

    def recorded_model(self) -> str | None:
        return self._conns.call("model", lambda c: self._state(c).read_model())

    def record_model(self, meaning: str) -> None:
        self._conns.call("model", lambda c: self._state(c).write_model(meaning))

    def claim_tables(self, now_ms: int) -> str | None:
        taken_from = self._conns.call("table owner", lambda c: self._state(c).claim_tables(
            self._topic, self._group, now_ms, stale_after_ms(5.0)))
        if taken_from:
            other_topic, _, other_group = taken_from.rpartition(":")
            self._inherited_bound = self._conns.call(
                "cell timestamps", lambda c: self._state(c).cell_ts_bound(other_topic,
                                                                        other_group))
        return taken_from

    def owns_tables(self) -> bool:
        return self._conns.call("table owner", lambda c: self._state(c).owns_tables(
            self._topic, self._group))

    def first_topic_id(self, candidate: str | None) -> str | None:
        return self._conns.call("topic id", lambda c: self._state(c).pin_first_topic_id(
            self._topic, candidate))

    def key_moves(self) -> KeyMoves:
        return self._conns.call("key moves", lambda c: self._state(c).read_key_moves(
            self._topic, self._group))

    def record_key_moves(self, moves: KeyMoves) -> None:
        self._conns.call("key moves", lambda c: self._state(c).write_key_moves(
            self._topic, self._group, moves))

    def close(self) -> None:
        self._conns.reset()


def _run_row(topic: str, group: str) -> bytes:
    return f"run:{topic}:{group}".encode()


class HBaseRunRecord:
    """The run record (``run:<topic>:<group>`` in the state table, family ``l``): the
    driver's heartbeat, ``leakproof stop`` requests and how the run ended.

    Heartbeats are single attempts: the driver's main thread must not hang in an HBase
    outage (the batches ride those out); a missed heartbeat is harmless.
    """

    def __init__(self, cfg: HBaseConfig, topic: str, group: str) -> None:
        self._cfg = cfg
        self._row = _run_row(topic, group)
        self._conns = ConnectionSlot(cfg)

    def _table(self, conn: happybase.Connection) -> happybase.Table:
        return conn.table(self._cfg.state_table)

    def read(self) -> RunState | None:
        cells = self._conns.call("run record", lambda c: self._table(c).row(self._row))
        return _run_state(cells)

    def heartbeat(self, epoch: int, where: str) -> RunState | None:
        """Write this driver's heartbeat (a newer epoch takes the record over) and read the
        record back, stop request included."""
        now = str(int(time.time() * 1000)).encode()
        cells = {b"l:epoch": str(epoch).encode(), b"l:state": RUNNING.encode(),
                 b"l:heartbeat_ms": now, b"l:where": where.encode()}
        with self._conns.get() as conn:
            table = self._table(conn)
            current = _run_state(table.row(self._row))
            if current is not None and current.epoch > epoch:
                return current  # a newer driver owns the record; the lease fences this one
            table.put(self._row, cells)
            return _run_state(table.row(self._row))

    def request_stop(self, epoch: int) -> None:
        now = str(int(time.time() * 1000)).encode()
        self._conns.call("stop request", lambda c: self._table(c).put(
            self._row, {b"l:stop_epoch": str(epoch).encode(), b"l:stop_requested_ms": now}))

    def stopped(self, epoch: int, detail: str) -> None:
        now = str(int(time.time() * 1000)).encode()

        def write(conn: happybase.Connection) -> None:
            current = _run_state(self._table(conn).row(self._row))
            if current is None or current.epoch == epoch:
                self._table(conn).put(self._row, {
                    b"l:epoch": str(epoch).encode(), b"l:state": STOPPED.encode(),
                    b"l:stopped_ms": now, b"l:detail": detail.encode()})

        self._conns.call("run record", write)

    def close(self) -> None:
        self._conns.reset()


def _run_state(cells: dict[bytes, bytes]) -> RunState | None:
    if not cells or b"l:epoch" not in cells:
        return None

    def num(name: bytes) -> int:
        return int(cells.get(name, b"0") or b"0")

    return RunState(epoch=num(b"l:epoch"), state=cells.get(b"l:state", b"").decode(),
                    heartbeat_ms=num(b"l:heartbeat_ms"), stop_epoch=num(b"l:stop_epoch"),
                    stop_requested_ms=num(b"l:stop_requested_ms"),
                    stopped_ms=num(b"l:stopped_ms"),
                    detail=cells.get(b"l:detail", b"").decode(),
                    where=cells.get(b"l:where", b"").decode())
