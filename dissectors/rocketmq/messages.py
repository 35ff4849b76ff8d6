"""What counts as a message in RocketMQ: what producers send, and what brokers hand out.

SEND_MESSAGE and SEND_MESSAGE_V2 requests carry one message (its topic and queue in the
header, its body in the frame's body), SEND_BATCH_MESSAGE several; PULL_MESSAGE answers
(and the other frames holding stored messages: QUERY_MESSAGE, VIEW_MESSAGE_BY_ID,
CHECK_TRANSACTION_STATE, CONSUME_MESSAGE_DIRECTLY) hold stored messages with their topic,
queue and offset. Stats count them from their headers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamdump.spec.dissector import MessageRow, MessageRules, Volume, addressed, message_text
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame

SENDS = frozenset({"SEND_MESSAGE", "SEND_MESSAGE_V2"})
BATCH = "SEND_BATCH_MESSAGE"
SENT = SENDS | {BATCH}


class RemotingMessages(MessageRules):
    subject = "topic"
    positions = (("queue_id", "int"), ("queue_offset", "int"))

    def __init__(self, protocol: Protocol) -> None:
        super().__init__(protocol)
        # The properties a line shows after the body: those the one-line view labels too.
        self.key_properties = tuple(s.name for s in protocol.structs["message_properties"] if s.info)

    def carries(self, frame: Frame) -> bool:
        if frame.kind == "response" and frame.command in SENT:
            return False
        return frame.command in SENDS or frame.command == BATCH or "messages" in frame.fields

    def rows(self, frame: Frame) -> Iterator[MessageRow]:
        fields = frame.fields
        tag = frame.incomplete is not None
        if frame.command in SENDS:
            where = f"send queue={fields.get('queue_id', '?')}"
            body = fields.get("uncompressed_body", fields.get("body"))
            size = _size(body)
            yield MessageRow(
                addressed(fields.get("topic")),
                where,
                size,
                self._text(body, fields.get("properties")),
                tag,
                (("queue_id", fields.get("queue_id")),),
                fields,
            )
            return
        if frame.command == BATCH:
            for n, message in enumerate(fields.get("batch_messages") or []):
                where = f"send queue={fields.get('queue_id', '?')} [{n}]"
                body = message.get("message_body")
                size = _size(body)
                yield MessageRow(
                    addressed(fields.get("topic")),
                    where,
                    size,
                    self._text(body, message.get("properties")),
                    tag,
                    (("queue_id", fields.get("queue_id")),),
                    message,
                )
            return
        verb = "pull" if frame.command == "PULL_MESSAGE" else (frame.command or "message").lower()
        for message in fields.get("messages") or []:
            where = f"{verb} queue={message.get('queue_id', '?')} offset={message.get('queue_offset', '?')}"
            body = message.get("uncompressed_body", message.get("message_body"))
            size = _size(body)
            yield MessageRow(
                addressed(message.get("topic")),
                where,
                size,
                self._text(body, message.get("properties")),
                tag,
                (("queue_id", message.get("queue_id")), ("queue_offset", message.get("queue_offset"))),
                message,
            )

    def _text(self, body: Any, properties: Any) -> str:
        props = properties if isinstance(properties, dict) else {}
        named = ((name, props.get(name)) for name in self.key_properties)
        return message_text(body, named, props.get("user_properties") or {}).rstrip()

    def volume(self, frame: Frame) -> Volume | None:
        """Messages and their bodies' bytes (as sent, compressed or not), from the frame's fields."""
        fields = frame.fields
        if frame.kind != "response" and frame.command in SENDS:
            return Volume(addressed(fields.get("topic")), "send", 1, _size(fields.get("body")))
        if frame.kind != "response" and frame.command == BATCH:
            messages = fields.get("batch_messages") or []
            return Volume(
                addressed(fields.get("topic")),
                "send",
                len(messages),
                sum(_size(m.get("message_body")) for m in messages),
            )
        messages = fields.get("messages")
        if not messages:
            return None
        return Volume(
            addressed(messages[0].get("topic")),
            "pull",
            len(messages),
            sum(_size(m.get("message_body")) for m in messages),
        )


def _size(body: Any) -> int:
    return len(body) if body is not None else 0
