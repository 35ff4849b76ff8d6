"""What a decoded AMQP 1.0 message's content says about the client that wrote it.

The broker stores any well-formed message, so none of this is malformed; each is a note that
points at a client bug:

- a null value in application properties, annotations or the footer: the application set a
  value the client could not encode (a number, a date), and the client wrote null, so the
  value never crossed the wire and a consumer may fail on it;
- a content_type the body does not match: JSON that does not parse, text that is not UTF-8.

Sections out of order or repeated are the codec's own notes (amqp._check_order). The plugin's
Lua twin (show_record in the RabbitMQ Streams package's osiris.lua) words them the same.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from streamdump.codecs import lenient_json
from streamdump.codecs.amqp import (
    SECTION_CODES,
    MalformedError,
    Message,
    decode_message,
    decode_value,
)
from streamdump.codecs.values import preview

# Sections that are maps of values the application filled: delivery and message annotations,
# application properties, footer.
VALUE_MAPS = frozenset(
    SECTION_CODES[name]
    for name in ("delivery_annotations", "message_annotations", "application_properties", "footer")
)
PROPERTIES = SECTION_CODES["properties"]
DATA = SECTION_CODES["data"]
_U32 = struct.Struct(">I")
# A section value's constructor -> how wide its size field is (compounds, binary, strings).
_SIZED = {0xC0: 1, 0xC1: 1, 0xA0: 1, 0xA1: 1, 0xA3: 1, 0xD0: 4, 0xD1: 4, 0xB0: 4, 0xB1: 4, 0xB3: 4}


def content_notes(message: Message) -> Iterator[str]:
    """The notes on one message, in section order (text after "AMQP 1.0 message: ")."""
    content_type: Any = None
    bodies: list[bytes] = []
    for section in message.sections:
        value = section.value
        if section.code in VALUE_MAPS and isinstance(value, dict) and None in value.values():
            for key, item in value.items():
                if item is None:
                    shown = section.name.replace("_", " ")  # application properties, as people say it
                    yield (
                        f"{shown} '{key_text(key)}' is null: no value crossed the wire "
                        "(a client that cannot encode a value's type may write null)"
                    )
        elif section.code == PROPERTIES and isinstance(value, dict):
            content_type = value.get("content_type")
        elif section.code == DATA and isinstance(value, bytes | bytearray | memoryview):
            bodies.append(bytes(value))
    if isinstance(content_type, str) and len(bodies) == 1:
        said = body_mismatch(content_type, bodies[0])
        if said:
            yield said


def key_text(key: Any) -> str:
    """A map key as the note names it: text as it is, anything else as its preview."""
    return key if isinstance(key, str) else preview(key)


def body_mismatch(content_type: str, body: bytes) -> str | None:
    """Why the body is not what its content_type says, or None."""
    kind = content_type.split(";", 1)[0].strip().lower()
    subtype = kind.partition("/")[2]
    is_json = subtype == "json" or subtype.endswith("+json")
    if not is_json and not kind.startswith("text/"):
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        what = "JSON" if is_json else "text"
        return f"content_type '{content_type}' says {what}, but the body is not UTF-8"
    if is_json:
        try:
            lenient_json.loads(text)
        except lenient_json.JsonError:
            return f"content_type '{content_type}' says JSON, but the body does not parse as JSON"
    return None


def message_id(data: bytes | memoryview) -> object:
    """A message's message_id (None when it has none), reading only as far as the properties
    section: the sections before it are stepped over by their sizes. For the conversation
    tracker, which looks at every published message and must not decode each whole."""
    mv = memoryview(data)
    n = len(mv)
    at = 0
    try:
        while n - at >= 4 and mv[at] == 0x00 and mv[at + 1] == 0x53:
            code, constructor = mv[at + 2], mv[at + 3]
            if code == PROPERTIES:
                if constructor == 0x45:
                    return None  # an empty list: no fields at all
                width = _SIZED.get(constructor)
                if width is None or constructor not in (0xC0, 0xD0):
                    break
                first = at + 4 + 2 * width  # after the size and the count
                if first >= n:
                    return None
                kind = mv[first]
                if kind == 0xA1 and first + 2 + mv[first + 1] <= n:  # the commonest: a short string
                    return str(mv[first + 2 : first + 2 + mv[first + 1]], "utf-8")
                return None if kind == 0x40 else decode_value(mv[first:])[0]
            if code > PROPERTIES:
                return None  # past where properties go: the message has none
            width = _SIZED.get(constructor)
            if width is None:
                break
            size = mv[at + 4] if width == 1 else _U32.unpack_from(mv, at + 4)[0]
            at += 4 + width + size
    except (MalformedError, IndexError, struct.error, UnicodeDecodeError):
        return None  # as the general decoder finds such a message: malformed, no id read
    # Another shape (symbol descriptors, sections out of order): the general decoder.
    for section in decode_message(data).sections:
        if section.code == PROPERTIES and isinstance(section.value, dict):
            return section.value.get("message_id")
    return None
