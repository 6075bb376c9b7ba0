"""Where a registry-framed record says which writer schema it was written with.

A *frame* is the bytes that name the writer schema: a protocol byte, then an id whose layout
the protocol fixes. It is either the start of the value (then the Avro record follows it) or
the whole value of a record header (then the value is the bare Avro record). The frame's bytes
are the cache key of the writer schema: the same bytes always name the same schema.

Layouts, all big-endian, by the registry's API (``events.registry.api``):

==========  =====  ============================================  ===========================
API         byte   id after it                                    looked up as
==========  =====  ============================================  ===========================
confluent   0      4-byte schema id                               /schemas/ids/{id}
confluent   1      16-byte schema GUID                            /schemas/guids/{guid}
cloudera    0      4-byte schema version id (Confluent protocol)  schemas/versionsById/{id}
cloudera    1      8-byte schema metadata id + 4-byte version     schemasById + versions/{v}
cloudera    2      8-byte schema version id                       schemas/versionsById/{id}
cloudera    3      4-byte schema version id                       schemas/versionsById/{id}
==========  =====  ============================================  ===========================

The header names: ``__value_schema_id`` (Confluent's clients) and ``value.schema.version.id``
(Cloudera's serializers); a header, when present, wins over the value's first byte.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Literal

Api = Literal["confluent", "cloudera"]

FRAME_LENGTHS: dict[str, dict[int, int]] = {
    "confluent": {0: 5, 1: 17},
    "cloudera": {0: 5, 1: 13, 2: 9, 3: 5},
}
HEADERS = ("__value_schema_id", "value.schema.version.id")


class FrameError(ValueError):
    """The record names no writer schema this API knows (kind ``unknown_magic``)."""


def confluent_frame(schema_id: int) -> bytes:
    """Confluent's frame of registry id ``schema_id``: magic byte 0, the 4-byte id."""
    return b"\x00" + schema_id.to_bytes(4, "big")


def frame_of(api: str, value: bytes, headers: Sequence[tuple[str, bytes | None]] = ()
             ) -> tuple[bytes, int]:
    """The frame and where the Avro record starts in ``value``."""
    for name, header in headers:
        if name in HEADERS:
            if header is None or not header or \
                    FRAME_LENGTHS[api].get(header[0]) != len(header):
                raise FrameError(f"header {name} is not a {api} schema reference: "
                                 f"{_shown(header)}")
            return bytes(header), 0
    lengths = FRAME_LENGTHS[api]
    if not value:
        raise FrameError(f"not the {api} wire format: an empty value")
    length = lengths.get(value[0])
    if length is None:
        raise FrameError(f"not the {api} wire format: first byte "
                         f"{value[0]:#04x}, expected one of "
                         f"{', '.join(f'{m:#04x}' for m in lengths)}")
    if len(value) < length:
        raise FrameError(f"not the {api} wire format: protocol {value[0]} needs a "
                         f"{length}-byte header, the value has {len(value)} bytes")
    return value[:length], length


def describe(api: str, frame: bytes) -> str:
    """The frame as a person names it: 'schema id 7', 'schema version id 12', ..."""
    magic, ident = frame[0], frame[1:]
    if api == "confluent":
        if magic == 1:
            return f"schema GUID {uuid.UUID(bytes=ident)}"
        return f"schema id {int.from_bytes(ident, 'big')}"
    if magic == 1:
        return (f"schema metadata id {int.from_bytes(ident[:8], 'big')} version "
                f"{int.from_bytes(ident[8:], 'big')}")
    return f"schema version id {int.from_bytes(ident, 'big')}"


def _shown(header: bytes | None) -> str:
    return "null" if header is None else (header[:20].hex() or "empty")
