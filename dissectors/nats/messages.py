"""What counts as a message in NATS: what clients publish and what the server delivers.

PUB and HPUB publish, MSG and HMSG deliver; a delivery's subscription (its SUB's subject
pattern and queue group) comes from the conversation tracker. Stats count messages and
payload bytes per subject, and count replies under the subject of the request they answer
(their own subject is a one-off inbox), with the request's latency: "reply" for what the
server delivers to the requester, "reply sent" for what a responder sends. One-off subjects
count in one row per pattern: inboxes as `_INBOX.*`, acknowledgements as
`$JS.ACK.<stream>.<consumer>.*`. Statuses, JetStream errors and service errors count as
response codes where they land.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamdump.spec.dissector import MessageRow, MessageRules, Volume, addressed, message_text
from streamdump.wire.frame import Frame

INBOX = "_INBOX."
ACK = "$JS.ACK."
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
            ("op", fields.get("kv_operation") if fields.get("kv_operation") != "PUT" else None),
            ("ack", fields.get("js_ack")),
            ("error", fields.get("js_error") or fields.get("service_error")),
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

    def codes(self, frame: Frame) -> Iterator[tuple[str, str]]:
        """A status (503, 408, 100...), a JetStream error and a service error, each where it lands
        (what the server delivers)."""
        if frame.from_client is not False:
            return
        fields = frame.fields
        status = fields.get("status")
        if isinstance(status, int):
            text = fields.get("status_text")
            yield "status", f"{status} {text}" if isinstance(text, str) else str(status)
        code = fields.get("js_error_code")
        if isinstance(code, int):
            detail = fields.get("js_err_code")
            yield "JetStream error", f"{code}/{detail}" if isinstance(detail, int) else str(code)
        service = fields.get("service_error_code")
        if isinstance(service, int) or "service_error" in fields:
            yield "service error", str(service) if isinstance(service, int) else "(no code)"

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
            return Volume(addressed(grouped(asked)), direction, 1, size, timed)
        return Volume(addressed(grouped(frame.fields.get("subject"))), verb, 1, size)


def grouped(subject: Any) -> Any:
    """A one-off subject as the pattern of its kind, so that stats count them in one row: an
    inbox (_INBOX.*), an acknowledgement ($JS.ACK.<stream>.<consumer>.*)."""
    if not isinstance(subject, str):
        return subject
    if subject.startswith(INBOX):
        return INBOX + "*"
    if subject.startswith(ACK):
        tokens = subject.split(".")
        if len(tokens) >= 11:  # with a domain and an account hash before the stream
            tokens = tokens[:2] + tokens[4:]
        if len(tokens) >= 9:
            return ".".join(tokens[:4]) + ".*"
    return subject


def _content(fields: dict[str, Any]) -> Any:
    for name in ("data_json", "data_text"):
        if name in fields:
            return fields[name]
    data = fields.get("data")
    return bytes(data) if isinstance(data, bytes | bytearray | memoryview) and data else None
