"""AMQP 1.0 messages: every type as independent encoders (proton, rstream) write it, round trips, garbage."""

from __future__ import annotations

import json
import math
import struct
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import proton
import pytest
import rstream
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Data
from rstream._pyamqp.message import Header as RstreamHeader

from streamdump.codecs import amqp
from streamdump.codecs import values as shown
from streamdump.codecs.amqp import (
    Array,
    Char,
    Decimal,
    Described,
    EncodeError,
    MalformedError,
    Symbol,
    Timestamp,
    Typed,
)

U = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")


def pn(fill: Callable[[Data], Any]) -> bytes:
    """What proton writes for the values fill puts into a fresh Data."""
    data = Data()
    fill(data)
    return data.encode()


def pn_decode(wire: bytes) -> Any:
    """proton's reading of wire; its binaries are memoryviews into the Data, copied while it lives."""
    data = Data()
    data.decode(wire)
    return _copied(data.get_object())


def _copied(value: Any) -> Any:
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, dict):
        return {_copied(k): _copied(v) for k, v in value.items()}
    return value


def value_of(wire: bytes) -> Any:
    value, end = amqp.decode_value(wire)
    assert end == len(wire)
    return value


def section(code: int, fill: Callable[[Data], Any]) -> bytes:
    """A message section as proton encodes a described value with a ulong descriptor."""

    def described(data: Data) -> None:
        data.put_described()
        data.enter()
        data.put_ulong(code)
        fill(data)
        data.exit()

    return pn(described)


# ---------------------------------------------------------------- every type, as proton writes it

# (proton put method, argument, expected decoded value, encoding proton chose)
SCALARS: list[tuple[str, Any, Any, str]] = [
    ("put_bool", True, True, "true"),
    ("put_bool", False, False, "false"),
    ("put_ubyte", 0, 0, "ubyte"),
    ("put_ubyte", 255, 255, "ubyte"),
    ("put_byte", -128, -128, "byte"),
    ("put_byte", 127, 127, "byte"),
    ("put_byte", 0, 0, "byte"),
    ("put_ushort", 0, 0, "ushort"),
    ("put_ushort", 65535, 65535, "ushort"),
    ("put_short", -32768, -32768, "short"),
    ("put_short", 32767, 32767, "short"),
    ("put_uint", 0, 0, "uint0"),
    ("put_uint", 255, 255, "smalluint"),
    ("put_uint", 256, 256, "uint"),
    ("put_uint", 2**32 - 1, 2**32 - 1, "uint"),
    ("put_int", -128, -128, "smallint"),
    ("put_int", 127, 127, "smallint"),
    ("put_int", -129, -129, "int"),
    ("put_int", 2**31 - 1, 2**31 - 1, "int"),
    ("put_int", -(2**31), -(2**31), "int"),
    ("put_ulong", 0, 0, "ulong0"),
    ("put_ulong", 255, 255, "smallulong"),
    ("put_ulong", 256, 256, "ulong"),
    ("put_ulong", 2**64 - 1, 2**64 - 1, "ulong"),
    ("put_long", 127, 127, "smalllong"),
    ("put_long", -128, -128, "smalllong"),
    ("put_long", 128, 128, "long"),
    ("put_long", 2**63 - 1, 2**63 - 1, "long"),
    ("put_long", -(2**63), -(2**63), "long"),
    ("put_float", 1.5, 1.5, "ieee-754"),
    ("put_float", -0.0, -0.0, "ieee-754"),
    ("put_float", 3.4028234663852886e38, 3.4028234663852886e38, "ieee-754"),
    ("put_float", math.inf, math.inf, "ieee-754"),
    ("put_double", 0.1, 0.1, "ieee-754"),
    ("put_double", -1e308, -1e308, "ieee-754"),
    ("put_double", 5e-324, 5e-324, "ieee-754"),
    ("put_double", -math.inf, -math.inf, "ieee-754"),
    ("put_decimal32", 7, Decimal(4, bytes.fromhex("00000007")), "ieee-754"),
    ("put_decimal32", 2**32 - 1, Decimal(4, b"\xff" * 4), "ieee-754"),
    ("put_decimal64", 2**64 - 1, Decimal(8, b"\xff" * 8), "ieee-754"),
    ("put_decimal128", bytes(range(16)), Decimal(16, bytes(range(16))), "ieee-754"),
    ("put_char", "a", Char("a"), "utf32"),
    ("put_char", "é", Char("é"), "utf32"),
    ("put_char", "\U0001f600", Char("\U0001f600"), "utf32"),
    ("put_char", "\x00", Char("\x00"), "utf32"),
    ("put_timestamp", 0, Timestamp(0), "ms64"),
    ("put_timestamp", -1, Timestamp(-1), "ms64"),
    ("put_timestamp", 1_700_000_000_000, Timestamp(1_700_000_000_000), "ms64"),
    ("put_timestamp", 2**63 - 1, Timestamp(2**63 - 1), "ms64"),
    ("put_timestamp", -(2**63), Timestamp(-(2**63)), "ms64"),
    ("put_uuid", U, U, "uuid"),
    ("put_uuid", uuid.UUID(int=0), uuid.UUID(int=0), "uuid"),
    ("put_binary", b"", b"", "vbin8"),
    ("put_binary", b"\x00\xff", b"\x00\xff", "vbin8"),
    ("put_binary", b"b" * 255, b"b" * 255, "vbin8"),
    ("put_binary", b"b" * 256, b"b" * 256, "vbin32"),
    ("put_string", "", "", "str8-utf8"),
    ("put_string", "héllo wörld", "héllo wörld", "str8-utf8"),
    ("put_string", "x" * 255, "x" * 255, "str8-utf8"),
    ("put_string", "x" * 256, "x" * 256, "str32-utf8"),
    ("put_string", "€" * 100, "€" * 100, "str32-utf8"),  # 100 characters, 300 bytes
    ("put_symbol", "", Symbol(""), "sym8"),
    ("put_symbol", "amqp:accepted:list", Symbol("amqp:accepted:list"), "sym8"),
    ("put_symbol", "s" * 300, Symbol("s" * 300), "sym32"),
]


@pytest.mark.parametrize(("method", "arg", "expected", "encoding"), SCALARS)
def test_proton_scalar(method: str, arg: Any, expected: Any, encoding: str) -> None:
    wire = pn(lambda d: getattr(d, method)(arg))
    assert amqp.encoding_name(wire[0]) == encoding
    value = value_of(wire)
    assert value == expected
    assert type(value) is type(expected)
    if isinstance(expected, float):
        assert math.copysign(1.0, value) == math.copysign(1.0, expected)


def test_proton_null_and_nan() -> None:
    assert value_of(pn(lambda d: d.put_null())) is None
    assert math.isnan(value_of(pn(lambda d: d.put_double(math.nan))))
    assert math.isnan(value_of(pn(lambda d: d.put_float(math.nan))))


def test_proton_lists() -> None:
    assert value_of(pn(lambda d: d.put_list())) == []

    def small(d: Data) -> None:
        d.put_list()
        d.enter()
        d.put_int(1)
        d.put_string("a")
        d.put_null()
        d.put_list()
        d.enter()
        d.put_bool(True)
        d.exit()
        d.exit()

    wire = pn(small)
    assert amqp.encoding_name(wire[0]) == "list32"  # proton writes list32 even for tiny lists
    assert value_of(wire) == [1, "a", None, [True]]

    def long_list(d: Data) -> None:
        d.put_list()
        d.enter()
        for i in range(300):
            d.put_uint(i)
        d.exit()

    assert value_of(pn(long_list)) == list(range(300))


def test_proton_maps() -> None:
    def empty(d: Data) -> None:
        d.put_map()

    assert value_of(pn(empty)) == {}

    def mixed(d: Data) -> None:
        d.put_map()
        d.enter()
        d.put_symbol("sym")
        d.put_string("a")
        d.put_string("str")
        d.put_long(-1)
        d.put_ulong(7)
        d.put_binary(b"v")
        d.put_int(8)
        d.put_map()
        d.enter()
        d.put_string("nested")
        d.put_null()
        d.exit()
        d.exit()

    value = value_of(pn(mixed))
    assert value == {"sym": "a", "str": -1, 7: b"v", 8: {"nested": None}}
    assert [type(k) for k in value] == [Symbol, str, int, int]

    def big(d: Data) -> None:
        d.put_map()
        d.enter()
        for i in range(200):
            d.put_string(f"key-{i}")
            d.put_string("v" * 10)
        d.exit()

    assert value_of(pn(big)) == {f"key-{i}": "v" * 10 for i in range(200)}


def test_proton_unhashable_map_keys_become_tuples() -> None:
    def fill(d: Data) -> None:
        d.put_map()
        d.enter()
        d.put_list()
        d.enter()
        d.put_int(1)
        d.put_list()
        d.enter()
        d.put_int(2)
        d.exit()
        d.exit()
        d.put_string("list key")
        d.put_map()
        d.enter()
        d.put_string("k")
        d.put_string("v")
        d.exit()
        d.put_string("map key")
        d.exit()

    assert value_of(pn(fill)) == {(1, (2,)): "list key", (("k", "v"),): "map key"}


def array(element: int, items: list[Any], put: str, descriptor: Callable[[Data], Any] | None = None) -> bytes:
    def fill(d: Data) -> None:
        d.put_array(descriptor is not None, element)
        d.enter()
        if descriptor is not None:
            descriptor(d)
        for item in items:
            getattr(d, put)(item)
        d.exit()

    return pn(fill)


@pytest.mark.parametrize(
    ("element", "put", "items", "type_name"),
    [
        (Data.INT, "put_int", [1, -1, 2**31 - 1], "int"),
        (Data.UINT, "put_uint", [0, 2, 2**32 - 1], "uint"),
        (Data.ULONG, "put_ulong", [0, 2**64 - 1], "ulong"),
        (Data.LONG, "put_long", [-(2**63), 0], "long"),
        (Data.UBYTE, "put_ubyte", [0, 255], "ubyte"),
        (Data.BYTE, "put_byte", [-128, 127], "byte"),
        (Data.SHORT, "put_short", [-1], "short"),
        (Data.USHORT, "put_ushort", [65535], "ushort"),
        (Data.BOOL, "put_bool", [True, False], "boolean"),
        (Data.NULL, "put_null", [], "null"),
        (Data.FLOAT, "put_float", [1.5, -2.0], "float"),
        (Data.DOUBLE, "put_double", [0.1], "double"),
        (Data.CHAR, "put_char", ["a", "\U0001f600"], "char"),
        (Data.TIMESTAMP, "put_timestamp", [1, -1], "timestamp"),
        (Data.UUID, "put_uuid", [U, uuid.UUID(int=1)], "uuid"),
        (Data.BINARY, "put_binary", [b"", b"x" * 300], "binary"),
        (Data.STRING, "put_string", ["x", "y" * 300], "string"),
        (Data.SYMBOL, "put_symbol", ["a", "b"], "symbol"),
        (Data.STRING, "put_string", [], "string"),
        (Data.DECIMAL64, "put_decimal64", [1, 2], "decimal64"),
    ],
)
def test_proton_arrays(element: int, put: str, items: list[Any], type_name: str) -> None:
    value = value_of(array(element, items, put))
    assert isinstance(value, Array)
    assert value.element_type == type_name
    assert value.descriptor is None
    if type_name == "decimal64":
        assert value.items == [Decimal(8, struct.pack(">Q", i)) for i in items]
    else:
        assert value.items == items
    if type_name == "char":
        assert all(type(v) is Char for v in value.items)


def test_proton_array_of_nulls() -> None:
    def fill(d: Data) -> None:
        d.put_array(False, Data.NULL)
        d.enter()
        d.put_null()
        d.put_null()
        d.put_null()
        d.exit()

    assert value_of(pn(fill)) == Array("null", [None, None, None])


def test_proton_described_arrays() -> None:
    wire = array(Data.INT, [1, 2], "put_int", lambda d: d.put_symbol("desc"))
    assert value_of(wire) == Array("int", [1, 2], Symbol("desc"))
    wire = array(Data.STRING, ["a"], "put_string", lambda d: d.put_ulong(0x1234))
    assert value_of(wire) == Array("string", ["a"], 0x1234)
    assert amqp.to_json(value_of(wire)) == [{"descriptor": 0x1234, "value": "a"}]


def test_proton_arrays_of_arrays_lists_and_maps() -> None:
    def arrays(d: Data) -> None:
        d.put_array(False, Data.ARRAY)
        d.enter()
        d.put_array(False, Data.INT)
        d.enter()
        d.put_int(1)
        d.exit()
        d.put_array(False, Data.STRING)
        d.enter()
        d.put_string("x")
        d.put_string("y")
        d.exit()
        d.put_array(True, Data.ULONG)
        d.enter()
        d.put_symbol("inner")
        d.put_ulong(9)
        d.exit()
        d.exit()

    assert value_of(pn(arrays)) == Array(
        "array",
        [Array("int", [1]), Array("string", ["x", "y"]), Array("ulong", [9], Symbol("inner"))],
    )

    def lists(d: Data) -> None:
        d.put_array(False, Data.LIST)
        d.enter()
        d.put_list()
        d.put_list()
        d.enter()
        d.put_int(3)
        d.exit()
        d.exit()

    assert value_of(pn(lists)) == Array("list", [[], [3]])

    def maps(d: Data) -> None:
        d.put_array(False, Data.MAP)
        d.enter()
        d.put_map()
        d.enter()
        d.put_string("k")
        d.put_int(1)
        d.exit()
        d.exit()

    assert value_of(pn(maps)) == Array("map", [{"k": 1}])


def test_proton_described() -> None:
    def fill(d: Data) -> None:
        d.put_described()
        d.enter()
        d.put_ulong(0x0000_0000_0000_0023)
        d.put_list()
        d.enter()
        d.put_string("reason")
        d.put_described()
        d.enter()
        d.put_symbol("amqp:inner")
        d.put_binary(b"\x01")
        d.exit()
        d.exit()
        d.exit()

    assert value_of(pn(fill)) == Described(0x23, ["reason", Described(Symbol("amqp:inner"), b"\x01")])


# ---------------------------------------------------------------- whole messages, as proton writes them


def full_proton_message() -> proton.Message:
    message = proton.Message(
        body="hello",
        durable=True,
        priority=7,
        ttl=1.5,  # seconds in proton, milliseconds on the wire
        first_acquirer=True,
        delivery_count=3,
        id=U,
        user_id=b"guest",
        address="orders",
        subject="subject",
        reply_to="replies",
        correlation_id=proton.ulong(42),
        content_type="text/plain",
        content_encoding="gzip",
        expiry_time=1_700_000_001.5,
        creation_time=1_700_000_000.25,
        group_id="group",
        group_sequence=9,
        reply_to_group_id="reply-group",
    )
    message.instructions = {proton.symbol("x-opt-delivery"): "d", proton.symbol("x-n"): 1}
    message.annotations = {
        proton.symbol("x-opt-partition-key"): "pk",
        proton.symbol("x-count"): proton.ulong(5),
    }
    message.properties = {
        "long": 2**40,
        "int": proton.int32(-2),
        "short": proton.short(-3),
        "byte": proton.byte(-4),
        "ulong": proton.ulong(2**64 - 1),
        "uint": proton.uint(6),
        "ushort": proton.ushort(7),
        "ubyte": proton.ubyte(8),
        "float": proton.float32(0.5),
        "double": 2.25,
        "bool": False,
        "string": "text",
        "symbol": proton.symbol("sym"),
        "binary": b"\x00\x01",
        "uuid": U,
        "timestamp": proton.timestamp(1_700_000_000_000),
        "char": proton.char("c"),
        "null": None,
        "decimal32": proton.decimal32(1),
        "list": [1, "two"],
        "map": {"nested": True},
    }
    return message


def test_proton_message_with_every_header_and_property_field() -> None:
    wire = full_proton_message().encode()
    assert amqp.looks_like_amqp(wire)
    message = amqp.decode_message(wire)
    assert message.error is None and message.error_offset is None
    assert message.notes == []
    names = [s.name for s in message.sections]
    assert names == [
        "header",
        "delivery_annotations",
        "message_annotations",
        "properties",
        "application_properties",
        "amqp_value",
    ]
    by_name = {s.name: s for s in message.sections}
    assert by_name["header"].value == {
        "durable": True,
        "priority": 7,
        "ttl": 1500,
        "first_acquirer": True,
        "delivery_count": 3,
    }
    assert by_name["delivery_annotations"].value == {"x-opt-delivery": "d", "x-n": 1}
    assert by_name["message_annotations"].value == {"x-opt-partition-key": "pk", "x-count": 5}
    assert all(type(k) is Symbol for k in by_name["message_annotations"].value)
    properties = by_name["properties"].value
    assert properties == {
        "message_id": U,
        "user_id": b"guest",
        "to": "orders",
        "subject": "subject",
        "reply_to": "replies",
        "correlation_id": 42,
        "content_type": "text/plain",
        "content_encoding": "gzip",
        "absolute_expiry_time": 1_700_000_001_500,
        "creation_time": 1_700_000_000_250,
        "group_id": "group",
        "group_sequence": 9,
        "reply_to_group_id": "reply-group",
    }
    assert type(properties["content_type"]) is Symbol
    assert type(properties["creation_time"]) is Timestamp
    app = by_name["application_properties"].value
    assert app == {
        "long": 2**40,
        "int": -2,
        "short": -3,
        "byte": -4,
        "ulong": 2**64 - 1,
        "uint": 6,
        "ushort": 7,
        "ubyte": 8,
        "float": 0.5,
        "double": 2.25,
        "bool": False,
        "string": "text",
        "symbol": "sym",
        "binary": b"\x00\x01",
        "uuid": U,
        "timestamp": 1_700_000_000_000,
        "char": "c",
        "null": None,
        "decimal32": Decimal(4, bytes.fromhex("00000001")),
        "list": [1, "two"],
        "map": {"nested": True},
    }
    assert (type(app["symbol"]), type(app["char"]), type(app["timestamp"])) == (Symbol, Char, Timestamp)
    assert by_name["amqp_value"].value == "hello"
    # Offsets and lengths tile the message.
    assert message.sections[0].offset == 0
    for before, after in zip(message.sections, message.sections[1:], strict=False):
        assert before.offset + before.length == after.offset
    last = message.sections[-1]
    assert last.offset + last.length == len(wire)


def test_proton_message_bodies() -> None:
    data = amqp.decode_message(proton.Message(body=b"raw bytes", inferred=True).encode())
    # proton always writes an (empty) header and properties section.
    assert [(s.name, s.value) for s in data.sections] == [
        ("header", {}),
        ("properties", {}),
        ("data", b"raw bytes"),
    ]
    binary_value = amqp.decode_message(proton.Message(body=b"raw").encode())
    assert binary_value.sections[-1].name == "amqp_value" and binary_value.sections[-1].value == b"raw"
    sequence = amqp.decode_message(proton.Message(body=[1, "a", None], inferred=True).encode())
    assert (sequence.sections[-1].name, sequence.sections[-1].value) == ("amqp_sequence", [1, "a", None])
    mapping = amqp.decode_message(proton.Message(body={"k": [1.5]}).encode())
    assert (mapping.sections[-1].name, mapping.sections[-1].value) == ("amqp_value", {"k": [1.5]})
    empty = amqp.decode_message(proton.Message().encode())
    assert empty.error is None
    assert empty.notes == ["message has no body section (data, amqp_sequence or amqp_value)"]


def test_proton_footer_and_several_data_sections() -> None:
    def footer(d: Data) -> None:
        d.put_map()
        d.enter()
        d.put_symbol("x-hash")
        d.put_binary(b"\xab")
        d.exit()

    wire = (
        proton.Message(body=b"first", inferred=True).encode()
        + section(0x75, lambda d: d.put_binary(b"second"))
        + section(0x75, lambda d: d.put_binary(b""))
        + section(0x78, footer)
    )
    message = amqp.decode_message(wire)
    assert message.error is None and message.notes == []
    assert [s.name for s in message.sections] == ["header", "properties", "data", "data", "data", "footer"]
    assert amqp.message_json(message) == {
        "header": {},
        "properties": {},
        "data": ["6669727374", "7365636f6e64", ""],
        "footer": {"x-hash": "ab"},
    }


def test_symbolic_and_ulong_section_descriptors() -> None:
    def symbolic(d: Data) -> None:
        d.put_described()
        d.enter()
        d.put_symbol("amqp:data:binary")
        d.put_binary(b"payload")
        d.exit()

    wire = pn(symbolic)
    assert amqp.looks_like_amqp(wire)
    message = amqp.decode_message(wire)
    assert [(s.code, s.name, s.value) for s in message.sections] == [(0x75, "data", b"payload")]
    ulong_form = b"\x00\x80" + struct.pack(">Q", 0x77) + b"\xa1\x02hi"
    assert amqp.looks_like_amqp(ulong_form)
    assert amqp.decode_message(ulong_form).sections[0].value == "hi"
    sym32 = b"\x00\xb3" + struct.pack(">I", 17) + b"amqp:amqp-value:*" + b"\x40"
    assert amqp.looks_like_amqp(sym32)
    assert [(s.name, s.value) for s in amqp.decode_message(sym32).sections] == [("amqp_value", None)]


def test_our_messages_decode_in_proton() -> None:
    wire = amqp.encode_message(
        [
            ("header", {"durable": True, "priority": 4, "ttl": 60_000, "delivery_count": 2}),
            ("message_annotations", {"x-opt-key": "v"}),
            (
                "properties",
                {
                    "message_id": 77,
                    "user_id": b"guest",
                    "to": "q",
                    "correlation_id": "c-1",
                    "content_type": "application/json",
                    "creation_time": 1_700_000_000_000,
                    "group_sequence": 3,
                },
            ),
            ("application_properties", {"tenant": "acme", "attempt": 3}),
            ("data", b'{"a": 1}'),
        ]
    )
    message = proton.Message()
    message.decode(wire)
    assert (message.durable, message.priority, message.ttl, message.delivery_count) == (True, 4, 60.0, 2)
    assert message.annotations == {"x-opt-key": "v"}
    assert message.id == 77  # a ulong on the wire: proton hands it back as int
    assert (message.user_id, message.address, message.correlation_id) == (b"guest", "q", "c-1")
    assert (message.content_type, message.creation_time, message.group_sequence) == (
        "application/json",
        1.7e9,
        3,
    )
    assert message.properties == {"tenant": "acme", "attempt": 3}
    assert message.body == b'{"a": 1}'


# ---------------------------------------------------------------- rstream, as the captures have it


def test_rstream_message() -> None:
    message = rstream.AMQPMessage(
        body=b'{"order": 12345, "item": "w-42"}',
        properties=rstream.Properties(
            message_id="msg-0001",
            user_id=b"guest",
            to="orders",
            subject="new",
            reply_to="replies",
            correlation_id="corr-1",
            content_type="application/json",
            content_encoding="utf-8",
            absolute_expiry_time=1_700_000_060_000,
            creation_time=1_700_000_000_000,
            group_id="g",
            group_sequence=5,
            reply_to_group_id="rg",
        ),
        application_properties={
            "tenant": "acme",
            "attempt": 3,
            "big": 2**40,
            "negative": -5,
            "ratio": 0.5,
            "urgent": True,
            "raw": b"\x01",
            "none": None,
            "id": U,
            "list": [1, "a"],
            "map": {"k": "v"},
        },
    )
    wire = bytes(message)
    assert amqp.looks_like_amqp(wire)
    decoded = amqp.decode_message(wire, base=100)
    assert decoded.error is None and decoded.notes == []
    assert (decoded.sections[0].name, decoded.sections[0].offset) == ("properties", 100)
    assert amqp.message_json(decoded) == {
        "properties": {
            "message_id": "msg-0001",
            "user_id": "6775657374",
            "to": "orders",
            "subject": "new",
            "reply_to": "replies",
            "correlation_id": "corr-1",
            "content_type": "application/json",
            "content_encoding": "utf-8",
            "absolute_expiry_time": 1_700_000_060_000,
            "creation_time": 1_700_000_000_000,
            "group_id": "g",
            "group_sequence": 5,
            "reply_to_group_id": "rg",
        },
        "application_properties": {
            "tenant": "acme",
            "attempt": 3,
            "big": 2**40,
            "negative": -5,
            "ratio": 0.5,
            "urgent": True,
            "raw": "01",
            "none": None,
            "id": str(U),
            "list": [1, "a"],
            "map": {"k": "v"},
        },
        "data": b'{"order": 12345, "item": "w-42"}'.hex(),
    }


def test_rstream_writes_every_properties_field_and_nulls_are_kept() -> None:
    wire = bytes(rstream.AMQPMessage(body=b"x", properties=rstream.Properties(message_id=1)))
    properties = amqp.decode_message(wire).sections[0].value
    assert len(properties) == 13
    assert properties["message_id"] == 1 and properties["reply_to_group_id"] is None


def test_rstream_puts_delivery_annotations_last_which_is_noted() -> None:
    wire = bytes(
        rstream.AMQPMessage(
            body=b"x",
            header=RstreamHeader(durable=True, priority=5, ttl=1000, first_acquirer=False, delivery_count=2),
            message_annotations={"x-a": 1},
            delivery_annotations={"x-d": 1},
            footer={"x-f": 2},
        )
    )
    message = amqp.decode_message(wire)
    assert message.error is None
    assert [s.name for s in message.sections] == [
        "header",
        "message_annotations",
        "data",
        "footer",
        "delivery_annotations",
    ]
    assert message.sections[0].value == {
        "durable": True,
        "priority": 5,
        "ttl": 1000,
        "first_acquirer": False,
        "delivery_count": 2,
    }
    assert len(message.notes) == 1
    assert "delivery_annotations section at offset" in message.notes[0]
    assert "comes after footer" in message.notes[0]


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    ("value", "wire_hex"),
    [
        (None, "40"),
        (True, "41"),
        (False, "42"),
        (Typed("uint", 0), "43"),
        (Typed("uint", 255), "52ff"),
        (Typed("uint", 256), "7000000100"),
        (Typed("ulong", 0), "44"),
        (Typed("ulong", 5), "5305"),
        (Typed("int", -1), "54ff"),
        (Typed("int", 128), "7100000080"),
        (5, "5505"),
        (-129, "81ffffffffffffff7f"),
        (2**63, "808000000000000000"),  # only a ulong holds it
        (Typed("ubyte", 1), "5001"),
        (Typed("byte", -1), "51ff"),
        (Typed("ushort", 2), "600002"),
        (Typed("short", -2), "61fffe"),
        (1.0, "823ff0000000000000"),
        (Typed("float", 1.0), "723f800000"),
        (Char("A"), "7300000041"),
        (Timestamp(1), "830000000000000001"),
        ("", "a100"),
        ("hi", "a1026869"),
        (Symbol("s"), "a30173"),
        (b"\x00", "a00100"),
        ([], "45"),
        ([None], "c0020140"),
        ({}, "c10100"),
        ({"a": 1}, "c10602a101615501"),
        (Described(Typed("ulong", 0x24), []), "00532445"),
        (Array("uint", [1, 2]), "e0040252" + "0102"),
        (Array("uint", [1, 256]), "e00a0270" + "00000001" + "00000100"),
        (Array("boolean", [True, False]), "e00402560100"),
        (Array("symbol", [], Symbol("d")), "e0060000a30164a3"),
        (Decimal(4, b"\x01\x02\x03\x04"), "7401020304"),
        (U, "98" + U.hex),
    ],
)
def test_compact_encodings(value: Any, wire_hex: str) -> None:
    wire = amqp.encode_value(value)
    assert wire.hex() == wire_hex
    assert value_of(wire) == _untyped(value)


def test_long_forms_are_chosen_by_size() -> None:
    assert amqp.encode_value("x" * 255)[0] == 0xA1
    assert amqp.encode_value("x" * 256)[0] == 0xB1
    assert amqp.encode_value("é" * 128)[0] == 0xB1
    assert amqp.encode_value(b"x" * 256)[0] == 0xB0
    assert amqp.encode_value(Symbol("x" * 256))[0] == 0xB3
    assert amqp.encode_value(["x" * 252])[:2] == b"\xc0\xff"  # size 255: count, a1, length, 252 bytes
    assert amqp.encode_value(["x" * 253])[0] == 0xD0
    assert amqp.encode_value([None] * 256)[0] == 0xD0  # count over 255
    assert amqp.encode_value({"k": "v" * 300})[0] == 0xD1
    assert amqp.encode_value(Array("string", ["a", "b" * 300]))[:10].hex() == "f00000013a00000002b1"
    for value in (
        ["x" * 252],
        ["x" * 253],
        [None] * 256,
        {"k": "v" * 300},
        Array("string", ["a", "b" * 300]),
    ):
        assert value_of(amqp.encode_value(value)) == value


def test_encode_errors() -> None:
    for bad in (
        Typed("ubyte", 256),
        Typed("uint", -1),
        Typed("long", 2**63),
        2**64,
        -(2**63) - 1,
        Typed("nope", 1),
        Typed("string", 5),
        Typed("int", 1.5),
        Typed("char", "ab"),
        Typed("uuid", "not a uuid"),
        Decimal(4, b"\x00"),
        Array("described", []),
        object(),
    ):
        with pytest.raises(EncodeError):
            amqp.encode_value(bad)
    with pytest.raises(EncodeError):
        amqp.encode_message([("body", b"x")])
    with pytest.raises(EncodeError):
        amqp.encode_message([("header", {"durability": True})])


# Representative values with what proton's own decoder must make of our encoding.
PROTON_VIEW: list[tuple[Any, Any]] = [
    (None, None),
    (True, True),
    (Typed("ubyte", 255), proton.ubyte(255)),
    (Typed("byte", -128), proton.byte(-128)),
    (Typed("ushort", 65535), proton.ushort(65535)),
    (Typed("short", -32768), proton.short(-32768)),
    (Typed("uint", 0), proton.uint(0)),
    (Typed("uint", 255), proton.uint(255)),
    (Typed("uint", 2**32 - 1), proton.uint(2**32 - 1)),
    (Typed("int", -129), proton.int32(-129)),
    (Typed("ulong", 2**64 - 1), proton.ulong(2**64 - 1)),
    (Typed("ulong", 0), proton.ulong(0)),
    (-(2**63), -(2**63)),
    (7, 7),
    (Typed("float", 0.5), proton.float32(0.5)),
    (1e300, 1e300),
    (Char("\U0001f600"), proton.char("\U0001f600")),
    (Timestamp(-5), proton.timestamp(-5)),
    (U, U),
    (b"", b""),
    (b"z" * 300, b"z" * 300),
    ("é" * 200, "é" * 200),
    (Symbol("s" * 300), proton.symbol("s" * 300)),
    (Decimal(4, bytes.fromhex("00000007")), proton.decimal32(7)),
    (Decimal(8, bytes.fromhex("0000000000000008")), proton.decimal64(8)),
    (Decimal(16, bytes(range(16))), proton.decimal128(bytes(range(16)))),
    ([1, "a", None, [True]], [1, "a", None, [True]]),
    (list(range(300)), list(range(300))),
    ({"k": [1], Symbol("s"): {"n": None}}, {"k": [1], proton.symbol("s"): {"n": None}}),
    (Described(Symbol("d"), [1]), proton.Described(proton.symbol("d"), [1])),
    (Array("int", [Typed("int", 1), 2]), proton.Array(proton.UNDESCRIBED, Data.INT, 1, 2)),
    (Array("uint", [1, 2**32 - 1], Symbol("x")), proton.Array(proton.symbol("x"), Data.UINT, 1, 2**32 - 1)),
    (Array("string", ["a", "b" * 300]), proton.Array(proton.UNDESCRIBED, Data.STRING, "a", "b" * 300)),
    (
        Array("array", [Array("uint", [1]), Array("string", ["a"])]),
        proton.Array(
            proton.UNDESCRIBED,
            Data.ARRAY,
            proton.Array(proton.UNDESCRIBED, Data.UINT, 1),
            proton.Array(proton.UNDESCRIBED, Data.STRING, "a"),
        ),
    ),
    (Array("list", [[1], []]), proton.Array(proton.UNDESCRIBED, Data.LIST, [1], [])),
]


@pytest.mark.parametrize(("value", "seen_by_proton"), PROTON_VIEW)
def test_proton_decodes_our_encoding(value: Any, seen_by_proton: Any) -> None:
    wire = amqp.encode_value(value)
    got = pn_decode(wire)
    assert got == seen_by_proton
    assert type(got) is type(seen_by_proton)
    # And back through proton's encoder to us.
    expected = value.value if isinstance(value, Typed) else value
    again = value_of(pn(lambda d: d.put_object(got)))
    assert again == _untyped(expected)


def _untyped(value: Any) -> Any:
    if isinstance(value, Typed):
        return value.value
    if isinstance(value, list):
        return [_untyped(v) for v in value]
    if isinstance(value, dict):
        return {k: _untyped(v) for k, v in value.items()}
    if isinstance(value, Array):
        return Array(value.element_type, [_untyped(v) for v in value.items], value.descriptor)
    if isinstance(value, Described):
        return Described(_untyped(value.descriptor), _untyped(value.value))
    return value


INT_TYPES = [
    ("ubyte", 0, 2**8 - 1),
    ("byte", -(2**7), 2**7 - 1),
    ("ushort", 0, 2**16 - 1),
    ("short", -(2**15), 2**15 - 1),
    ("uint", 0, 2**32 - 1),
    ("int", -(2**31), 2**31 - 1),
    ("ulong", 0, 2**64 - 1),
    ("long", -(2**63), 2**63 - 1),
]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    *(st.builds(Typed, st.just(name), st.integers(lo, hi)) for name, lo, hi in INT_TYPES),
    st.floats(allow_nan=False),
    st.builds(Typed, st.just("float"), st.floats(width=32, allow_nan=False)),
    st.text(max_size=20),
    st.text(min_size=201, max_size=300),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=10).map(Symbol),
    st.characters().map(Char),
    st.binary(max_size=20),
    st.uuids(),
    st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    st.sampled_from([4, 8, 16]).flatmap(
        lambda w: st.binary(min_size=w, max_size=w).map(lambda b: Decimal(w, b))
    ),
)

_ARRAY_ELEMENTS: dict[str, st.SearchStrategy[Any]] = {
    **{name: st.integers(lo, hi) for name, lo, hi in INT_TYPES},
    "null": st.none(),
    "boolean": st.booleans(),
    "double": st.floats(allow_nan=False),
    "float": st.floats(width=32, allow_nan=False),
    "string": st.text(max_size=5),
    "symbol": st.text(alphabet="abc:", max_size=5).map(Symbol),
    "binary": st.binary(max_size=5),
    "char": st.characters().map(Char),
    "timestamp": st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    "uuid": st.uuids(),
}


def _arrays(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Array]:
    simple = st.sampled_from(sorted(_ARRAY_ELEMENTS)).flatmap(
        lambda name: st.builds(
            Array,
            st.just(name),
            st.lists(_ARRAY_ELEMENTS[name], max_size=4),
            st.one_of(
                st.none(), st.just(Symbol("desc")), st.integers(0, 2**64 - 1).map(lambda n: Typed("ulong", n))
            ),
        )
    )
    return st.one_of(
        simple,
        st.builds(Array, st.just("array"), st.lists(simple, max_size=3)),
        st.builds(Array, st.just("list"), st.lists(st.lists(children, max_size=3), max_size=3)),
    )


values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers(0, 100)), children, max_size=5),
        st.builds(
            Described,
            st.one_of(
                st.text(max_size=5).map(Symbol), st.integers(0, 2**64 - 1).map(lambda n: Typed("ulong", n))
            ),
            children,
        ),
        _arrays(children),
    ),
    max_leaves=15,
)


def _expected(value: Any) -> Any:
    """What decoding our encoding of value gives: no Typed wrappers, tuples as lists."""
    value = _untyped(value)
    if isinstance(value, Array):
        return Array(
            value.element_type,
            [_expected(v) for v in value.items],
            _expected(value.descriptor),
        )
    if isinstance(value, list):
        return [_expected(v) for v in value]
    if isinstance(value, dict):
        return {k: _expected(v) for k, v in value.items()}
    if isinstance(value, Described):
        return Described(_expected(value.descriptor), _expected(value.value))
    return value


@settings(max_examples=300, deadline=None)
@given(values)
def test_value_round_trip(value: Any) -> None:
    wire = amqp.encode_value(value)
    decoded = value_of(wire)
    assert decoded == _expected(value)
    # Decoded values encode again to the same meaning.
    assert value_of(amqp.encode_value(decoded)) == decoded
    json.dumps(amqp.to_json(decoded), allow_nan=False)


_header = st.fixed_dictionaries(
    {},
    optional={
        "durable": st.booleans(),
        "priority": st.integers(0, 255),
        "ttl": st.integers(0, 2**32 - 1),
        "first_acquirer": st.booleans(),
        "delivery_count": st.integers(0, 2**32 - 1),
    },
)
_properties = st.fixed_dictionaries(
    {},
    optional={
        "message_id": st.one_of(
            st.integers(0, 2**64 - 1), st.text(max_size=10), st.uuids(), st.binary(max_size=5)
        ),
        "user_id": st.binary(max_size=8),
        "to": st.text(max_size=10),
        "subject": st.none() | st.text(max_size=10),
        "content_type": st.text(alphabet="abc/", max_size=10).map(Symbol),
        "creation_time": st.integers(-(2**63), 2**63 - 1).map(Timestamp),
        "group_sequence": st.integers(0, 2**32 - 1),
    },
)
_annotations = st.dictionaries(
    st.text(alphabet="x-abc", min_size=1, max_size=6).map(Symbol), values, max_size=3
)
_body = st.one_of(
    st.lists(st.binary(max_size=40).map(lambda b: ("data", b)), min_size=1, max_size=3),
    st.lists(st.lists(values, max_size=3).map(lambda v: ("amqp_sequence", v)), min_size=1, max_size=2),
    values.map(lambda v: [("amqp_value", v)]),
)


@st.composite
def leading_sections(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """The sections before a body, each present or not, in the spec's order."""
    sections: list[tuple[str, Any]] = []
    for name, strategy in (
        ("header", _header),
        ("delivery_annotations", _annotations),
        ("message_annotations", _annotations),
        ("properties", _properties),
        ("application_properties", st.dictionaries(st.text(max_size=8), values, max_size=4)),
    ):
        if draw(st.booleans()):
            sections.append((name, draw(strategy)))
    return sections


@st.composite
def messages(draw: st.DrawFn) -> list[tuple[str, Any]]:
    sections = draw(leading_sections())
    sections.extend(draw(_body))
    if draw(st.booleans()):
        sections.append(("footer", draw(_annotations)))
    return sections


def _section_expected(name: str, value: Any) -> Any:
    if name in ("header", "properties"):
        fields = [f for f, _ in (amqp.HEADER_FIELDS if name == "header" else amqp.PROPERTIES_FIELDS)]
        last = max((fields.index(k) for k in value), default=-1)
        return {f: value.get(f) for f in fields[: last + 1]}
    return _expected(value)


@settings(max_examples=200, deadline=None)
@given(messages())
def test_message_round_trip_and_every_cut(sections: list[tuple[str, Any]]) -> None:
    wire = amqp.encode_message(sections)
    assert amqp.looks_like_amqp(wire)
    message = amqp.decode_message(wire, base=7)
    assert message.error is None and message.notes == []
    assert [(s.name, s.value) for s in message.sections] == [
        (n, _section_expected(n, v)) for n, v in sections
    ]
    ends = {s.offset - 7 + s.length for s in message.sections}
    for cut in range(1, len(wire)):
        partial = amqp.decode_message(wire[:cut], base=7)
        kept = sum(1 for end in ends if end <= cut)
        assert [s.value for s in partial.sections] == [s.value for s in message.sections[:kept]]
        if cut in ends:
            assert partial.error is None
        else:
            assert partial.error is not None
            assert partial.error_offset is not None and 7 <= partial.error_offset <= 7 + cut


def test_encode_message_coerces_fields_and_keys() -> None:
    wire = amqp.encode_message(
        [
            ("header", {"priority": 9}),
            ("delivery_annotations", {"x-str": 1, 5: "ulong key"}),
            ("properties", {"content_type": "text/plain", "absolute_expiry_time": 10, "user_id": "me"}),
            ("amqp_value", Typed("uint", 3)),
        ]
    )
    message = amqp.decode_message(wire)
    header, annotations, properties, value = (s.value for s in message.sections)
    assert header == {"durable": None, "priority": 9}
    assert wire[3:9].hex() == "c00402405009"  # priority is a ubyte after a null durable
    assert annotations == {"x-str": 1, 5: "ulong key"} and type(next(iter(annotations))) is Symbol
    assert type(properties["content_type"]) is Symbol
    assert type(properties["absolute_expiry_time"]) is Timestamp
    assert properties["user_id"] == b"me"
    assert list(properties)[-1] == "absolute_expiry_time"
    assert value == 3


# ---------------------------------------------------------------- malformed input


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise(data: bytes) -> None:
    message = amqp.decode_message(data, base=3)
    assert message.error is not None or message.sections
    if message.error is not None:
        assert message.error_offset is not None and 3 <= message.error_offset <= 3 + len(data)
    amqp.looks_like_amqp(data)
    amqp.message_json(message)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_random_section_bodies_never_raise(body: bytes) -> None:
    for code in range(0x70, 0x79):
        message = amqp.decode_message(bytes((0x00, 0x53, code)) + body)
        assert message.error is not None or message.sections
        json.dumps(amqp.message_json(message), allow_nan=False)
        for s in message.sections:
            shown.preview(s.value)


@settings(max_examples=200, deadline=None)
@given(messages(), st.data())
def test_bit_flips_never_raise(sections: list[tuple[str, Any]], data: st.DataObject) -> None:
    wire = bytearray(amqp.encode_message(sections))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(wire) - 1))
        wire[i] ^= 1 << data.draw(st.integers(0, 7))
    message = amqp.decode_message(memoryview(wire))
    json.dumps(amqp.message_json(message), allow_nan=False)


@pytest.mark.parametrize(
    ("wire_hex", "error"),
    [
        ("005377d0ffffffffffffffff", "list at offset 8 needs 4294967295 bytes, 4 left"),
        ("005377d000000008ffffffff40404040", "list at offset 4 declares 4294967295 elements in 4 bytes"),
        ("005377d100000008fffffffe40404040", "map at offset 4 declares 4294967294 elements in 4 bytes"),
        ("005377f000000006ffffffff4040", "more than the 14-byte input"),
        ("005377e002ff45", "array at offset 4 declares 255 list elements, more than the 7-byte input"),
        ("005377f000000009ffffffff7000000001", "declares 4294967295 uint elements of 4 bytes in 4 bytes"),
        ("005377f000000006ffffffffa100", "declares 4294967295 string elements in 1 bytes"),
        ("005377b1ffffffff6161", "string at offset 8 needs 4294967295 bytes, 2 left"),
        ("005377b07fffffff", "binary at offset 8 needs 2147483647 bytes, 0 left"),
        ("005377a0", "binary size at offset 4 needs 1 bytes, 0 left"),
        ("005377c1050340404040", "map at offset 4 declares an odd element count 3"),
    ],
)
def test_huge_or_impossible_counts_fail_fast(wire_hex: str, error: str) -> None:
    tracemalloc.start()
    try:
        message = amqp.decode_message(bytes.fromhex(wire_hex))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message.sections == []
    assert message.error is not None and error in message.error
    assert peak < 1_000_000


def test_nesting_is_limited() -> None:
    ok: Any = "leaf"
    for _ in range(50):
        ok = [ok]
    assert amqp.decode_message(amqp.encode_message([("amqp_value", ok)])).error is None
    deep = b"\xc0\x01\x00"  # innermost: an empty list8
    for _ in range(500):
        deep = b"\xd0" + struct.pack(">II", len(deep) + 4, 1) + deep
    message = amqp.decode_message(b"\x00\x53\x77" + deep)
    assert message.error is not None and "nests deeper than 64 levels" in message.error
    described = b"\x00\x53\x77" + b"\x00\x40" * 2000 + b"\x40"
    assert "nests deeper" in (amqp.decode_message(described).error or "")
    arrays = b"\xf0" + struct.pack(">II", 5, 1) + b"\x40"  # innermost: an array32 of one null
    for level in range(200):
        body = arrays[1:]
        arrays = b"\xf0" + struct.pack(">II", 4 + 1 + len(body), 1) + b"\xf0" + body
        if level == 10:
            shallow = amqp.decode_message(b"\x00\x53\x77" + arrays)
            assert shallow.error is None and isinstance(shallow.sections[0].value, Array)
    message = amqp.decode_message(b"\x00\x53\x77" + arrays)
    assert message.error is not None and "nests deeper" in message.error
    with pytest.raises(MalformedError):
        amqp.decode_value(deep)


@pytest.mark.parametrize(
    ("wire_hex", "error", "offset"),
    [
        ("0053779f", "unknown constructor 0x9f at offset 3", 3),
        ("005377a10c61626364", "string at offset 5 needs 12 bytes, 4 left", 5),
        ("005377a10361ff62", "string at offset 6 is not valid UTF-8", 6),
        ("005377a302c328", "symbol at offset 5 is not valid UTF-8", 5),
        ("0053775602", "boolean at offset 4 is 0x02, not 0x00 or 0x01", 4),
        ("005377730000d800", "char at offset 4 is 0x0000d800, not a Unicode scalar value", 4),
        ("0053777300110000", "not a Unicode scalar value", 4),
        ("005377c00301404040", "list at offset 4 has 1 bytes after its 1 elements", 4),
        ("005377c00000", "list at offset 4 declares size 0", 4),
        ("005377700001", "uint at offset 4 needs 4 bytes, 2 left", 4),
        ("005377", "value at offset 3 needs a constructor byte, 0 left", 3),
        ("00", "section descriptor at offset 1 needs 1 bytes, 0 left", 1),
        ("0053", "ulong at offset 2 needs 1 bytes, 0 left", 2),
        ("00537940", "section descriptor 0x79 at offset 1 is not a message section", 1),
        ("00a30361626340", "section descriptor 'abc' at offset 1 is not a message section", 1),
        ("00557040", "section descriptor constructor 0x55 at offset 1", 1),
        ("68656c6c6f", "byte 0x68 at offset 0 is not the start of a message section (0x00)", 0),
        ("", "message at offset 0 is empty", 0),
    ],
)
def test_errors_say_what_and_where(wire_hex: str, error: str, offset: int) -> None:
    message = amqp.decode_message(bytes.fromhex(wire_hex), base=1000)
    assert message.sections == []
    assert message.error is not None
    assert error.replace(f"offset {offset}", f"offset {offset + 1000}") in message.error
    assert message.error_offset == offset + 1000


def test_decode_value_raises_malformed_error() -> None:
    for wire, text in (
        (b"\x9f", "unknown constructor 0x9f at offset 0"),
        (b"\x40\xa1\x05ab", "string at offset 3 needs 5 bytes, 2 left"),
    ):
        with pytest.raises(MalformedError) as raised:
            amqp.decode_value(wire, 1 if wire[0] == 0x40 else 0)
        assert str(raised.value).startswith(text)
    assert amqp.decode_value(b"\x40\x52\x07", 1) == (7, 3)


def test_sections_before_the_error_are_kept() -> None:
    wire = amqp.encode_message([("properties", {"message_id": "m"}), ("data", b"body")])
    message = amqp.decode_message(wire + b"\x00\x53\x75\xa0\x09abc", base=50)
    assert [s.name for s in message.sections] == ["properties", "data"]
    assert message.error == f"binary at offset {50 + len(wire) + 5} needs 9 bytes, 3 left"


def test_not_amqp() -> None:
    for data in (
        b"",
        b"\x00",
        b"\x00\x53",
        b"hello world",
        b"\x00\x53\x79\x40",
        b"\x00\x53\x10",
        b"\x00\xa3\x03abc",
    ):
        assert not amqp.looks_like_amqp(data)
    assert not amqp.looks_like_amqp(b"\x00\x80" + struct.pack(">Q", 0x79) + b"\x40")
    assert not amqp.looks_like_amqp(b"\x00\xb3\xff\xff")
    assert amqp.looks_like_amqp(memoryview(b"\x00\x53\x70\x45"))
    message = amqp.decode_message(b"hello world")
    assert message.sections == [] and message.error is not None and message.error_offset == 0


# ---------------------------------------------------------------- notes (warnings, not errors)


def test_order_and_body_notes() -> None:
    def notes(*sections: tuple[str, Any]) -> list[str]:
        message = amqp.decode_message(amqp.encode_message(list(sections)))
        assert message.error is None
        return message.notes

    assert notes(("application_properties", {}), ("properties", {}), ("data", b"")) == [
        "properties section at offset 6 comes after application_properties, out of the spec's order"
    ]
    assert notes(("header", {}), ("header", {}), ("data", b"")) == [
        "header section at offset 4 repeats an earlier header section"
    ]
    assert notes(("data", b""), ("amqp_value", 1)) == [
        "amqp_value section at offset 5 mixes body kinds: the body started as data"
    ]
    assert notes(("amqp_value", 1), ("amqp_value", 2)) == [
        "amqp_value section at offset 5: a message has at most one amqp_value section"
    ]
    assert notes(("amqp_sequence", [1]), ("amqp_sequence", [2])) == []
    assert notes(("footer", {}), ("data", b"")) == [
        "data section at offset 6 comes after footer, out of the spec's order"
    ]
    assert notes(("properties", {})) == ["message has no body section (data, amqp_sequence or amqp_value)"]


def test_wrong_section_types_and_extra_fields_are_noted() -> None:
    wire = (
        b"\x00\x53\x70"
        + amqp.encode_value([True, None, None, None, None, "extra"])
        + b"\x00\x53\x74"
        + amqp.encode_value([1])
        + b"\x00\x53\x75"
        + amqp.encode_value("not binary")
    )
    message = amqp.decode_message(wire)
    assert message.error is None
    header, app, data = (s.value for s in message.sections)
    assert header == {
        "durable": True,
        "priority": None,
        "ttl": None,
        "first_acquirer": None,
        "delivery_count": None,
        "field_5": "extra",
    }
    assert app == [1] and data == "not binary"
    offsets = [s.offset for s in message.sections]
    assert message.notes == [
        "header section at offset 0 has 6 fields, the spec defines 5",
        f"application_properties section at offset {offsets[1]} holds a list, not a map",
        f"data section at offset {offsets[2]} holds a string, not a binary",
    ]


# ---------------------------------------------------------------- JSON, previews, names


def test_to_json() -> None:
    value = {
        Symbol("sym"): Char("c"),
        5: Timestamp(-1),
        True: U,
        b"\x01": Decimal(4, b"\x00\x00\x00\x07"),
        (1, 2): [math.nan, math.inf, -math.inf, 1.5],
        "described": Described(Typed("ulong", 1), b"\xff"),
        "array": Array("symbol", [Symbol("a")]),
        "none": None,
    }
    assert amqp.to_json(value) == {
        "sym": "c",
        "5": -1,
        "true": str(U),
        "01": "00000007",
        "[1,2]": ["NaN", "Infinity", "-Infinity", 1.5],
        "described": {"descriptor": 1, "value": "ff"},
        "array": ["a"],
        "none": None,
    }
    converted = amqp.to_json(value)
    assert type(converted["sym"]) is str and type(converted["5"]) is int
    # Views know no codec: the generic form reaches the AMQP types through their as_json.
    assert shown.to_json(value) == converted
    json.dumps(converted, allow_nan=False)


def test_message_json_single_data_is_a_string() -> None:
    message = amqp.decode_message(
        amqp.encode_message([("application_properties", {"k": 1}), ("data", b"\xab")])
    )
    assert amqp.message_json(message) == {"application_properties": {"k": 1}, "data": "ab"}
    sequences = amqp.decode_message(amqp.encode_message([("amqp_sequence", [1]), ("amqp_sequence", [2, 3])]))
    assert amqp.message_json(sequences) == {"amqp_sequence": [[1], [2, 3]]}


def test_preview() -> None:
    assert shown.preview(b"hello\x00\x01world") == "hello..world"
    assert shown.preview(memoryview(b'{"k": "v"}')) == '{"k": "v"}'
    assert shown.preview("héllo\nthere") == "héllo.there"
    assert shown.preview("é" * 60) == "é" * 39 + "…"
    assert shown.preview(b"x" * 1000, limit=10) == "x" * 9 + "…"
    assert shown.preview(b"x" * 10, limit=10) == "x" * 10
    assert shown.preview("€".encode() * 100, limit=5) == "€€€€…"
    assert shown.preview(b"\xff\xfe") == ".."
    assert shown.preview(None) == "null"
    assert shown.preview(True) == "true"
    assert shown.preview(42) == "42"
    assert shown.preview(Timestamp(1_700_000_000_000)) == "1700000000000"
    assert shown.preview(Symbol("text/plain")) == "text/plain"
    assert shown.preview(U) == str(U)
    assert shown.preview({"k": [1, 2]}) == '{"k":[1,2]}'
    assert shown.preview(list(range(100)), limit=12) == "[0,1,2,3,4,…"
    assert shown.preview(Described(Symbol("d"), 1)) == '{"descriptor":"d","value":1}'
    assert shown.preview(math.nan) == "NaN"


def test_type_names() -> None:
    assert [amqp.type_name(c) for c in (0x40, 0x43, 0x52, 0x70, 0xA3, 0xB1, 0xD1, 0xF0, 0x00)] == [
        "null",
        "uint",
        "uint",
        "uint",
        "symbol",
        "string",
        "map",
        "array",
        "described",
    ]
    assert amqp.type_name(0x9F) is None and amqp.encoding_name(0x9F) is None
    assert amqp.encoding_name(0x52) == "smalluint" and amqp.encoding_name(0xB3) == "sym32"


def _with_message_id(text: str) -> bytes:
    return bytes(rstream.AMQPMessage(body=b"x", properties=rstream.Properties(message_id=text)))


def test_a_message_id_that_is_not_utf8_is_no_id_not_an_error() -> None:
    """The tracker's quick read of a message's id takes a short string that is not UTF-8 (a
    damaged capture) as no id, as the general decoder calls that message malformed."""
    from streamdump.codecs.amqp_content import message_id

    wire = _with_message_id("abcd")
    assert message_id(wire) == "abcd"
    damaged = wire.replace(b"abcd", b"a\xfccd")
    assert message_id(damaged) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=4))
def test_message_id_never_raises_on_damaged_bytes(flips: list[tuple[int, int]]) -> None:
    """Whatever bytes of a message are damaged, the quick read of its id gives a value or None."""
    from streamdump.codecs.amqp_content import message_id

    wire = bytearray(_with_message_id("order-0001"))
    for at, value in flips:
        if at < len(wire):
            wire[at] = value
    message_id(bytes(wire))
