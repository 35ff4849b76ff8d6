"""Compiles registry field specs into decode/encode operations, once per layout and version.

Consecutive fixed-width integers become one precompiled struct.Struct (one unpack,
no per-field work); strings, arrays, maps, structs and conditional fields become
small op objects. The same ops decode and encode, so every spec is symmetric.
Detail-tree nodes are built only when a caller asks for them (ctx.nodes set).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streamdump.core.frame import Expert, Node
from streamdump.spec.registry import INT_TYPES, FieldSpec

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_ACRONYMS = {"id": "ID", "ids": "IDs", "crc": "CRC", "sasl": "SASL"}


def title(name: str) -> str:
    """Display name from a snake_case field name: correlation_id -> Correlation ID."""
    return " ".join(_ACRONYMS.get(w, w.capitalize()) for w in name.split("_"))


class Short(Exception):
    """The frame ends (or a count cannot fit) before a field is complete."""

    def __init__(self, field: str, offset: int, need: int, have: int) -> None:
        super().__init__(field, offset, need, have)
        self.field = field
        self.offset = offset
        self.need = need
        self.have = have

    def message(self) -> str:
        return (
            f"frame too short: {self.field} needs {self.need} bytes at offset {self.offset}, "
            f"{max(self.have, 0)} left"
        )


class BadValue(Exception):
    """A length or count on the wire is impossible (negative other than null)."""

    def __init__(self, field: str, offset: int, message: str) -> None:
        super().__init__(field, offset, message)
        self.field = field
        self.offset = offset
        self.text = message


@dataclass(slots=True)
class Ctx:
    """Per-decode state: where expert notes go, and the node list when a tree is wanted."""

    expert: list[Expert]
    nodes: list[Node] | None = None
    # Partial frames: where the frame's size says it ends, beyond the captured bytes. Counts
    # are checked against it, so an array cut by a gap still yields its elements up to the cut.
    declared_end: int | None = None
    # Run the hooks' expand step: a view needs records and sections, not just the headers.
    expand: bool = False
    # What expanding this frame may still produce (a hook's Budget), created by the first hook to need it.
    budget: Any = None


class Op(Protocol):
    min_size: int

    def decode(self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int: ...

    def encode(self, buf: bytearray, values: dict[str, Any]) -> None: ...


# ---------------------------------------------------------------- value codecs
# A value codec reads one value with no name attached; FieldOp and the
# container codecs give it a name, a node and a place in the output.


class IntCodec:
    __slots__ = ("min_size", "st")

    def __init__(self, type_name: str) -> None:
        self.st = struct.Struct(">" + INT_TYPES[type_name][0])
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


class LengthPrefixed:
    """string (int16 length) and bytes (int32 length); a length of -1 is null."""

    __slots__ = ("is_text", "min_size", "prefix")

    def __init__(self, is_text: bool) -> None:
        self.is_text = is_text
        self.prefix = _I16 if is_text else _I32
        self.min_size = self.prefix.size

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
        if not self.is_text:
            return raw, pos + length
        try:
            return str(raw, "utf-8"), pos + length
        except UnicodeDecodeError:
            ctx.expert.append(Expert("warn", f"{name} is not valid UTF-8", pos))
            return str(raw, "utf-8", "replace"), pos + length

    def write(self, buf: bytearray, value: Any) -> None:
        if value is None:
            buf += self.prefix.pack(-1)
            return
        data = value.encode("utf-8") if self.is_text else bytes(value)
        buf += self.prefix.pack(len(data))
        buf += data


class ArrayCodec:
    """int32 count, then elements; a fixed-width integer element array is one unpack."""

    __slots__ = ("element", "element_spec", "fixed_code", "min_size")

    def __init__(self, element_spec: FieldSpec, element: Any) -> None:
        self.element_spec = element_spec
        self.element = element
        self.fixed_code = INT_TYPES[element_spec.type][0] if element_spec.type in INT_TYPES else None
        self.min_size = 4

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        count, pos = _read_count(mv, pos, end, name, self.element.min_size, ctx.declared_end)
        if count is None:
            return None, pos
        items: list[Any] = []
        if self.fixed_code and node is None and count * self.element.min_size <= end - pos:
            items.extend(struct.unpack_from(f">{count}{self.fixed_code}", mv, pos))
            return items, pos + count * self.element.min_size
        try:
            for index in range(count):
                pos = _read_element(self.element, self.element_spec, mv, pos, end, ctx, node, items, index)
        except (Short, BadValue) as exc:
            exc.partial = items  # type: ignore[attr-defined]
            raise
        return items, pos

    def write(self, buf: bytearray, value: Any) -> None:
        if _write_count(buf, value):
            for item in value:
                self.element.write(buf, item)


class MapCodec:
    """int32 count, then key/value pairs; decoded as a dict in wire order."""

    __slots__ = ("key", "key_spec", "min_size", "value", "value_spec")

    def __init__(self, key_spec: FieldSpec, key: Any, value_spec: FieldSpec, value: Any) -> None:
        self.key_spec, self.key = key_spec, key
        self.value_spec, self.value = value_spec, value
        self.min_size = 4

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        count, pos = _read_count(
            mv, pos, end, name, self.key.min_size + self.value.min_size, ctx.declared_end
        )
        if count is None:
            return None, pos
        items: dict[Any, Any] = {}
        try:
            for _ in range(count):
                start = pos
                k, pos = self.key.read(mv, pos, end, ctx, None, f"{name} key")
                v, pos = self.value.read(mv, pos, end, ctx, None, f"{name} value")
                if k in items:
                    ctx.expert.append(Expert("warn", f"{name}: duplicate key {k!r}", start))
                items[k] = v
                if node is not None:
                    node.children.append(Node(self.value_spec, str(k), start, pos - start, v))
        except (Short, BadValue) as exc:
            exc.partial = items  # type: ignore[attr-defined]
            raise
        return items, pos

    def write(self, buf: bytearray, value: Any) -> None:
        if _write_count(buf, value):
            for k, v in value.items():
                self.key.write(buf, k)
                self.value.write(buf, v)


class StructCodec:
    __slots__ = ("min_size", "ops")

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ops = tuple(ops)
        self.min_size = sum(op.min_size for op in self.ops)

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        out: dict[str, Any] = {}
        saved = ctx.nodes
        if node is not None:
            ctx.nodes = node.children
        try:
            pos = decode_ops(self.ops, mv, pos, end, out, ctx)
        except (Short, BadValue) as exc:
            exc.partial = out  # type: ignore[attr-defined]
            raise
        finally:
            ctx.nodes = saved
        return out, pos

    def write(self, buf: bytearray, value: Any) -> None:
        encode_ops(self.ops, buf, value)


class RawCodec:
    """Bytes with no length prefix: a fixed size, or the value of an earlier sibling."""

    __slots__ = ("fixed", "min_size", "ref")

    def __init__(self, size: int | str) -> None:
        self.fixed = size if isinstance(size, int) else None
        self.ref = size if isinstance(size, str) else None
        self.min_size = self.fixed or 0

    def size_for(self, out: dict[str, Any]) -> int | None:
        return self.fixed if self.ref is None else out.get(self.ref)


def _read_count(
    mv: memoryview, pos: int, end: int, name: str, element_min: int, declared_end: int | None
) -> tuple[int | None, int]:
    if end - pos < 4:
        raise Short(name, pos, 4, end - pos)
    (count,) = _I32.unpack_from(mv, pos)
    pos += 4
    if count == -1:
        return None, pos
    if count < 0:
        raise BadValue(name, pos - 4, f"{name} has negative count {count}")
    # Refuse counts that cannot fit before allocating anything for them.
    room = max(end, declared_end or 0) - pos
    if count * element_min > room:
        raise Short(f"{name} ({count} entries)", pos, count * element_min, end - pos)
    return count, pos


def _write_count(buf: bytearray, value: Any) -> bool:
    """Write an array or map count (-1 for null); True when elements follow."""
    buf += _I32.pack(-1 if value is None else len(value))
    return value is not None


def _read_element(
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
        label = f"{title(spec.struct)} [{index}]" if spec.struct else f"[{index}]"
        child = Node(spec, label, pos, 0)
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


# ---------------------------------------------------------------- field ops


class FixedRun:
    """A run of unconditional fixed-width integer fields, decoded in one unpack."""

    __slots__ = ("min_size", "names", "offsets", "specs", "st")

    def __init__(self, specs: Sequence[FieldSpec]) -> None:
        self.specs = tuple(specs)
        self.names = tuple(s.name for s in specs)
        self.st = struct.Struct(">" + "".join(INT_TYPES[s.type][0] for s in specs))
        self.min_size = self.st.size
        offsets, at = [], 0
        for s in specs:
            offsets.append(at)
            at += INT_TYPES[s.type][1]
        self.offsets = tuple(offsets)

    def decode(self, mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int:
        if end - pos >= self.st.size:
            out.update(zip(self.names, self.st.unpack_from(mv, pos), strict=True))
            if ctx.nodes is not None:
                for spec, off in zip(self.specs, self.offsets, strict=True):
                    width = INT_TYPES[spec.type][1]
                    ctx.nodes.append(Node(spec, title(spec.name), pos + off, width, out[spec.name]))
            return pos + self.st.size
        # Short: decode what fits so the caller keeps every complete field.
        for spec, off in zip(self.specs, self.offsets, strict=True):
            width = INT_TYPES[spec.type][1]
            if end - (pos + off) < width:
                raise Short(spec.name, pos + off, width, end - (pos + off))
            (out[spec.name],) = struct.unpack_from(">" + INT_TYPES[spec.type][0], mv, pos + off)
            if ctx.nodes is not None:
                ctx.nodes.append(Node(spec, title(spec.name), pos + off, width, out[spec.name]))
        raise AssertionError("unreachable")  # pragma: no cover

    def encode(self, buf: bytearray, values: dict[str, Any]) -> None:
        buf += self.st.pack(*(values[n] for n in self.names))


class FieldOp:
    """One named field of any type, with its presence conditions."""

    __slots__ = ("codec", "hook", "min_size", "name", "optional", "spec", "when")

    def __init__(self, spec: FieldSpec, codec: Any, hook: Any = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.codec = codec
        self.hook = hook
        self.when = spec.when
        self.optional = spec.optional
        # Conditional and optional fields may be absent, so they promise nothing.
        self.min_size = 0 if (spec.when or spec.optional) else codec.min_size

    def present(self, out: dict[str, Any], pos: int, end: int) -> bool:
        if self.when is not None and out.get(self.when[0]) not in self.when[1]:
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
                value, new_pos = self._read_raw(mv, pos, end, out)
            else:
                value, new_pos = codec.read(mv, pos, end, ctx, node, self.name)
        except (Short, BadValue) as exc:
            partial = getattr(exc, "partial", None)
            if partial is not None:
                out[self.name] = partial
                exc.partial = None  # type: ignore[attr-defined]
            if node is not None:
                node.length = max(0, min(exc.offset, end) - pos)
                node.value = partial
            raise
        out[self.name] = value
        if node is not None:
            node.length = new_pos - pos
            node.value = value
        if self.hook is not None and value is not None:
            run_hook(self.hook, value, out, pos, ctx, node)
        return new_pos

    def _read_raw(self, mv: memoryview, pos: int, end: int, out: dict[str, Any]) -> tuple[Any, int]:
        size = self.codec.size_for(out)
        if size is None:
            raise BadValue(self.name, pos, f"{self.name}: size field {self.codec.ref} is missing")
        if size < 0:
            # A negative length prefix means null, as for bytes.
            return None, pos
        if end - pos < size:
            raise Short(self.name, pos, size, end - pos)
        return mv[pos : pos + size], pos + size

    def encode(self, buf: bytearray, values: dict[str, Any]) -> None:
        if self.when is not None and values.get(self.when[0]) not in self.when[1]:
            return
        value = values.get(self.name)
        if self.optional and value is None:
            return
        if isinstance(self.codec, RawCodec):
            if value is not None:
                buf += bytes(value)
            return
        self.codec.write(buf, value)


# ---------------------------------------------------------------- compilation


def compile_fields(
    specs: Sequence[FieldSpec], version: int, hooks: Mapping[str, Any] | None = None
) -> tuple[Op, ...]:
    """Ops for the fields present in this version, fixed integer runs merged; hooks by name."""
    hooks = hooks or {}
    ops: list[Op] = []
    run: list[FieldSpec] = []
    for spec in specs:
        if spec.since > version:
            continue
        if spec.type in INT_TYPES and not spec.when and not spec.optional:
            run.append(spec)
            continue
        if run:
            ops.append(FixedRun(run))
            run = []
        hook = hooks[spec.hook] if spec.hook else None
        ops.append(FieldOp(spec, value_codec(spec, version, hooks), hook))
    if run:
        ops.append(FixedRun(run))
    return tuple(ops)


def value_codec(spec: FieldSpec, version: int, hooks: Mapping[str, Any] | None = None) -> Any:
    if spec.type == "hook":
        assert hooks is not None and spec.hook is not None
        return hooks[spec.hook]
    if spec.type in INT_TYPES:
        return IntCodec(spec.type)
    if spec.type in ("string", "bytes"):
        return LengthPrefixed(spec.type == "string")
    if spec.type == "raw":
        assert spec.size is not None
        return RawCodec(spec.size)
    if spec.type == "array":
        assert spec.of is not None
        return ArrayCodec(spec.of, value_codec(spec.of, version, hooks))
    if spec.type == "map":
        assert spec.key is not None and spec.value is not None
        return MapCodec(
            spec.key,
            value_codec(spec.key, version, hooks),
            spec.value,
            value_codec(spec.value, version, hooks),
        )
    if spec.type == "struct":
        return StructCodec(compile_fields(spec.fields, version, hooks))
    raise ValueError(f"no codec for type {spec.type!r}")  # the registry rejects these first


def decode_ops(ops: Sequence[Op], mv: memoryview, pos: int, end: int, out: dict[str, Any], ctx: Ctx) -> int:
    for op in ops:
        pos = op.decode(mv, pos, end, out, ctx)
    return pos


def encode_ops(ops: Sequence[Op], buf: bytearray, values: dict[str, Any]) -> None:
    values = _with_derived_sizes(ops, values)
    for op in ops:
        op.encode(buf, values)


def _with_derived_sizes(ops: Sequence[Op], values: dict[str, Any]) -> dict[str, Any]:
    """Fill in size fields a raw field refers to, when the caller left them out."""
    missing = {}
    for op in ops:
        ref = op.codec.ref if isinstance(op, FieldOp) and isinstance(op.codec, RawCodec) else None
        if ref and ref not in values:
            raw = values.get(op.name)
            missing[ref] = -1 if raw is None else len(raw)
    return {**values, **missing} if missing else values
