"""The `--messages` view: one line per message that crossed the wire, in Publish or Deliver frames.

Deliver frames name a subscription and Publish frames a publisher, not a stream; the
stream is what the conversation tracker linked to the frame (from the Subscribe or
DeclarePublisher that opened them), "?" when the capture does not show it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamdump.frame import Frame
from streamdump.hooks import amqp
from streamdump.hooks.osiris import SUB_BATCH

# The frames whose records this view lists; other frames only teach it streams.
MESSAGE_COMMANDS = ("Publish", "Deliver")
KEY_PROPERTIES = ("message_id", "correlation_id", "subject", "content_type")
MAX_APP_PROPERTIES = 3
PREVIEW_CHARS = 40


class MessageLines:
    """Turns frames into message lines."""

    def __init__(self, protocol_enums: dict[str, dict[int, str]]) -> None:
        self.tracking_names = protocol_enums.get("tracking_type", {})

    def lines(self, frame: Frame, t0: float) -> Iterator[str]:
        if frame.command not in MESSAGE_COMMANDS:
            return
        fields = frame.fields
        stream = (frame.links or {}).get("stream") or "?"
        head = f"{frame.number:>6} {frame.ts - t0:>11.6f}"
        # Whatever could not be shown is said in place, so no message disappears silently.
        tag = f"  [incomplete frame: {frame.incomplete}]" if frame.incomplete else ""
        if frame.command == "Publish":
            publisher = f"publish pub={fields.get('publisher_id', '?')}"
            for message in fields.get("messages") or []:
                pid = message.get("publishing_id", "?")
                entry = message.get("entry")
                if entry is None:
                    yield f"{head} {stream} {publisher} id={pid}  (message cut short: not shown){tag}"
                    continue
                records = message.get("records") or []
                batched = entry.kind == SUB_BATCH
                for n, record in enumerate(records):
                    where = f"{publisher} id={pid}[{n}]" if batched else f"{publisher} id={pid}"
                    yield self._line(head, stream, where, record) + tag
                if len(records) < entry.record_count:
                    missing = entry.record_count - len(records)
                    note = f"({missing} records not decoded: see expert notes)"
                    yield f"{head} {stream} {publisher} id={pid}  {note}"
        elif frame.command == "Deliver":
            chunk = fields.get("chunk") or {}
            records = chunk.get("records") or []
            for record in records:
                where = f"deliver offset={record.get('offset')} chunk={chunk.get('chunk_id')}"
                yield self._line(head, stream, where, record) + tag
            declared = chunk.get("num_records")
            if isinstance(declared, int) and len(records) < declared:
                why = f"incomplete frame: {frame.incomplete}" if frame.incomplete else "see expert notes"
                yield (
                    f"{head} {stream} deliver chunk={chunk.get('chunk_id')}  "
                    f"({declared - len(records)} of {declared} records not shown: {why})"
                )

    def _line(self, head: str, stream: str, where: str, record: dict[str, Any]) -> str:
        size = f"{record.get('size', 0)} B"
        if "tracking" in record:
            parts = [
                f"{self.tracking_names.get(t['tracking_type'], t['tracking_type'])} {t['id']!r}={t['value']}"
                for t in record["tracking"]
            ]
            return f"{head} {stream} {where} {size:>8}  tracking: {'; '.join(parts)}"
        if "bytes" in record:
            return f"{head} {stream} {where} {size:>8}  {amqp.preview(bytes(record['bytes']), PREVIEW_CHARS)}"
        message = record.get("message")
        if message is None:
            return f"{head} {stream} {where} {size:>8}"
        return f"{head} {stream} {where} {size:>8}  {summary(message)}".rstrip()


def summary(message: amqp.Message) -> str:
    """Body preview and key properties of one AMQP message, for a one-line view."""
    body = None
    props: dict[str, Any] = {}
    app: dict[Any, Any] = {}
    for section in message.sections:
        if section.name in ("data", "amqp_value", "amqp_sequence") and body is None:
            body = section.value
        elif section.name == "properties" and isinstance(section.value, dict):
            props = section.value
        elif section.name == "application_properties" and isinstance(section.value, dict):
            app = section.value
    parts = [amqp.preview(body, PREVIEW_CHARS) if body is not None else "(no body)"]
    parts += [f"{name}={amqp.preview(props[name])}" for name in KEY_PROPERTIES if props.get(name) is not None]
    for key in list(app)[:MAX_APP_PROPERTIES]:
        parts.append(f"{key}={amqp.preview(app[key])}")
    if len(app) > MAX_APP_PROPERTIES:
        parts.append(f"(+{len(app) - MAX_APP_PROPERTIES} app properties)")
    if message.error is not None:
        parts.append(f"[warn: {message.error}]")
    return "  ".join(parts)


def message_volume(frame: Frame) -> tuple[int, int] | None:
    """(messages, bytes) a Publish or Deliver frame carries, from its headers alone; else None."""
    if frame.command == "Publish":
        entries = [m.get("entry") for m in frame.fields.get("messages") or [] if isinstance(m, dict)]
        present = [e for e in entries if e is not None]
        return sum(e.record_count for e in present), sum(e.size for e in present)
    if frame.command == "Deliver":
        chunk = frame.fields.get("chunk")
        if not isinstance(chunk, dict) or chunk.get("chunk_type", 0) != 0:
            return None  # tracking chunks carry offsets and sequences, not messages
        return chunk.get("num_records") or 0, chunk.get("data_length") or 0
    return None
