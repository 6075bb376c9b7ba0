"""The section reader every part of the config is read with, the model's included: a
section's keys and values are checked here, so each message has the same shape (it names the
dotted key, and for a choice the valid values). A key left out takes the default written on
the section's dataclass (the one place defaults live)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any, get_args

from leakproof.core.errors import ConfigError

TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def no_unknown_keys(section: Mapping[str, Any], prefix: str, known: set[str]) -> None:
    """Refuse a key ``section`` (at ``prefix``; "" for the top level) does not know."""
    unknown = sorted(set(section) - known)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown key '{where}{unknown[0]}'; valid keys here: "
                          f"{', '.join(sorted(known))}")


def one_of(value: Any, key: str, choices: Any) -> Any:
    """``value`` if the ``Literal`` type ``choices`` holds it; else an error naming ``key``."""
    if value not in get_args(choices):
        raise ConfigError(f"'{key}' must be one of {', '.join(get_args(choices))}, got "
                          f"{value!r}")
    return value


def mapping(value: Any, key: str) -> dict[str, Any]:
    """The YAML mapping at ``key`` ("" for the top level), or an error naming ``key``."""
    if value is None and key:
        raise ConfigError(f"'{key}' is required (a mapping)")
    if not isinstance(value, dict):
        raise ConfigError(f"'{key or '<top level>'}' must be a mapping, got {type(value).__name__}")
    return value


class Section:
    """One YAML mapping read into the dataclass ``cls``: unknown keys are refused, and a key
    left out takes the default written on ``cls``'s field (the one place defaults live)."""

    def __init__(self, data: Mapping[str, Any], prefix: str, cls: type) -> None:
        # ``kerberos`` fields are filled from security.kerberos, never from their own key
        no_unknown_keys(data, prefix, {f.name for f in fields(cls)} - {"kerberos"})
        self.data = data
        self.prefix = prefix
        self._defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def get(self, name: str) -> Any:
        return self.data.get(name, self._defaults.get(name))

    def text(self, name: str, *, pattern: re.Pattern[str] | None = None,
            optional: bool = False) -> Any:
        value = self.get(name)
        if value is None:
            if optional:
                return None
            raise ConfigError(f"'{self.key(name)}' is required")
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"'{self.key(name)}' must be a non-empty string, got {value!r}")
        if pattern is not None and not pattern.match(value):
            raise ConfigError(f"'{self.key(name)}' = {value!r} has characters outside "
                              f"{pattern.pattern}")
        return value

    def choice(self, name: str, choices: Any, aliases: tuple[str, ...] = ()) -> Any:
        """A value among the ``Literal`` type ``choices`` (the dataclass field's own type,
        so the valid values are written once), or one of ``aliases``."""
        valid = (*get_args(choices), *aliases)
        value = self.get(name)
        if value not in valid:
            raise ConfigError(f"'{self.key(name)}' = {value!r} is not valid; use one of: "
                              f"{' | '.join(valid)}")
        return value

    def number(self, name: str, *, minimum: float, integer: bool = False,
               exclusive: bool = False) -> Any:
        value = self.get(name)
        kind = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ConfigError(f"'{self.key(name)}' must be "
                              f"{'an integer' if integer else 'a number'}, got {value!r}")
        if value < minimum or (exclusive and value == minimum):
            op = ">" if exclusive else ">="
            raise ConfigError(f"'{self.key(name)}' must be {op} {minimum}, got {value!r}")
        return value

    def flag(self, name: str) -> bool:
        value = self.get(name)
        if not isinstance(value, bool):
            raise ConfigError(f"'{self.key(name)}' must be true or false, got {value!r}")
        return value

    def section(self, name: str) -> dict[str, Any]:
        return mapping(self.data.get(name, {}), self.key(name))
