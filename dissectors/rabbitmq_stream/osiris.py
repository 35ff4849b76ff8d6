"""Osiris entries and chunks: the hooks `osiris_entry` (Publish) and `osiris_chunk` (Deliver).

An entry is what a publisher sends and a chunk stores: a simple entry ([u32 size, top bit
clear][record]) or a sub-batch ([flags u8: top bit set, compression in bits 4-6]
[u16 records][u32 uncompressed length][u32 length][body]) whose body, once decompressed,
is a run of [u32 size][record]. A chunk's data is `num_entries` entries back to back; the
records in it are numbered from the chunk id, so every record has its stream offset.

On every decode the chunk's CRC-32 is checked (zlib's, over the data, as the broker
computes it) and entry headers are read, nothing more; records, decompression and AMQP
sections wait for `expand`, i.e. for a view that shows them. Every inconsistency
between headers, entries and records becomes an expert note, never an exception.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamdump.codecs import amqp
from streamdump.codecs.compression import Budget, DecompressionError, decompress
from streamdump.core.frame import Expert, Node
from streamdump.spec.hooks import Hook
from streamdump.spec.layout import BadValue, Ctx, Short

_U32 = struct.Struct(">I")
_SUB_BATCH = struct.Struct(">BHII")  # flags, record count, uncompressed length, length
_U64 = struct.Struct(">Q")
SIMPLE, SUB_BATCH = 0, 1
MAGIC = 5
DELTA, SNAPSHOT = 1, 2  # chunk types whose records are tracking entries, not messages
PRODUCER = 0  # tracking entry type of a producer's sequence
DATA = 0x75  # the AMQP data section's descriptor


@dataclass(slots=True)
class Entry:
    """One entry's header and body; the body is the record (simple) or the compressed records."""

    kind: int
    size: int  # bytes the entry occupies, header included
    body: memoryview | bytes
    compression: int = 0
    record_count: int = 1
    uncompressed_length: int = 0
    length: int = 0
    # Where the entry starts in the frame, and the codec variant that matched once decompressed:
    # facts about one decode, not part of the value.
    pos: int = field(default=0, compare=False)
    framing: str | None = field(default=None, compare=False)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"entry_kind": self.kind, "entry_size": self.size}
        if self.kind == SUB_BATCH:
            out |= {
                "compression": self.compression,
                "record_count": self.record_count,
                "uncompressed_length": self.uncompressed_length,
                "length": self.length,
            }
            if self.framing is not None:
                out["framing"] = self.framing
        return out


def read_entry(mv: memoryview, pos: int, end: int, name: str) -> tuple[Entry, int]:
    """The entry at pos; raises Short when the bytes end inside it."""
    if end - pos < 4:
        raise Short(name, pos, 4, end - pos)
    if not mv[pos] & 0x80:
        (size,) = _U32.unpack_from(mv, pos)
        if end - pos - 4 < size:
            raise Short(name, pos + 4, size, end - pos - 4)
        # Positional (kind, size, body, compression, record_count, uncompressed_length, length,
        # pos): about 10% faster than keywords, and a Publish frame has hundreds.
        return Entry(SIMPLE, 4 + size, mv[pos + 4 : pos + 4 + size], 0, 1, 0, 0, pos), pos + 4 + size
    if end - pos < _SUB_BATCH.size:
        raise Short(name, pos, _SUB_BATCH.size, end - pos)
    flags, count, uncompressed, length = _SUB_BATCH.unpack_from(mv, pos)
    if length > 0x7FFFFFFF:
        raise BadValue(name, pos + 7, f"{name}: sub-batch length {length} is impossible")
    start = pos + _SUB_BATCH.size
    if end - start < length:
        raise Short(name, start, length, end - start)
    entry = Entry(
        SUB_BATCH,
        _SUB_BATCH.size + length,
        mv[start : start + length],
        compression=(flags >> 4) & 0x07,
        record_count=count,
        uncompressed_length=uncompressed,
        length=length,
        pos=pos,
    )
    return entry, start + length


def write_entry(buf: bytearray, entry: Entry) -> None:
    if entry.kind == SIMPLE:
        buf += _U32.pack(len(entry.body))
    else:
        flags = 0x80 | (entry.compression & 0x07) << 4
        buf += _SUB_BATCH.pack(flags, entry.record_count, entry.uncompressed_length, len(entry.body))
    buf += entry.body


def records_body(records: list[bytes]) -> bytes:
    """The uncompressed body of a sub-batch holding these records."""
    return b"".join(_U32.pack(len(r)) + r for r in records)


class EntryHook(Hook):
    """`osiris_entry`: one entry of a Publish frame, and its records on demand."""

    name = "osiris_entry"
    min_size = 4
    expands_in_place = True  # an Entry knows its pos; its records need only it and the id beside it

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        return read_entry(mv, pos, end, name)

    def write(self, buf: bytearray, value: Any) -> None:
        write_entry(buf, value)

    def skip(self, data: bytes, pos: int, end: int) -> int | None:
        # read_entry's sizes, without its Entry
        if end - pos < 4:
            return None
        if not data[pos] & 0x80:
            (size,) = _U32.unpack_from(data, pos)
            return pos + 4 + size if end - pos - 4 >= size else None
        if end - pos < _SUB_BATCH.size:
            return None
        length = _SUB_BATCH.unpack_from(data, pos)[3]
        after = pos + _SUB_BATCH.size + length
        return after if length <= 0x7FFFFFFF and after <= end else None

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        if node is None and value.kind == SIMPLE:
            # Most entries: their record as entry_records makes it, without its loop, while
            # the frame's record budget lasts (past it, entry_records says so).
            budget = ctx.budget or Budget.of(ctx)
            if budget.records_left > 0:
                budget.records_left -= 1
                record: dict[str, Any] = {"record_size": len(value.body)}
                _decode_record(record, value.body, value.pos + 4, value.pos, ctx, None)
                siblings["records"] = [record]
                return
        if node is not None:
            node.label = describe(value, self.protocol.enums["compression"])
        where = f"message {siblings.get('publishing_id')}"
        siblings["records"] = entry_records(value, where, None, ctx, None, node)

    def expand_run(self, holders: list[Any], start: int, name: str, ctx: Ctx) -> int:
        """Messages from start whose entry is simple and its record a data section alone, the
        commonest, given the records expand gives them, while the frame's record budget lasts."""
        budget = ctx.budget or Budget.of(ctx)
        stop = min(len(holders), start + budget.records_left)
        at = start
        data_message = amqp.data_message
        while at < stop:
            values = holders[at]
            entry = values.get(name) if type(values) is dict else None
            if entry is None or entry.kind != SIMPLE:
                break
            body = bytes(entry.body)
            message = data_message(body, 0, len(body), entry.pos + 4)
            if message is None:
                break
            values["records"] = [{"record_size": len(body), "sections": [DATA], "message": message}]
            at += 1
        budget.records_left -= at - start
        return at


class ChunkHook(Hook):
    """`osiris_chunk`: a chunk's data, checked against its header, walked into records on demand."""

    name = "osiris_chunk"

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        magic_version = siblings.get("magic_version")
        if isinstance(magic_version, int) and magic_version >> 4 != MAGIC:
            ctx.expert.append(
                Expert("error", f"not an Osiris chunk: magic/version byte is 0x{magic_version:02x}", pos - 48)
            )
        chunk_type = siblings.get("chunk_type")
        if chunk_type not in self.protocol.enums["chunk_type"]:
            ctx.expert.append(Expert("warn", f"unknown chunk type {chunk_type}", pos - 47))
        crc = siblings.get("crc")
        actual = zlib.crc32(value)
        siblings["crc_valid"] = crc == actual
        if crc != actual:
            ctx.expert.append(
                Expert(
                    "error", f"chunk CRC mismatch: header says 0x{crc:08x}, data gives 0x{actual:08x}", pos
                )
            )

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        mv = value if isinstance(value, memoryview) else memoryview(value)
        chunk_id = siblings.get("chunk_id", 0)
        num_entries = siblings.get("num_entries", 0)
        chunk_type = siblings.get("chunk_type")
        tracking = self.protocol.enums["tracking_type"] if chunk_type in (DELTA, SNAPSHOT) else None
        snapshot = chunk_type == SNAPSHOT
        entries: list[dict[str, Any]] = []
        records: list[dict[str, Any]] = []
        counted = 0  # records the entries promise, read or not: the next record's offset
        at, end = 0, len(mv)
        data = bytes(mv) if node is None and tracking is None else None
        index = 0
        while index < num_entries:
            if data is not None:
                # Most entries of a chunk are simple: a run of them at once, then the general step.
                walked, at = _simple_entries(data, mv, at, index, num_entries, chunk_id + counted, pos, ctx)
                entries += walked[0]
                records += walked[1]
                index += len(walked[1])
                counted += len(walked[1])
                if index >= num_entries:
                    break
            if at >= end:
                ctx.expert.append(
                    Expert(
                        "error", f"chunk declares {num_entries} entries but its data holds {index}", pos + at
                    )
                )
                break
            try:
                entry, next_at = read_entry(mv, at, end, f"entry {index}")
            except (Short, BadValue) as exc:
                what = exc.message() if isinstance(exc, Short) else exc.text
                ctx.expert.append(Expert("error", f"entry {index}: {what}", pos + at))
                break
            entry.pos = pos + at
            entry_node = None
            if node is not None:
                label = f"Entry {index}: {describe(entry, self.protocol.enums['compression'])}"
                entry_node = Node(None, label, entry.pos, entry.size)
                node.children.append(entry_node)
            records += entry_records(
                entry,
                f"entry {index}",
                index,
                ctx,
                chunk_id + counted,
                entry_node,
                tracking=tracking,
                snapshot=snapshot,
            )
            entries.append(entry.as_json())
            counted += entry.record_count
            at = next_at
            index += 1
        if at < end and len(entries) == num_entries:
            ctx.expert.append(Expert("warn", f"{end - at} bytes after the chunk's last entry", pos + at))
        declared = siblings.get("num_records", 0)
        if counted != declared and len(entries) == num_entries:
            ctx.expert.append(
                Expert("warn", f"chunk declares {declared} records but its entries hold {counted}", pos)
            )
        siblings["entries"] = entries
        siblings["records"] = records
        # The records say what the raw data said, decoded; JSON need not carry both.
        siblings.pop("chunk_data", None)


def _simple_entries(
    data: bytes, mv: memoryview, at: int, index: int, stop: int, offset: int, pos: int, ctx: Ctx
) -> tuple[tuple[list[dict[str, Any]], list[dict[str, Any]]], int]:
    """The run of whole simple entries of a chunk's data from at (entry index onwards, before
    entry stop), made into what entry_records and Entry.as_json make of them, while the frame's
    record budget lasts: ((entries' JSON, records), where the run ends).

    It stops before anything else (a sub-batch, an entry cut short, the end of the data), which
    the general step then reads and reports. data is mv's bytes: indexing them is quicker.
    """
    budget = Budget.of(ctx)
    stop = min(stop, index + budget.records_left)
    end = len(data)
    entries: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    data_message = amqp.data_message
    while index < stop and end - at >= 4 and not data[at] & 0x80:
        (size,) = _U32.unpack_from(data, at)
        body_at = at + 4
        if end - body_at < size:
            break
        entries.append({"entry_kind": SIMPLE, "entry_size": 4 + size})
        record = {"offset": offset, "entry_index": index, "record_size": size}
        message = data_message(data, body_at, body_at + size, pos + body_at)
        if message is not None:  # a data section alone, the commonest record: nothing to note
            record["sections"] = [DATA]
            record["message"] = message
        else:
            _decode_record(record, mv[body_at : body_at + size], pos + body_at, pos + at, ctx, None)
        records.append(record)
        index += 1
        offset += 1
        at = body_at + size
    budget.records_left -= len(records)
    return (entries, records), at


def entry_records(
    entry: Entry,
    where: str,
    index: int | None,
    ctx: Ctx,
    first_offset: int | None,
    node: Node | None,
    *,
    tracking: Mapping[int, str] | None = None,
    snapshot: bool = False,
) -> list[dict[str, Any]]:
    """The records of one entry, decompressed and decoded; offsets from first_offset when known.

    where names the entry in notes ("entry 2" of a chunk, "message 17" of a Publish); index
    is its place in a chunk, recorded with each record. tracking: the records are tracking
    entries (of a snapshot, if snapshot), and these are their type names.
    """
    budget = Budget.of(ctx)
    if entry.kind == SIMPLE:
        bodies = [(entry.body, entry.pos + 4)]
    else:
        if entry.uncompressed_length > budget.bytes_left:
            budget.refuse(ctx, where, f"{entry.record_count} records not decoded", entry.pos)
            return []
        budget.bytes_left -= entry.uncompressed_length
        try:
            result = decompress(entry.compression, entry.body, entry.uncompressed_length)
        except DecompressionError as exc:
            ctx.expert.append(Expert("error", f"{where}: sub-batch: {exc}", entry.pos))
            return []
        entry.framing = result.framing
        if node is not None:
            node.label += f", {result.framing}"
        # Records of an uncompressed body sit in the frame; a compressed one's only in its output.
        base = entry.pos + _SUB_BATCH.size if entry.compression == 0 else None
        bodies = _split_records(result.data, entry, where, base, ctx)
    out: list[dict[str, Any]] = []
    for body, at in bodies:
        if budget.records_left <= 0:
            budget.refuse(ctx, where, f"{len(bodies) - len(out)} records not decoded", entry.pos)
            break
        budget.records_left -= 1
        record: dict[str, Any] = {}
        if first_offset is not None:
            record["offset"] = first_offset + len(out)
        if index is not None:
            record["entry_index"] = index
        record["record_size"] = len(body)
        record_node = None
        if node is not None:
            if "offset" in record:
                label = f"Record at offset {record['offset']}"
            else:
                label = "Record" if entry.kind == SIMPLE else f"Record {len(out)}"
            where_at = entry.pos if at is None else at
            record_node = Node(None, f"{label}: {len(body)} bytes", where_at, len(body))
            node.children.append(record_node)
        if tracking is not None:
            record["tracking"] = decode_tracking(body, at, ctx, record_node, tracking, snapshot=snapshot)
        else:
            _decode_record(record, body, at, entry.pos, ctx, record_node)
        out.append(record)
    return out


def _split_records(
    data: bytes, entry: Entry, where: str, base: int | None, ctx: Ctx
) -> list[tuple[memoryview, int | None]]:
    """[u32 size][record] runs of a decompressed body, each with its frame position when it has one."""
    mv = memoryview(data)
    out: list[tuple[memoryview, int | None]] = []
    at = 0
    for n in range(entry.record_count):
        if len(mv) - at < 4 or len(mv) - at - 4 < _U32.unpack_from(mv, at)[0]:
            ctx.expert.append(
                Expert(
                    "error",
                    f"{where}: sub-batch declares {entry.record_count} records but its body ends "
                    f"inside record {n}",
                    entry.pos,
                )
            )
            return out
        (size,) = _U32.unpack_from(mv, at)
        out.append((mv[at + 4 : at + 4 + size], None if base is None else base + at + 4))
        at += 4 + size
    if at != len(mv):
        ctx.expert.append(
            Expert("warn", f"{where}: {len(mv) - at} bytes after the sub-batch's last record", entry.pos)
        )
    return out


def _decode_record(
    record: dict[str, Any], body: memoryview, at: int | None, entry_pos: int, ctx: Ctx, node: Node | None
) -> None:
    """One record: an AMQP 1.0 message, or bytes. at is its frame position, None inside compressed bytes."""
    base = entry_pos if at is None else at
    # decode_message tries the shape clients send first: no record is decoded twice.
    message = amqp.decode_message(body, base) if amqp.looks_like_amqp(body) else None
    if message is None:
        record["bytes"] = body
        if node is not None:
            node.label += ", not AMQP 1.0"
            node.children.append(Node(None, f"Bytes: {amqp.preview(bytes(body))}", node.offset, len(body)))
        return
    # Wire order and repeats, which the message's section-name keys cannot show.
    sections = message.sections
    record["sections"] = [sections[0].code] if len(sections) == 1 else [s.code for s in sections]
    record["message"] = message
    if message.error is not None:
        # Inside compressed bytes the entry is the closest place in the frame.
        where = entry_pos if at is None else message.error_offset
        ctx.expert.append(Expert("warn", f"AMQP 1.0 message: {message.error}", where))
    for note in message.notes:
        ctx.expert.append(Expert("note", f"AMQP 1.0 message: {note}", entry_pos if at is None else at))
    if node is not None:
        node.label += ", AMQP 1.0"
        for section in message.sections:
            node.children.append(_section_node(section))


def _section_node(section: Any) -> Node:
    label = section.name.replace("_", " ").capitalize()
    value = section.value
    node = Node(None, label, section.offset, section.length)
    if isinstance(value, dict):
        fixed = section.name in ("header", "properties")  # named fields of a list, not a map
        if not fixed:
            node.label += f": {len(value)} entries"
        for key, item in value.items():
            if fixed and item is None:
                continue  # clients write absent fields as nulls; they say nothing
            node.children.append(Node(None, f"{key}: {amqp.preview(item)}", section.offset, 0))
    elif isinstance(value, list):
        node.label += f": {len(value)} items"
        for i, item in enumerate(value):
            node.children.append(Node(None, f"[{i}]: {amqp.preview(item)}", section.offset, 0))
    else:
        node.label += f": {amqp.preview(value)}"
    return node


def describe(entry: Entry, compression_names: Any) -> str:
    """A tree label for an entry; the framing that matched is added once it is decompressed."""
    if entry.kind == SIMPLE:
        return f"Simple entry, {entry.size} bytes"  # all of it, length field included, as `entry_size` says
    codec = compression_names.get(entry.compression, f"unknown compression {entry.compression}")
    return (
        f"Sub-batch, {entry.record_count} records, {codec}: "
        f"{entry.length} bytes, {entry.uncompressed_length} uncompressed"
    )


def decode_tracking(
    body: memoryview,
    at: int | None,
    ctx: Ctx,
    node: Node | None,
    names: Mapping[int, str],
    *,
    snapshot: bool = False,
) -> list[dict[str, Any]]:
    """Tracking entries back to back: [type u8][id size u8][id][u64 value].

    In a snapshot a producer entry carries two u64: the snapshot's own chunk id, then the
    sequence (seen in a 3.10.8 broker's segment files).
    """
    out: list[dict[str, Any]] = []
    pos, end = 0, len(body)
    at = at or 0
    while pos < end:
        if end - pos < 2:
            ctx.expert.append(Expert("warn", f"tracking data ends inside an entry header at byte {pos}", at))
            break
        kind, id_size = body[pos], body[pos + 1]
        two = snapshot and kind == PRODUCER
        need = 2 + id_size + (16 if two else 8)
        if end - pos < need:
            ctx.expert.append(
                Expert("warn", f"tracking entry at byte {pos} needs {need} bytes, {end - pos} left", at)
            )
            break
        ident = str(body[pos + 2 : pos + 2 + id_size], "utf-8", "replace")
        item: dict[str, Any] = {"tracking_type": kind, "id": ident}
        values = pos + 2 + id_size
        if two:
            item["chunk_id"] = _U64.unpack_from(body, values)[0]
            values += 8
        item["value"] = _U64.unpack_from(body, values)[0]
        out.append(item)
        if node is not None:
            what = names.get(kind, f"type {kind}")
            node.children.append(Node(None, f"Tracking {what} {ident!r}: {item['value']}", at + pos, need))
        pos += need
    return out


class TrailerHook(Hook):
    """`osiris_trailer`: a chunk's trailer, should a broker send it: the producers' last sequences."""

    name = "osiris_trailer"

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        names = self.protocol.enums["tracking_type"]
        siblings["trailer_tracking"] = decode_tracking(memoryview(value), pos, ctx, node, names)


def simple_entry(record: bytes) -> Entry:
    return Entry(SIMPLE, 4 + len(record), record)


def sub_batch_entry(records: list[bytes], compression: int, body: bytes) -> Entry:
    """A sub-batch of records whose (already compressed) body is given."""
    plain = records_body(records)
    return Entry(
        SUB_BATCH,
        _SUB_BATCH.size + len(body),
        body,
        compression=compression,
        record_count=len(records),
        uncompressed_length=len(plain),
        length=len(body),
    )
