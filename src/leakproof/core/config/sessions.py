"""``sessions:``: when a session closes, how a visitor's events are split into sessions, and
what a late event does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from leakproof.core.config.reader import Section
from leakproof.core.errors import ConfigError

SessionsBy = Literal["id", "gap"]  # gap: a visitor's events split into sessions by the gap
LatePolicy = Literal["count", "fold"]  # fold: also folded in, the summary published again


# ``sessions.idle_after_s`` left out: the inactivity gap (a value no user can write: > 0)
IDLE_AFTER_GAP = -1.0


@dataclass(frozen=True)
class SessionsConfig:
    """When a session closes: partition watermark > last_ts + inactivity_gap + grace."""

    inactivity_gap_s: float = 1800.0
    grace_s: float = 60.0
    # a partition the job has read nothing of for this long, by its own clock, has its
    # watermark moved on by that silence, so its sessions close too (``IDLE_AFTER_GAP``,
    # the default: as long as the inactivity gap); None: never
    idle_after_s: float | None = IDLE_AFTER_GAP
    # sessions by their id, or a visitor's events split by the gap (``gap``, cut at
    # ``max_duration_s`` if set); a late event counted (``count``), or counted and folded
    # into its session (``fold``)
    by: SessionsBy = "id"
    late: LatePolicy = "count"
    max_duration_s: float | None = None
    # closed sessions whose last event is this much older than their partition's watermark
    # (less the close delay) are deleted, with a tombstone; an event that old is late. None:
    # kept for ever
    retention_days: float | None = None

    def __post_init__(self) -> None:
        if self.idle_after_s == IDLE_AFTER_GAP:  # left out: silent as long as the gap
            object.__setattr__(self, "idle_after_s", self.inactivity_gap_s)

    @property
    def close_after_ms(self) -> int:
        return round((self.inactivity_gap_s + self.grace_s) * 1000)

    @property
    def gap_ms(self) -> int:
        return round(self.inactivity_gap_s * 1000)

    @property
    def max_duration_ms(self) -> int | None:
        return None if self.max_duration_s is None else round(self.max_duration_s * 1000)

    @property
    def retention_ms(self) -> int | None:
        return None if self.retention_days is None else round(self.retention_days * 86_400_000)


def read_sessions(data: dict[str, Any]) -> SessionsConfig:
    s = Section(data, "sessions", SessionsConfig)
    return SessionsConfig(
        inactivity_gap_s=s.number("inactivity_gap_s", minimum=0, exclusive=True),
        grace_s=s.number("grace_s", minimum=0),
        idle_after_s=(IDLE_AFTER_GAP if "idle_after_s" not in data
                      else None if data["idle_after_s"] is None
                      else s.number("idle_after_s", minimum=0, exclusive=True)),
        by=(by := s.choice("by", SessionsBy)),
        late=s.choice("late", LatePolicy),
        max_duration_s=_max_duration(s, data.get("max_duration_s"), by),
        retention_days=(None if data.get("retention_days") is None
                        else s.number("retention_days", minimum=0, exclusive=True)),
    )


def _max_duration(s: Section, value: Any, by: str) -> float | None:
    if value is None:
        return None
    if by != "gap":
        raise ConfigError(f"'sessions.max_duration_s' cuts sessions split by an inactivity "
                          f"gap: it needs sessions.by: gap (valid: id, gap; got {by!r}), or "
                          f"null")
    return float(s.number("max_duration_s", minimum=0, exclusive=True))
