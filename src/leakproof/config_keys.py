"""What every reader of a config section checks, so each message has the same shape: a key
the section does not know, a value outside its choices (both name the dotted key)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from leakproof.errors import ConfigError


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
