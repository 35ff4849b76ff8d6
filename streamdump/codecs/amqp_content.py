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

from collections.abc import Iterator
from typing import Any

from streamdump.codecs import lenient_json
from streamdump.codecs.amqp import Message, preview

# Sections that are maps of values the application filled: delivery and message annotations,
# application properties, footer.
VALUE_MAPS = frozenset({0x71, 0x72, 0x74, 0x78})
PROPERTIES = 0x73
DATA = 0x75


def content_notes(message: Message) -> Iterator[str]:
    """The notes on one message, in section order (text after "AMQP 1.0 message: ")."""
    content_type: Any = None
    bodies: list[bytes] = []
    for section in message.sections:
        value = section.value
        if section.code in VALUE_MAPS and isinstance(value, dict) and None in value.values():
            for key, item in value.items():
                if item is None:
                    yield (
                        f"{section.name} '{key_text(key)}' is null: no value crossed the wire "
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
