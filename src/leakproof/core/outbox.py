"""The closed-session summaries a partition owes the output topic (pure).

A range that closes sessions (or changes closed ones, with a late event) writes their ids to
the partition's outbox *before* it writes their session rows, and publishes them after its
last write, in one Kafka transaction that also commits the outbox's id as a marker. So:

- a crash before the outbox write leaves nothing behind: the replay folds the same closes;
- a crash after it leaves the outbox pending: whatever the replay folds, it publishes the
  pending ids too, read from their rows once the replay's own writes are done;
- a crash after the transaction committed, before the job's offsets did: the marker says
  the outbox is published, and the replay (whose fences skip every event) owes nothing new.

Each closed session is therefore published once per change, with its row as it stands after
the range that changed it.

An outbox's id names the range attempt and, by a digest, the sessions it holds: two
attempts of one range running at once (a speculative copy, a zombie) may each see the other's
writes part way and owe different sessions; under one id the second would take the first's
marker for its own and never send what only it owed. With the digest each goes out (a
session the two share is then published twice: at least once, never lost).

With ``output.emit: {every_s: N}`` the outbox also holds the open sessions changed since
the partition's last window opened and not yet published (``held``), and when that window
opened (``emitted``, a cell timestamp: the version it sent): ``throttled``. They are
written with it, before the rows, so a crash never loses a change: it is owed, or held, or
the replay folds it again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

ID = b"w:outbox"
SESSIONS = b"w:outbox_sessions"
PUBLISHED = b"w:outbox_published"
HELD = b"w:outbox_held"
EMITTED = b"w:outbox_emitted"


@dataclass(frozen=True)
class Outbox:
    """A partition's outbox: the newest one's id and sessions, and the id last published;
    with ``every_s``, the sessions held back and when the last window opened (-1: never)."""

    id: str = ""
    sessions: tuple[str, ...] = ()
    published: str = ""
    held: tuple[str, ...] = ()
    emitted: int = -1

    @property
    def pending(self) -> bool:
        """Written, and not known to be published."""
        return bool(self.id) and self.id != self.published

    def owed(self) -> tuple[str, ...]:
        """The sessions still to publish: this outbox's, unless it went out already."""
        return self.sessions if self.pending else ()

    def next(self, new_id: str, closed: Iterable[str]) -> Outbox | None:
        """The outbox a range writes: what is still owed and what it closed itself; None
        when it owes nothing (then it writes no outbox)."""
        sessions = tuple(dict.fromkeys((*self.owed(), *closed)))
        if not sessions:
            return None
        return replace(self, id=with_digest(new_id, sessions), sessions=sessions)

    def throttled(self, new_id: str, due: Iterable[str], changed: Iterable[str],
                  now: int, every_ms: int) -> Outbox | None:
        """``next`` for ``output.emit: {every_s: N}`` at cell timestamp ``now``: ``due``
        (closes, tombstones) go out now; the open sessions ``changed`` too, with every one
        held before, when the partition's window is open (``every_ms`` since the last one
        opened at ``emitted``) -- so a session goes out at most once per window while it
        changes -- else they are held. With nothing to send but a new held list, the same
        (published) outbox with that list: only the list is written."""
        changed = tuple(changed)
        release = bool(self.held or changed) and (
            self.emitted < 0 or now - self.emitted >= every_ms)
        out: tuple[str, ...] = (*self.owed(), *due)
        kept: tuple[str, ...] = (*self.held, *changed)
        emitted = self.emitted
        if release:
            out, kept, emitted = (*out, *kept), (), now
        sessions = tuple(dict.fromkeys(out))
        sent = set(sessions)
        held = tuple(sid for sid in dict.fromkeys(kept) if sid not in sent)
        if sessions:
            return Outbox(with_digest(new_id, sessions), sessions, self.published, held,
                          emitted)
        if (held, emitted) == (self.held, self.emitted):
            return None
        return replace(self, held=held, emitted=emitted)

    def encode(self) -> dict[bytes, bytes]:
        cells = {ID: self.id.encode(), SESSIONS: json.dumps(list(self.sessions)).encode()}
        if self.held or self.emitted >= 0:  # every_s only: close and update write as before
            cells[HELD] = json.dumps(list(self.held)).encode()
            cells[EMITTED] = str(self.emitted).encode()
        return cells

    @classmethod
    def parse(cls, cells: Mapping[bytes, bytes]) -> Outbox:
        """From the state row's cells (an absent outbox is an empty one)."""
        return cls(cells.get(ID, b"").decode(),
                   tuple(json.loads(cells.get(SESSIONS, b"[]"))),
                   cells.get(PUBLISHED, b"").decode(),
                   tuple(json.loads(cells.get(HELD, b"[]"))),
                   int(cells.get(EMITTED, b"-1")))


def with_digest(attempt_id: str, sessions: Iterable[str]) -> str:
    """``attempt_id`` and a digest of the (sorted) sessions an outbox holds."""
    digest = hashlib.blake2b("\n".join(sorted(sessions)).encode(), digest_size=6)
    return f"{attempt_id}:{digest.hexdigest()}"


def covers(marker_id: str, outbox_id: str) -> bool:
    """Whether a partition's marker (the id its newest committed transaction carried) says
    the outbox ``outbox_id`` needs no publish: it is that outbox, or one of a later range
    of the same driver (a later batch, further on), which ran after this range's batch had
    committed and so found its sessions published or carried them on. So the slow copy of
    a speculated task waking after later batches does not send its summaries again.

    Another driver's marker never covers: a newer driver's ranges may have loaded the
    partition before this one's outbox landed (a replaced driver's stalled task, a rewind
    that starts over), and epochs restart with a new state table while markers stay in
    Kafka. Such an attempt publishes again: at least once, never lost."""
    if marker_id == outbox_id:
        return True
    marker, mine = _order(marker_id), _order(outbox_id)
    if marker is None or mine is None or marker[0] != mine[0]:
        return False
    return marker[1] > mine[1] and marker[2] > mine[2]


def _order(outbox_id: str) -> tuple[int, int, int] | None:
    """(epoch, batch time, until offset) of an id ``outbox_id`` made."""
    try:
        batch, offsets, epoch = outbox_id.split(":")[:3]
        return int(epoch), int(batch), int(offsets.rsplit("-", 1)[1])
    except (ValueError, IndexError):
        return None


def outbox_id(batch_ms: int, from_offset: int, until_offset: int, epoch: int) -> str:
    """Unique per range attempt of a driver: a rewind or a new table prefix never makes an
    old marker look like a new outbox's."""
    return f"{batch_ms}:{from_offset}-{until_offset}:{epoch}"
