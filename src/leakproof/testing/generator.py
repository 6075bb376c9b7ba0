"""Realistic web sessions from a seed (pure): the same seed always gives the same events.

Sessions start spread over an event-time window; each has 1..many events with think time
between them (pageviews, clicks, some purchases, some 4xx/5xx). Events are emitted in event-
time order, except a small fraction delivered late (a network delay), which exercises the
out-of-order and late-event rules, and a smaller one sent twice (a producer retry after a lost
acknowledgement), which exercises the duplicate rule. Session ids carry the seed so runs with
different seeds never share a session.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from leakproof.core.events import WebEvent

DEFAULT_START_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PATHS = ("/", "/search", "/products", "/product/{}", "/cart", "/checkout", "/help", "/account",
         "/blog/{}", "/offers")
AGENTS = ("Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "Mozilla/5.0 (Macintosh) Safari/19",
          "Mozilla/5.0 (iPhone) Mobile Safari/19", "curl/8.9.1", None)
REFERRERS = ("https://www.example.org/", "https://news.example.com/a", None, None, None)


@dataclass(frozen=True)
class GeneratorSpec:
    """One production run: what ``leakproof produce`` was asked for."""

    seed: int
    events: int
    sessions: int
    start_ts: int = DEFAULT_START_TS
    late_fraction: float = 0.01
    duplicate_fraction: float = 0.002
    mean_think_s: float = 20.0
    # event time over which sessions start; None = about one new session every 2 s. A short
    # span puts many sessions open at once, as on a busy site.
    span_s: int | None = None

    def as_arg(self) -> str:
        """The run as ``leakproof verify --spec`` takes it: SEED:EVENTS:SESSIONS:START_TS,
        then :SPAN_S if set (the fractions are the defaults; produce cannot change them)."""
        text = f"{self.seed}:{self.events}:{self.sessions}:{self.start_ts}"
        return text if self.span_s is None else f"{text}:{self.span_s}"


def generate(spec: GeneratorSpec) -> list[WebEvent]:
    """The run's events in emission order."""
    if spec.sessions < 1 or spec.events < spec.sessions:
        raise ValueError(f"need 1 <= sessions <= events, got sessions={spec.sessions} "
                         f"events={spec.events}")
    rng = random.Random(spec.seed)
    # Heavy-tailed session lengths: most sessions short, a few long.
    weights = [rng.paretovariate(1.3) for _ in range(spec.sessions)]
    extra = Counter(rng.choices(range(spec.sessions), weights=weights,
                                k=spec.events - spec.sessions))
    span_ms = spec.span_s * 1000 if spec.span_s else spec.sessions * 2000
    keyed: list[tuple[int, int, WebEvent]] = []  # (emission time, tiebreak, event)
    seen_ids: set[str] = set()
    for i in range(spec.sessions):
        sid = f"s{spec.seed:x}-{rng.getrandbits(48):012x}"
        while sid in seen_ids:
            sid = f"s{spec.seed:x}-{rng.getrandbits(48):012x}"
        seen_ids.add(sid)
        user = f"u{rng.randrange(spec.sessions * 2 + 1):07d}"
        agent = rng.choice(AGENTS)
        ts = spec.start_ts + rng.randrange(span_ms)
        for seq in range(1 + extra[i]):
            if seq:
                ts += 500 + int(min(rng.expovariate(1 / spec.mean_think_s), 900.0) * 1000)
            roll = rng.random()
            event_type = ("pageview" if seq == 0 or roll < 0.6 else
                          "click" if roll < 0.95 else "purchase")
            status_roll = rng.random()
            status = 200 if status_roll < 0.95 else 404 if status_roll < 0.98 else \
                rng.choice((500, 502, 503))
            path = rng.choice(PATHS).format(rng.randrange(1000))
            event = WebEvent(
                session_id=sid, user_id=user, seq=seq, ts=ts, event_type=event_type,
                url=f"https://shop.example.com{path}", status=status,
                bytes=rng.randrange(200, 50_000), referrer=rng.choice(REFERRERS) if seq == 0
                else None, user_agent=agent)
            delay = 0
            if rng.random() < spec.late_fraction:
                delay = rng.randrange(1_000, 3_600_000)  # up to an hour late
            keyed.append((ts + delay, len(keyed), event))
            if rng.random() < spec.duplicate_fraction:
                keyed.append((ts + delay + rng.randrange(0, 30_000), len(keyed), event))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [e for _, _, e in keyed]
