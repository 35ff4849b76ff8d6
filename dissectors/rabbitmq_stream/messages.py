"""What counts as a message in RabbitMQ Streams: the records of Publish and Deliver frames.

Deliver frames name a subscription and Publish frames a publisher, not a stream; the
stream is what the conversation tracker linked to the frame (from the Subscribe or
DeclarePublisher that opened them), "?" when the capture does not show it. Stats count
messages from the Osiris headers alone, so nothing is decompressed for them; a chunk a gap
cut counts the records it still holds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from streamdump.dissectors.rabbitmq_stream.osiris import SIMPLE, SUB_BATCH, whole_entries

from streamdump.codecs import amqp
from streamdump.codecs.values import preview
from streamdump.spec.dissector import PREVIEW_CHARS, MessageRow, MessageRules, Volume, message_text
from streamdump.spec.hooks import Cut
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame

PUBLISH, DELIVER, STORE_OFFSET = "Publish", "Deliver", "StoreOffset"
_U32 = struct.Struct(">I")
# A consumer's positions, drawn over time (their difference is its lag).
OFFSET_DELIVERED, OFFSET_STORED = "offset delivered", "offset stored"
# AMQP properties a line shows, in this order, before the first application properties.
KEY_PROPERTIES = ("message_id", "correlation_id", "subject", "content_type")
BODIES = ("data", "amqp_value", "amqp_sequence")
# A record that is a data section alone of at most 255 bytes (amqp.data_message's shape): its
# descriptor and vbin8 code, then the body's length in one byte.
DATA_ALONE = b"\x00\x53\x75\xa0"
# The bytes of a body a preview of PREVIEW_CHARS characters reads at most (codecs.values.preview).
PREVIEW_BYTES = PREVIEW_CHARS * 4 + 4
# A Publish message of such a record, expanded, as JSON: its id, its entry's JSON form (a simple
# entry's kind and size), and its one record (size, sections, the message's JSON form).
# A chunk's values that expanding it leaves as they are (its data aside, taken out).
_CHUNK_PLAIN = frozenset(
    (
        *("magic_version", "chunk_type", "num_entries", "num_records", "timestamp", "epoch"),
        *("chunk_id", "crc", "data_length", "trailer_length", "bloom_size", "reserved"),
        *("chunk_data", "crc_valid"),
    )
)
_ENTRY = '{"entry_kind":0,"entry_size":%d}'
_DELIVERED = '{"offset":%d,"entry_index":%d,"record_size":%d,"sections":[117],"message":{"data":"%s"}}'
_PUBLISHED = (
    '{"publishing_id":%d,"entry":{"entry_kind":0,"entry_size":%d},'
    '"records":[{"record_size":%d,"sections":[117],"message":{"data":"%s"}}]}'
)


class StreamMessages(MessageRules):
    subject = "stream"
    positions = (
        ("publisher_id", "int"),
        ("publishing_id", "int"),
        ("subscription_id", "int"),
        ("chunk_id", "int"),
        ("offset", "int"),
    )

    def __init__(self, protocol: Protocol) -> None:
        super().__init__(protocol)
        self.tracking_names = protocol.enums.get("tracking_type", {})

    def carries(self, frame: Frame) -> bool:
        return frame.command in (PUBLISH, DELIVER)

    def rows(self, frame: Frame) -> Iterator[MessageRow]:
        fields = frame.fields
        stream = (frame.links or {}).get("stream") or "?"
        # Whatever could not be shown is said in place, so no message disappears silently.
        tag = frame.incomplete is not None
        if frame.command == PUBLISH:
            publisher = f"publish pub={fields.get('publisher_id', '?')}"
            publisher_at = ("publisher_id", fields.get("publisher_id"))
            for message in fields.get("messages") or []:
                pid = message.get("publishing_id", "?")
                at = (publisher_at, ("publishing_id", message.get("publishing_id")))
                entry = message.get("entry")
                if entry is None:
                    cut = "(message cut short: not shown)"
                    yield MessageRow(stream, f"{publisher} id={pid}", text=cut, tag=tag, at=at)
                    continue
                records = message.get("records") or []
                if entry.kind != SUB_BATCH and len(records) == 1:  # the commonest: one record
                    yield self._row(stream, f"{publisher} id={pid}", records[0], tag, at)
                    continue
                batched = entry.kind == SUB_BATCH
                for n, record in enumerate(records):
                    where = f"{publisher} id={pid}[{n}]" if batched else f"{publisher} id={pid}"
                    yield self._row(stream, where, record, tag, at)
                if len(records) < entry.record_count:
                    missing = entry.record_count - len(records)
                    note = f"({missing} records not decoded: see expert notes)"
                    yield MessageRow(stream, f"{publisher} id={pid}", text=note, at=at)
        elif frame.command == DELIVER:
            chunk = fields.get("chunk") or {}
            records = chunk.get("records") or []
            at = (("subscription_id", fields.get("subscription_id")), ("chunk_id", chunk.get("chunk_id")))
            # The same on every record's line; "?" when a gap took the chunk's header.
            in_chunk = f" chunk={chunk.get('chunk_id', '?')}"
            row = self._row
            for record in records:
                offset = record.get("offset")  # unknown behind a gap that nothing pins
                where = f"deliver offset={'?' if offset is None else offset}{in_chunk}"
                yield row(stream, where, record, tag, (*at, ("offset", offset)))
            declared = chunk.get("num_records")
            if isinstance(declared, int) and len(records) < declared:
                why = f"incomplete frame: {frame.incomplete}" if frame.incomplete else "see expert notes"
                yield MessageRow(
                    stream,
                    f"deliver chunk={chunk.get('chunk_id')}",
                    text=f"({declared - len(records)} of {declared} records not shown: {why})",
                    at=at,
                )

    def plain_rows(self, frame: Frame) -> tuple[str, list[tuple[str, int, str]]] | None:
        """rows' Publish and Deliver rows of a complete frame whose every message is one record
        (no sub-batch), as (where, size, text): the same walk and text, without the rows."""
        if frame.incomplete is not None:
            return None
        fields = frame.fields
        stream = (frame.links or {}).get("stream") or "?"
        text = self._text
        out: list[tuple[str, int, str]] = []
        add = out.append
        if frame.command == PUBLISH:
            publisher = f"publish pub={fields.get('publisher_id', '?')}"
            for message in fields.get("messages") or []:
                entry, records = message.get("entry"), message.get("records")
                if entry is None or entry.kind == SUB_BATCH or records is None or len(records) != 1:
                    return None
                size, said = text(records[0])
                add((f"{publisher} id={message.get('publishing_id', '?')}", size, said))
            return stream, out
        chunk = fields.get("chunk") or {}
        records = chunk.get("records") or []
        declared = chunk.get("num_records")
        if isinstance(declared, int) and len(records) < declared:
            return None
        in_chunk = f" chunk={chunk.get('chunk_id')}"
        for record in records:
            size, said = text(record)
            add((f"deliver offset={record.get('offset')}{in_chunk}", size, said))
        return stream, out

    def bare_rows(self, frame: Frame, records: int) -> tuple[str, list[tuple[str, int, str]]] | None:
        """plain_rows of a complete Publish or Deliver frame not expanded, from its entries'
        bytes, when every message is a simple entry whose record is a data section alone (what
        expansion makes an amqp.DataAlone of, previewed as its body) and there are no more
        than records of them; None for anything else (expanded, then asked again)."""
        if frame.incomplete is not None or frame.expanded:
            return None
        if any(e.group == "malformed" for e in frame.expert):  # expanded by a second decode
            return None
        fields = frame.fields
        stream = (frame.links or {}).get("stream") or "?"
        out: list[tuple[str, int, str]] = []
        add = out.append
        if frame.command == PUBLISH:
            messages = fields.get("messages") or []
            if len(messages) > records:
                return None
            publisher = f"publish pub={fields.get('publisher_id', '?')}"
            for message in messages:
                entry = message.get("entry") if type(message) is dict else None
                if entry is None or entry.kind != SIMPLE:
                    return None
                body = entry.body
                size = len(body)
                if size < 5 or body[:4] != DATA_ALONE or body[4] != size - 5:
                    return None
                said = preview(bytes(body[5 : 5 + PREVIEW_BYTES]), PREVIEW_CHARS).rstrip()
                add((f"{publisher} id={message.get('publishing_id', '?')}", size, said))
            return stream, out
        chunk = fields.get("chunk")
        if frame.command != DELIVER or type(chunk) is not dict or chunk.get("chunk_type") != 0:
            return None  # tracking chunks hold offsets and sequences, told otherwise
        plain = _plain_data(chunk, records)
        if plain is None:
            return None
        data, first, declared = plain
        in_chunk = f" chunk={first}"
        at, end = 0, len(data)
        for offset in range(first, first + declared):
            if end - at < 4 or data[at] & 0x80:  # the data ends, or a sub-batch
                return None
            (size,) = _U32.unpack_from(data, at)
            body_at = at + 4
            if end - body_at < size or size < 5 or not data.startswith(DATA_ALONE, body_at):
                return None
            if data[body_at + 4] != size - 5:
                return None
            said = preview(data[body_at + 5 : body_at + 5 + min(size - 5, PREVIEW_BYTES)], PREVIEW_CHARS)
            add((f"deliver offset={offset}{in_chunk}", size, said.rstrip()))
            at = body_at + size
        return stream, out

    def bare_fields_json(self, frame: Frame, records: int) -> bytes | None:
        """The JSON of a complete Publish frame's fields, expanded, from its entries' bytes: the
        version 1 layout (a publisher and messages of an id and an entry), every entry simple
        and its record a data section alone of at most 255 bytes, as EntryHook.expand_run makes
        them (record size, sections [117], the message's data as hex), at most records of them;
        a Deliver frame's as _bare_chunk_json writes it."""
        if frame.incomplete is not None or frame.expanded:
            return None
        if frame.command == DELIVER:
            return self._bare_chunk_json(frame, records)
        if frame.command != PUBLISH or any(e.group == "malformed" for e in frame.expert):
            return None  # (a frame with such notes is expanded by a second decode)
        fields = frame.fields
        publisher, messages = fields.get("publisher_id"), fields.get("messages")
        if len(fields) != 2 or type(publisher) is not int or type(messages) is not list:
            return None
        if len(messages) > records:
            return None
        items = []
        add = items.append
        for message in messages:
            # The decode makes each item's dict in the layout's order: two keys are these two.
            if type(message) is not dict or len(message) != 2:
                return None
            pid, entry = message.get("publishing_id"), message.get("entry")
            if type(pid) is not int or entry is None or entry.kind != SIMPLE:
                return None
            body = entry.body
            size = len(body)
            if size < 5 or body[:4] != DATA_ALONE or body[4] != size - 5:
                return None
            add(_PUBLISHED % (pid, entry.size, size, body[5:].hex()))
        return b'{"publisher_id":%d,"messages":[%s]}' % (publisher, ",".join(items).encode())

    def _bare_chunk_json(self, frame: Frame, records: int) -> bytes | None:
        """A Deliver frame's fields' JSON, expanded, from its chunk's bytes, as ChunkHook.expand
        and _simple_entries make them: the chunk last among the fields, its data (a user chunk
        whose CRC matched, of simple entries whose records are data sections alone, as many as
        its header declares of each, and nothing after them) taken out and its entries and
        records put after the header's values. A frame with any note is left to the second
        decode that expands it, whose notes would come first."""
        fields = frame.fields
        chunk = fields.get("chunk")
        if frame.expert or type(chunk) is not dict or next(reversed(fields)) != "chunk":
            return None
        if chunk.get("chunk_type") != 0 or chunk.get("crc_valid") is not True:
            return None
        if not _CHUNK_PLAIN.issuperset(chunk):  # a trailer, whose hook adds its tracking
            return None
        plain = _plain_data(chunk, records)
        if plain is None:
            return None
        data, first, declared = plain
        sizes: list[str] = []
        texts: list[str] = []
        at, end = 0, len(data)
        for index in range(declared):
            if end - at < 4 or data[at] & 0x80:  # the data ends, or a sub-batch
                return None
            (size,) = _U32.unpack_from(data, at)
            body_at = at + 4
            if end - body_at < size or size < 5 or not data.startswith(DATA_ALONE, body_at):
                return None
            if data[body_at + 4] != size - 5:
                return None
            sizes.append(_ENTRY % (size + 4))
            texts.append(_DELIVERED % (first + index, index, size, data[body_at + 5 : body_at + size].hex()))
            at = body_at + size
        if at != end:  # bytes after the last entry: a note
            return None
        import orjson  # as the JSON writer's, loaded with the first JSON line

        # The other values as orjson writes them (bytes as hex), which json.dumps's are for
        # these integer and byte fields.
        head = {name: value for name, value in fields.items() if name != "chunk"}
        header = {name: value for name, value in chunk.items() if name != "chunk_data"}
        try:
            fields_json = orjson.dumps(head, default=_hex)[:-1]
            chunk_json = orjson.dumps(header, default=_hex)[:-1]
        except TypeError:
            return None
        tail = b'"entries":[%s],"records":[%s]}}' % (",".join(sizes).encode(), ",".join(texts).encode())
        return b'%s%s"chunk":%s%s%s' % (
            fields_json,
            b"," if head else b"",
            chunk_json,
            b"," if header else b"",
            tail,
        )

    def _row(
        self, stream: str, where: str, record: dict[str, Any], tag: bool, at: tuple[tuple[str, Any], ...]
    ) -> MessageRow:
        return MessageRow(stream, where, *self._text(record), tag, at, record)

    def _text(self, record: dict[str, Any]) -> tuple[int, str]:
        """A record's size and what its line says."""
        size = record.get("record_size", 0)
        message = record.get("message")  # a record holds a message, bytes or tracking entries
        if message is not None:
            if type(message) is amqp.DataAlone:  # the commonest of all, without its sections
                return size, preview(message.body, PREVIEW_CHARS).rstrip()
            sections = message.sections
            if len(sections) == 1 and message.error is None and sections[0].name in BODIES:
                # The commonest message, a body alone: _summary would say its preview alone.
                body = sections[0].value
                if body is not None:
                    return size, preview(body, PREVIEW_CHARS).rstrip()
            return size, _summary(message).rstrip()
        if "tracking" in record:
            parts = [
                f"{self.tracking_names.get(t['tracking_type'], t['tracking_type'])} {t['id']!r}={t['value']}"
                for t in record["tracking"]
            ]
            return size, f"tracking: {'; '.join(parts)}"
        if "bytes" in record:
            return size, preview(bytes(record["bytes"]), PREVIEW_CHARS)
        return size, ""

    def gauges(self, frame: Frame) -> Iterator[tuple[str, str, float]]:
        """A consumer as it goes: the credit each subscription has left (by the packet that
        opened it), and per stream the last offset delivered and the last one stored, what a
        consumer's lag is told from. Packets, not connections, name them: a packet's number is
        the capture's, whoever reads it."""
        if frame.command == DELIVER:
            links = frame.links or {}
            stream = links.get("stream") or "?"
            left = links.get("credit_left")
            if isinstance(left, int):
                yield "credit left", f"{stream} · opened at packet {links.get('opened_in', '?')}", left
            chunk = frame.fields.get("chunk")
            if isinstance(chunk, dict) and chunk.get("chunk_type", 0) == 0:
                first, records = chunk.get("chunk_id"), chunk.get("num_records")
                if isinstance(first, int) and isinstance(records, int) and records > 0:
                    yield OFFSET_DELIVERED, stream, first + records - 1
        elif frame.command == STORE_OFFSET:
            offset, stream = frame.fields.get("offset"), frame.fields.get("stream")
            if isinstance(offset, int):
                yield OFFSET_STORED, stream if isinstance(stream, str) and stream else "?", offset

    def volume(self, frame: Frame) -> Volume | None:
        """Messages and bytes a Publish or Deliver frame carries, from its headers alone."""
        stream = (frame.links or {}).get("stream") or "(unknown stream)"
        direction = "publish" if frame.from_client is not False else "deliver"
        if frame.command == PUBLISH:
            entries = [m.get("entry") for m in frame.fields.get("messages") or [] if isinstance(m, dict)]
            present = [e for e in entries if e is not None]
            return Volume(
                stream, direction, sum(e.record_count for e in present), sum(e.size for e in present)
            )
        if frame.command == DELIVER:
            chunk = frame.fields.get("chunk")
            if not isinstance(chunk, dict) or chunk.get("chunk_type", 0) != 0:
                return None  # tracking chunks carry offsets and sequences, not messages
            data = chunk.get("chunk_data")
            # Cut or incomplete, a chunk counts as a Publish does: the records and bytes of the
            # entries whole in the capture, not what its header declares.
            if type(data) is Cut:  # a gap cut it: the records it still holds, whole
                whole = whole_entries(bytes(data.head), chunk.get("num_entries") or 0)[2]
                present = whole + sum(entry.size for entry, _, _ in data.tail)
                return Volume(stream, direction, data.found, present)
            if frame.incomplete is not None and "records" in chunk:  # the same, expanded
                present = sum(e.get("entry_size", 0) for e in chunk.get("entries") or [])
                return Volume(stream, direction, len(chunk["records"]), present)
            if frame.incomplete is not None and data is None:  # cut inside the chunk's header
                return Volume(stream, direction, 0, 0)
            return Volume(stream, direction, chunk.get("num_records") or 0, chunk.get("data_length") or 0)
        return None


def _plain_data(chunk: dict[str, Any], records: int) -> tuple[bytes, int, int] | None:
    """A user chunk's data, first offset and record count, when its entries are one record each
    and no more than the frame's record budget: what both bare readings of a chunk start from."""
    data, first = chunk.get("chunk_data"), chunk.get("chunk_id")
    entries, declared = chunk.get("num_entries"), chunk.get("num_records")
    if (
        not isinstance(data, bytes | memoryview)
        or type(first) is not int
        or type(declared) is not int
        or entries != declared
        or declared > records
    ):
        return None
    return bytes(data), first, declared


def _summary(message: amqp.Message) -> str:
    """A record's body and key AMQP properties, then its first application properties."""
    body = None
    props: dict[str, Any] = {}
    app: dict[Any, Any] = {}
    for section in message.sections:
        if section.name in BODIES and body is None:
            body = section.value
        elif section.name == "properties" and isinstance(section.value, dict):
            props = section.value
        elif section.name == "application_properties" and isinstance(section.value, dict):
            app = section.value
    text = message_text(body, ((name, props.get(name)) for name in KEY_PROPERTIES), app, "app properties")
    return text + (f"  [warn: {message.error}]" if message.error is not None else "")


def _hex(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    raise TypeError(f"cannot serialise {type(value).__name__}")
