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

A chunk a gap cut still gives its records: the whole entries before the gap, with their
offsets, and those behind each gap that chain entry by entry to where the bytes end
(`ChunkHook.tail`). Behind the last gap, entries that end where the frame ends are
numbered back from the header's counts, or, when the gap took the header, from the
next chunk of the same subscription; behind an earlier gap, and wherever nothing pins
them, their offsets stay unknown rather than guessed. Every start whose entries chain is a
candidate: where two readings of the bytes chain (a record whose body holds what reads as a
whole entry), only the records both hold are given, and a note says so (`Cut.notes`).
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from msgspec import Struct

from streamdump.codecs import amqp
from streamdump.codecs.amqp_content import content_notes, message_id
from streamdump.codecs.compression import DecompressionError, TooLarge, decompress
from streamdump.codecs.values import preview
from streamdump.spec.budget import Budget
from streamdump.spec.hooks import Around, Cut, Hook
from streamdump.spec.layout import BadValue, Ctx, Short
from streamdump.wire.findings import FINDINGS
from streamdump.wire.frame import Expert, Node
from streamdump.wire.limits import hint

# The expert group of a note on a message's content (a null value, a body its content_type
# does not describe): the broker takes such messages, so they are not malformed.
CONTENT = FINDINGS["content"].group

_U32 = struct.Struct(">I")
_SUB_BATCH = struct.Struct(">BHII")  # flags, record count, uncompressed length, length
# The integers before an entry (a Publish's publishing id) and the entry's size, by their format.
_WITH_SIZE: dict[str, struct.Struct] = {}
_U64 = struct.Struct(">Q")
SIMPLE, SUB_BATCH = 0, 1
MAGIC = 5
DELTA, SNAPSHOT = 1, 2  # chunk types whose records are tracking entries, not messages
PRODUCER = 0  # tracking entry type of a producer's sequence
DATA = 0x75  # the AMQP data section's descriptor
# A sub-batch's first byte: the top bit, a known compression in bits 4-6, reserved bits clear.
SUB_BATCH_FLAGS = frozenset(0x80 | c << 4 for c in range(5))


# Where an entry may start behind a gap. A simple entry whose size is below 2**(32 - 8 * zeros)
# has that many leading zero bytes; a sub-batch has known flags and its length as many leading
# zero bytes; where the records are AMQP 1.0, a simple entry's record opens with a section
# descriptor (0x00, then 0x53, 0x80, 0xa3 or 0xb3), which is searched for on its own: far fewer
# places show one than show a zero byte, and a literal is found at C speed.
_SIMPLE_STARTS = {zeros: re.compile(rb"(?=" + rb"\x00" * zeros + rb")", re.S) for zeros in (1, 2)}
_SUB_BATCH_STARTS = {
    zeros: re.compile(rb"[\x80\x90\xa0\xb0\xc0](?=......" + rb"\x00" * zeros + rb")", re.S)
    for zeros in (0, 1, 2)
}
_DESCRIPTOR = re.compile(rb"\x00[\x53\x80\xa3\xb3]")


def _candidate_starts(data: bytes, exact: bool, amqp_only: bool) -> list[int] | range:
    """The places in data where an entry of a chain may start, in order: every entry whole in
    data is at most len(data) long when exact, and (an approximation for cut entries) below
    16 MiB otherwise."""
    n = len(data)
    zeros = 2 if exact and n <= 0xFFFF else 1 if n <= 0xFFFFFF or not exact else 0
    batches = [m.start() for m in _SUB_BATCH_STARTS[zeros].finditer(data)]
    if amqp_only:
        simple = [
            m.start() - 4
            for m in _DESCRIPTOR.finditer(data, 4)
            if data[m.start() - 4 : m.start() - 4 + zeros] == bytes(zeros)
        ]
    elif zeros:
        simple = [m.start() for m in _SIMPLE_STARTS[zeros].finditer(data)]
    else:
        return range(n)
    return sorted(simple + batches) if batches else simple


CUT_OFF = -1  # an entry the end of the bytes cuts: where a chain behind an earlier gap stops


class Entry(Struct):
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
    pos: int = 0
    framing: str | None = None

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Entry:
            return NotImplemented
        return self._value() == other._value()  # type: ignore[attr-defined]

    def _value(self) -> tuple[Any, ...]:
        return (
            self.kind,
            self.size,
            self.body,  # a memoryview compares by its bytes
            self.compression,
            self.record_count,
            self.uncompressed_length,
            self.length,
        )

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

    def read_items(
        self,
        mv: memoryview,
        pos: int,
        end: int,
        count: int,
        head: struct.Struct,
        names: tuple[str, ...],
        name: str,
    ) -> tuple[list[dict[str, Any]], int] | None:
        # A Publish's messages: each id and its simple entry's size in one unpack, the entry as
        # read_entry makes it; a sub-batch is read_entry's. An entry the bytes cut: None.
        if len(names) != 1:
            return None
        both = _WITH_SIZE.get(head.format)
        if both is None:
            both = _WITH_SIZE[head.format] = struct.Struct(head.format + "I")
        key = names[0]
        step = both.size
        items: list[dict[str, Any]] = []
        append = items.append
        for _ in range(count):
            if end - pos < step:
                return None
            ident, size = both.unpack_from(mv, pos)
            start = pos + step
            if size & 0x80000000:
                try:
                    entry, pos = read_entry(mv, start - 4, end, name)
                except (Short, BadValue):
                    return None
                append({key: ident, name: entry})
                continue
            if end - start < size:
                return None
            append(
                {key: ident, name: Entry(SIMPLE, 4 + size, mv[start : start + size], 0, 1, 0, 0, start - 4)}
            )
            pos = start + size
        return items, pos

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
    cuts = True
    items = "records"

    def tail(self, cut: Cut, siblings: dict[str, Any], around: Around) -> tuple[int, int]:
        return _tail(cut, siblings, around)

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        magic_version = siblings.get("magic_version")
        if isinstance(magic_version, int) and magic_version >> 4 != MAGIC:
            ctx.expert.append(
                Expert("error", f"not an Osiris chunk: magic/version byte is 0x{magic_version:02x}", pos - 48)
            )
        chunk_type = siblings.get("chunk_type")
        if chunk_type not in self.protocol.enums["chunk_type"]:
            ctx.expert.append(Expert("warn", f"unknown chunk type {chunk_type}", pos - 47))
        if type(value) is Cut:
            # The CRC covers bytes a gap took. The records whole before it count for stats.
            value.found = _headers(bytes(value.head), 0, siblings.get("num_entries", 0))[1]
            return
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
        cut = value if type(value) is Cut else None
        if cut is not None:
            value = cut.head
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
            if at >= end and cut is None:
                ctx.expert.append(
                    Expert(
                        "error", f"chunk declares {num_entries} entries but its data holds {index}", pos + at
                    )
                )
                break
            try:
                entry, next_at = read_entry(mv, at, end, f"entry {index}")
            except Short as exc:
                if cut is None:  # a cut chunk's data ends inside the entry the gap took: no news
                    ctx.expert.append(Expert("error", f"entry {index}: {exc.message()}", pos + at))
                break
            except BadValue as exc:
                ctx.expert.append(Expert("error", f"entry {index}: {exc.text}", pos + at))
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
        if cut is not None:
            for entry, offset, entry_index in cut.tail:
                where = f"entry {entry_index}" if entry_index is not None else "an entry behind the gap"
                records += entry_records(
                    entry, where, entry_index, ctx, offset, None, tracking=tracking, snapshot=snapshot
                )
                entries.append(entry.as_json())
            siblings["entries"] = entries
            siblings["records"] = records
            siblings.pop("chunk_data", None)
            return
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


def _tail(cut: Cut, siblings: dict[str, Any], around: Around) -> tuple[int, int]:
    """ChunkHook.tail: the entries behind each gap, numbered where the counts pin them."""
    if siblings.get("chunk_type") in (DELTA, SNAPSHOT):
        return 0, 0  # tracking entries: a few bytes, and nothing to check a chain of them against
    num_entries, num_records = siblings.get("num_entries"), siblings.get("num_records")
    head = bytes(cut.head)
    limit = num_entries if isinstance(num_entries, int) else 1 << 31
    head_entries, head_records, _ = _headers(head, 0, limit)
    amqp_only = _amqp_records(head, head_entries)
    # The offset after the chunk's last record: from its header, or (the header lost) from the
    # next chunk, when one subscription's chunks are all this direction carries.
    end_offset: int | None = None
    floor: int | None = None
    counted = isinstance(num_entries, int) and isinstance(num_records, int)
    if counted and isinstance(siblings.get("chunk_id"), int):
        end_offset = siblings["chunk_id"] + num_records
    elif not siblings and around.one_session and around.after is not None and around.before is not None:
        after_id, before_id = around.after.get("chunk_id"), around.before.get("chunk_id")
        before_count = around.before.get("num_records")
        before_data = around.before.get("chunk_data")
        if type(before_data) is Cut:  # a gap cut it too: only its records before that are known
            before_count = before_data.found
        if isinstance(after_id, int) and isinstance(before_id, int) and isinstance(before_count, int):
            end_offset, floor = after_id, before_id + before_count
    found, entries, used = 0, 0, 0
    last = len(around.islands) - 1
    for i, island in enumerate(around.islands):
        exact = around.anchored and i == last
        data = island
        if exact and around.span >= 0 and cut.size >= 0:
            extra = around.span - (cut.pos + cut.size)  # a trailer the broker sent after the data
            exact = 0 <= extra <= len(data)
            data = data[: len(data) - extra] if exact else data
        data_at = cut.pos + cut.size - len(data) if exact and cut.size >= 0 else 0
        # What the chunk's counts allow a chain here: (entries known before it, the least offset
        # its first record may have, the chunk's entries when its header says).
        constraint: tuple[int, int, int | None] | None = None
        if exact and end_offset is not None:
            if counted:
                # Behind what came before (the head, earlier islands) and at least one entry,
                # with its records, that a gap took.
                behind = siblings["chunk_id"] + head_records + found
                constraint = (head_entries + entries, behind + 1, num_entries)
            elif floor is not None:
                constraint = (-1, floor, None)
        candidates = [
            chain
            for chain in (_admissible(c, end_offset, constraint) for c in _chains(data, exact, amqp_only))
            if chain
        ]
        if not candidates:
            continue
        chain = candidates[0]
        if len(candidates) > 1:
            chain = _agreed(candidates)
            at = ", ".join(str(c[0][0]) for c in candidates[:4])
            more = ", ..." if len(candidates) > 4 else ""
            shared = sum(count for _, _, count in chain)
            cut.notes.append(
                f"{len(candidates)} chains of entries fit the {len(data)} bytes after a gap (from their "
                f"bytes {at}{more}): only the {shared} records they all hold are recovered, "
                "the others are not guessed"
            )
            if not chain:
                continue
        records = sum(count for _, _, count in chain)
        first: int | None = None
        index: int | None = None
        if constraint is not None:
            first = end_offset - records  # type: ignore[operator]
            if constraint[2] is not None:
                index = constraint[2] - len(chain)
        mv = memoryview(data)
        for start, _end, count in chain:
            entry, _ = read_entry(mv, start, len(data), "entry")
            entry.pos = data_at + start
            cut.tail.append((entry, first, index))
            if first is not None:
                first += count
            if index is not None:
                index += 1
        found += records
        entries += len(chain)
        used += chain[-1][1] - chain[0][0]
    cut.found += found
    return found, used


def _step(data: bytes, start: int, n: int) -> tuple[int, int]:
    """The end of the entry at start and its record count; (CUT_OFF, 0) when the end of the
    bytes cuts it, (start, 0) when it cannot be an entry."""
    if n - start < 4:
        return CUT_OFF, 0
    flags = data[start]
    if not flags & 0x80:
        (size,) = _U32.unpack_from(data, start)
        return (start + 4 + size, 1) if n - start - 4 >= size else (CUT_OFF, 0)
    if flags not in SUB_BATCH_FLAGS:
        return start, 0
    if n - start < _SUB_BATCH.size:
        return CUT_OFF, 0
    _, count, _, length = _SUB_BATCH.unpack_from(data, start)
    if count == 0 or length > 0x7FFFFFFF:
        return start, 0
    end = start + _SUB_BATCH.size + length
    return (end, count) if end <= n else (CUT_OFF, 0)


def whole_entries(data: bytes, limit: int) -> tuple[int, int, int]:
    """The entries whole at the start of data, at most limit of them: (entries, records, bytes)."""
    return _headers(data, 0, limit)


def _headers(data: bytes, at: int, limit: int) -> tuple[int, int, int]:
    """Whole entries from at, at most limit of them, by their headers alone: (entries,
    records, where they end)."""
    n = len(data)
    entries = records = 0
    while entries < limit:
        end, count = _step(data, at, n)
        if end <= at:
            break
        entries += 1
        records += count
        at = end
    return entries, records, at


def _amqp_records(head: bytes, entries: int) -> bool:
    """Whether records behind a gap must be AMQP 1.0 messages to be believed: unless the
    chunk's first simple record before the gap shows the stream holds something else."""
    at = 0
    for _ in range(entries):
        end, _count = _step(head, at, len(head))
        if not head[at] & 0x80:
            return amqp.looks_like_amqp(head[at + 4 : end])
        at = end
    return True


def _chains(data: bytes, exact: bool, amqp_only: bool) -> list[list[tuple[int, int, int]]]:
    """The candidate chains of entries in data, earliest start first, as (start, end, records)
    each: when exact, those ending exactly at the end of data; else those ending in an entry
    the end of data cuts (or exactly at it). Every record must pass _believable. A candidate
    starts where no other candidate's entry ends: a chain from one of its later entries is the
    same reading, shorter.

    Starts are tried in order, each chain followed entry by entry until it ends or meets a
    position already settled: chains from false starts soon fail or join the true one, so
    the work is about one step per candidate start plus one walk of the chain.
    """
    n = len(data)
    starts = _candidate_starts(data, exact, amqp_only)
    after: dict[int, tuple[int, int]] = {}
    # Whether a believed chain runs from a position to where chains may stop: the end of data,
    # and (not exact) an entry the end of data cuts.
    ok: dict[int, bool] = {n: True}
    settled = ok.get
    # Where a believed entry ends, and the records inside a believed uncompressed sub-batch (they
    # read as simple entries on their own): a start there is that chain's reading, not another.
    # Entries run forward and starts come in order, so at a start's turn every chain that could
    # run through it has been followed.
    ends: set[int] = set()
    heads: list[int] = []
    for start in starts:
        known = settled(start)
        if known is not None:  # on a chain followed before (most starts, once one is found)
            if known and start in after and start not in ends:
                heads.append(start)  # behind an unbelievable entry: a chain of its own
            continue
        if start in ends:
            continue  # a record inside a believed sub-batch
        path: list[int] = []
        at = start
        while at not in ok:
            end, count = _step(data, at, n)
            if end == CUT_OFF:
                ok[at] = not exact
                break
            if end <= at:
                ok[at] = False
                break
            after[at] = (end, count)
            path.append(at)
            at = end
        good = ok[at]
        for at in reversed(path):  # settled from the end back: one unbelievable entry ends it
            good = good and _believable(data, at, after[at][0], amqp_only)
            ok[at] = good
            if good:
                ends.add(after[at][0])
                if data[at] & 0x80 and not (data[at] >> 4) & 0x07:
                    inner, stop = at + _SUB_BATCH.size, after[at][0]
                    while stop - inner >= 4:
                        ends.add(inner)
                        inner += 4 + _U32.unpack_from(data, inner)[0]
        if ok[start] and start in after:
            heads.append(start)
    chains = []
    for start in heads:
        chain = []
        at = start
        while at in after:
            end, count = after[at]
            chain.append((at, end, count))
            at = end
        chains.append(chain)
    return chains


def _admissible(
    chain: list[tuple[int, int, int]], end_offset: int | None, constraint: tuple[int, int, int | None] | None
) -> list[tuple[int, int, int]]:
    """The longest end of chain the chunk's counts allow: constraint is (the entries known
    before it, the least offset its first record may have, the chunk's entries if known);
    its last record's offset is end_offset - 1. A chain the counts rule out from its start
    (it would hold more entries or records than the gap can have taken) may still end in
    the true entries."""
    if constraint is None or end_offset is None:
        return chain
    known, least, entries = constraint
    records = sum(count for _, _, count in chain)
    for k, (_, _, count) in enumerate(chain):
        index_ok = entries is None or entries - (len(chain) - k) > known
        if index_ok and end_offset - records >= least:
            return chain[k:]
        records -= count
    return []


def _agreed(candidates: list[list[tuple[int, int, int]]]) -> list[tuple[int, int, int]]:
    """The entries every candidate holds: chains that meet go on as one, so it is the end of the
    first candidate from where all the others have joined it (nothing when they never meet)."""
    others = [{start for start, _, _ in chain} for chain in candidates[1:]]
    first = candidates[0]
    for k, (start, _, _) in enumerate(first):
        if all(start in positions for positions in others):
            return first[k:]
    return []


def _believable(data: bytes, start: int, end: int, amqp_only: bool) -> bool:
    """Whether the entry from start to end holds what a chunk holds: a sub-batch whose header
    adds up (uncompressed, its body is exactly its count of [u32 size][record], each record
    believable), or a record that is an AMQP 1.0 message where the stream's are."""
    if data[start] & 0x80:
        _, count, uncompressed, length = _SUB_BATCH.unpack_from(data, start)
        if (data[start] >> 4) & 0x07 != 0:
            return True  # compressed: its records are not seen without decompressing them
        if uncompressed != length:
            return False
        at = start + _SUB_BATCH.size
        for _ in range(count):
            if end - at < 4:
                return False
            after = at + 4 + _U32.unpack_from(data, at)[0]
            if after > end or not _record_believable(data, at + 4, after, amqp_only):
                return False
            at = after
        return at == end
    return _record_believable(data, start + 4, end, amqp_only)


def _record_believable(data: bytes, start: int, end: int, amqp_only: bool) -> bool:
    if not amqp_only:
        return True
    body = data[start:end]
    if not amqp.looks_like_amqp(body):
        return False
    return amqp.data_message(body, 0, len(body), 0) is not None or amqp.decode_message(body).error is None


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
            result = decompress(
                entry.compression, entry.body, entry.uncompressed_length, ctx.limits.sub_batch
            )
        except TooLarge as exc:
            over = f"declared uncompressed length {exc.declared} is over {hint('sub_batch', exc.cap)}"
            ctx.expert.append(Expert("error", f"{where}: sub-batch: {over}", entry.pos))
            return []
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
    message = amqp.decode_message(body, base, ctx.limits.amqp_depth) if amqp.looks_like_amqp(body) else None
    if message is None:
        record["bytes"] = body
        if node is not None:
            node.label += ", not AMQP 1.0"
            node.children.append(Node(None, f"Bytes: {preview(bytes(body))}", node.offset, len(body)))
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
    for note in content_notes(message):
        ctx.expert.append(
            Expert("note", f"AMQP 1.0 message: {note}", entry_pos if at is None else at, group=CONTENT)
        )
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
            node.children.append(Node(None, f"{key}: {preview(item)}", section.offset, 0))
    elif isinstance(value, list):
        node.label += f": {len(value)} items"
        for i, item in enumerate(value):
            node.children.append(Node(None, f"[{i}]: {preview(item)}", section.offset, 0))
    else:
        node.label += f": {preview(value)}"
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


def ids_of(message: dict[str, Any]) -> int:
    """How many publishing ids a Publish message may use: a sub-batch's records (rstream gives a
    sub-batch the id of its last record, so its id is that many above the one before)."""
    entry = message.get("entry")
    return entry.record_count if isinstance(entry, Entry) else 1


AMQP_FORMAT = "AMQP 1.0"


def content_of(messages: list[Any], want_ids: bool) -> list[tuple[str | None, Any] | None]:
    """Each Publish message's format (AMQP 1.0, or None for other bytes) and, when asked, its
    message id; None for a sub-batch (its records are compressed, or many)."""
    out: list[tuple[str | None, Any] | None] = []
    append = out.append
    for message in messages:
        entry = message.get("entry") if type(message) is dict else None
        if type(entry) is not Entry or entry.kind != SIMPLE:
            append(None)
            continue
        body = entry.body
        if amqp.looks_like_amqp(body):
            append((AMQP_FORMAT, message_id(body) if want_ids else None))
        else:
            append(_NOT_AMQP)
    return out


_NOT_AMQP: tuple[str | None, Any] = (None, None)


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
