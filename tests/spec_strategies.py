"""Hypothesis strategies derived from registry field specs, and the values a decode must give back."""

from __future__ import annotations

import struct
import zlib
from typing import Any

from hypothesis import strategies as st
from streamdump.dissectors.rabbitmq_stream.osiris import (
    Entry,
    records_body,
    simple_entry,
    sub_batch_entry,
    write_entry,
)

from streamdump.codecs.compression import FRAMINGS, compress
from streamdump.spec.registry import INT_TYPES, FieldSpec

RECORDS = st.lists(st.binary(max_size=12), min_size=1, max_size=4)


@st.composite
def osiris_entries(draw: st.DrawFn) -> Entry:
    """A simple entry, or a sub-batch compressed in any framing streamdump reads."""
    records = draw(RECORDS)
    if draw(st.booleans()):
        return simple_entry(records[0])
    code = draw(st.sampled_from(sorted(FRAMINGS)))
    framing = draw(st.sampled_from(FRAMINGS[code]))
    return sub_batch_entry(records, code, compress(framing, records_body(records)))


def chunk_data(entries: list[Entry]) -> bytes:
    data = bytearray()
    for entry in entries:
        write_entry(data, entry)
    return bytes(data)


def int_range(type_name: str) -> tuple[int, int]:
    _, width, signed = INT_TYPES[type_name]
    bits = width * 8
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def value_strategy(spec: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    if spec.hook == "osiris_entry":
        return osiris_entries()
    if spec.hook == "osiris_chunk":
        return st.lists(osiris_entries(), max_size=3)
    if spec.type in INT_TYPES:
        low, high = int_range(spec.type)
        return st.integers(low, high)
    if spec.type == "string":
        return st.none() | st.text(max_size=20)
    if spec.type == "bytes":
        return st.none() | st.binary(max_size=20)
    if spec.type == "raw":
        size = spec.size if isinstance(spec.size, int) else None
        return st.binary(min_size=size or 0, max_size=size if size is not None else 30)
    if spec.type == "array":
        assert spec.of is not None
        return st.none() | st.lists(value_strategy(spec.of, version), max_size=3)
    if spec.type == "map":
        assert spec.key is not None and spec.value is not None
        return st.none() | st.dictionaries(
            value_strategy(spec.key, version).filter(lambda k: k is not None),
            value_strategy(spec.value, version),
            max_size=3,
        )
    if spec.type == "struct":
        return struct_strategy(spec.fields, version)
    raise AssertionError(spec.type)


def struct_strategy(specs: tuple[FieldSpec, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    present = [s for s in specs if s.since <= version]
    base = st.fixed_dictionaries({s.name: value_strategy(s, version) for s in present})
    return base.map(lambda values: normalise(present, values))


def normalise(specs: list[FieldSpec], values: dict[str, Any]) -> dict[str, Any]:
    """What the wire can carry of these values: conditions applied, sizes derived, absent tails dropped."""
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.when is not None and values.get(spec.when[0]) not in spec.when[1]:
            continue
        value = values[spec.name]
        if spec.hook == "osiris_chunk":
            # The header must agree with the data, as a broker's does.
            value = chunk_data(values[spec.name])
            out.update(
                magic_version=0x50,
                chunk_type=0,
                num_entries=len(values[spec.name]),
                num_records=sum(e.record_count for e in values[spec.name]),
                crc=zlib.crc32(value),
            )
            out[spec.size] = len(value)
            out[spec.name] = value
            out["crc_valid"] = True  # what the hook's check adds on every decode
            continue
        if spec.optional and (value is None or (spec.type == "raw" and not value)):
            break  # an absent optional field is the end of the frame (and an empty raw one looks absent)
        if spec.type == "raw" and isinstance(spec.size, str):
            out[spec.size] = len(value)
        out[spec.name] = value
    return out


def comparable(value: Any) -> Any:
    """Decoded values with memoryviews turned into bytes, for equality checks."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


# An independent builder of chunks as a broker sends them, for tests: not the decoder's spec.
_CHUNK_HEADER = struct.Struct(">BBHIqQQIIIB3x")


def encode_chunk(
    entries: list[Entry],
    *,
    chunk_id: int = 0,
    chunk_type: int = 0,
    timestamp: int = 0,
    epoch: int = 1,
    trailer_length: int = 0,
) -> bytes:
    """A chunk as a broker sends it (header and data, no trailer), CRC and counts computed."""
    data = bytearray()
    for entry in entries:
        write_entry(data, entry)
    records = sum(e.record_count for e in entries)
    header = _CHUNK_HEADER.pack(
        0x50, chunk_type, len(entries), records, timestamp, epoch, chunk_id,
        zlib.crc32(data), len(data), trailer_length, 0,
    )  # fmt: skip
    return header + bytes(data)
