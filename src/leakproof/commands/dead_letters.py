"""``leakproof deadletters list`` and ``show``: the records the job set aside, as an operator
reads them -- which, why, when, and whether a redrive took them back (``redrive`` is
``commands/redrive.py``)."""

from __future__ import annotations

import json
import string
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from leakproof.core.config import Config, session_stage
from leakproof.core.dead_letter import DeadLetter, Selection, source
from leakproof.core.errors import LeakproofError, TableMissing
from leakproof.core.rekey import source_header

PRINTABLE = frozenset(string.printable.encode()) - frozenset(b"\t\n\r\x0b\x0c")


def current_source(cfg: Config) -> str:
    """The name the dead letters of the topic the job reads now go under
    (``dead_letter.source``): tagged when the topic was recreated under its name, as its
    fences are (``sessions.incarnation_of``, from the ids the state table keeps). With
    ``input.rekey`` the job reads the internal topic: its dead letters go under that name,
    and each says which source record it copies (``describe``)."""
    from leakproof.core.sessions import incarnation_of
    from leakproof.hbase.state_store import HBaseLeaseStore

    cfg = session_stage(cfg)
    leases = HBaseLeaseStore(cfg.hbase, cfg.kafka.topic, cfg.kafka.group_id)
    try:
        tag = incarnation_of(leases.topic_id(), leases.first_topic_id(None))
    except TableMissing:  # the job never ran: the topic's first incarnation
        tag = ""
    finally:
        leases.close()
    return source(cfg.kafka.topic, tag)


def letters(cfg: Config, selection: Selection) -> Iterator[DeadLetter]:
    """The dead letters of ``cfg``'s topic (as it is now) the selection takes, in row-key
    order."""
    from leakproof.hbase.dead_letters import DeadLetterRows

    name = current_source(cfg)
    rows = DeadLetterRows(cfg.hbase)
    try:
        yield from rows.letters(name, selection)
    finally:
        rows.close()


def one(cfg: Config, coordinates: str) -> DeadLetter:
    """The dead letter at ``PARTITION:OFFSET`` of ``cfg``'s topic."""
    from leakproof.hbase.dead_letters import DeadLetterRows

    partition, _, offset = coordinates.partition(":")
    if not partition.isdigit() or not offset.isdigit():
        raise LeakproofError(f"{coordinates!r} is not PARTITION:OFFSET (two whole numbers)")
    name = current_source(cfg)
    rows = DeadLetterRows(cfg.hbase)
    try:
        found = rows.get(name, int(partition), int(offset))
    finally:
        rows.close()
    if found is None:
        raise LeakproofError(f"no dead letter {name}:{partition}:{offset} in "
                             f"{cfg.hbase.full_name(cfg.hbase.dead_letter_table)}")
    return found


def print_list(cfg: Config, selection: Selection, limit: int, as_json_lines: bool,
               say: Callable[[str], None] = print) -> int:
    """``list``: a line each (at most ``limit``; 0: all), then the counts of every one."""
    kinds: Counter[str] = Counter()
    states: Counter[str] = Counter()
    if not as_json_lines:
        say(HEADER)
    for letter in letters(cfg, selection):
        if not limit or kinds.total() < limit:
            say(json.dumps(as_json(letter), sort_keys=True) if as_json_lines else line(letter))
        kinds[letter.kind] += 1
        states[letter.state] += 1
    say(json.dumps({"dead_letters": kinds.total(), "kinds": kinds, "states": states},
                   sort_keys=True) if as_json_lines else summary(kinds, states))
    return 0


def print_one(cfg: Config, coordinates: str, as_json_object: bool,
              say: Callable[[str], None] = print) -> int:
    """``show``: every cell of one dead letter (JSON: the bytes as hex)."""
    letter = one(cfg, coordinates)
    say(json.dumps(as_json(letter, raw=True), sort_keys=True) if as_json_object else
        "\n".join(describe(letter)))
    return 0


def when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def redrive_state(letter: DeadLetter) -> str:
    mark = letter.mark
    if mark is None:
        return "waiting"
    if mark.state == "sent":
        topic = letter.topic.partition("~")[0]  # the copy is in the topic, whatever its tag
        return f"sent as {topic}:{letter.partition}:{mark.copy_offset} at {when(mark.at_ms)}"
    return f"pending since {when(mark.at_ms)} (transactional id {mark.txn})"


HEADER = f"{'partition:offset':>22}  {'kind':<18} {'record time (UTC)':<29} {'state':<8} error"


def line(letter: DeadLetter) -> str:
    """One dead letter on one line (``list``)."""
    error = letter.error if len(letter.error) <= 80 else letter.error[:77] + "..."
    return (f"{f'{letter.partition}:{letter.offset}':>22}  {letter.kind:<18} "
            f"{when(letter.time_ms):<29} {letter.state:<8} {error}")


def as_json(letter: DeadLetter, raw: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "topic": letter.topic, "partition": letter.partition, "offset": letter.offset,
        "kind": letter.kind, "error": letter.error, "error_type": letter.error_type,
        "timestamp_ms": letter.timestamp_ms, "batch_ms": letter.batch_ms,
        "state": letter.state, "redriven_from": letter.redriven_from}
    if letter.mark is not None:
        out["redrive"] = letter.mark.encode().decode()
    copied = source_header(letter.headers)
    if copied is not None:  # input.rekey: the source record this copy is of
        out["source"] = f"{copied[0]}:{copied[1]}:{copied[2]}"
    if raw:
        out.update(key=None if letter.key is None else letter.key.hex(),
                   value=None if letter.value is None else letter.value.hex(),
                   headers=[[n, None if v is None else v.hex()] for n, v in letter.headers])
    return out


def summary(kinds: Counter[str], states: Counter[str]) -> str:
    return (f"{kinds.total()} dead letters: "
            + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            + ("; " + ", ".join(f"{s} {n}" for s, n in sorted(states.items())) if states else ""))


def describe(letter: DeadLetter) -> list[str]:
    """Everything a row holds, the record's bytes as hex and printable text (``show``)."""
    out = [f"dead letter {letter.topic}:{letter.partition}:{letter.offset}",
           f"  kind          {letter.kind} ({letter.error_type})",
           f"  error         {letter.error}",
           "  record time   " + ("unknown (a row written before record times were kept)"
                                 if letter.timestamp_ms is None else
                                 f"{when(letter.timestamp_ms)} ({letter.timestamp_ms})"),
           f"  batch         {when(letter.batch_ms)} ({letter.batch_ms})",
           f"  redrive       {redrive_state(letter)}"]
    if letter.redriven_from:
        out.append(f"  redriven from {letter.redriven_from} (a copy of that dead letter, "
                   f"still bad)")
    copied = source_header(letter.headers)
    if copied is not None:
        out.append(f"  source record {copied[0]}:{copied[1]}:{copied[2]} (re-keyed onto "
                   f"{letter.topic} by input.rekey)")
    out += _bytes("key", letter.key) + _bytes("value", letter.value)
    if not letter.headers:
        out.append("  headers       none")
    for name, value in letter.headers:
        out.append(f"  header        {name}: "
                   + ("null" if value is None else f"{value.hex()}  {_printable(value)!r}"))
    return out


def _bytes(name: str, data: bytes | None) -> list[str]:
    if data is None:
        return [f"  {name:<13} null"]
    out = [f"  {name:<13} {len(data)} bytes"]
    for at in range(0, len(data), 16):
        piece = data[at:at + 16]
        out.append(f"    {at:06x}  {piece.hex(' '):<47}  |{_printable(piece)}|")
    return out


def _printable(data: bytes) -> str:
    return "".join(chr(b) if b in PRINTABLE else "." for b in data)
