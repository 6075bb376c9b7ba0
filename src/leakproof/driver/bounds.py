"""Bounded runs (backfills): where ``--until-offsets`` / ``--until-time`` stop each partition
(pure: no Kafka, no HBase).

A run's bound is, per partition, the first offset it must not read (an until offset, as in
the rest of the job's vocabulary). It is worked out once, when the run starts:

- ``--until-offsets P=O,...`` names every assigned partition's bound; a bound past the log
  end is refused (the run would wait for records that may never come);
- ``--until-time T``: each partition's first offset whose record timestamp is at or after T
  (Kafka's offsets-for-times), so records from there on are not read; a partition with no
  record that new is bounded at its log end at start (the high watermark: records of a
  transaction still open then are read once it commits).

Planning never plans a range past a bound, and the batch whose ranges reach every bound is
the run's last: the run stops once it has committed (exit 0). A bounded run that stops
before every partition got there (``leakproof stop``, a signal, ``--until-idle`` while the
bound is still ahead) exits ``BOUND_NOT_REACHED`` instead, naming the partitions short of it:
a backfill-then-switch recipe (``run --until-time T && sessions diff && switch``) must not
take a copy that is missing records for complete. A partition that appears while
a bounded run runs is bounded the same way from where it appears (``--until-offsets``: at
its log start, so nothing of it is read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from leakproof.core.errors import OffsetError
from leakproof.core.offsets import LogBounds, OffsetRange

BOUND_NOT_REACHED = 3
"""``leakproof run``'s exit code when a bounded run stopped short of its bound."""


def short_of(until: Mapping[int, int], committed: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """The partitions whose committed offset is below their bound: partition -> (committed,
    bound); a partition never committed counts as at 0. Empty: the bound was reached."""
    return {p: (committed.get(p, 0), o) for p, o in sorted(until.items())
            if committed.get(p, 0) < o}


def shortfall(until: Mapping[int, int] | None, committed: Mapping[int, int]) -> str | None:
    """Where each partition short of its bound got to (``p0 at 120 of 400, ...``); None: the
    run is unbounded or reached its bound."""
    short = short_of(until, committed) if until is not None else {}
    return ", ".join(f"p{p} at {at} of {bound}" for p, (at, bound) in short.items()) or None


def bound_offsets(topic: str, bounds: Mapping[int, LogBounds],
                  until_offsets: Mapping[int, int] | None = None,
                  by_time: Mapping[int, int | None] | None = None) -> dict[int, int]:
    """Each partition's bound, from ``--until-offsets`` or the offsets-for-times answer
    ``by_time`` (None where no record is that new); raises OffsetError naming what is
    wrong with an ``--until-offsets``."""
    if by_time is not None:
        found = {p: by_time.get(p) for p in sorted(bounds)}
        return {p: bounds[p].log_end if o is None else o for p, o in found.items()}
    assert until_offsets is not None
    unknown = sorted(set(until_offsets) - set(bounds))
    if unknown:
        raise OffsetError(f"--until-offsets names partitions {unknown}, but {topic} has "
                          f"partitions {sorted(bounds)}")
    unnamed = sorted(set(bounds) - set(until_offsets))
    if unnamed:
        raise OffsetError(f"--until-offsets names no bound for partitions {unnamed} of "
                          f"{topic}: name every partition (its committed offset reads none "
                          f"of it; `leakproof offsets show` prints them)")
    for p, o in sorted(until_offsets.items()):
        if o > bounds[p].log_end:
            raise OffsetError(f"--until-offsets {p}={o} is past the log end of {topic} "
                              f"partition {p} ({bounds[p].log_end}): the run would wait for "
                              f"records that may never come")
    return dict(sorted(until_offsets.items()))


def clamp(ends: Mapping[int, int], until: Mapping[int, int]) -> dict[int, int]:
    """The readable ends, none past its partition's bound."""
    return {p: min(end, until[p]) for p, end in ends.items()}


def reached(ranges: Iterable[OffsetRange], until: Mapping[int, int]) -> bool:
    """Whether these ranges (a plan's, one per assigned partition) end at or past every
    bound: the batch is the bounded run's last."""
    return all(r.until_offset >= until[r.partition] for r in ranges)
