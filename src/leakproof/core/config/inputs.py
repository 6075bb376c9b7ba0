"""``input:``: how record values are read (the evolved writer schemas, the future-time
check), and ``input.rekey``: a topic whose keys are not its session keys, re-keyed through an
internal topic before the sessions are folded (``kafka/rekey.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakproof.core.config.reader import TOPIC_RE, Section
from leakproof.core.config.security import Registry
from leakproof.core.errors import ConfigError


@dataclass(frozen=True)
class Rekey:
    """``input.rekey``: the source topic's records are re-keyed by the event field ``field``
    onto the internal topic ``topic`` (None: ``<kafka.topic>.leakproof-rekey``), created with
    ``partitions`` partitions (None: as many as the source topic has)."""

    field: str
    topic: str | None = None
    partitions: int | None = None

    def internal_topic(self, source: str) -> str:
        """The topic the session job reads: the configured one, or the default name."""
        return self.topic or f"{source}{REKEY_SUFFIX}"


REKEY_SUFFIX = ".leakproof-rekey"


@dataclass(frozen=True)
class InputConfig:
    """How record values are read (codec.py has the rules).

    ``writer_schemas`` holds the JSON text of each evolved writer schema (the files are read
    when the config loads, so executors need no copy of them).
    """

    writer_schemas: tuple[str, ...] = ()
    max_ahead_s: float = 86400.0  # 0 = no check
    # ``events.registry``: where writer schemas of ``events.format: confluent`` are fetched
    registry: Registry | None = None
    rekey: Rekey | None = None

    @property
    def max_ahead_ms(self) -> int:
        return round(self.max_ahead_s * 1000)


def read_input(data: dict[str, Any], base: Path) -> InputConfig:
    s = Section(data, "input", InputConfig)
    paths = data.get("writer_schemas") or []
    if not isinstance(paths, list) or not all(isinstance(x, str) and x for x in paths):
        raise ConfigError(f"'input.writer_schemas' must be a list of .avsc file paths, "
                          f"got {paths!r}")
    texts = []
    for i, name in enumerate(paths):
        path = base / name
        try:
            text = path.read_text("utf-8")
            json.loads(text)
        except OSError as exc:
            raise ConfigError(f"'input.writer_schemas[{i}]': cannot read {path}: "
                              f"{exc.strerror}") from exc
        except ValueError as exc:
            raise ConfigError(f"'input.writer_schemas[{i}]': {path} is not JSON: {exc}") from exc
        texts.append(text)
    return InputConfig(writer_schemas=tuple(texts), max_ahead_s=s.number("max_ahead_s", minimum=0),
                       rekey=read_rekey(data["rekey"]) if data.get("rekey") is not None
                       else None)


def read_rekey(data: Any) -> Rekey:
    """``input.rekey``: the field is required; the topic and partition count may be left to
    their defaults (the source's name and count)."""
    if not isinstance(data, dict):
        raise ConfigError(f"'input.rekey' must be a mapping (field, topic, partitions), got "
                          f"{type(data).__name__}")
    s = Section(data, "input.rekey", Rekey)
    partitions = s.get("partitions")
    return Rekey(field=s.text("field"), topic=s.text("topic", pattern=TOPIC_RE, optional=True),
                 partitions=None if partitions is None else
                 s.number("partitions", minimum=1, integer=True))
