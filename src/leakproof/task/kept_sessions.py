"""The kept-rows cache (``kept_rows``) in front of the session rows: the speed work a range's
steps call by name and never have to look into.

``KeptSessions`` stands in front of a ``SessionRows`` store for the two calls that give the
cache its part (the others go to the store itself). ``read_touched`` takes a range's touched
rows from the cache while its partition's writer token still holds (read otherwise); ``keep``
leaves them there once the range's writes all landed. The store hands its rows over as opaque images
(``SessionRows.images``, ``adopt``), so the cache never knows how HBase lays a row out. The
tokens it holds under come from the partition rows (``StoredPartition.writer``, ``Mark``):
``keep_after`` and ``foreign`` say what a range's writes do to them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from leakproof.core.kept_rows import KeptRows, keepable, rewritten
from leakproof.core.sessions import FoldResult, SessionState, fence_source
from leakproof.ports.task import SessionRows


class Touched(NamedTuple):
    """One range's touched sessions, for ``KeptSessions.read_touched``: its partition's
    fence key and the writer token its state row holds."""

    key: str
    token: bytes
    session_ids: frozenset[str]


class Kept(NamedTuple):
    """One range's rows to keep after all its writes landed (``KeptSessions.keep``): the
    token its load saw and the one it wrote, the touched sessions whose rows may be kept
    (``kept_rows.keepable``), and those to forget (closed, or fenced by another partition)."""

    key: str
    read: bytes
    token: bytes
    session_ids: frozenset[str]
    forget: tuple[str, ...]


class KeptSessions:
    """``kept`` in front of ``rows`` (None: nothing kept, every touched row read)."""

    def __init__(self, rows: SessionRows, kept: KeptRows | None) -> None:
        self._rows = rows
        self._kept = kept

    def read_touched(self, wanted: Sequence[Touched]) -> tuple[dict[str, SessionState],
                                                                 dict[str, int]]:
        """The rows that exist among each range's touched sessions -- kept where its
        partition's token still holds, read otherwise -- and per fence key how many were
        kept."""
        images: dict[str, bytes] = {}
        missing: set[str] = set()
        counts: dict[str, int] = {}
        for key, token, session_ids in wanted:
            hits: dict[str, bytes] = {}
            if self._kept is not None:
                self._kept.catch_up(key, token)
                hits = self._kept.take(key, token, session_ids)
            images.update(hits)
            missing |= session_ids - hits.keys()
            counts[key] = len(hits)
        found = self._rows.read(missing - images.keys())
        found.update(self._rows.adopt(images))
        return found, counts

    def keep(self, done: Sequence[Kept]) -> None:
        """Each range's keepable rows, as its reads and writes left them, kept for its
        partition's next range."""
        if self._kept is None:
            return
        for d in done:
            self._kept.keep(d.key, d.read, d.token, self._rows.images(d.session_ids),
                            d.forget)


def keep_after(key: str, read: bytes, token: bytes, result: FoldResult) -> Kept:
    """What a range's writes leave kept (``key``: its fence key; ``read``: the token its load
    saw; ``token``: the writer part it wrote): its touched rows that may be, the rest
    forgotten."""
    keep = frozenset(sid for sid, s in result.touched.items() if keepable(s, key))
    return Kept(key, read, rewritten(read, token), keep,
                (*result.closed_untouched, *(result.touched.keys() - keep), *result.removed))


def foreign(own: Iterable[tuple[tuple[str, int], Iterable[SessionState]]]
            ) -> list[tuple[str, int]]:
    """For each range's (topic, partition) and the rows it is about to write: the (topic,
    partition) of every fence a row bears besides its range's own (of any incarnation).
    Those partitions' ranges may keep the row, and must stop trusting it."""
    return sorted({source for mine, rows in own for s in rows for key in s.fences
                   if (source := fence_source(key)) != mine})
