"""Byte ranges of one capture file that separate tasks read on their own (Spark's splits).

A classic pcap file is a header, then records that each start with a 16-byte header giving
their length; pcapng is blocks carrying their length at both ends. A task handed a range
finds its first record by checking, at each offset, a chain of plausible record headers
(as the published splittable pcap readers do). A scan of every range then walks its
records up to the next range, which confirms where that range starts: the driver rescans
the rare range whose guess disagrees, so no heuristic decides what is decoded. Compressed
files cannot be entered mid-stream; each is one range. A file the scan finds damaged is
read whole by the reader the CLI uses, so it fails the same way.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator
from io import BytesIO
from typing import BinaryIO

from msgspec import Struct, field

from streamdump.wire.capture import (
    BZIP2_MAGIC,
    GZIP_MAGIC,
    MAX_RECORD,
    PCAP_MAGICS,
    PCAPNG_MAGIC,
    XZ_MAGIC,
    ZSTD_MAGIC,
)
from streamdump.wire.packet import Segment, parse
from streamdump.wire.pcapng import (
    BYTE_ORDERS,
    DESCRIBING,
    EPB,
    PB,
    SPB,
    PcapngError,
    Section,
    plausible_length,
    read_packets,
)

PCAP_HEADER = 24
_RECORD = {"<": struct.Struct("<IIII"), ">": struct.Struct(">IIII")}
_BLOCK = {"<": struct.Struct("<II"), ">": struct.Struct(">II")}
# Records (or blocks) that must follow a candidate start, each well formed, before it is believed;
# fewer when the file ends first, exactly at a record's end.
CHAIN = 8
# How far past a range's start its first record is looked for: beyond, the range holds none;
# and how much is read at a time while looking.
SEARCH = MAX_RECORD + 16
WINDOW = 256 << 10
# Where a scan remembers the last records of its range: the file's last TCP segment is among them.
TAIL = 32
# A record's time may step back this much (clock adjustments, merged interfaces) and still chain.
BACKSTEP_S = 3600
PACKET_BLOCKS = frozenset({EPB, SPB, PB})


class SplitError(Exception):
    """A file cannot be split; str() says why in one line."""


class Layout(Struct, frozen=True):
    """What a capture's first bytes say about how its records are laid out."""

    kind: str  # pcap, pcapng, or whole (compressed: read from the start only)
    order: str = "<"
    nano: bool = False
    linktype: int = 0
    snaplen: int = 0


class Split(Struct, frozen=True):
    capture: int  # the file's place among the inputs
    path: str
    index: int  # the range's place in its file
    start: int
    end: int
    layout: Layout


class Scan(Struct):
    """What walking one range found: where its records start and stop, and how many there are."""

    first: int | None  # offset of the range's first record (None: no record starts in it)
    stop: int  # where the walk ended: the first record at or past the range's end, or the file's end
    packets: int = 0
    tail: list[int] = field(default_factory=list)  # offsets of its last records, oldest first
    damaged: str | None = None  # why the walk met bytes that are no record
    described: list[tuple[int, bytes]] = field(default_factory=list)  # pcapng SHB and IDB blocks


def layout_of(head: bytes) -> Layout | None:
    """The layout a file's first 24 bytes show, or None for a file that is no capture."""
    if head.startswith((GZIP_MAGIC, ZSTD_MAGIC, XZ_MAGIC, BZIP2_MAGIC)):
        return Layout("whole")
    if head[:4] == PCAPNG_MAGIC:
        return Layout("pcapng")
    if head[:4] in PCAP_MAGICS and len(head) >= PCAP_HEADER:
        order = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        nano = head[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
        snaplen, linktype = struct.unpack_from(order + "II", head, 16)
        return Layout("pcap", order, nano, linktype, snaplen)
    return None


def plan(capture: int, path: str, size: int, layout: Layout, split_bytes: int) -> list[Split]:
    """The file's ranges: one for a compressed file, else ranges of split_bytes."""
    if layout.kind == "whole" or size <= split_bytes:
        return [Split(capture, path, 0, 0, size, layout)]
    starts = range(0, size, split_bytes)
    return [Split(capture, path, n, s, min(s + split_bytes, size), layout) for n, s in enumerate(starts)]


# ---------------------------------------------------------------------- finding a start


def find_first(fh: BinaryIO, split: Split, size: int) -> int | None:
    """The first offset at or after the range's start where records chain; None if none does
    within reach (a range inside one huge record, or damage)."""
    layout = split.layout
    if split.start == 0:
        return PCAP_HEADER if layout.kind == "pcap" else 0
    at, limit = split.start, min(size, split.start + SEARCH)
    while at < limit:
        fh.seek(at)
        window = fh.read(min(WINDOW, limit - at))
        # Cheap checks on the bytes in hand first; the chain (more reads) only where they pass.
        for i in range(max(1, len(window) - 15)):
            offset = at + i
            if layout.kind == "pcap":
                if _pcap_record(layout, window[i : i + 16]) is not None and _pcap_chain(
                    fh, layout, offset, size
                ):
                    return offset
            elif _block_length_plausible(window, i) and _pcapng_order(fh, offset, size) is not None:
                return offset
        at += max(1, len(window) - 15)
    return None


def _block_length_plausible(window: bytes, i: int) -> bool:
    head = window[i + 4 : i + 8]
    if len(head) < 4:
        return True  # near the window's end: let the full check decide
    return any(map(plausible_length, struct.unpack("<I", head) + struct.unpack(">I", head)))


def _pcap_record(layout: Layout, head: bytes) -> tuple[int, int, int] | None:
    """A plausible record header's (seconds, captured length, wire length), else None."""
    if len(head) < 16:
        return None
    sec, frac, caplen, wire = _RECORD[layout.order].unpack(head)
    if frac >= (1_000_000_000 if layout.nano else 1_000_000) or caplen > wire or wire > MAX_RECORD:
        return None
    if layout.snaplen and caplen > max(layout.snaplen, 262_144):
        return None
    return sec, caplen, wire


def _pcap_chain(fh: BinaryIO, layout: Layout, offset: int, size: int) -> bool:
    previous: int | None = None
    for _ in range(CHAIN):
        if offset == size:
            return True
        fh.seek(offset)
        record = _pcap_record(layout, fh.read(16))
        if record is None:
            return False
        sec, caplen, _wire = record
        if previous is not None and sec + BACKSTEP_S < previous:
            return False
        previous = sec
        offset += 16 + caplen
        if offset > size:
            return False
    return True


def _pcapng_order(fh: BinaryIO, offset: int, size: int) -> str | None:
    """The byte order in which blocks chain from offset (their lengths repeated at their ends);
    a section header met on the way sets the order from there on, as it does for readers."""
    for start_order in ("<", ">"):
        order: str | None = start_order
        at = offset
        for _ in range(CHAIN):
            if at == size:
                return start_order
            fh.seek(at)
            if fh.read(4) == PCAPNG_MAGIC:
                fh.seek(at + 8)
                order = BYTE_ORDERS.get(fh.read(4))
            length = _pcapng_block(fh, order, at, size) if order is not None else None
            if length is None:
                break
            at += length
        else:
            return start_order
    return None


def _pcapng_block(fh: BinaryIO, order: str, offset: int, size: int) -> int | None:
    fh.seek(offset)
    head = fh.read(8)
    if len(head) < 8:
        return None
    btype, length = _BLOCK[order].unpack(head)
    if not plausible_length(length) or offset + length > size:
        return None
    if btype != 0x0A0D0D0A and btype > 0xFF and btype & 0x7FFFFFFF != 0xBAD:
        return None  # not a standard block type, nor a custom one
    fh.seek(offset + length - 4)
    (trailing,) = struct.unpack(order + "I", fh.read(4))
    return length if trailing == length else None


# ---------------------------------------------------------------------- scanning


def scan(fh: BinaryIO, split: Split, size: int, first: int | None) -> Scan:
    """Walk the range's records from first: their count, where the walk ends, its last offsets."""
    if first is None or first >= split.end:
        return Scan(first, first if first is not None else split.end)
    if split.layout.kind == "pcap":
        return _scan_pcap(fh, split, size, first)
    return _scan_pcapng(fh, split, size, first)


def _scan_pcap(fh: BinaryIO, split: Split, size: int, first: int) -> Scan:
    found = Scan(first, first)
    tail: deque[int] = deque(maxlen=TAIL)
    record = _RECORD[split.layout.order]
    at = first
    fh.seek(at)
    while at < split.end and at < size:
        head = fh.read(16)
        if len(head) < 16:
            found.damaged = "the file ends inside a record header"
            break
        caplen = record.unpack(head)[2]
        if caplen > MAX_RECORD or at + 16 + caplen > size:
            found.damaged = f"a record at offset {at} claims {caplen} bytes"
            break
        tail.append(at)
        found.packets += 1
        at += 16 + caplen
        fh.seek(at)
    found.stop, found.tail = at, list(tail)
    return found


def _scan_pcapng(fh: BinaryIO, split: Split, size: int, first: int) -> Scan:
    order = _pcapng_order(fh, first, size) if first else "<"
    found = Scan(first, first)
    tail: deque[int] = deque(maxlen=TAIL)
    at = first
    while at < split.end and at < size:
        fh.seek(at)
        head = fh.read(12)
        if len(head) < 12 or order is None:
            found.damaged = "the file ends inside a block header"
            break
        if head[:4] == PCAPNG_MAGIC:
            order = BYTE_ORDERS.get(head[8:12])
            if order is None:
                found.damaged = f"a section header at offset {at} has a bad byte-order magic"
                break
        btype, length = _BLOCK[order].unpack(head[:8])
        if not plausible_length(length) or at + length > size:
            found.damaged = f"a block at offset {at} claims {length} bytes"
            break
        if btype in DESCRIBING:
            fh.seek(at)
            found.described.append((at, fh.read(length)))
        elif btype in PACKET_BLOCKS:
            tail.append(at)
            found.packets += 1
        at += length
    found.stop, found.tail = at, list(tail)
    return found


# ---------------------------------------------------------------------- reading


def section_at(described: list[tuple[int, bytes]]) -> Section:
    """The pcapng section a reader is in after the given section and interface blocks."""
    section = Section()
    for _ in read_packets(BytesIO(b"".join(block for _, block in described)), section):
        pass
    return section


def records(
    fh: BinaryIO, split: Split, first: int, section: Section | None = None
) -> Iterator[tuple[float, int, bytes]]:
    """(timestamp, link type, packet bytes) of every record starting in the range, from first;
    section (pcapng): the one the range starts in, left as it is."""
    fh.seek(first)
    if split.layout.kind == "pcapng":
        try:
            yield from read_packets(fh, section.copy() if section else Section(), first, split.end)
        except PcapngError as exc:
            raise SplitError(f"{split.path}: {exc}") from None
        return
    layout = split.layout
    record = _RECORD[layout.order]
    at = first
    while at < split.end:
        head = fh.read(16)
        if len(head) < 16:
            return
        sec, frac, caplen, _wire = record.unpack(head)
        data = fh.read(caplen)
        # The same arithmetic as the CLI's reader, so times are equal bit for bit.
        ts = (sec * 1_000_000_000 + frac) / 1_000_000_000 if layout.nano else sec + frac / 1e6
        yield ts, layout.linktype, data
        at += 16 + caplen


def record_at(fh: BinaryIO, split: Split, offset: int, section: Section | None) -> Segment | None:
    """The TCP segment of the one record at offset (None: not TCP), numbered 0."""
    for ts, linktype, data in records(fh, split, offset, section):
        got = parse(linktype, data, 0, ts)
        return got if isinstance(got, Segment) else None
    return None


def head_blocks(fh: BinaryIO) -> list[tuple[int, bytes]]:
    """The section header and interface blocks a pcapng file starts with, up to its first other block."""
    blocks: list[tuple[int, bytes]] = []
    at, order = 0, "<"
    while True:
        fh.seek(at)
        head = fh.read(12)
        if len(head) < 12:
            return blocks
        if head[:4] == PCAPNG_MAGIC:
            order = BYTE_ORDERS.get(head[8:12], order)
        btype, length = _BLOCK[order].unpack(head[:8])
        if btype not in DESCRIBING or not plausible_length(length):
            return blocks
        fh.seek(at)
        blocks.append((at, fh.read(length)))
        at += length


def head_section(fh: BinaryIO) -> Section:
    """The pcapng section a file's first blocks describe (the header, then interface blocks)."""
    return section_at(head_blocks(fh))
