"""Osiris chunks and their entries, parsed from raw bytes without streamdump.

The recordings check their captures and cut their fixtures with this small parser of their
own, so that the ground truth never comes from the decoder it is meant to test. Owns the
48-byte chunk header (`StoredChunk`), the data entries of a chunk or a Publish message
(`Entry`: a simple record or a sub-batch) and the tracking entries of tracking chunks and
trailers.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, fields
from typing import Any

from scenario_tools import expect

CHUNK_HEADER = struct.Struct(">BBHIqQQIIIB3x")
CHUNK_HEADER_LEN = CHUNK_HEADER.size  # 48
CHUNK_MAGIC_VERSION = 0x50


@dataclass(frozen=True)
class StoredChunk:
    """One chunk as osiris stores it in a segment file (or sends it in a Deliver frame)."""

    segment: str
    position: int
    magic_version: int
    chunk_type: int
    num_entries: int
    num_records: int
    timestamp: int
    epoch: int
    chunk_id: int
    data_crc: int
    data_length: int
    trailer_length: int
    bloom_size: int
    raw: bytes  # header, data, trailer, bloom

    @classmethod
    def unpack(cls, buf: bytes, position: int, segment: str) -> StoredChunk:
        """The chunk whose header starts at `position`; `raw` stops where the buffer does if it is short."""
        header = CHUNK_HEADER.unpack_from(buf, position)
        data_length, trailer_length, bloom_size = header[-3:]
        end = position + CHUNK_HEADER_LEN + data_length + trailer_length + bloom_size
        return cls(segment, position, *header, raw=buf[position:end])

    @property
    def size(self) -> int:
        """Header, data, trailer and bloom filter, as the header declares them."""
        return CHUNK_HEADER_LEN + self.data_length + self.trailer_length + self.bloom_size

    @property
    def data(self) -> bytes:
        return self.raw[CHUNK_HEADER_LEN : CHUNK_HEADER_LEN + self.data_length]

    @property
    def trailer(self) -> bytes:
        start = CHUNK_HEADER_LEN + self.data_length
        return self.raw[start : start + self.trailer_length]

    def crc_ok(self) -> bool:
        return zlib.crc32(self.data) == self.data_crc

    def header(self) -> dict[str, int]:
        """Every header field, in header order."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("segment", "position", "raw")
        }

    def layout(self) -> dict[str, int]:
        return {
            "position": self.position,
            "chunk_type": self.chunk_type,
            "chunk_id": self.chunk_id,
            "num_entries": self.num_entries,
            "num_records": self.num_records,
            "data_length": self.data_length,
            "trailer_length": self.trailer_length,
            "bloom_size": self.bloom_size,
        }


@dataclass(frozen=True)
class Entry:
    """One data entry of a Publish message or of a chunk: a simple record or a sub-batch."""

    code: int | None  # compression code of a sub-batch, None for a simple entry
    records: int
    uncompressed_size: int
    body: bytes  # the record, or the sub-batch's compressed body


def read_entry(buf: bytes, pos: int) -> tuple[Entry, int]:
    if buf[pos] & 0x80 == 0:
        (size,) = struct.unpack_from(">I", buf, pos)
        return Entry(None, 1, size, buf[pos + 4 : pos + 4 + size]), pos + 4 + size
    kind, count, plain, size = struct.unpack_from(">BHII", buf, pos)
    start = pos + 11
    return Entry((kind >> 4) & 0x07, count, plain, buf[start : start + size]), start + size


def chunk_entries(data: bytes, count: int) -> list[Entry]:
    entries = []
    pos = 0
    for _ in range(count):
        entry, pos = read_entry(data, pos)
        entries.append(entry)
    expect(pos == len(data), f"entries end at {pos} of {len(data)} bytes")
    return entries


def tracking_entries(payload: bytes, snapshot: bool) -> list[dict[str, Any]]:
    """[type u8][id size u8][id][u64 value]...; in a snapshot a producer sequence (type 0) has two u64."""
    entries = []
    pos = 0
    while pos < len(payload):
        kind, size = payload[pos], payload[pos + 1]
        entry: dict[str, Any] = {"type": kind, "id": payload[pos + 2 : pos + 2 + size].decode()}
        pos += 2 + size
        if snapshot and kind == 0:
            entry["chunk_id"], entry["sequence"] = struct.unpack_from(">QQ", payload, pos)
            pos += 16
        else:
            (entry["value"],) = struct.unpack_from(">Q", payload, pos)
            pos += 8
        entries.append(entry)
    expect(pos == len(payload), f"tracking entries end at {pos} of {len(payload)} bytes")
    return entries
