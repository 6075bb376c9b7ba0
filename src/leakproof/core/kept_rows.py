"""Session rows kept between batches (pure): a session touched again in the next range of
its partition is not read from HBase again.

A row is kept as HBase holds it after a range's writes (the cells read, with the cells then
written), as the store's *image* of it (``ports.task.SessionRows.images``: bytes this module
never looks into), under its partition's fence key. Kept rows hold only while the partition's state
row carries the writer token they were kept under: every range puts a fresh token in its
pending mark, before any session row, so an unchanged token means no one wrote the
partition since -- no other worker, no retried attempt, no zombie that got as far as its
mark. A changed token drops them, unless the ``Delta`` of every range since is at hand
(another Python worker's, shared on the host: ``task.kept_trail``) to bring them up to it.

Only a row whose sole fence is its partition's own, and whose session is open, is kept: a
row that names another partition's fence (a key that moved when partitions were added, or a
second topic) may be written by that partition's ranges, which leave this partition's
``w:writer`` alone. A range that writes such a row puts a fresh ``w:foreign`` into each
partition the row names, which changes their tokens with no delta to bridge it.

Rows are held as images (the HBase store's are marshalled cells: a third of a dict's memory,
and a delta is their bytes as they are), at most ``most`` of them, the least recently used
going first. ``task.kept_sessions`` puts this cache in front of the session rows.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from leakproof.core.sessions import OPEN, SessionState


class Delta(NamedTuple):
    """What one range did to a partition's kept rows: the token its load saw, the one it
    wrote, and each touched row's image as kept (None: forgotten -- closed, or foreign)."""

    read: bytes
    token: bytes
    rows: dict[str, bytes | None]


def new_token() -> bytes:
    """A writer token: 16 random hex digits (no two writers ever pick the same)."""
    return secrets.token_hex(8).encode()


def rewritten(read: bytes, writer: bytes) -> bytes:
    """The writer token once a range's own writer part replaced the one its load ``read``
    (the foreign part as it was then: a bump since then must not go unseen). A token is
    ``<writer>/<foreign>``: a fresh writer part in each range's pending mark, a fresh foreign
    part whenever another partition's range writes a row that also bears this partition's
    fence."""
    return writer + b"/" + read.partition(b"/")[2]


def keepable(s: SessionState, key: str) -> bool:
    """Whether a session's row, as a range of partition ``key`` leaves it, may be kept: open,
    and fenced by ``key`` alone."""
    return s.state == OPEN and all(k == key for k in s.fences)


class KeptRows:
    """One worker's kept rows, for one sessions table and one driver epoch."""

    def __init__(self, most: int) -> None:  # (``job.kept_rows``)
        self._most = most
        self._tokens: dict[str, tuple[bytes, int]] = {}  # fence key -> (token, generation)
        self._generation = 0
        self._rows: OrderedDict[tuple[str, str], tuple[int, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    def token(self, key: str) -> bytes | None:
        """The token this worker's rows of ``key`` hold under, if any."""
        held = self._tokens.get(key)
        return None if held is None else held[0]

    def catch_up(self, key: str, token: bytes) -> None:
        """Bring the rows of ``key`` up to ``token`` where others' deltas say how (only a
        cache shared between workers has them: ``task.kept_trail``)."""

    def take(self, key: str, token: bytes, session_ids: Iterable[str]) -> dict[str, bytes]:
        """The images of the kept rows among ``session_ids`` if the partition's rows hold
        under ``token``; otherwise none, and the partition's rows are dropped."""
        held = self._tokens.get(key)
        if held is None or held[0] != token:
            self._tokens.pop(key, None)
            return {}
        generation = held[1]
        found: dict[str, bytes] = {}
        rows = self._rows
        for sid in session_ids:
            entry = rows.get((key, sid))
            if entry is not None and entry[0] == generation:
                rows.move_to_end((key, sid))
                found[sid] = entry[1]
        return found

    def drop(self, key: str) -> None:
        """Forget the rows of ``key``: a write of its partition failed or timed out, so
        what HBase holds is not known (its next range reads them)."""
        self._tokens.pop(key, None)

    def keep(self, key: str, read: bytes, token: bytes, rows: Mapping[str, bytes],
             gone: Iterable[str] = ()) -> Delta:
        """After a range's writes all landed: ``token`` (written in place of ``read``, the
        token its load saw) is now the partition's; ``rows`` (``keepable``, images of them as
        HBase now holds them) are kept, ``gone`` forgotten. Returns the change, for other
        workers."""
        change: dict[str, bytes | None] = dict.fromkeys(gone)
        change.update(rows)
        delta = Delta(read, token, change)
        self.apply(key, delta)
        return delta

    def apply(self, key: str, delta: Delta) -> None:
        """A range's change (this worker's or another's): the rows it touched replace the
        kept ones. Unless the partition's rows held under the token its load saw, the
        older ones are dropped first."""
        held = self._tokens.get(key)
        if held is None or held[0] != delta.read:
            self._generation += 1
            generation = self._generation
        else:
            generation = held[1]
        self._tokens[key] = (delta.token, generation)
        store = self._rows
        for sid, blob in delta.rows.items():
            if blob is None:
                store.pop((key, sid), None)
            else:
                store[(key, sid)] = (generation, blob)
                store.move_to_end((key, sid))
        while len(store) > self._most:
            store.popitem(last=False)
