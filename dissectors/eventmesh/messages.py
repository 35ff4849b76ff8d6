"""What counts as a message in EventMesh: what producers publish and what servers push.

Producers publish with ASYNC_MESSAGE_TO_SERVER, BROADCAST_MESSAGE_TO_SERVER and
REQUEST_TO_SERVER, and a consumer answers a request with RESPONSE_TO_SERVER; the server
pushes with ASYNC_MESSAGE_TO_CLIENT, BROADCAST_MESSAGE_TO_CLIENT, REQUEST_TO_CLIENT and
brings a reply back with RESPONSE_TO_CLIENT. Acknowledgements echo a message but are not
one. Stats count messages per topic from the package's topic (read on every decode).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamdump.dissectors.eventmesh.framing import PREFIX

from streamdump.codecs import lenient_json
from streamdump.spec.dissector import MessageRow, MessageRules, Volume, addressed, message_text
from streamdump.wire.frame import Frame

# (command, kind) -> the verb a line says.
CARRIERS = {
    ("AsyncMessage", "request"): "publish",
    ("Broadcast", "request"): "broadcast",
    ("SyncRequest", "request"): "request",
    ("SyncReply", "command"): "reply",
    ("AsyncPush", "request"): "push",
    ("BroadcastPush", "request"): "push broadcast",
    ("SyncPush", "request"): "push request",
    ("SyncRequest", "response"): "push reply",
}


class PackageMessages(MessageRules):
    subject = "topic"
    positions = (("seq", "string"),)

    def carries(self, frame: Frame) -> bool:
        return (frame.command, frame.kind) in CARRIERS

    def rows(self, frame: Frame) -> Iterator[MessageRow]:
        fields = frame.fields
        verb = CARRIERS[frame.command, frame.kind]  # type: ignore[index]
        content = next(
            (fields[name] for name in ("content", "content_text", "content_bytes") if name in fields), None
        )
        named = (("id", fields.get("event_id")), ("type", fields.get("content_type")))
        size = _size(content) if content is not None else None
        yield MessageRow(
            addressed(fields.get("topic")),
            f"{verb} seq={fields.get('seq', '?')}",
            size,
            message_text(content, named, {}).rstrip(),
            frame.incomplete is not None,
            (("seq", fields.get("seq")),),
            fields,
        )

    def volume(self, frame: Frame) -> Volume | None:
        verb = CARRIERS.get((frame.command, frame.kind))  # type: ignore[arg-type]
        if verb is None:
            return None
        header = frame.fields.get("header_length")
        body = len(frame.data) - PREFIX - header if isinstance(header, int) else 0
        direction = "push" if verb.startswith("push") else "publish"
        return Volume(addressed(frame.fields.get("topic")), direction, 1, max(body, 0))


def _size(content: Any) -> int:
    if isinstance(content, bytes | bytearray | memoryview):
        return len(content)
    if isinstance(content, str):
        return len(content.encode("utf-8"))
    return len(lenient_json.dumps(content).encode("utf-8"))
