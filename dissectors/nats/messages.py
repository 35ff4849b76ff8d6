"""What counts as a message in NATS: what clients publish and what the server delivers.

PUB and HPUB publish, MSG and HMSG deliver; a delivery's subscription (its SUB's subject
pattern and queue group) comes from the conversation tracker. Stats count messages and
payload bytes per subject, and count replies under the subject of the request they answer
(their own subject is a one-off inbox), with the request's latency: "reply" for what the
server delivers to the requester, "reply sent" for what a responder sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamdump.spec.dissector import MessageRow, MessageRules, Volume, addressed, message_text
from streamdump.wire.frame import Frame

# command -> the verb a line says.
CARRIERS = {
    "Publish": "publish",
    "HeadersPublish": "publish",
    "Message": "deliver",
    "HeadersMessage": "deliver",
}


class SubjectMessages(MessageRules):
    subject = "subject"
    positions = (("sid", "string"), ("js_stream_seq", "int"))

    def carries(self, frame: Frame) -> bool:
        return frame.command in CARRIERS

    def rows(self, frame: Frame) -> Iterator[MessageRow]:
        fields = frame.fields
        links = frame.links or {}
        verb = CARRIERS[frame.command]  # type: ignore[index]
        where = f"{verb} sid={fields['sid']}" if "sid" in fields else verb
        if links.get("subscribed") is not None and links["subscribed"] != fields.get("subject"):
            where += f" ({links['subscribed']})"
        content = _content(fields)
        named = (
            ("reply", fields.get("reply_to")),
            ("queue", links.get("queue_group")),
            ("status", fields.get("status")),
            ("stream", fields.get("js_stream")),
            ("seq", fields.get("js_stream_seq")),
        )
        headers = fields.get("message_headers") or {}
        data = fields.get("data")
        size = len(data) if isinstance(data, bytes | bytearray | memoryview) else None
        yield MessageRow(
            addressed(fields.get("subject")),
            where,
            size,
            message_text(content, named, headers, "headers").rstrip(),
            frame.incomplete is not None,
            (("sid", fields.get("sid")), ("js_stream_seq", fields.get("js_stream_seq"))),
            fields,
        )

    def volume(self, frame: Frame) -> Volume | None:
        verb = CARRIERS.get(frame.command or "")
        if verb is None:
            return None
        links = frame.links or {}
        size = frame.fields.get("payload_size")
        size = size if isinstance(size, int) else 0
        asked = links.get("request_subject")
        if asked is not None:
            # A reply the client sends (a responder's, a JetStream consumer's ack) times the
            # client's own work; one the server delivers times the whole request.
            direction = "reply sent" if frame.from_client else "reply"
            latency = links.get("response_time")
            timed = latency if isinstance(latency, float) else None
            return Volume(addressed(asked), direction, 1, size, timed)
        return Volume(addressed(frame.fields.get("subject")), verb, 1, size)


def _content(fields: dict[str, Any]) -> Any:
    for name in ("data_json", "data_text"):
        if name in fields:
            return fields[name]
    data = fields.get("data")
    return bytes(data) if isinstance(data, bytes | bytearray | memoryview) and data else None
