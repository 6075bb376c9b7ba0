"""Expected session rows, computed independently of the fold (pure).

Written from docs/DESIGN.md's definitions, not from sessions.py: all events of a partition are
scanned in order to decide which are late or repeat a (session_id, seq) already applied, then
each session's aggregates are computed from the list of its applied events with plain
min/max/sum.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from leakproof.events import WebEvent

# The columns of family `s` the oracle predicts, as docs/DESIGN.md names them.
COLUMNS = ("user_id", "events", "pageviews", "clicks", "purchases", "errors", "bytes",
           "first_ts", "last_ts", "entry_url", "exit_url", "state", "out_of_order",
           "late_events", "duplicates", "unknown_types")
EVENT_TYPES = {"pageview", "click", "purchase"}


def expected_rows(partitions: Mapping[int, Iterable[WebEvent]],
                  close_after_ms: int) -> dict[str, dict[str, str]]:
    """session_id -> {column: text value} for events given per partition in offset order."""
    rows: dict[str, dict[str, str]] = {}
    for events in partitions.values():
        applied: dict[str, list[WebEvent]] = defaultdict(list)
        newest: dict[str, int] = {}  # highest ts among a session's applied events
        late: dict[str, int] = defaultdict(int)
        dups: dict[str, int] = defaultdict(int)
        applied_keys: set[tuple[str, int]] = set()
        watermark = -1
        for e in events:
            if e.session_id in newest and watermark > newest[e.session_id] + close_after_ms:
                late[e.session_id] += 1
            elif (e.session_id, e.seq) in applied_keys:
                dups[e.session_id] += 1
            else:
                applied_keys.add((e.session_id, e.seq))
                applied[e.session_id].append(e)
                newest[e.session_id] = max(newest.get(e.session_id, e.ts), e.ts)
            watermark = max(watermark, e.ts)
        for sid, evs in applied.items():
            last_ts = max(e.ts for e in evs)
            prefix_max = [max(x.seq for x in evs[:1])]
            for e in evs[1:]:
                prefix_max.append(max(prefix_max[-1], e.seq))
            ooo = sum(1 for i in range(1, len(evs)) if evs[i].seq <= prefix_max[i - 1])
            lowest = min(range(len(evs)), key=lambda i: (evs[i].seq, i))
            highest = min(range(len(evs)), key=lambda i: (-evs[i].seq, i))
            rows[sid] = {
                "user_id": evs[0].user_id,
                "events": str(len(evs)),
                "pageviews": str(sum(e.event_type == "pageview" for e in evs)),
                "clicks": str(sum(e.event_type == "click" for e in evs)),
                "purchases": str(sum(e.event_type == "purchase" for e in evs)),
                "errors": str(sum(e.status >= 500 for e in evs)),
                "bytes": str(sum(e.bytes for e in evs)),
                "first_ts": str(min(e.ts for e in evs)),
                "last_ts": str(last_ts),
                "entry_url": evs[lowest].url,
                "exit_url": evs[highest].url,
                "state": "closed" if watermark > last_ts + close_after_ms else "open",
                "out_of_order": str(ooo),
                "late_events": str(late[sid]),
                "duplicates": str(dups[sid]),
                "unknown_types": str(sum(e.event_type not in EVENT_TYPES for e in evs)),
            }
    return rows


def compare(expected: Mapping[str, Mapping[str, str]],
            actual: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Every difference, one line each; an empty list means an exact match."""
    problems = [f"missing session {sid}" for sid in sorted(set(expected) - set(actual))]
    problems += [f"unexpected session {sid}" for sid in sorted(set(actual) - set(expected))]
    for sid in sorted(set(expected) & set(actual)):
        for col in COLUMNS:
            want, got = expected[sid].get(col), actual[sid].get(col)
            if want != got:
                problems.append(f"{sid}.{col}: expected {want!r}, HBase has {got!r}")
    return problems
