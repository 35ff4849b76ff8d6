"""What counts as a message in Liftbridge: what a client publishes to a stream.

A Publish envelope holds one Message (stream, partition, key, value, headers); Acks and
the servers' internal messages are not messages. Stats count messages and value bytes per
stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamdump.spec.dissector import MessageRow, MessageRules, Volume, addressed, message_text
from streamdump.wire.frame import Frame


class StreamMessages(MessageRules):
    subject = "stream"
    positions = (("partition", "int"), ("offset", "int"))

    def carries(self, frame: Frame) -> bool:
        return frame.command == "Publish"

    def rows(self, frame: Frame) -> Iterator[MessageRow]:
        fields = frame.fields
        value = fields.get("value")
        where = "publish"
        if fields.get("partition") is not None:
            where += f" partition={fields['partition']}"
        named = (
            ("key", _bytes(fields.get("message_key"))),
            ("id", fields.get("correlation_id")),
            ("ack_inbox", fields.get("ack_inbox")),
        )
        headers = {k: _bytes(v) for k, v in (fields.get("headers") or {}).items()}
        yield MessageRow(
            addressed(fields.get("stream")),
            where,
            len(value) if value is not None else 0,
            message_text(_bytes(value), named, headers, "headers").rstrip(),
            frame.incomplete is not None,
            (("partition", fields.get("partition")), ("offset", fields.get("offset"))),
            fields,
        )

    def volume(self, frame: Frame) -> Volume | None:
        if frame.command != "Publish":
            return None
        value = frame.fields.get("value")
        return Volume(
            addressed(frame.fields.get("stream")), "publish", 1, len(value) if value is not None else 0
        )


def _bytes(value: Any) -> Any:
    """Bytes as text where they are UTF-8 (a key, a header), else as they are."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value)
    return value
