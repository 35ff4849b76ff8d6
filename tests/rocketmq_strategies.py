"""Hypothesis strategies for RocketMQ frames, derived from dissectors/rocketmq/spec.yaml.

A frame's values: the header's (in JSON or in the binary encoding), the command's fields
(entries of extFields, a body, stored messages, JSON bodies) and what decoding derives
from them, so a test can encode, decode, and compare with what it gave.
"""

from __future__ import annotations

import zlib
from typing import Any

from hypothesis import strategies as st
from spec_strategies import int_range

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import INT_TYPES, FieldSpec, Layout, Protocol

V1, V2 = 0xDAA320A7, 0xDAA320AB
# Text that survives every encoding RocketMQ puts text in (key/value text has separators).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=12)
KEYS = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6).map(lambda s: "x_" + s)


def json_values() -> st.SearchStrategy[Any]:
    """JSON of no declared shape: objects, lists, integers, text, booleans."""
    scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
        max_leaves=6,
    )


def value(
    spec: FieldSpec, protocol: Protocol, *, text: bool = False, keyed: bool = False
) -> st.SearchStrategy[Any]:
    """A value of one field. text: it travels as text (an extFields entry, key/value text);
    keyed: it is a member of a keyed object (a JSON object), where structs are keyed too."""
    kind = spec.type
    if kind in INT_TYPES:
        low, high = int_range(kind)
        if spec.name == "sys_flag":
            high = min(high, 0x7FFFFFFF)
            return st.integers(0, high).map(lambda v: v & ~0x1)  # compressed bodies: their own tests
        return st.integers(low, high)
    if kind == "string":
        return TEXT
    if kind == "bool":
        return st.booleans()
    if kind in ("bytes", "raw"):
        return st.binary(min_size=1, max_size=24)
    if kind == "ipv4":
        return st.ip_addresses(v=4).map(str)
    if kind == "ipv6":
        return st.ip_addresses(v=6).map(str)
    if kind == "json" and not spec.fields:
        return st.dictionaries(KEYS, json_values(), max_size=3)
    if spec.struct == "stored_message":
        return stored_message(protocol)
    if spec.struct == "batch_message":
        return batch_message(protocol)
    if kind in ("json", "pairs") or (kind == "struct" and keyed):
        return keyed_struct(spec.fields, protocol, text=text or kind == "pairs")
    if kind == "array" and spec.of is not None:
        least = 1 if spec.optional and spec.prefix == "none" else 0  # an empty one is absent
        return st.lists(value(spec.of, protocol, text=text, keyed=keyed), min_size=least, max_size=3)
    if kind == "map" and spec.key is not None and spec.value is not None:
        keys = KEYS if spec.key.type == "string" else value(spec.key, protocol)
        return st.dictionaries(keys, value(spec.value, protocol, text=True), max_size=3)
    raise AssertionError(f"no strategy for {kind} ({spec.name})")


def keyed_struct(
    specs: tuple[FieldSpec, ...], protocol: Protocol, *, text: bool
) -> st.SearchStrategy[dict[str, Any]]:
    """Some of a keyed struct's members (a JSON object's, key/value text's), and rest entries."""
    members = {s.name: value(s, protocol, text=text, keyed=True) for s in specs if not s.rest}
    rest = next((s for s in specs if s.rest), None)
    chosen = st.fixed_dictionaries({}, optional=members)
    if rest is None:
        return chosen
    extra = st.dictionaries(KEYS, TEXT if text or rest.value.type == "string" else json_values(), max_size=2)  # type: ignore[union-attr]
    return st.tuples(chosen, extra).map(lambda pair: {**pair[0], rest.name: pair[1]} if pair[1] else pair[0])


@st.composite
def stored_message(draw: st.DrawFn, protocol: Protocol) -> dict[str, Any]:
    """One stored message as a broker writes it: hosts by sys_flag, its CRC, a topic its magic can hold."""
    magic = draw(st.sampled_from([V1, V2]))
    sys_flag = draw(st.integers(0, 0x7FFFFFFF)) & ~0x1
    body = draw(st.binary(max_size=24))
    topic = draw(TEXT.filter(lambda t: len(t.encode()) <= 127))
    out: dict[str, Any] = {
        "magic_code": magic,
        "body_crc": zlib.crc32(body) & 0x7FFFFFFF,
        "queue_id": draw(st.integers(0, 1000)),
        "message_flag": draw(st.integers(-(2**31), 2**31 - 1)),
        "queue_offset": draw(st.integers(0, 2**62)),
        "physical_offset": draw(st.integers(0, 2**62)),
        "sys_flag": sys_flag,
        "born_timestamp": draw(st.integers(0, 2**42)),
        "born_port": draw(st.integers(0, 65535)),
        "store_timestamp": draw(st.integers(0, 2**42)),
        "store_port": draw(st.integers(0, 65535)),
        "reconsume_times": draw(st.integers(0, 16)),
        "prepared_transaction_offset": draw(st.integers(0, 2**40)),
        "message_body": body,
        "topic": topic,
        "properties": draw(keyed_struct(protocol.structs["message_properties"], protocol, text=True)),
    }
    out["born_host_v6" if sys_flag & 0x10 else "born_host"] = draw(
        st.ip_addresses(v=6 if sys_flag & 0x10 else 4).map(str)
    )
    out["store_host_v6" if sys_flag & 0x20 else "store_host"] = draw(
        st.ip_addresses(v=6 if sys_flag & 0x20 else 4).map(str)
    )
    return out


@st.composite
def batch_message(draw: st.DrawFn, protocol: Protocol) -> dict[str, Any]:
    """One message of a SEND_BATCH_MESSAGE body, as clients write it (no magic, no CRC)."""
    return {
        "magic_code": 0,
        "body_crc": 0,
        "message_flag": draw(st.integers(-(2**31), 2**31 - 1)),
        "message_body": draw(st.binary(max_size=24)),
        "properties": draw(keyed_struct(protocol.structs["message_properties"], protocol, text=True)),
    }


def layout_values(layout: Layout, protocol: Protocol) -> st.SearchStrategy[dict[str, Any]]:
    """Values for some of a command's fields; an optional body last, when present at all."""
    strategies: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for spec in layout.fields:
        target = optional if (spec.entry is not None or spec.optional) else strategies
        target[spec.name] = value(spec, protocol, text=spec.entry is not None)
    return st.fixed_dictionaries(strategies, optional=optional)


@st.composite
def header_values(draw: st.DrawFn, serialize: int, response: bool) -> dict[str, Any]:
    """The header a frame carries besides what the encoder derives (key, length, marks)."""
    out: dict[str, Any] = {
        "serialize_type": serialize,
        "language": draw(st.integers(0, 13)),
        "version": draw(st.integers(-(2**15), 2**15 - 1)),
        "opaque": draw(st.integers(-(2**31), 2**31 - 1)),
        "flag": draw(st.sampled_from([0, 4, 8])),
        "remark": draw(st.none() | TEXT) if serialize == 0 else draw(TEXT),
        "ext_fields": draw(st.dictionaries(KEYS, TEXT, max_size=2)),
    }
    if response:
        out["code"] = draw(st.integers(-(2**15), 2**15 - 1))
    if serialize == 0:
        out["serialize_type_current_rpc"] = draw(st.none() | st.just("JSON"))
        out["header_other"] = draw(st.dictionaries(KEYS, TEXT, max_size=2))
    return out


def expected(values: dict[str, Any], decoder: Decoder) -> dict[str, Any]:
    """What decoding gives back: the values, with what decoding derives and without absences."""
    out = {k: v for k, v in values.items() if v is not None and v != {} and k != "version"}
    for message in out.get("messages") or []:
        message["total_size"] = len(decoder.encode_struct("stored_message", message))
        message["body_crc_valid"] = True
    for message in out.get("batch_messages") or []:
        message["total_size"] = len(decoder.encode_struct("batch_message", message))
    return out


def comparable(fields: dict[str, Any]) -> dict[str, Any]:
    """Decoded fields as test values are written: bytes for views, no nulls, no derived header words."""
    derived = {"header_word", "header_length"}

    def plain(v: Any) -> Any:
        if isinstance(v, memoryview):
            return bytes(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return {k: plain(v) for k, v in fields.items() if k not in derived and v is not None and v != {}}
