"""Straight-line decoders generated once per layout from its compiled ops: the fast path.

The ops in `streamdump.spec.layout` interpret a spec: every field is a method call, every
array element a struct codec, a decode_ops loop and a dict. That generality costs
more than the bytes do on frames that carry hundreds of elements (a Publish frame's
messages). Here each layout's ops become the source of one Python function, compiled
once: fixed runs unpack into locals, structs and arrays of structs are inlined loops,
and only strings, maps and hooks still call their codec.

The generated code handles the common case only: whole frames, no detail tree, and
well-formed counts and sizes. Fields it has no straight-line form for (switches, JSON,
key/value text, packed words, entries of a header map) call their op, as the general
decoder would. Anything else (bytes ending inside a field, a null or
negative count, a frame cut by a gap) raises Fallback, and the caller discards what
the fast path produced and decodes the frame again with the ops, which know how to
keep partial values and say what went wrong. Both paths give the same frame; the
tests check that on every capture and on garbage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamdump.spec.hooks import Hook
from streamdump.spec.layout import (
    ArrayCodec,
    Ctx,
    FieldOp,
    FixedRun,
    IntCodec,
    JsonCodec,
    Op,
    RawCodec,
    StructCodec,
    SwitchCodec,
    run_hook,
)

Specialised = Callable[[memoryview, int, int, dict[str, Any], Ctx], int]


class Fallback(Exception):
    """The fast path met a case it leaves to the general decoder."""


class _Source:
    """The function being generated: its lines and the objects its code refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "Fallback": Fallback,
            "run_hook": run_hook,
        }
        self.count = 0

    def name(self, prefix: str, obj: Any = None) -> str:
        self.count += 1
        name = f"{prefix}{self.count}"
        if obj is not None:
            self.env[name] = obj
        return name

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def specialise(ops: tuple[Op, ...], label: str) -> Specialised:
    """The fast decoder of one layout's ops: (mv, pos, end, out, ctx) -> pos, or Fallback."""
    src = _Source()
    src.add(0, "def decode(mv, pos, end, out, ctx):")
    _emit_ops(src, ops, "out", 1)
    src.add(1, "return pos")
    code = compile("\n".join(src.lines) + "\n", f"<specialised {label}>", "exec")
    exec(code, src.env)  # the source is generated above from the compiled spec, never from input
    decode: Specialised = src.env["decode"]
    return decode


def _emit_ops(src: _Source, ops: tuple[Op, ...], out: str, depth: int) -> None:
    for op in ops:
        if isinstance(op, FixedRun) and not op.checks:
            _emit_run(src, op, out, depth)
        elif isinstance(op, FieldOp) and _plain(op):
            _emit_field(src, op, out, depth)
        else:  # no straight-line form: the op decodes itself, as in the general decoder
            src.add(depth, f"pos = {src.name('op', op)}.decode(mv, pos, end, {out}, ctx)")


def _plain(op: FieldOp) -> bool:
    """Whether a field has a straight-line form: no parts, constants, inlining or chosen layout."""
    codec = op.codec
    if op.checks is not None or op.spec.inline or isinstance(codec, JsonCodec | SwitchCodec):
        return False
    if isinstance(codec, StructCodec):
        return codec.length_of is None
    return not isinstance(codec, ArrayCodec) or codec.prefix is not None


def _emit_run(src: _Source, run: FixedRun, out: str, depth: int) -> None:
    st = src.name("st", run.st)
    src.add(depth, f"if end - pos < {run.st.size}:")
    src.add(depth + 1, "raise Fallback")
    values = [src.name("v") for _ in run.names]
    src.add(depth, f"{', '.join(values)}, = {st}.unpack_from(mv, pos)")
    for name, value in zip(run.names, values, strict=True):
        src.add(depth, f"{out}[{name!r}] = {value}")
    src.add(depth, f"pos += {run.st.size}")


def _emit_field(src: _Source, op: FieldOp, out: str, depth: int) -> None:
    if op.when is not None or op.optional:
        src.add(depth, f"if {src.name('op', op)}.present({out}, pos, end):")
        depth += 1
    start = src.name("start")
    src.add(depth, f"{start} = pos")
    value = src.name("value")
    codec = op.codec
    if isinstance(codec, IntCodec):
        src.add(depth, f"if end - pos < {codec.st.size}:")
        src.add(depth + 1, "raise Fallback")
        src.add(depth, f"{value} = {src.name('st', codec.st)}.unpack_from(mv, pos)[0]")
        src.add(depth, f"pos += {codec.st.size}")
    elif isinstance(codec, RawCodec):
        src.add(depth, f"{value}, pos = {src.name('op', op)}._read_sized(mv, pos, end, {out}, ctx, None)")
    elif isinstance(codec, StructCodec):
        src.add(depth, f"{value} = {{}}")
        _emit_ops(src, codec.ops, value, depth)
    elif (
        isinstance(codec, ArrayCodec)
        and isinstance(codec.element, StructCodec)
        and codec.element.length_of is None
        and codec.counts == "items"
    ):
        _emit_struct_array(src, codec, value, depth)
    else:  # strings, bytes, maps, integer arrays (already one unpack), hooks that read
        reader = src.name("codec", codec)
        src.add(depth, f"{value}, pos = {reader}.read(mv, pos, end, ctx, None, {op.name!r})")
    src.add(depth, f"{out}[{op.name!r}] = {value}")
    if op.hook is not None:
        hook = src.name("hook", op.hook)
        # A hook without checks of its own costs nothing until a view expands the frame.
        guard = "ctx.expand and " if type(op.hook).check is Hook.check else ""
        src.add(depth, f"if {guard}{value} is not None:")
        src.add(depth + 1, f"run_hook({hook}, {value}, {out}, {start}, ctx, None)")


def _emit_struct_array(src: _Source, codec: ArrayCodec, value: str, depth: int) -> None:
    count = src.name("count")
    prefix = codec.prefix
    assert prefix is not None
    width = prefix.size
    src.add(depth, f"if end - pos < {width}:")
    src.add(depth + 1, "raise Fallback")
    src.add(depth, f"{count}, = {src.name('st', prefix)}.unpack_from(mv, pos)")
    # Null and negative counts, and counts the bytes cannot hold, are the general decoder's.
    src.add(depth, f"if {count} < 0 or {count} * {codec.element.min_size} > end - pos - {width}:")
    src.add(depth + 1, "raise Fallback")
    src.add(depth, f"pos += {width}")
    src.add(depth, f"{value} = []")
    item = src.name("item")
    src.add(depth, f"for _ in range({count}):")
    src.add(depth + 1, f"{item} = {{}}")
    _emit_ops(src, codec.element.ops, item, depth + 1)
    src.add(depth + 1, f"{value}.append({item})")
