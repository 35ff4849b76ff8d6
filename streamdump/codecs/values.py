"""Decoded values as JSON and as one line of text, whatever decoded them.

Frames hold plain Python values (bytes, text, numbers, maps, lists) and objects a codec or a
hook made (an AMQP message, a described value, an entry cut by a gap). Those objects give
their own JSON form through an `as_json()` method, so nothing here knows any codec: bytes
become lowercase hex, NaN and the infinities the strings JavaScript's JSON.parse reads, keys
that are not text their compact JSON, and anything else its text. `preview` makes the short
one-line rendering `--messages`, trees and notes show.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any


def json_float(value: float) -> Any:
    """A float as JSON can hold it: NaN and the infinities as text."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def plain_float(value: float) -> bool:
    """Whether Python writes this float without an exponent (0.0 and 1e-4 <= |x| < 1e16), as
    JSON writers other than json.dumps write it too (orjson writes 1e-05 as 0.00001)."""
    return value == 0.0 or 1e-4 <= abs(value) < 1e16


def to_json(value: Any) -> Any:
    """A JSON-safe form of a decoded value."""
    kind = type(value)
    if kind is bytes:
        return value.hex()
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else json_key(k): to_json(v) for k, v in value.items()}
    if kind is list:
        return [to_json(v) for v in value]
    if kind is float:
        return json_float(value)
    # Subclasses (an AMQP symbol is text, its timestamp a number) and objects with a form of their own.
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {json_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    as_json = getattr(value, "as_json", None)
    if as_json is not None:
        return as_json()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def json_key(key: Any) -> str:
    """A map key as a JSON object's key: text as it is, anything else its compact JSON."""
    if isinstance(key, str):
        return str(key)
    converted = to_json(key)
    if isinstance(converted, str):
        return converted
    return json.dumps(converted, separators=(",", ":"), ensure_ascii=False)


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else "." for c in text)


# The bytes str.isprintable() accepts in ASCII: what a body's preview shows as it is.
_PRINTABLE_ASCII = bytes(range(0x20, 0x7F))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def preview(value: Any, limit: int = 40) -> str:
    """A one-line rendering of at most limit characters, cut with '…'.

    Bytes show as UTF-8 text with '.' for what is not printable; strings show their text (control
    characters as '.'); other values their compact JSON (to_json), uuids and decimals unquoted.
    """
    if type(value) is bytes and limit > 0:  # a data body, the commonest: as below, in fewer steps
        head = value[: limit + 1]
        if not head.translate(None, _PRINTABLE_ASCII):
            # Printable ASCII, a byte a character: these limit + 1 say all the line shows.
            return head[: limit - 1].decode("ascii") + "…" if len(head) > limit else head.decode("ascii")
    if isinstance(value, bytes | bytearray | memoryview):
        # Enough bytes for limit + 1 characters, so a longer value always gets its '…'.
        raw = bytes(value[: limit * 4 + 4])
        return _cut(_printable(raw.decode("utf-8", errors="replace").replace("\ufffd", ".")), limit)
    if isinstance(value, str):
        return _cut(_printable(value[: limit + 1]), limit)
    converted = to_json(value)
    if isinstance(converted, str):  # uuid, decimal, NaN: their text, unquoted like strings
        return _cut(_printable(converted), limit)
    return _cut(_printable(json.dumps(converted, ensure_ascii=False, separators=(",", ":"))), limit)
