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

from streamdump.codecs import amqp
from streamdump.core.frame import Frame
from streamdump.spec.dissector import MessageRow, MessageRules, Volume

SENDS = frozenset({"SEND_MESSAGE", "SEND_MESSAGE_V2"})
BATCH = "SEND_BATCH_MESSAGE"
PREVIEW_CHARS = 40
# Message properties a line shows, in this order, after the body.
KEY_PROPERTIES = ("keys", "tags", "uniq_key")
MAX_USER_PROPERTIES = 3


class RemotingMessages(MessageRules):
    subject = "topic"

    def carries(self, frame: Frame) -> bool:
        if frame.kind == "response" and frame.command in SENDS | {BATCH}:
            return False
        return frame.command in SENDS or frame.command == BATCH or "messages" in frame.fields

    def rows(self, frame: Frame) -> Iterator[MessageRow]:
        fields = frame.fields
        tag = frame.incomplete is not None
        if frame.command in SENDS and frame.kind != "response":
            where = f"send queue={fields.get('queue_id', '?')}"
            body = fields.get("uncompressed_body", fields.get("body"))
            size = len(body) if body is not None else 0
            yield MessageRow(_topic(fields), where, size, _text(body, fields.get("properties")), tag)
            return
        if frame.command == BATCH and frame.kind != "response":
            for n, message in enumerate(fields.get("batch_messages") or []):
                where = f"send queue={fields.get('queue_id', '?')} [{n}]"
                body = message.get("message_body")
                size = len(body) if body is not None else 0
                yield MessageRow(_topic(fields), where, size, _text(body, message.get("properties")), tag)
            return
        verb = "pull" if frame.command == "PULL_MESSAGE" else (frame.command or "message").lower()
        for message in fields.get("messages") or []:
            where = f"{verb} queue={message.get('queue_id', '?')} offset={message.get('queue_offset', '?')}"
            body = message.get("uncompressed_body", message.get("message_body"))
            size = len(body) if body is not None else 0
            yield MessageRow(_topic(message), where, size, _text(body, message.get("properties")), tag)

    def volume(self, frame: Frame) -> Volume | None:
        fields = frame.fields
        if frame.command in SENDS and frame.kind != "response":
            body = fields.get("body")
            return Volume(_topic(fields), "send", 1, len(body) if body is not None else 0)
        if frame.command == BATCH and frame.kind != "response":
            messages = fields.get("batch_messages") or []
            return Volume(
                _topic(fields), "send", len(messages), sum(m.get("total_size", 0) for m in messages)
            )
        messages = fields.get("messages")
        if not messages:
            return None
        return Volume(
            _topic(messages[0]), "pull", len(messages), sum(m.get("total_size", 0) for m in messages)
        )


def _topic(values: dict[str, Any]) -> str:
    topic = values.get("topic")
    return topic if isinstance(topic, str) and topic else "?"


def _text(body: Any, properties: Any) -> str:
    parts = [amqp.preview(bytes(body), PREVIEW_CHARS) if body is not None else "(no body)"]
    if isinstance(properties, dict):
        for name in KEY_PROPERTIES:
            if properties.get(name) is not None:
                parts.append(f"{name}={amqp.preview(properties[name])}")
        user = properties.get("user_properties") or {}
        for key in list(user)[:MAX_USER_PROPERTIES]:
            parts.append(f"{key}={amqp.preview(user[key])}")
        if len(user) > MAX_USER_PROPERTIES:
            parts.append(f"(+{len(user) - MAX_USER_PROPERTIES} properties)")
    return "  ".join(parts).rstrip()
