"""``input:``: how record values are read (the evolved writer schemas, the future-time
check)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakproof.config.reader import Section
from leakproof.config.security import Registry
from leakproof.errors import ConfigError


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
    return InputConfig(writer_schemas=tuple(texts), max_ahead_s=s.number("max_ahead_s", minimum=0))
