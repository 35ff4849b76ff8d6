"""Compiles registry field specs into decode/encode operations, once per layout and version.

Consecutive fixed-width integers become one precompiled struct.Struct (one unpack,
no per-field work); strings, arrays, maps, structs, switches, JSON and conditional
fields become small op objects. The same ops decode and encode, so every spec is
symmetric. Byte order is the spec's, compiled into every struct once. Detail-tree
nodes are built only when a caller asks for them (ctx.nodes set).
"""

from __future__ import annotations

import ipaddress
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from msgspec import Struct

from streamdump.codecs import lenient_json
from streamdump.codecs.protobuf import ProtobufError, Schema
from streamdump.spec.hooks import Cut
from streamdump.spec.keyed import MASKED, Keyed, key_of, label, member_nodes, title, value_nodes
from streamdump.spec.registry import INT_TYPES, FieldSpec
from streamdump.wire.frame import Expert, Node
from streamdump.wire.limits import DEFAULT_LIMITS, Limits

__all__ = ["BadValue", "Compiler", "Ctx", "Short", "decode_ops", "encode_ops", "title"]


class Short(Exception):
    """The frame ends (or a count cannot fit) before a field is complete."""

    def __init__(self, field: str, offset: int, need: int, have: int) -> None:
        super().__init__(field, offset, need, have)
        self.field = field
        self.offset = offset
        self.need = need
        self.have = have

    def detail(self) -> str:
        """What was short, in the words trees use: `Envelope Rest needs 4 bytes at offset 8, 2 left`."""
        name, more, counted = self.field.partition(" (")  # a count said after the name: "(3 entries)"
        what = f"{title(name)}{more}{counted}"
        return f"{what} needs {self.need} bytes at offset {self.offset}, {max(self.have, 0)} left"

    def message(self) -> str:
        return f"frame too short: {self.detail()}"


class BadValue(Exception):
    """A length or count on the wire is impossible (negative other than null)."""

    def __init__(self, field: str, offset: int, message: str) -> None:
        super().__init__(field, offset, message)
        self.field = field
        self.offset = offset
        self.text = message


class Ctx(Struct):
    """Per-decode state: where expert notes go, and the node list when a tree is wanted."""

    expert: list[Expert]
    nodes: list[Node] | None = None
    # Partial frames: where the frame's size says it ends, beyond the captured bytes. Counts
    # are checked against it, so an array cut by a gap still yields its elements up to the cut.
    declared_end: int | None = None
    # The bytes are the captured start of a longer frame (cut by a gap).
    partial: bool = False
    # Run the hooks' expand step: a view needs records and sections, not just the headers.
    expand: bool = False
    # What expanding this frame may still produce (a hook's Budget), created by the first hook to need it.
    budget: Any = None
    # The header's map of entries (frame.entries) that layout fields with `entry:` take
    # their values from, and where its bytes are (for their tree nodes).
    entries: dict[Any, Any] | None = None
    entries_at: tuple[int, int] = (0, 0)
    # Text protocols: a `size: word` field just read its line's end, so a `size: line` field
    # after it has nothing left on that line.
    line_done: bool = False
    # The bounds the decode keeps (its decoder's).
    limits: Limits = DEFAULT_LIMITS


class Op(Protocol):
    min_size: int

    def decode(self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int: ...

    def encode(self, buf: bytearray, values: dict[str, Any]) -> None: ...


# ---------------------------------------------------------------- value codecs
# A value codec reads one value with no name attached; FieldOp and the
# container codecs give it a name, a node and a place in the output.


class IntCodec:
    __slots__ = ("min_size", "st")

    def __init__(self, type_name: str, order: str = ">") -> None:
        self.st = struct.Struct(order + INT_TYPES[type_name][0])
        self.min_size = self.st.size

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        size = self.st.size
        if end - pos < size:
            raise Short(name, pos, size, end - pos)
        return self.st.unpack_from(mv, pos)[0], pos + size

    def write(self, buf: bytearray, value: Any) -> None:
        buf += self.st.pack(value)


class FixedCodec:
    """bool (one byte), ipv4 and ipv6 addresses: fixed widths with a value of their own."""

    __slots__ = ("kind", "min_size")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.min_size = {"bool": 1, "ipv4": 4, "ipv6": 16}[kind]

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        size = self.min_size
        if end - pos < size:
            raise Short(name, pos, size, end - pos)
        raw = bytes(mv[pos : pos + size])
        if self.kind == "bool":
            if raw[0] > 1:
                ctx.expert.append(Expert("warn", f"{name} is {raw[0]}, not 0 or 1", pos))
            return bool(raw[0]), pos + size
        return str(ipaddress.ip_address(raw)), pos + size

    def write(self, buf: bytearray, value: Any) -> None:
        if self.kind == "bool":
            buf.append(1 if value else 0)
        else:
            buf += ipaddress.ip_address(value).packed


class LengthPrefixed:
    """string, bytes and pairs (key/value text) after a length prefix; a length of -1 is null."""

    __slots__ = ("keyed", "kind", "min_size", "prefix", "spec")

    def __init__(self, spec: FieldSpec, order: str, keyed: Keyed | None) -> None:
        self.spec = spec
        self.kind = spec.type
        self.prefix = struct.Struct(order + INT_TYPES[spec.prefix or "int32"][0])
        self.min_size = self.prefix.size
        self.keyed = keyed

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        psize = self.prefix.size
        if end - pos < psize:
            raise Short(name, pos, psize, end - pos)
        (length,) = self.prefix.unpack_from(mv, pos)
        pos += psize
        if length == -1:
            return None, pos
        if length < 0:
            raise BadValue(name, pos - psize, f"{name} has negative length {length}")
        if end - pos < length:
            raise Short(name, pos, length, end - pos)
        raw = mv[pos : pos + length]
        if self.kind == "bytes":
            return raw, pos + length
        text = decode_text(raw, name, pos, ctx)
        if self.kind == "string":
            return (MASKED if self.spec.secret and text else text), pos + length
        value = pairs_value(self.spec, self.keyed, text, pos, ctx)
        if node is not None and isinstance(value, dict):
            node.children = member_nodes(self.spec.fields, value, pos, length)
        return value, pos + length

    def write(self, buf: bytearray, value: Any) -> None:
        if value is None:
            buf += self.prefix.pack(-1)
            return
        if self.kind == "pairs" and self.keyed is not None:
            value = self.keyed.wire(self.spec, value, text=True)
        data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        buf += self.prefix.pack(len(data))
        buf += data


def decode_text(raw: memoryview | bytes, name: str, pos: int, ctx: Ctx) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        ctx.expert.append(Expert("warn", f"{name} is not valid UTF-8", pos))
        return str(raw, "utf-8", "replace")


def pairs_value(spec: FieldSpec, keyed: Keyed | None, text: str, pos: int, ctx: Ctx) -> Any:
    notes: list[str] = []
    assert keyed is not None
    value = keyed.value(spec, text, notes)
    ctx.expert.extend(Expert("warn", note, pos) for note in notes)
    return value


class ArrayCodec:
    """A count prefix (or a byte length, or none: to the end), then elements.

    A fixed-width integer element array with a count is one unpack.
    """

    __slots__ = ("counts", "element", "element_spec", "fixed", "min_size", "prefix")

    def __init__(self, element_spec: FieldSpec, element: Any, prefix: str, counts: str, order: str) -> None:
        self.element_spec = element_spec
        self.element = element
        self.prefix = None if prefix == "none" else struct.Struct(order + INT_TYPES[prefix][0])
        self.counts = counts
        code = INT_TYPES[element_spec.type][0] if element_spec.type in INT_TYPES else None
        self.fixed = (order, code) if code and counts == "items" and self.prefix else None
        self.min_size = self.prefix.size if self.prefix else 0

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        if self.prefix is not None and self.counts == "items":
            count, pos = read_count(self.prefix, mv, pos, end, name, self.element.min_size, ctx.declared_end)
            if count is None:
                return None, pos
            stop = None
        else:
            count, stop, pos = None, end, pos
            if self.prefix is not None:
                stop, pos = read_span(self.prefix, mv, pos, end, name)
                if stop is None:
                    return None, pos
        items: list[Any] = []
        if self.fixed and node is None and count is not None and count * self.element.min_size <= end - pos:
            order, code = self.fixed
            items.extend(struct.unpack_from(f"{order}{count}{code}", mv, pos))
            return items, pos + count * self.element.min_size
        try:
            index = 0
            while (index < count) if count is not None else (pos < stop):  # type: ignore[operator]
                pos = read_element(
                    self.element, self.element_spec, mv, pos, stop or end, ctx, node, items, index
                )
                index += 1
        except (Short, BadValue) as exc:
            exc.partial = items  # type: ignore[attr-defined]
            raise
        return items, pos

    def write(self, buf: bytearray, value: Any) -> None:
        if self.prefix is None:
            for item in value or ():
                self.element.write(buf, item)
            return
        if self.counts == "bytes":
            body = bytearray()
            for item in value or ():
                self.element.write(body, item)
            buf += self.prefix.pack(-1 if value is None else len(body))
            buf += body
            return
        buf += self.prefix.pack(-1 if value is None else len(value))
        for item in value or ():
            self.element.write(buf, item)


class MapCodec:
    """A count prefix (or a byte length, or none), then key/value pairs; a dict in wire order."""

    __slots__ = ("counts", "key", "key_spec", "min_size", "prefix", "value", "value_spec")

    def __init__(
        self,
        key_spec: FieldSpec,
        key: Any,
        value_spec: FieldSpec,
        value: Any,
        prefix: str,
        counts: str,
        order: str,
    ) -> None:
        self.key_spec, self.key = key_spec, key
        self.value_spec, self.value = value_spec, value
        self.prefix = None if prefix == "none" else struct.Struct(order + INT_TYPES[prefix][0])
        self.counts = counts
        self.min_size = self.prefix.size if self.prefix else 0

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        count: int | None = None
        stop = end
        if self.prefix is not None and self.counts == "items":
            entry_min = self.key.min_size + self.value.min_size
            count, pos = read_count(self.prefix, mv, pos, end, name, entry_min, ctx.declared_end)
            if count is None:
                return None, pos
        elif self.prefix is not None:
            span, pos = read_span(self.prefix, mv, pos, end, name)
            if span is None:
                return None, pos
            stop = span
        items: dict[Any, Any] = {}
        try:
            index = 0
            while (index < count) if count is not None else (pos < stop):
                start = pos
                k, pos = self.key.read(mv, pos, stop, ctx, None, f"{name} key")
                v, pos = self.value.read(mv, pos, stop, ctx, None, f"{name} value")
                if k in items:
                    ctx.expert.append(Expert("warn", f"{name}: duplicate key {k!r}", start))
                items[k] = v
                if node is not None:
                    node.children.append(Node(self.value_spec, str(k), start, pos - start, v))
                index += 1
        except (Short, BadValue) as exc:
            exc.partial = items  # type: ignore[attr-defined]
            raise
        return items, pos

    def write(self, buf: bytearray, value: Any) -> None:
        body = bytearray()
        for k, v in (value or {}).items():
            self.key.write(body, k)
            self.value.write(body, v)
        if self.prefix is not None:
            length = len(body) if self.counts == "bytes" else len(value or {})
            buf += self.prefix.pack(-1 if value is None else length)
        buf += body


class StructCodec:
    __slots__ = ("length_of", "min_size", "ops", "st")

    def __init__(self, ops: Sequence[Op], length_of: tuple[str, struct.Struct] | None = None) -> None:
        self.ops = tuple(ops)
        self.min_size = sum(op.min_size for op in self.ops)
        # (field, struct): the member holding the struct's own length, from its first byte.
        self.length_of = length_of

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        out: dict[str, Any] = {}
        saved = ctx.nodes
        if node is not None:
            ctx.nodes = node.children
        try:
            if self.length_of is not None:
                pos = self._read_measured(mv, pos, end, out, ctx, name)
            else:
                pos = decode_ops(self.ops, mv, pos, end, out, ctx)
        except (Short, BadValue) as exc:
            exc.partial = out  # type: ignore[attr-defined]
            raise
        finally:
            ctx.nodes = saved
        return out, pos

    def _read_measured(
        self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx, name: str
    ) -> int:
        """A struct whose first field says how long it is: its fields may not read past that."""
        assert self.length_of is not None
        field, st = self.length_of
        if end - pos < st.size:
            raise Short(field, pos, st.size, end - pos)
        (length,) = st.unpack_from(mv, pos)
        if length < st.size:
            raise BadValue(field, pos, f"{name}: {field} {length} is less than its own size")
        if end - pos < length:
            raise Short(f"{name} ({length} bytes)", pos, length, end - pos)
        stop = pos + length
        after = decode_ops(self.ops, mv, pos, stop, out, ctx)
        if after < stop:
            ctx.expert.append(Expert("warn", f"{name}: {stop - after} bytes after its last field", after))
        return stop

    def write(self, buf: bytearray, value: Any) -> None:
        if self.length_of is None:
            encode_ops(self.ops, buf, value)
            return
        field, st = self.length_of
        body = bytearray()
        encode_ops(self.ops, body, {**value, field: value.get(field, 0)})
        if field not in value:
            st.pack_into(body, 0, len(body))
        buf += body


# What ends a `size: word` field: a space, a tab or the line's end.
_WORD_END = re.compile(rb"[ \t\r\n]")
_BLANKS = re.compile(rb"[ \t]*")
_WORD = re.compile(rb"[^ \t\r\n]+")
DELIMITED = ("line", "word")
# A `size: word` field in one match, for the generated fast path (spec/specialise.py): the word
# (up to a space, a tab or a line's end), the spaces and tabs after it (group 1), and the line's
# end after those, when there is one (group 2): what delimited() finds in three steps.
WORD_AT = re.compile(rb"[^ \t\r\n]*(?=[ \t\r\n])([ \t]*)(\r?\n)?")
# The words of a line, as WordsCodec splits it.
WORDS_OF = _WORD.findall


def delimited(mv: memoryview, pos: int, end: int, name: str, mode: str, ctx: Ctx) -> tuple[int, int]:
    """A `size: line` or `size: word` field's length, and the bytes after it that it reads too.

    A line ends with CRLF or a bare LF, as text protocols' servers accept; a word with a space,
    a tab or the line's end, and takes the spaces and tabs after it (a line's end after them too).
    """
    data = mv.obj if isinstance(mv.obj, bytes | bytearray) and len(mv) == len(mv.obj) else bytes(mv)
    if mode == "line":
        if ctx.line_done:
            ctx.line_done = False
            return 0, 0
        nl = data.find(b"\n", pos, end)
        if nl < 0:
            raise Short(name, pos, end - pos + 1, end - pos)
        size = nl - pos - (1 if nl > pos and data[nl - 1] == 13 else 0)
        return size, nl + 1 - pos - size
    ctx.line_done = False
    found = _WORD_END.search(data, pos, end)
    if found is None:
        raise Short(name, pos, end - pos + 1, end - pos)
    size = found.start() - pos
    after = _BLANKS.match(data, found.start(), end).end()  # type: ignore[union-attr]
    if data[after : after + 2] == b"\r\n" or data[after : after + 1] == b"\n":
        ctx.line_done = True
        after += 2 if data[after] == 13 else 1
    return size, after - pos - size


class RawCodec:
    """Bytes with no length prefix: a fixed size, the value of an earlier sibling, the rest, or a
    text protocol's line or word."""

    __slots__ = ("delim", "fixed", "min_size", "ref")
    # Whether the bytes are parsed into a value (JSON, text, words, protobuf); a class attribute,
    # so the hot path asks one question instead of an isinstance over four types.
    parses = False

    def __init__(self, size: int | str) -> None:
        self.fixed = size if isinstance(size, int) else None
        self.delim = size if size in DELIMITED else None
        self.ref = size if isinstance(size, str) and size != "rest" and self.delim is None else None
        self.min_size = self.fixed or 0

    def size_for(self, out: dict[str, Any], pos: int, end: int) -> int | None:
        if self.fixed is not None:
            return self.fixed
        if self.ref is None:
            return end - pos
        return out.get(self.ref)  # type: ignore[no-any-return]

    def write(self, buf: bytearray, value: Any) -> None:
        if value is not None:
            buf += bytes(value)

    def terminate(self, buf: bytearray) -> None:
        """What ends a line or a word field on the wire."""
        if self.delim == "line":
            buf += b"\r\n"
        elif self.delim == "word":
            buf += b" "


class TextCodec(RawCodec):
    """A string with no length prefix: its size says where it ends (a text protocol's word or line)."""

    __slots__ = ("spec",)
    parses = True

    def __init__(self, spec: FieldSpec) -> None:
        super().__init__(spec.size if spec.size is not None else "rest")
        self.spec = spec

    def parse(self, raw: memoryview, pos: int, ctx: Ctx, node: Node | None, name: str) -> Any:
        text = decode_text(raw, name, pos, ctx)
        return MASKED if self.spec.secret and text else text

    def write(self, buf: bytearray, value: Any) -> None:
        if value is not None:
            buf += value.encode("utf-8") if isinstance(value, str) else bytes(value)


class WordsCodec(RawCodec):
    """Words separated by spaces or tabs, named in order by a struct: a text protocol's arguments.

    Optional members are the ones a shorter line leaves out, taken in order when words spare
    (`PUB subject [reply-to] size`: two words are subject and size, three all of them).
    """

    __slots__ = ("required", "spec")
    parses = True

    def __init__(self, spec: FieldSpec) -> None:
        super().__init__(spec.size if spec.size is not None else "rest")
        self.spec = spec
        self.required = sum(1 for f in spec.fields if not f.optional)

    def parse(self, raw: memoryview, pos: int, ctx: Ctx, node: Node | None, name: str) -> Any:
        spans = [(m.start(), m.end()) for m in _WORD.finditer(bytes(raw))]
        members = self.spec.fields
        if len(spans) < self.required:
            shown = " ".join(f"[{f.name}]" if f.optional else f.name for f in members)
            raise BadValue(name, pos, f"{name}: {len(spans)} words where {shown} are expected")
        spare = len(spans) - self.required
        value: dict[str, Any] = {}
        words = iter(spans)
        for member in members:
            if member.optional:
                if spare <= 0:
                    continue
                spare -= 1
            start, stop = next(words)
            text = decode_text(raw[start:stop], member.name, pos + start, ctx)
            if member.type in INT_TYPES:
                number = int(text) if text.isascii() and text.isdigit() else None
                if number is None or number >= 1 << (8 * INT_TYPES[member.type][1]):
                    what = "is not a number" if number is None else f"is out of range for {member.type}"
                    error = BadValue(member.name, pos + start, f"{member.name} {text!r} {what}")
                    error.partial = value  # type: ignore[attr-defined]  # the words before it still say something
                    raise error
                value[member.name] = number
            else:
                value[member.name] = text
            if node is not None:
                node.children.append(
                    Node(member, label(member), pos + start, stop - start, value[member.name])
                )
        extra = list(words)
        if extra:
            at = pos + extra[0][0]
            ctx.expert.append(Expert("warn", f"{name}: {len(extra)} words more than expected", at))
        return value

    def write(self, buf: bytearray, value: Any) -> None:
        if value is None:
            return
        words = [str(value[f.name]) for f in self.spec.fields if value.get(f.name) is not None]
        buf += " ".join(words).encode("utf-8")


class ProtobufCodec(RawCodec):
    """A protobuf message of a declared struct (members numbered by `tag:`), through the library."""

    __slots__ = ("_schema", "spec")
    parses = True

    def __init__(self, spec: FieldSpec) -> None:
        super().__init__(spec.size if spec.size is not None else "rest")
        self.spec = spec
        self._schema: Schema | None = None

    @property
    def schema(self) -> Schema:
        """The message classes, made by the first message decoded or written: the protobuf
        library loads then, not at every start."""
        if self._schema is None:
            structs: dict[str, tuple[FieldSpec, ...]] = {}
            _protobuf_structs(self.spec, structs)
            self._schema = Schema(f"streamdump.{self.spec.struct}", structs)
        return self._schema

    def parse(self, raw: memoryview, pos: int, ctx: Ctx, node: Node | None, name: str) -> Any:
        assert self.spec.struct is not None
        try:
            value = self.schema.decode(self.spec.struct, bytes(raw))
        except ProtobufError as exc:
            ctx.expert.append(
                Expert("warn", f"{title(name)} is not a protobuf {title(self.spec.struct)}: {exc}", pos)
            )
            return raw
        if node is not None:
            node.children = member_nodes(self.spec.fields, value, pos, len(raw))
        return value

    def write(self, buf: bytearray, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bytes | bytearray | memoryview):
            buf += bytes(value)
            return
        assert self.spec.struct is not None
        buf += self.schema.encode(self.spec.struct, value)


def _protobuf_structs(spec: FieldSpec, out: dict[str, tuple[FieldSpec, ...]]) -> None:
    if spec.struct is None or spec.struct in out:
        return
    out[spec.struct] = spec.fields
    for member in spec.fields:
        element = member.of if member.type == "array" and member.of is not None else member
        if element.type == "struct":
            _protobuf_structs(element, out)


class JsonCodec(RawCodec):
    """JSON text (of a size, or to the end): a declared struct's members, or any JSON value."""

    __slots__ = ("keyed", "spec")
    parses = True

    def __init__(self, spec: FieldSpec, keyed: Keyed | None) -> None:
        super().__init__(spec.size if spec.size is not None else "rest")
        self.spec = spec
        self.keyed = keyed

    def parse(self, raw: memoryview, pos: int, ctx: Ctx, node: Node | None, name: str) -> Any:
        text = decode_text(raw, name, pos, ctx)
        if not text.strip():
            return None
        try:
            value, lenient = lenient_json.loads(text)
        except lenient_json.JsonError as exc:
            ctx.expert.append(Expert("warn", f"{name} is not JSON: {exc} at byte {exc.pos}", pos))
            return raw
        if lenient:
            ctx.expert.append(
                Expert(
                    "note", f"{name}: JSON with unquoted object keys (read as its writers' parsers do)", pos
                )
            )
        if self.spec.fields and self.keyed is not None:
            if not isinstance(value, dict):
                ctx.expert.append(Expert("warn", f"{name}: expected a JSON object", pos))
            else:
                notes: list[str] = []
                value = self.keyed.fields(self.spec.fields, value, notes)
                ctx.expert.extend(Expert("warn", f"{name}: {note}", pos) for note in notes)
        if node is not None:
            if self.spec.fields and isinstance(value, dict):
                node.children = member_nodes(self.spec.fields, value, pos, len(raw))
            else:
                node.children = json_nodes(value, pos, len(raw))
        return value

    def write(self, buf: bytearray, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, bytes | bytearray | memoryview):
            buf += bytes(value)
            return
        if self.spec.fields and self.keyed is not None and isinstance(value, Mapping):
            value = self.keyed.obj(self.spec.fields, value, text=False)
        buf += lenient_json.dumps(value).encode("utf-8")


def json_nodes(value: Any, offset: int, length: int) -> list[Node]:
    """Tree nodes of a JSON value with no declared shape: one per key or element."""
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"[{i}]", v) for i, v in enumerate(value)]
    else:
        return []
    nodes = []
    for name, item in items:
        node = Node(None, name, offset, length, None if isinstance(item, dict | list) else item)
        node.children = json_nodes(item, offset, length)
        if isinstance(item, dict | list) and not node.children:
            node.value = "{}" if isinstance(item, dict) else "[]"
        nodes.append(node)
    return nodes


class SwitchCodec(RawCodec):
    """A layout chosen by an earlier field's value (`on`), within a size when one is given."""

    __slots__ = ("bounded", "cases", "default", "on", "spec")

    def __init__(self, spec: FieldSpec, cases: dict[int, Any], default: Any) -> None:
        super().__init__(spec.size if spec.size is not None else "rest")
        self.spec = spec
        self.on = spec.on
        self.cases = cases
        self.default = default
        # With a size, the case must fill it; without, it ends where its fields do.
        self.bounded = spec.size is not None


def read_count(
    prefix: struct.Struct,
    mv: memoryview,
    pos: int,
    end: int,
    name: str,
    element_min: int,
    declared_end: int | None,
) -> tuple[int | None, int]:
    count, pos = _read_prefix(prefix, mv, pos, end, name, "count")
    if count is None:
        return None, pos
    # Refuse counts that cannot fit before allocating anything for them.
    room = max(end, declared_end or 0) - pos
    if count * element_min > room:
        raise Short(f"{name} ({count} entries)", pos, count * element_min, end - pos)
    return count, pos


def _read_prefix(
    prefix: struct.Struct, mv: memoryview, pos: int, end: int, name: str, what: str
) -> tuple[int | None, int]:
    """A count or length prefix's value (None for -1, a null) and the position after it."""
    size = prefix.size
    if end - pos < size:
        raise Short(name, pos, size, end - pos)
    (value,) = prefix.unpack_from(mv, pos)
    pos += size
    if value == -1:
        return None, pos
    if value < 0:
        raise BadValue(name, pos - size, f"{name} has negative {what} {value}")
    return value, pos


def read_span(prefix: struct.Struct, mv: memoryview, pos: int, end: int, name: str) -> tuple[int | None, int]:
    """A byte-length prefix: where what it measures ends (None for a null)."""
    length, pos = _read_prefix(prefix, mv, pos, end, name, "length")
    if length is None:
        return None, pos
    if end - pos < length:
        raise Short(name, pos, length, end - pos)
    return pos + length, pos


def read_element(
    codec: Any,
    spec: FieldSpec,
    mv: memoryview,
    pos: int,
    end: int,
    ctx: Ctx,
    parent: Node | None,
    items: list[Any],
    index: int,
) -> int:
    child = None
    if parent is not None:
        text = f"{title(spec.struct)} [{index}]" if spec.struct else f"[{index}]"
        child = Node(spec, text, pos, 0)
        parent.children.append(child)
    try:
        value, new_pos = codec.read(mv, pos, end, ctx, child, spec.name)
    except (Short, BadValue) as exc:
        partial = getattr(exc, "partial", None)
        if partial is not None:
            items.append(partial)
            exc.partial = None  # type: ignore[attr-defined]
        if child is not None:
            child.length = max(0, min(exc.offset, end) - pos)
        raise
    items.append(value)
    if child is not None:
        child.length = new_pos - pos
        child.value = value
    return new_pos


def run_hook(hook: Any, value: Any, out: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
    """A hooked field's check, and its expand step when a view needs it."""
    try:
        hook.check(value, out, pos, ctx)
        if ctx.expand or node is not None:
            hook.expand(value, out, pos, ctx, node)
    except Exception as exc:  # decoding never raises: a hook bug is shown, not fatal
        ctx.expert.append(Expert("error", f"hook {hook.name} failed: {type(exc).__name__}: {exc}", pos))


# ---------------------------------------------------------------- what a field's value says


class Checks(Struct, frozen=True):
    """Work a field needs beyond reading its value: a constant to compare, parts to unpack."""

    const: Any = None
    parts: tuple[tuple[str, int, int], ...] = ()  # (name, mask, shift)

    def apply(self, spec: FieldSpec, value: Any, out: dict[str, Any], pos: int, width: int, ctx: Ctx) -> None:
        if self.const is not None and value != self.const:
            want = f"0x{self.const:x}" if isinstance(self.const, int) else f"0x{bytes(self.const).hex()}"
            got = f"0x{value:x}" if isinstance(value, int) else f"0x{bytes(value).hex()}"
            ctx.expert.append(Expert("error", f"{title(spec.name)} is {got}, expected {want}", pos))
        if self.parts and isinstance(value, int):
            parent = ctx.nodes[-1] if ctx.nodes else None
            for part_spec, (name, mask, shift) in zip(spec.bits, self.parts, strict=True):
                out[name] = (value & mask) >> shift
                if parent is not None:
                    parent.children.append(Node(part_spec, title(name), pos, width, out[name]))


def checks_of(spec: FieldSpec) -> Checks | None:
    if spec.const is None and not spec.bits:
        return None
    parts = tuple((p.name, p.mask or 0, _shift(p.mask or 0)) for p in spec.bits)
    return Checks(spec.const, parts)


def _shift(mask: int) -> int:
    return (mask & -mask).bit_length() - 1 if mask else 0


def part_of(word: int, mask: int) -> int:
    """The value of the part of a packed word under mask."""
    return (word & mask) >> _shift(mask)


def compose_bits(spec: FieldSpec, values: Mapping[str, Any]) -> int | None:
    """A packed word from its parts, when the caller gave parts and not the word."""
    if not spec.bits or spec.name in values or not all(p.name in values for p in spec.bits):
        return None
    word = 0
    for part in spec.bits:
        word |= (int(values[part.name]) << _shift(part.mask or 0)) & (part.mask or 0)
    return word


# ---------------------------------------------------------------- field ops


class FixedRun:
    """A run of unconditional fixed-width integer fields, decoded in one unpack."""

    __slots__ = ("check_of", "checks", "min_size", "names", "offsets", "specs", "st", "widths")

    def __init__(self, specs: Sequence[FieldSpec], order: str = ">") -> None:
        self.specs = tuple(specs)
        self.names = tuple(s.name for s in specs)
        self.st = struct.Struct(order + "".join(INT_TYPES[s.type][0] for s in specs))
        self.min_size = self.st.size
        offsets, at = [], 0
        for s in specs:
            offsets.append(at)
            at += INT_TYPES[s.type][1]
        self.offsets = tuple(offsets)
        self.widths = tuple(INT_TYPES[s.type][1] for s in specs)
        # Constants to compare and words to unpack into parts, per field; `checks` lists the
        # fields that have any (empty for plain runs).
        self.check_of = tuple(checks_of(s) for s in specs)
        self.checks = tuple((i, c) for i, c in enumerate(self.check_of) if c is not None)

    def decode(self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int:
        if end - pos >= self.st.size:
            out.update(zip(self.names, self.st.unpack_from(mv, pos), strict=True))
            if ctx.nodes is not None:
                for i, spec in enumerate(self.specs):
                    at, width = pos + self.offsets[i], self.widths[i]
                    ctx.nodes.append(Node(spec, title(spec.name), at, width, out[spec.name]))
                    self._check(i, out, at, ctx)
            else:
                for i, checks in self.checks:
                    checks.apply(
                        self.specs[i], out[self.names[i]], out, pos + self.offsets[i], self.widths[i], ctx
                    )
            return pos + self.st.size
        # Short: decode what fits so the caller keeps every complete field.
        order = self.st.format[0]
        for i, spec in enumerate(self.specs):
            at, width = pos + self.offsets[i], self.widths[i]
            if end - at < width:
                raise Short(spec.name, at, width, end - at)
            (out[spec.name],) = struct.unpack_from(order + INT_TYPES[spec.type][0], mv, at)
            if ctx.nodes is not None:
                ctx.nodes.append(Node(spec, title(spec.name), at, width, out[spec.name]))
            self._check(i, out, at, ctx)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check(self, i: int, out: dict[str, Any], at: int, ctx: Ctx) -> None:
        checks = self.check_of[i]
        if checks is not None:
            spec = self.specs[i]
            checks.apply(spec, out[spec.name], out, at, self.widths[i], ctx)

    def encode(self, buf: bytearray, values: dict[str, Any]) -> None:
        words = {s.name: compose_bits(s, values) for s in self.specs if s.bits}
        buf += self.st.pack(
            *(values[n] if n in values or words.get(n) is None else words[n] for n in self.names)
        )


class FieldOp:
    """One named field of any type, with its presence conditions."""

    __slots__ = ("checks", "codec", "hook", "min_size", "name", "optional", "spec", "when")

    def __init__(self, spec: FieldSpec, codec: Any, hook: Any = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.codec = codec
        self.hook = hook
        self.when = spec.when
        self.optional = spec.optional
        self.checks = checks_of(spec)
        # Conditional and optional fields may be absent, so they promise nothing.
        self.min_size = 0 if (spec.when or spec.optional) else codec.min_size

    def present(self, out: dict[str, Any], pos: int, end: int) -> bool:
        if self.when is not None:
            name, values, mask = self.when
            value = out.get(name)
            if mask is not None and isinstance(value, int):
                value &= mask
            if value not in values:
                return False
        return not (self.optional and pos >= end)

    def decode(self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int:
        if not self.present(out, pos, end):
            return pos
        codec = self.codec
        node = None
        if ctx.nodes is not None:
            node = Node(self.spec, title(self.name), pos, 0)
            ctx.nodes.append(node)
        try:
            if isinstance(codec, RawCodec):
                value, new_pos = self._read_sized(mv, pos, end, out, ctx, node)
            else:
                value, new_pos = codec.read(mv, pos, end, ctx, node, self.name)
        except (Short, BadValue) as exc:
            partial = getattr(exc, "partial", None)
            if partial is not None:
                self._store(out, partial)
                exc.partial = None  # type: ignore[attr-defined]
            if node is not None:
                node.length = max(0, min(exc.offset, end) - pos)
                node.value = partial.head if type(partial) is Cut else partial
            if type(partial) is Cut:
                run_hook(self.hook, partial, out, pos, ctx, node)
            raise
        self._store(out, value)
        if node is not None:
            node.length = new_pos - pos
            node.value = value
        if self.checks is not None:
            self.checks.apply(self.spec, value, out, pos, new_pos - pos, ctx)
        if self.hook is not None and value is not None:
            run_hook(self.hook, value, out, pos, ctx, node)
        return new_pos

    def _store(self, out: dict[str, Any], value: Any) -> None:
        if self.spec.inline and isinstance(value, dict):
            out.update(value)
        else:
            out[self.name] = value

    def _read_sized(
        self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx, node: Node | None
    ) -> tuple[Any, int]:
        codec = self.codec
        skip = 0
        if codec.delim is not None:
            size, skip = delimited(mv, pos, end, self.name, codec.delim, ctx)
        else:
            size = codec.size_for(out, pos, end)
        if size is None:
            raise BadValue(self.name, pos, f"{self.name}: size field {codec.ref} is missing")
        if size < 0:
            # A negative length prefix means null, as for bytes.
            return None, pos
        if end - pos < size:
            short = Short(self.name, pos, size, end - pos)
            if ctx.partial and self.hook is not None and self.hook.cuts:
                # The bytes before a gap: the hook still reads what is whole in them.
                short.partial = Cut(mv[pos:end], size, pos)  # type: ignore[attr-defined]
            raise short
        stop = pos + size
        if isinstance(codec, SwitchCodec):
            value, after = self._read_case(mv, pos, stop, out, ctx, node)
            return value, stop if codec.bounded else after
        raw = mv[pos:stop]
        if codec.parses:
            return codec.parse(raw, pos, ctx, node, self.name), stop + skip
        return raw, stop + skip

    def _read_case(
        self, mv: memoryview, pos: int, stop: int, out: dict[str, Any], ctx: Ctx, node: Node | None
    ) -> tuple[Any, int]:
        """The case an earlier field's value picks, read within [pos, stop)."""
        codec: SwitchCodec = self.codec
        selector = out.get(codec.on or "")
        case = codec.cases.get(selector, codec.default) if isinstance(selector, int) else codec.default
        if case is None:
            what = f"{self.name}: no layout for {codec.on} {selector}; {stop - pos} bytes not decoded"
            ctx.expert.append(Expert("warn", what, pos))
            return mv[pos:stop], stop
        case_spec, case_codec = case
        if node is not None:
            node.label = f"{title(self.name)} ({case_spec_name(case_spec)})"
        if isinstance(case_codec, JsonCodec):
            return case_codec.parse(mv[pos:stop], pos, ctx, node, self.name), stop
        value, after = case_codec.read(mv, pos, stop, ctx, node, self.name)
        if after < stop and codec.bounded:
            ctx.expert.append(
                Expert("warn", f"{self.name}: {stop - after} bytes after its last field", after)
            )
        return value, after

    def encode(self, buf: bytearray, values: dict[str, Any]) -> None:
        if self.when is not None:
            name, wanted, mask = self.when
            value = values.get(name)
            if mask is not None and isinstance(value, int):
                value &= mask
            if value not in wanted:
                return
        value = values if self.spec.inline else values.get(self.name)
        if self.optional and value is None:
            return
        word = compose_bits(self.spec, values)
        if word is not None:
            value = word
        codec = self.codec
        if isinstance(codec, SwitchCodec):
            selector = values.get(codec.on or "")
            case = codec.cases.get(selector, codec.default) if isinstance(selector, int) else codec.default
            if case is None:
                if isinstance(value, bytes | bytearray | memoryview):
                    buf += bytes(value)
                elif value is not None:
                    raise ValueError(f"{self.name}: no case for {codec.on} {selector!r}")
                return
            case[1].write(buf, value)
            return
        codec.write(buf, value)
        if isinstance(codec, RawCodec) and codec.delim is not None:
            codec.terminate(buf)


def case_spec_name(spec: FieldSpec) -> str:
    if spec.type == "json":
        return "JSON"
    return title(spec.struct) if spec.struct else spec.type


class EntryOp:
    """A field whose value is an entry of the header's map (frame.entries), not bytes of its own."""

    __slots__ = ("hook", "keyed", "min_size", "name", "spec", "wire")

    def __init__(self, spec: FieldSpec, keyed: Keyed, hook: Any = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.wire = key_of(spec)
        self.keyed = keyed
        self.hook = hook
        self.min_size = 0

    def decode(self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int:
        entries = ctx.entries
        if not entries or self.wire not in entries:
            return pos
        notes: list[str] = []
        value = self.keyed.value(self.spec, entries.pop(self.wire), notes)
        at, length = ctx.entries_at
        ctx.expert.extend(Expert("warn", note, at) for note in notes)
        out[self.name] = value
        node = None
        if ctx.nodes is not None:
            node = value_nodes(self.spec, value, at, length, label(self.spec))
            ctx.nodes.append(node)
        if self.hook is not None and value is not None:
            run_hook(self.hook, value, out, at, ctx, node)
        return pos

    def encode(self, buf: bytearray, values: dict[str, Any]) -> None:
        """Entries travel in the header's map: the decoder's encode puts them there."""


# ---------------------------------------------------------------- compilation


class Compiler:
    """Turns field specs into ops, with one spec's byte order, hooks and keyed conversions."""

    def __init__(
        self, order: str = ">", hooks: Mapping[str, Any] | None = None, keyed: Keyed | None = None
    ) -> None:
        self.order = order
        self.hooks = hooks or {}
        self.keyed = keyed

    def fields(self, specs: Sequence[FieldSpec], version: int, *, entries: bool = False) -> tuple[Op, ...]:
        """Ops for the fields present in this version, fixed integer runs merged.

        entries: fields with `entry:` read the frame's entries map (a command layout's);
        elsewhere (JSON objects, key/value text) `entry:` only names their key.
        """
        ops: list[Op] = []
        run: list[FieldSpec] = []
        for spec in specs:
            if spec.since > version:
                continue
            if entries and spec.entry is not None:
                if run:
                    ops.append(FixedRun(run, self.order))
                    run = []
                assert self.keyed is not None
                ops.append(EntryOp(spec, self.keyed, self.hooks[spec.hook] if spec.hook else None))
                continue
            if spec.type in INT_TYPES and not spec.when and not spec.optional:
                run.append(spec)
                if spec.bits:  # its parts follow it, before the next field
                    ops.append(FixedRun(run, self.order))
                    run = []
                continue
            if run:
                ops.append(FixedRun(run, self.order))
                run = []
            hook = self.hooks[spec.hook] if spec.hook else None
            ops.append(FieldOp(spec, self.codec(spec, version), hook))
        if run:
            ops.append(FixedRun(run, self.order))
        return tuple(ops)

    def codec(self, spec: FieldSpec, version: int) -> Any:
        kind = spec.type
        if kind == "hook":
            assert spec.hook is not None
            return self.hooks[spec.hook]
        if kind in INT_TYPES:
            return IntCodec(kind, self.order)
        if kind in ("bool", "ipv4", "ipv6"):
            return FixedCodec(kind)
        if kind == "string" and spec.size is not None:
            return TextCodec(spec)
        if kind == "words":
            return WordsCodec(spec)
        if kind == "protobuf":
            return ProtobufCodec(spec)
        if kind in ("string", "bytes", "pairs"):
            return LengthPrefixed(spec, self.order, self.keyed)
        if kind == "raw":
            assert spec.size is not None
            return RawCodec(spec.size)
        if kind == "json":
            return JsonCodec(spec, self.keyed)
        if kind == "switch":
            cases = {value: (case, self.codec(case, version)) for value, case in spec.cases.items()}
            default = (spec.default, self.codec(spec.default, version)) if spec.default else None
            return SwitchCodec(spec, cases, default)
        if kind == "array":
            assert spec.of is not None
            element = self.codec(spec.of, version)
            return ArrayCodec(spec.of, element, spec.prefix or "int32", spec.prefix_counts, self.order)
        if kind == "map":
            assert spec.key is not None and spec.value is not None
            return MapCodec(
                spec.key,
                self.codec(spec.key, version),
                spec.value,
                self.codec(spec.value, version),
                spec.prefix or "int32",
                spec.prefix_counts,
                self.order,
            )
        if kind == "struct":
            ops = self.fields(spec.fields, version)
            measured = next((m for m in spec.fields if m.length_of), None)
            length_of = (
                (measured.name, struct.Struct(self.order + INT_TYPES[measured.type][0])) if measured else None
            )
            return StructCodec(ops, length_of)
        raise ValueError(f"no codec for type {spec.type!r}")  # the registry rejects these first


def decode_ops(ops: Sequence[Op], mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int:
    for op in ops:
        pos = op.decode(mv, pos, end, out, ctx)
    return pos


def encode_ops(ops: Sequence[Op], buf: bytearray, values: dict[str, Any]) -> None:
    values = with_derived_sizes(ops, values)
    for op in ops:
        op.encode(buf, values)


def with_derived_sizes(ops: Sequence[Op], values: dict[str, Any]) -> dict[str, Any]:
    """Fill in the size fields sized fields refer to, and packed words, when the caller left them out.

    A packed word given whole also gives its parts, which later fields may be chosen by.
    """
    derived: dict[str, Any] = {}
    for op in ops:
        for spec in op.specs if isinstance(op, FixedRun) else (op.spec,) if isinstance(op, FieldOp) else ():
            word = values.get(spec.name)
            if spec.bits and isinstance(word, int):
                for part in spec.bits:
                    if part.name not in values:
                        derived[part.name] = part_of(word, part.mask or 0)
    for op in ops:
        ref = op.codec.ref if isinstance(op, FieldOp) and isinstance(op.codec, RawCodec) else None
        if ref and ref not in values:
            probe = bytearray()
            op.encode(probe, {**values, **derived})  # type: ignore[union-attr]
            raw = values.get(op.name)  # type: ignore[union-attr]
            null = raw is None and type(op.codec) is RawCodec  # type: ignore[union-attr]
            derived[ref] = -1 if null else len(probe)
    return {**values, **derived} if derived else values
