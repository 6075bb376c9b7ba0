"""A partition's open-session index around a range: loaded before the fold, saved after it.

The rules are ``open_index``'s (pure); this is where they meet the stores, in one place:
an index entry is taken at its word unless it lies below ``check_below`` -- a range that
stopped part way may have left it stale -- and then its session row's last_ts and state
decide. The touched sessions' rows are read whole here too, since both the fold and the
index need them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from leakproof import open_index
from leakproof.open_index import Entry
from leakproof.sessions import FoldResult, OpenSessions, PartitionState, SessionState
from leakproof.task.ports import PartitionRows, SessionRows, StoredPartition


@dataclass
class Loaded:
    """What the fold starts from, and what saving the index after it needs."""

    stored: StoredPartition  # the partition's row as read (watermark, marks, outbox)
    state: PartitionState  # its watermark and the open sessions that may expire now
    rows: dict[str, SessionState]  # the touched sessions' rows, whole
    width: int
    cutoff: int  # sessions whose last_ts is below this expire in this range
    found: list[Entry]  # the index entries that may expire in it
    before: dict[str, SessionState]  # what is known of every session found or touched


def load(partitions: PartitionRows, sessions: SessionRows, topic: str, partition: int,
         close_after_ms: int, touched: Iterable[str], newest_ts: int) -> Loaded:
    """Read the partition's state, the touched rows, and the open sessions that may expire
    by ``newest_ts`` (the newest event time in the range)."""
    width = open_index.bucket_width(close_after_ms)
    stored = partitions.read_partition(topic, partition, width)
    state = stored.state
    cutoff = open_index.cutoff(max(state.watermark, newest_ts), close_after_ms)
    found = open_index.expiring(partitions.scan_open(topic, partition, stored.cutoff, cutoff),
                                cutoff)
    rows = sessions.read(set(touched))
    stale = open_index.to_check(found, stored.check_below)
    checked = sessions.read_expiry(stale - rows.keys())
    before = open_index.known_rows(found, stale, checked, rows)
    state.open_sessions = OpenSessions(open_index.open_set(found, before))
    return Loaded(stored, state, rows, width, cutoff, found, before)


def save(partitions: PartitionRows, topic: str, partition: int, loaded: Loaded,
         result: FoldResult) -> None:
    """The index changes, then the watermark (``PartitionRows.write_partition``)."""
    partitions.write_partition(topic, partition, result.partition,
                               open_index.changes(loaded.width, loaded.found, loaded.before,
                                                  result),
                               loaded.cutoff, loaded.stored.check_below)
