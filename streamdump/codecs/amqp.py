"""AMQP 1.0 bare messages, as RabbitMQ Streams stores them in its records: decode, show, encode.

This module owns the AMQP 1.0 type system (spec part 1, section 1.6) and the message sections of
part 3 (section 3.2). It is pure: no state between calls, no I/O. Decoding works over a memoryview
with one dispatch table indexed by constructor byte; fixed-width layouts are struct.Structs compiled
once at import.

Value model (what decoding returns, and what the encoder accepts):

- null None, boolean bool, every integer width int, float and double float, string str,
  binary bytes, uuid uuid.UUID, list list, map dict (wire order);
- symbol `Symbol` and char `Char` (both str subclasses), timestamp `Timestamp` (int subclass,
  milliseconds since the epoch, signed), decimal32/64/128 `Decimal(width, raw)` (the raw IEEE 754
  decimal bytes, no arithmetic);
- described values `Described(descriptor, value)`;
- arrays `Array(element_type, items, descriptor)`: element_type is the type name of the shared
  element constructor ("uint", "symbol", "array"...), items the element values; when the shared
  constructor is described, descriptor holds its descriptor and items the undescribed values (a
  nested described constructor makes each item a Described). A null descriptor cannot be told
  from "not described": it decodes as a plain array.
- map keys that Python cannot hash become hashable copies: lists and arrays' items become tuples,
  maps become tuples of (key, value) pairs, recursively (also inside Described). Keys that compare
  equal in Python (true and 1, a symbol and a string of the same text) share one dict entry, and a
  repeated key keeps its last value.

Strictness: a string or symbol that is not UTF-8 (symbols are ASCII per the spec; UTF-8 is
accepted), a char that is not a Unicode scalar value, a boolean byte other than 0 or 1, a compound
whose elements do not fill exactly its declared size, an odd map count and nesting deeper than
MAX_DEPTH are malformed. Counts are checked against the bytes present before anything is built
(every list or map element takes at least one byte; an array of zero-width elements, such as
nulls, may not claim more elements than the whole input has bytes).

Messages: decode_message() returns a Message whose sections are decoded up to the first malformed
byte; `error` and `error_offset` (base-relative) say what and where, and `notes` holds warnings
(sections out of the spec's order, repeated or mixed body sections, a missing body, a section
whose value has the wrong type). Header and properties become dicts of the spec's field names
holding only the fields present in the list, explicit nulls included as None; list elements past
the known fields are kept as "field_<index>" with a note. The section descriptor may be a ulong
or the spec's symbol ("amqp:header:list"...).

JSON (to_json, message_json): bytes and Decimal become lowercase hex, Symbol/Char str, Timestamp
int (ms), UUID its canonical text, NaN and infinities the strings "NaN", "Infinity",
"-Infinity", Described {"descriptor", "value"}, an Array a list (of {"descriptor", "value"}
objects when its constructor is described), map keys strings (str keys as they are, other keys as
their compact JSON text: 5 -> "5", true -> "true", bytes -> hex). message_json maps section name
to value; a section that appears several times (data, amqp_sequence) becomes a list with one
item per section, so one data section is a hex string and two are a list of hex strings.

Encoding (encode_value, encode_message) picks the compact encodings (uint0, smalluint, str8...)
from the same value model, and 8-bit compound and array forms whenever sizes and counts fit. A plain
int is a long (a ulong from 2**63 up, where only a ulong holds it); `Typed(type_name, value)` asks
for another type ("uint", "ubyte", "symbol", "timestamp"...). encode_message coerces header and
properties fields, annotation keys and the data body to the types the spec gives them. Arrays whose
element constructor nests two descriptors decode, but the encoder writes one descriptor at most.
Every decoded value encodes again to the same meaning, although not always to the same bytes.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from msgspec import Struct

from streamdump.codecs.values import json_float, json_key, plain_float

MAX_DEPTH = 64
TOO_DEEP = f"nests deeper than {MAX_DEPTH} levels"

# ---------------------------------------------------------------- value types


class Symbol(str):
    """An AMQP symbol (ASCII by the spec)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Char(str):
    """An AMQP char: one Unicode code point, UTF-32BE on the wire."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Char({str.__repr__(self)})"


class Timestamp(int):
    """An AMQP timestamp: signed milliseconds since the Unix epoch."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Timestamp({int(self)})"


class Decimal(Struct, frozen=True):
    """An IEEE 754 decimal32/64/128, kept as its raw bytes (width in bytes: 4, 8 or 16)."""

    width: int
    raw: bytes

    def as_json(self) -> Any:
        return self.raw.hex()


class Described(Struct, frozen=True):
    """A described value: descriptor (usually a ulong or a symbol) and the value it describes."""

    descriptor: Any
    value: Any

    def as_json(self) -> Any:
        return {"descriptor": to_json(self.descriptor), "value": to_json(self.value)}


class Array(Struct, frozen=True):
    """An AMQP array: one element constructor shared by all items."""

    element_type: str
    items: list[Any]
    descriptor: Any = None

    def as_json(self) -> Any:
        return to_json(self)


class Typed(Struct, frozen=True):
    """Encoder input: value encoded as the named AMQP type ("uint", "symbol", ...)."""

    type_name: str
    value: Any

    def as_json(self) -> Any:
        return to_json(self.value)


class Section(Struct):
    """One message section: header, properties, a data body..., with its place in the input."""

    code: int  # 0x70..0x78
    name: str
    offset: int  # base + offset of the section's 0x00 byte
    length: int
    value: Any


# A dataclass, not a Struct: DataAlone below keeps its own slots and makes these on first read.
@dataclass(slots=True)
class Message:
    """A decoded bare message: its sections up to the first malformed byte, that error, and notes."""

    sections: list[Section] = field(default_factory=list)
    error: str | None = None
    error_offset: int | None = None
    notes: list[str] = field(default_factory=list)

    def section_values(self) -> dict[str, Any]:
        """Section name -> decoded value, keyed as message_json keys them: a section present
        several times (data, amqp_sequence) maps to a list with one item per section."""
        out: dict[str, Any] = {}
        repeated: set[str] = set()
        for section in self.sections:
            name = section.name
            if name not in out:
                out[name] = section.value
            elif name in repeated:
                out[name].append(section.value)
            else:
                out[name] = [out[name], section.value]
                repeated.add(name)
        return out

    def as_json(self) -> dict[str, Any]:
        return message_json(self)

    def as_plain_json(self) -> dict[str, Any]:
        """as_json, for a JSON writer that writes floats otherwise than json.dumps: ValueError at
        a float Python writes with an exponent."""
        sections = self.sections
        if len(sections) == 1 and type(sections[0].value) is bytes:  # a body alone
            return {sections[0].name: sections[0].value.hex()}
        return message_json(self, True)


class DataAlone(Message):
    """A message that is one data section alone (the commonest of all), kept as its body and
    the section's place: its sections list is made only when something reads it, and views
    that know this shape read .body instead. Equal to, and shown as, decode_message's result."""

    __slots__ = ("body", "offset")
    # Such a message has no error: class values shadow Message's slots, left empty.
    error = None
    error_offset = None

    def __init__(self, body: bytes, offset: int) -> None:
        self.body = body
        self.offset = offset  # of the section's 0x00 byte

    def __getattr__(self, name: str) -> Any:
        # Message's sections and notes slots, unset until first read; anything else (pickle
        # and copy ask for hooks) is missing as usual.
        if name == "sections":
            body = self.body
            self.sections = [Section(0x75, "data", self.offset, len(body) + 5, body)]
            return self.sections
        if name == "notes":
            self.notes = []
            return self.notes
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.sections, self.error, self.error_offset, self.notes) == (
            other.sections,
            other.error,
            other.error_offset,
            other.notes,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Message(sections={self.sections!r}, error=None, error_offset=None, notes={self.notes!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (DataAlone, (self.body, self.offset))

    def as_json(self) -> dict[str, Any]:
        return {"data": self.body.hex()}

    as_plain_json = as_json


class MalformedError(ValueError):
    """The bytes are not a well-formed AMQP value. decode_value raises it; decode_message reports it."""

    def __init__(self, what: str, offset: int, detail: str = "") -> None:
        super().__init__(what, offset, detail)
        self.what = what
        self.offset = offset
        self.detail = detail

    def describe(self, base: int = 0) -> str:
        text = f"{self.what} at offset {self.offset + base}"
        return f"{text} {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return self.describe()


class EncodeError(ValueError):
    """A value cannot be encoded as asked."""


# ---------------------------------------------------------------- format table

# code: (type name, encoding name as in the spec, fixed body width or -1 when sized on the wire)
_FORMATS: dict[int, tuple[str, str, int]] = {
    0x00: ("described", "described", -1),
    0x40: ("null", "null", 0),
    0x56: ("boolean", "boolean", 1),
    0x41: ("boolean", "true", 0),
    0x42: ("boolean", "false", 0),
    0x50: ("ubyte", "ubyte", 1),
    0x60: ("ushort", "ushort", 2),
    0x70: ("uint", "uint", 4),
    0x52: ("uint", "smalluint", 1),
    0x43: ("uint", "uint0", 0),
    0x80: ("ulong", "ulong", 8),
    0x53: ("ulong", "smallulong", 1),
    0x44: ("ulong", "ulong0", 0),
    0x51: ("byte", "byte", 1),
    0x61: ("short", "short", 2),
    0x71: ("int", "int", 4),
    0x54: ("int", "smallint", 1),
    0x81: ("long", "long", 8),
    0x55: ("long", "smalllong", 1),
    0x72: ("float", "ieee-754", 4),
    0x82: ("double", "ieee-754", 8),
    0x74: ("decimal32", "ieee-754", 4),
    0x84: ("decimal64", "ieee-754", 8),
    0x94: ("decimal128", "ieee-754", 16),
    0x73: ("char", "utf32", 4),
    0x83: ("timestamp", "ms64", 8),
    0x98: ("uuid", "uuid", 16),
    0xA0: ("binary", "vbin8", -1),
    0xB0: ("binary", "vbin32", -1),
    0xA1: ("string", "str8-utf8", -1),
    0xB1: ("string", "str32-utf8", -1),
    0xA3: ("symbol", "sym8", -1),
    0xB3: ("symbol", "sym32", -1),
    0x45: ("list", "list0", 0),
    0xC0: ("list", "list8", -1),
    0xD0: ("list", "list32", -1),
    0xC1: ("map", "map8", -1),
    0xD1: ("map", "map32", -1),
    0xE0: ("array", "array8", -1),
    0xF0: ("array", "array32", -1),
}

# Codes whose fixed-width bodies are plain numbers: struct format characters (bulk array decode).
_NUMERIC = {
    0x50: "B",
    0x60: "H",
    0x70: "I",
    0x52: "B",
    0x80: "Q",
    0x53: "B",
    0x51: "b",
    0x61: "h",
    0x71: "i",
    0x54: "b",
    0x81: "q",
    0x55: "b",
    0x72: "f",
    0x82: "d",
}
_STRUCTS = {code: struct.Struct(">" + fmt) for code, fmt in _NUMERIC.items()}
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_U32X2 = struct.Struct(">II")


def type_name(code: int) -> str | None:
    """The AMQP type a constructor byte encodes ("uint" for 0x52), "described" for 0x00, None if unknown."""
    entry = _FORMATS.get(code)
    return entry[0] if entry else None


def encoding_name(code: int) -> str | None:
    """The spec's name of a constructor byte's encoding ("smalluint" for 0x52), None if unknown."""
    entry = _FORMATS.get(code)
    return entry[1] if entry else None


# ---------------------------------------------------------------- decoding
# A body decoder reads one value whose constructor byte is already consumed:
# body(mv, pos, end, depth) -> (value, next pos). Array elements reuse the same bodies.

Body = Callable[[memoryview, int, int, int], tuple[Any, int]]


def _short(what: str, pos: int, need: int, end: int) -> MalformedError:
    return MalformedError(what, pos, f"needs {need} bytes, {max(end - pos, 0)} left")


def _value(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if pos >= end:
        raise MalformedError("value", pos, "needs a constructor byte, 0 left")
    code = mv[pos]
    body = _BODIES[code]
    if body is None:
        raise MalformedError(f"unknown constructor 0x{code:02x}", pos)
    return body(mv, pos + 1, end, depth)


def _constant(value: Any) -> Body:
    def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        return value, pos

    return body


def _list0(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    return [], pos


def _ubyte_like(name: str) -> Body:
    def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if pos >= end:
            raise _short(name, pos, 1, end)
        return mv[pos], pos + 1

    return body


def _numeric(code: int) -> Body:
    name = _FORMATS[code][0]
    unpack = _STRUCTS[code].unpack_from
    size = _STRUCTS[code].size

    def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if end - pos < size:
            raise _short(name, pos, size, end)
        return unpack(mv, pos)[0], pos + size

    return body


def _boolean(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if pos >= end:
        raise _short("boolean", pos, 1, end)
    b = mv[pos]
    if b > 1:
        raise MalformedError("boolean", pos, f"is 0x{b:02x}, not 0x00 or 0x01")
    return b == 1, pos + 1


def _char(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if end - pos < 4:
        raise _short("char", pos, 4, end)
    (c,) = _U32.unpack_from(mv, pos)
    if c > 0x10FFFF or 0xD800 <= c <= 0xDFFF:
        raise MalformedError("char", pos, f"is 0x{c:08x}, not a Unicode scalar value")
    return Char(chr(c)), pos + 4


def _timestamp(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if end - pos < 8:
        raise _short("timestamp", pos, 8, end)
    return Timestamp(_I64.unpack_from(mv, pos)[0]), pos + 8


def _uuid(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if end - pos < 16:
        raise _short("uuid", pos, 16, end)
    return uuid.UUID(bytes=bytes(mv[pos : pos + 16])), pos + 16


def _decimal(width: int) -> Body:
    name = f"decimal{width * 8}"

    def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        if end - pos < width:
            raise _short(name, pos, width, end)
        return Decimal(width, bytes(mv[pos : pos + width])), pos + width

    return body


_BINARY, _STRING, _SYMBOL = 0, 1, 2


def _sized(name: str, wide: bool, kind: int) -> Body:
    """binary, string and symbol: a 1- or 4-byte size, then the bytes."""

    def convert(raw: memoryview, pos: int) -> Any:
        # str(buffer, encoding) and Symbol(buffer, encoding) decode straight from the memoryview.
        try:
            if kind == _STRING:
                return str(raw, "utf-8")
            if kind == _SYMBOL:
                return Symbol(raw, "utf-8")
        except UnicodeDecodeError as e:
            raise MalformedError(name, pos + e.start, "is not valid UTF-8") from None
        return bytes(raw)

    if wide:

        def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
            if end - pos < 4:
                raise _short(f"{name} size", pos, 4, end)
            (n,) = _U32.unpack_from(mv, pos)
            pos += 4
            stop = pos + n
            if stop > end:
                raise _short(name, pos, n, end)
            return convert(mv[pos:stop], pos), stop

        return body

    def body8(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        # The common case (str8, sym8, vbin8) decodes inline, without the convert call.
        if pos >= end:
            raise _short(f"{name} size", pos, 1, end)
        stop = pos + 1 + mv[pos]
        if stop > end:
            raise _short(name, pos + 1, stop - pos - 1, end)
        try:
            if kind == _STRING:
                return str(mv[pos + 1 : stop], "utf-8"), stop
            if kind == _SYMBOL:
                return Symbol(mv[pos + 1 : stop], "utf-8"), stop
        except UnicodeDecodeError as e:
            raise MalformedError(name, pos + 1 + e.start, "is not valid UTF-8") from None
        return bytes(mv[pos + 1 : stop]), stop

    return body8


def _compound_head(name: str, wide: bool, mv: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """Size and count of a list, map or array body at pos: (count, first element pos, stop)."""
    if wide:
        if end - pos < 8:
            raise _short(f"{name} size and count", pos, 8, end)
        size, count = _U32X2.unpack_from(mv, pos)
        if size < 4:
            raise MalformedError(name, pos, f"declares size {size}, too small for its 4-byte count")
        first, stop = pos + 8, pos + 4 + size
        if stop > end:
            raise _short(name, pos + 4, size, end)
    else:
        if end - pos < 2:
            raise _short(f"{name} size and count", pos, 2, end)
        size, count = mv[pos], mv[pos + 1]
        if size < 1:
            raise MalformedError(name, pos, "declares size 0, too small for its 1-byte count")
        first, stop = pos + 2, pos + 1 + size
        if stop > end:
            raise _short(name, pos + 1, size, end)
    return count, first, stop


def _too_deep(name: str, pos: int) -> MalformedError:
    return MalformedError(name, pos, TOO_DEEP)


def _elements(mv: memoryview, p: int, stop: int, count: int, depth: int) -> tuple[list[Any], int]:
    """count values back to back from p (the dispatch of _value, inlined: this is the hot loop)."""
    bodies = _BODIES
    items: list[Any] = []
    append = items.append
    for _ in range(count):
        if p >= stop:
            raise MalformedError("value", p, "needs a constructor byte, 0 left")
        code = mv[p]
        if code == 0x40:
            append(None)
            p += 1
            continue
        body = bodies[code]
        if body is None:
            raise MalformedError(f"unknown constructor 0x{code:02x}", p)
        value, p = body(mv, p + 1, stop, depth)
        append(value)
    return items, p


def _list(wide: bool) -> Body:
    def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, p, stop = _compound_head("list", wide, mv, pos, end)
        if count > stop - p:
            raise MalformedError("list", pos, f"declares {count} elements in {stop - p} bytes")
        if depth >= MAX_DEPTH:
            raise _too_deep("list", pos)
        items, p = _elements(mv, p, stop, count, depth + 1)
        if p != stop:
            raise MalformedError("list", pos, f"has {stop - p} bytes after its {count} elements")
        return items, stop

    return body


def _map(wide: bool) -> Body:
    def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, p, stop = _compound_head("map", wide, mv, pos, end)
        if count & 1:
            raise MalformedError("map", pos, f"declares an odd element count {count}")
        if count > stop - p:
            raise MalformedError("map", pos, f"declares {count} elements in {stop - p} bytes")
        if depth >= MAX_DEPTH:
            raise _too_deep("map", pos)
        items, p = _elements(mv, p, stop, count, depth + 1)
        if p != stop:
            raise MalformedError("map", pos, f"has {stop - p} bytes after its {count} elements")
        keys, values = items[0::2], items[1::2]
        try:
            return dict(zip(keys, values, strict=True)), stop
        except TypeError:
            return dict(zip(map(hashable, keys), values, strict=True)), stop

    return body


def _array(wide: bool) -> Body:
    def body(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
        count, p, stop = _compound_head("array", wide, mv, pos, end)
        if depth >= MAX_DEPTH:
            raise _too_deep("array", pos)
        depth += 1
        descriptors = []
        while True:
            if p >= stop:
                raise _short("array element constructor", p, 1, stop)
            code = mv[p]
            if code != 0x00:
                break
            if depth + len(descriptors) >= MAX_DEPTH:
                raise _too_deep("array element constructor", p)
            descriptor, p = _value(mv, p + 1, stop, depth + len(descriptors))
            descriptors.append(descriptor)
        element = _BODIES[code]
        if element is None:
            raise MalformedError(f"unknown constructor 0x{code:02x}", p)
        p += 1
        kind, _, width = _FORMATS[code]
        left = stop - p
        if width == 0:
            if count > len(mv):
                raise MalformedError(
                    "array", pos, f"declares {count} {kind} elements, more than the {len(mv)}-byte input"
                )
            # One shared empty list: a byte of input must not become a new object each.
            items = [[]] * count if code == 0x45 else [element(mv, p, stop, depth)[0]] * count
        elif width > 0:
            if count * width != left:
                raise MalformedError(
                    "array", pos, f"declares {count} {kind} elements of {width} bytes in {left} bytes"
                )
            fmt = _NUMERIC.get(code)
            if fmt is not None:
                items = list(struct.unpack_from(f">{count}{fmt}", mv, p))
            else:
                items = []
                for i in range(count):
                    items.append(element(mv, p + i * width, stop, depth)[0])
            p = stop
        else:
            if count > left:
                raise MalformedError("array", pos, f"declares {count} {kind} elements in {left} bytes")
            items = []
            append = items.append
            for _ in range(count):
                value, p = element(mv, p, stop, depth)
                append(value)
            if p != stop:
                raise MalformedError("array", pos, f"has {stop - p} bytes after its {count} elements")
        if not descriptors:
            return Array(kind, items), stop
        for inner in reversed(descriptors[1:]):
            items = [Described(inner, item) for item in items]
        return Array(kind, items, descriptors[0]), stop

    return body


def _described(mv: memoryview, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise _too_deep("described value", pos - 1)
    descriptor, pos = _value(mv, pos, end, depth + 1)
    value, pos = _value(mv, pos, end, depth + 1)
    return Described(descriptor, value), pos


def _build_bodies() -> tuple[Body | None, ...]:
    bodies: list[Body | None] = [None] * 256
    bodies[0x00] = _described
    bodies[0x40] = _constant(None)
    bodies[0x41] = _constant(True)
    bodies[0x42] = _constant(False)
    bodies[0x43] = _constant(0)
    bodies[0x44] = _constant(0)
    bodies[0x45] = _list0
    bodies[0x56] = _boolean
    for code, fmt in _NUMERIC.items():
        bodies[code] = _ubyte_like(_FORMATS[code][0]) if fmt == "B" else _numeric(code)
    bodies[0x73] = _char
    bodies[0x83] = _timestamp
    bodies[0x98] = _uuid
    bodies[0x74] = _decimal(4)
    bodies[0x84] = _decimal(8)
    bodies[0x94] = _decimal(16)
    bodies[0xA0] = _sized("binary", False, _BINARY)
    bodies[0xB0] = _sized("binary", True, _BINARY)
    bodies[0xA1] = _sized("string", False, _STRING)
    bodies[0xB1] = _sized("string", True, _STRING)
    bodies[0xA3] = _sized("symbol", False, _SYMBOL)
    bodies[0xB3] = _sized("symbol", True, _SYMBOL)
    bodies[0xC0] = _list(False)
    bodies[0xD0] = _list(True)
    bodies[0xC1] = _map(False)
    bodies[0xD1] = _map(True)
    bodies[0xE0] = _array(False)
    bodies[0xF0] = _array(True)
    return tuple(bodies)


_BODIES = _build_bodies()


def hashable(value: Any) -> Any:
    """A hashable copy of a decoded value, as used for map keys (lists and arrays to tuples...)."""
    if isinstance(value, list | tuple):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple((hashable(k), hashable(v)) for k, v in value.items())
    if isinstance(value, Array):
        return Array(value.element_type, hashable(value.items), hashable(value.descriptor))
    if isinstance(value, Described):
        return Described(hashable(value.descriptor), hashable(value.value))
    return value


def _view(data: bytes | bytearray | memoryview) -> memoryview:
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def decode_value(data: bytes | bytearray | memoryview, offset: int = 0) -> tuple[Any, int]:
    """Decode the value whose constructor is at offset: (value, offset after it).

    Raises MalformedError (offsets relative to data) on bytes that are not a well-formed value.
    """
    mv = _view(data)
    if not 0 <= offset <= len(mv):
        raise MalformedError("value", offset, f"is outside the {len(mv)}-byte data")
    return _value(mv, offset, len(mv), 0)


# ---------------------------------------------------------------- message sections

SECTION_NAMES = {
    0x70: "header",
    0x71: "delivery_annotations",
    0x72: "message_annotations",
    0x73: "properties",
    0x74: "application_properties",
    0x75: "data",
    0x76: "amqp_sequence",
    0x77: "amqp_value",
    0x78: "footer",
}
SECTION_CODES = {name: code for code, name in SECTION_NAMES.items()}
_SECTION_SYMBOLS = {
    "amqp:header:list": 0x70,
    "amqp:delivery-annotations:map": 0x71,
    "amqp:message-annotations:map": 0x72,
    "amqp:properties:list": 0x73,
    "amqp:application-properties:map": 0x74,
    "amqp:data:binary": 0x75,
    "amqp:amqp-sequence:list": 0x76,
    "amqp:amqp-value:*": 0x77,
    "amqp:footer:map": 0x78,
}
_SECTION_SYMBOL_BYTES = frozenset(s.encode("ascii") for s in _SECTION_SYMBOLS)
# Position in the order the spec requires; the three body sections share one.
_RANK = {0x70: 0, 0x71: 1, 0x72: 2, 0x73: 3, 0x74: 4, 0x75: 5, 0x76: 5, 0x77: 5, 0x78: 6}
_BODY_RANK = 5
_EXPECTED: dict[int, tuple[type, str]] = {
    0x70: (list, "list"),
    0x71: (dict, "map"),
    0x72: (dict, "map"),
    0x73: (list, "list"),
    0x74: (dict, "map"),
    0x75: (bytes, "binary"),
    0x76: (list, "list"),
    0x78: (dict, "map"),
}

# Field name and the type encode_message gives a plain value (None: message-id, chosen by value).
HEADER_FIELDS: tuple[tuple[str, str | None], ...] = (
    ("durable", "boolean"),
    ("priority", "ubyte"),
    ("ttl", "uint"),
    ("first_acquirer", "boolean"),
    ("delivery_count", "uint"),
)
PROPERTIES_FIELDS: tuple[tuple[str, str | None], ...] = (
    ("message_id", None),
    ("user_id", "binary"),
    ("to", "string"),
    ("subject", "string"),
    ("reply_to", "string"),
    ("correlation_id", None),
    ("content_type", "symbol"),
    ("content_encoding", "symbol"),
    ("absolute_expiry_time", "timestamp"),
    ("creation_time", "timestamp"),
    ("group_id", "string"),
    ("group_sequence", "uint"),
    ("reply_to_group_id", "string"),
)
_FIELD_NAMES = {
    0x70: tuple(name for name, _ in HEADER_FIELDS),
    0x73: tuple(name for name, _ in PROPERTIES_FIELDS),
}


def looks_like_amqp(data: bytes | bytearray | memoryview) -> bool:
    """Whether data starts with a described message section (0x00, then a section descriptor)."""
    n = len(data)
    if n < 3 or data[0] != 0x00:
        return False
    c = data[1]
    if c == 0x53:
        return 0x70 <= data[2] <= 0x78
    if c == 0x80:
        return n >= 10 and 0x70 <= _U64.unpack_from(data, 2)[0] <= 0x78
    if c == 0xA3:
        return bytes(data[3 : 3 + data[2]]) in _SECTION_SYMBOL_BYTES
    if c == 0xB3:
        return n >= 6 and bytes(data[6 : 6 + _U32.unpack_from(data, 2)[0]]) in _SECTION_SYMBOL_BYTES
    return False


def _section_code(mv: memoryview, pos: int, end: int) -> tuple[int, int]:
    """The section code of the descriptor at pos, and the offset after it."""
    if pos >= end:
        raise _short("section descriptor", pos, 1, end)
    c = mv[pos]
    if c in (0x53, 0x80, 0xA3, 0xB3):
        descriptor, after = _BODIES[c](mv, pos + 1, end, 1)
        code = _SECTION_SYMBOLS.get(descriptor) if c >= 0xA3 else descriptor
        if code in SECTION_NAMES:
            return code, after
        shown = repr(str(descriptor)) if c >= 0xA3 else f"0x{descriptor:x}"
        raise MalformedError(f"section descriptor {shown}", pos, "is not a message section")
    raise MalformedError(
        f"section descriptor constructor 0x{c:02x}", pos, "is not a ulong or symbol section descriptor"
    )


def _section_value(code: int, value: Any, offset: int, notes: list[str]) -> Any:
    name = SECTION_NAMES[code]
    expected = _EXPECTED.get(code)
    if expected is not None and not isinstance(value, expected[0]):
        notes.append(f"{name} section at offset {offset} holds a {_kind(value)}, not a {expected[1]}")
        return value
    fields = _FIELD_NAMES.get(code)
    if fields is None:
        return value
    out = dict(zip(fields, value, strict=False))
    if len(value) > len(fields):
        notes.append(
            f"{name} section at offset {offset} has {len(value)} fields, the spec defines {len(fields)}"
        )
        for i in range(len(fields), len(value)):
            out[f"field_{i}"] = value[i]
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Array):
        return "array"
    if isinstance(value, Described):
        return "described value"
    return {bool: "boolean", dict: "map", list: "list", bytes: "binary", str: "string"}.get(
        type(value), type(value).__name__.lower()
    )


def decode_message(data: bytes | bytearray | memoryview, base: int = 0, depth: int = MAX_DEPTH) -> Message:
    """Decode a bare message; never raises on bad bytes. Offsets in the result are base + offset in data.
    Values may nest depth levels (the amqp_depth limit)."""
    mv = _view(data)
    end = len(mv)
    plain = _plain_message(mv, end, base)
    if plain is not None:
        return plain
    # The walk counts levels up to MAX_DEPTH: starting it higher or lower sets the limit.
    message = _general_message(mv, end, base, 1 + MAX_DEPTH - depth)
    if message.error is not None and TOO_DEEP in message.error:
        said = f"nests deeper than {depth} levels (the amqp_depth limit: streamdump --limit raises it)"
        message.error = message.error.replace(TOO_DEEP, said)
    return message


def plain_message(data: bytes | memoryview, base: int = 0) -> Message | None:
    """decode_message's result for a message of the shape clients send (see _plain_message),
    None for any other: the shortcut decode_message tries first, on its own."""
    mv = data if type(data) is memoryview and data.format == "B" and data.ndim == 1 else _view(data)
    return _plain_message(mv, len(mv), base)


_DATA_ALONE = b"\x00\x53\x75\xa0"  # a data section (ulong descriptor 0x75) as a vbin8


def data_message(data: bytes, start: int, end: int, base: int) -> Message | None:
    """decode_message's result for data[start:end] (at base) when it is a data section of at
    most 255 bytes alone, the commonest message of all; None for anything else. Reads the
    bytes where they are, for a caller that holds many messages in one buffer."""
    if end - start >= 5 and data.startswith(_DATA_ALONE, start) and data[start + 4] == end - start - 5:
        return DataAlone(data[start + 5 : end], base)
    return None


def _general_message(mv: memoryview, end: int, base: int, level: int = 1) -> Message:
    message = Message()
    sections = message.sections
    pos = 0
    try:
        if end == 0:
            raise MalformedError("message", 0, "is empty, not an AMQP 1.0 section")
        while pos < end:
            start = pos
            if mv[pos] != 0x00:
                raise MalformedError(
                    f"byte 0x{mv[pos]:02x}", pos, "is not the start of a message section (0x00)"
                )
            code, pos = _section_code(mv, pos + 1, end)
            value, pos = _value(mv, pos, end, level)
            value = _section_value(code, value, base + start, message.notes)
            sections.append(Section(code, SECTION_NAMES[code], base + start, pos - start, value))
    except MalformedError as e:
        message.error = e.describe(base)
        message.error_offset = e.offset + base
    _check_order(message)
    return message


def _plain_message(mv: memoryview, end: int, base: int) -> Message | None:
    """The shape clients send, decoded without the general loop's checks: sections with ulong
    descriptors (0x53), each of header, annotations, properties and application properties at
    most once and in the spec's order, then one data section running to the end. Such a
    message has no error and no note. None for any other shape; decode_message then decodes
    it from the start."""
    # A data section alone, the commonest message of all, before any loop.
    if end >= 5 and mv[0] == 0x00 and mv[1] == 0x53 and mv[2] == 0x75 and mv[3] == 0xA0 and mv[4] == end - 5:
        return DataAlone(mv[5:].tobytes(), base)
    sections: list[Section] = []
    pos = 0
    last = -1
    try:
        while end - pos >= 4 and mv[pos] == 0x00 and mv[pos + 1] == 0x53:
            code = mv[pos + 2]
            if code == 0x75:
                constructor = mv[pos + 3]
                if constructor == 0xA0 and end - pos >= 5:
                    start, size = pos + 5, mv[pos + 4]
                elif constructor == 0xB0 and end - pos >= 8:
                    start, size = pos + 8, _U32.unpack_from(mv, pos + 4)[0]
                else:
                    return None
                if start + size != end:
                    return None
                sections.append(Section(0x75, "data", base + pos, end - pos, mv[start:end].tobytes()))
                return Message(sections, None, None, [])
            if not last < code < 0x75 or code < 0x70:
                return None
            value, after = _value(mv, pos + 3, end, 1)
            if not isinstance(value, _EXPECTED[code][0]):
                return None
            names = _FIELD_NAMES.get(code)
            if names is not None:
                if len(value) > len(names):
                    return None
                value = dict(zip(names, value, strict=False))
            sections.append(Section(code, SECTION_NAMES[code], base + pos, after - pos, value))
            last, pos = code, after
    except MalformedError:
        return None
    return None


def _check_order(message: Message) -> None:
    notes = message.notes
    last: Section | None = None
    seen: set[int] = set()
    body: Section | None = None
    for section in message.sections:
        code = section.code
        rank = _RANK[code]
        where = f"{section.name} section at offset {section.offset}"
        if last is not None and rank < _RANK[last.code]:
            notes.append(f"{where} comes after {last.name}, out of the spec's order")
        if rank == _BODY_RANK:
            if body is None:
                body = section
            elif body.code != code:
                notes.append(f"{where} mixes body kinds: the body started as {body.name}")
            elif code == 0x77:
                notes.append(f"{where}: a message has at most one amqp_value section")
        elif code in seen:
            notes.append(f"{where} repeats an earlier {section.name} section")
        seen.add(code)
        last = section
    if body is None and message.error is None and message.sections:
        notes.append("message has no body section (data, amqp_sequence or amqp_value)")


# ---------------------------------------------------------------- JSON and previews


def to_json(value: Any) -> Any:
    """A JSON-safe form of a decoded AMQP value (see the module docstring for the mapping)."""
    return _json(value, json_float)


def _plainjson_float(value: float) -> Any:
    """As json_float, refusing a float that Python writes with an exponent (1e-05), which
    JSON writers other than json.dumps write otherwise."""
    out = json_float(value)
    if type(out) is float and not plain_float(out):
        raise ValueError(f"{out!r} has an exponent")
    return out


def _json(value: Any, on_float: Callable[[float], Any]) -> Any:
    # Exact types first, the commonest first: a data body's bytes, strings, ints, maps.
    kind = type(value)
    if kind is bytes:
        return value.hex()
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else json_key(k): _json(v, on_float) for k, v in value.items()}
    if kind is list:
        return [_json(v, on_float) for v in value]
    if kind is float:
        return on_float(value)
    # Subclasses (Symbol, Char, Timestamp) and the AMQP types.
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return on_float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {json_key(k): _json(v, on_float) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v, on_float) for v in value]
    if isinstance(value, Array):
        if value.descriptor is None:
            return [_json(v, on_float) for v in value.items]
        descriptor = _json(value.descriptor, on_float)
        return [{"descriptor": descriptor, "value": _json(v, on_float)} for v in value.items]
    if isinstance(value, Described):
        return {"descriptor": _json(value.descriptor, on_float), "value": _json(value.value, on_float)}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return value.raw.hex()
    if isinstance(value, Typed):
        return _json(value.value, on_float)
    return str(value)


def message_json(message: Message, plain_floats: bool = False) -> dict[str, Any]:
    """Section name -> JSON value; a section present several times maps to a list, one item each.

    plain_floats: raise ValueError at a float Python writes with an exponent, for a caller
    whose JSON writer would write it otherwise (orjson: 0.00001 for 1e-05).
    """
    on_float = _plainjson_float if plain_floats else json_float
    sections = message.sections
    if len(sections) == 1:  # the commonest message: one data section
        section = sections[0]
        value = section.value
        return {section.name: value.hex() if type(value) is bytes else _json(value, on_float)}
    # A repeated section's values come as a list, whose JSON is the list of their JSON forms.
    return {name: _json(value, on_float) for name, value in message.section_values().items()}


# ---------------------------------------------------------------- encoding

# For one value: candidate codes, most compact first (the first that fits is used).
_SINGLE_CODES: dict[str, tuple[int, ...]] = {
    "null": (0x40,),
    "boolean": (0x41, 0x42),
    "ubyte": (0x50,),
    "ushort": (0x60,),
    "uint": (0x43, 0x52, 0x70),
    "ulong": (0x44, 0x53, 0x80),
    "byte": (0x51,),
    "short": (0x61,),
    "int": (0x54, 0x71),
    "long": (0x55, 0x81),
    "float": (0x72,),
    "double": (0x82,),
    "decimal32": (0x74,),
    "decimal64": (0x84,),
    "decimal128": (0x94,),
    "char": (0x73,),
    "timestamp": (0x83,),
    "uuid": (0x98,),
    "binary": (0xA0, 0xB0),
    "string": (0xA1, 0xB1),
    "symbol": (0xA3, 0xB3),
}
# In an array every element shares the code: no value-specific zero-width forms.
_ARRAY_CODES: dict[str, tuple[int, ...]] = {
    **_SINGLE_CODES,
    "boolean": (0x56,),
    "uint": (0x52, 0x70),
    "ulong": (0x53, 0x80),
}
_COMPOUND_CODES = {"list": (0xC0, 0xD0), "map": (0xC1, 0xD1), "array": (0xE0, 0xF0)}
_LONG_MAX = 2**63 - 1
_ULONG_MAX = 2**64 - 1


def _infer(value: Any) -> tuple[str, Any]:
    """The AMQP type name a Python value encodes as, and the value to encode."""
    if isinstance(value, Typed):
        return value.type_name, value.value
    if value is None:
        return "null", None
    if isinstance(value, bool):
        return "boolean", value
    if isinstance(value, Timestamp):
        return "timestamp", value
    if isinstance(value, int):
        # A long, unless only a ulong can hold it (a decoded ulong of 2**63 or more encodes again).
        return "ulong" if _LONG_MAX < value <= _ULONG_MAX else "long", value
    if isinstance(value, float):
        return "double", value
    if isinstance(value, Symbol):
        return "symbol", value
    if isinstance(value, Char):
        return "char", value
    if isinstance(value, str):
        return "string", value
    if isinstance(value, bytes | bytearray | memoryview):
        return "binary", value
    if isinstance(value, uuid.UUID):
        return "uuid", value
    if isinstance(value, Decimal):
        return f"decimal{value.width * 8}", value
    if isinstance(value, Described):
        return "described", value
    if isinstance(value, Array):
        return "array", value
    if isinstance(value, list | tuple):
        return "list", value
    if isinstance(value, Mapping):
        return "map", value
    raise EncodeError(f"no AMQP type for {type(value).__name__} {value!r}")


def _raw(code: int, value: Any) -> bytes:
    """The bytes of a sized value (binary, string, symbol)."""
    if code in (0xA0, 0xB0):
        if not isinstance(value, bytes | bytearray | memoryview):
            raise EncodeError(f"binary needs bytes, not {type(value).__name__}")
        return bytes(value)
    if not isinstance(value, str):
        raise EncodeError(f"{_FORMATS[code][0]} needs a str, not {type(value).__name__}")
    return value.encode("utf-8")


def _fits(code: int, value: Any) -> bool:
    if code in (0x43, 0x44, 0x52, 0x53, 0x54, 0x55):
        if not isinstance(value, int) or isinstance(value, bool):
            return False  # the full-width code that follows reports the bad value
        if code in (0x43, 0x44):
            return value == 0
        return 0 <= value <= 0xFF if code in (0x52, 0x53) else -0x80 <= value <= 0x7F
    if code == 0x41:
        return value is True
    if code == 0x42:
        return value is False
    if code in (0xA0, 0xA1, 0xA3):
        return len(_raw(code, value)) <= 0xFF
    return True


def _choose(codes: tuple[int, ...], values: list[Any]) -> int:
    for code in codes[:-1]:
        if all(_fits(code, v) for v in values):
            return code
    return codes[-1]


def _put_body(out: bytearray, code: int, value: Any) -> None:
    """Append the body of value under a fixed constructor code (scalars only)."""
    st = _STRUCTS.get(code)
    if st is not None:
        number = float | int if code in (0x72, 0x82) else int
        if isinstance(value, bool) or not isinstance(value, number):
            raise EncodeError(f"{_FORMATS[code][0]} needs a number, not {value!r}")
        try:
            out += st.pack(value)
        except struct.error as e:
            raise EncodeError(f"{value!r} does not fit a {_FORMATS[code][0]}: {e}") from None
    elif code in (0x40, 0x41, 0x42, 0x43, 0x44):
        return
    elif code == 0x56:
        out.append(1 if value else 0)
    elif code in (0xA0, 0xA1, 0xA3):
        raw = _raw(code, value)
        out.append(len(raw))
        out += raw
    elif code in (0xB0, 0xB1, 0xB3):
        raw = _raw(code, value)
        out += _U32.pack(len(raw))
        out += raw
    elif code == 0x73:
        if not isinstance(value, str) or len(value) != 1:
            raise EncodeError(f"char needs a one-character str, not {value!r}")
        out += _U32.pack(ord(value))
    elif code == 0x83:
        try:
            out += _I64.pack(int(value))
        except (struct.error, TypeError, ValueError) as e:
            raise EncodeError(f"timestamp needs milliseconds as an int, not {value!r}: {e}") from None
    elif code == 0x98:
        if not isinstance(value, uuid.UUID):
            raise EncodeError(f"uuid needs a uuid.UUID, not {value!r}")
        out += value.bytes
    elif code in (0x74, 0x84, 0x94):
        raw = value.raw if isinstance(value, Decimal) else bytes(value)
        width = _FORMATS[code][2]
        if len(raw) != width:
            raise EncodeError(f"{_FORMATS[code][0]} needs {width} raw bytes, not {len(raw)}")
        out += raw
    else:
        raise EncodeError(f"constructor 0x{code:02x} has no scalar body")


def _content(type_name: str, value: Any) -> tuple[int, bytearray]:
    """Count and element bytes of a list, map or array (what follows the size and count)."""
    payload = bytearray()
    if type_name == "list":
        if not isinstance(value, list | tuple):
            raise EncodeError(f"list needs a list, not {type(value).__name__}")
        for item in value:
            _put(payload, item)
        return len(value), payload
    if type_name == "map":
        if not isinstance(value, Mapping):
            raise EncodeError(f"map needs a dict, not {type(value).__name__}")
        for key, item in value.items():
            _put(payload, key)
            _put(payload, item)
        return 2 * len(value), payload
    if not isinstance(value, Array):
        raise EncodeError(f"array needs an Array, not {type(value).__name__}")
    if value.descriptor is not None:
        payload.append(0x00)
        _put(payload, value.descriptor)
    items = [v.value if isinstance(v, Typed) else v for v in value.items]
    element = value.element_type
    if element in _COMPOUND_CODES:
        contents = [_content(element, item) for item in items]
        wide = any(count > 0xFF or len(body) >= 0xFF for count, body in contents)
        payload.append(_COMPOUND_CODES[element][wide])
        for count, body in contents:
            _put_compound(payload, wide, count, body)
        return len(items), payload
    codes = _ARRAY_CODES.get(element)
    if codes is None:
        raise EncodeError(f"no array element type {element!r}")
    code = _choose(codes, items)
    payload.append(code)
    for item in items:
        _put_body(payload, code, item)
    return len(items), payload


def _put_compound(out: bytearray, wide: bool, count: int, body: bytearray) -> None:
    if wide:
        out += _U32X2.pack(len(body) + 4, count)
    else:
        out.append(len(body) + 1)
        out.append(count)
    out += body


def _put(out: bytearray, value: Any) -> None:
    name, value = _infer(value)
    if name == "described":
        if not isinstance(value, Described):
            raise EncodeError(f"described needs a Described, not {type(value).__name__}")
        out.append(0x00)
        _put(out, value.descriptor)
        _put(out, value.value)
        return
    codes = _COMPOUND_CODES.get(name)
    if codes is not None:
        count, body = _content(name, value)
        if name == "list" and count == 0:
            out.append(0x45)
            return
        wide = count > 0xFF or len(body) >= 0xFF
        out.append(codes[wide])
        _put_compound(out, wide, count, body)
        return
    single = _SINGLE_CODES.get(name)
    if single is None:
        raise EncodeError(f"no AMQP type named {name!r}")
    code = _choose(single, [value]) if len(single) > 1 else single[0]
    out.append(code)
    _put_body(out, code, value)


def encode_value(value: Any) -> bytes:
    """The AMQP encoding of a value (constructor included), compact forms where they apply."""
    out = bytearray()
    _put(out, value)
    return bytes(out)


def _coerce(kind: str | None, value: Any) -> Any:
    if value is None or isinstance(value, Typed):
        return value
    if kind is None:  # message-id: ulong, uuid, binary or string
        return Typed("ulong", value) if isinstance(value, int) and not isinstance(value, bool) else value
    if kind == "symbol" and isinstance(value, str):
        return Symbol(value)
    if kind == "binary" and isinstance(value, str):
        return value.encode("utf-8")
    if kind in ("ubyte", "uint") or (kind == "timestamp" and not isinstance(value, Timestamp)):
        return Typed(kind, value)
    return value


def _fields_list(section: str, fields: tuple[tuple[str, str | None], ...], value: Any) -> list[Any]:
    if not isinstance(value, Mapping):
        raise EncodeError(f"{section} needs a dict of field names, not {type(value).__name__}")
    known = {name for name, _ in fields}
    unknown = [k for k in value if k not in known]
    if unknown:
        raise EncodeError(f"{section} has no field {unknown[0]!r}")
    last = max((i for i, (name, _) in enumerate(fields) if name in value), default=-1)
    return [_coerce(kind, value.get(name)) for name, kind in fields[: last + 1]]


def _annotation_keys(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if type(key) is str:
            key = Symbol(key)
        elif isinstance(key, int) and not isinstance(key, bool):
            key = Typed("ulong", key)
        out[key] = item
    return out


def encode_message(sections: list[tuple[str, Any]]) -> bytes:
    """A bare message from (section name, value) pairs, in the order given.

    header and properties take dicts of field names; annotation and footer keys given as str
    become symbols (int keys ulongs); data takes bytes; the others take the value as is.
    """
    out = bytearray()
    for name, value in sections:
        code = SECTION_CODES.get(name)
        if code is None:
            raise EncodeError(f"no message section named {name!r}")
        if code == 0x70:
            value = _fields_list(name, HEADER_FIELDS, value)
        elif code == 0x73:
            value = _fields_list(name, PROPERTIES_FIELDS, value)
        elif code in (0x71, 0x72, 0x78):
            value = _annotation_keys(value)
        elif code == 0x75 and not isinstance(value, Typed):
            value = Typed("binary", value)
        out += bytes((0x00, 0x53, code))
        _put(out, value)
    return bytes(out)
