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

from streamdump.spec.cache import compiled
from streamdump.spec.hooks import Hook
from streamdump.spec.keyed import MASKED
from streamdump.spec.layout import (
    WORD_AT,
    WORDS_OF,
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
    TextCodec,
    WordsCodec,
    run_hook,
)
from streamdump.spec.registry import INT_TYPES

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
            "word_at": WORD_AT.match,
            "words_of": WORDS_OF,
            "MASKED": MASKED,
        }
        self.count = 0
        # Text fields read the frame's bytes object itself (find, a regular expression), which
        # the function takes from the memoryview once, at its start.
        self.needs_buf = False

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
    if src.needs_buf:
        # The bytes a text field is found in are the whole frame's, ending where the frame does
        # (as delimited() reads them); anything else is the general decoder's.
        src.lines[1:1] = [
            "    buf = mv.obj",
            "    if type(buf) is not bytes or mv.nbytes != len(buf) or end != len(buf):",
            "        raise Fallback",
        ]
    code = compiled("\n".join(src.lines) + "\n", f"<specialised {label}>")
    exec(code, src.env)  # the source is generated above from the compiled spec, never from input
    decode: Specialised = src.env["decode"]
    return decode


def _emit_ops(src: _Source, ops: tuple[Op, ...], out: str, depth: int) -> None:
    for op in ops:
        if isinstance(op, FixedRun) and not op.checks:
            _emit_run(src, op, out, depth)
        elif isinstance(op, FieldOp) and _text(op):
            _emit_text(src, op, out, depth)
        elif isinstance(op, FieldOp) and _plain(op):
            _emit_field(src, op, out, depth)
        else:  # no straight-line form: the op decodes itself, as in the general decoder
            src.add(depth, f"pos = {src.name('op', op)}.decode(mv, pos, end, {out}, ctx)")


def _plain(op: FieldOp) -> bool:
    """Whether a field has a straight-line form: no parts, inlining or chosen layout, and no
    constant but a fixed run of bytes' (_constant)."""
    codec = op.codec
    if (
        (op.checks is not None and not _constant(op))
        or op.spec.inline
        or isinstance(codec, JsonCodec | SwitchCodec)
    ):
        return False
    if isinstance(codec, StructCodec):
        return codec.length_of is None
    return not isinstance(codec, ArrayCodec) or codec.prefix is not None


def _constant(op: FieldOp) -> bool:
    """Whether a field is raw bytes of a fixed size whose one check is their constant value (a
    text protocol's CRLF after a payload)."""
    checks = op.checks
    return (
        checks is not None
        and checks.const is not None
        and not checks.parts
        and type(op.codec) is RawCodec
        and op.codec.fixed is not None
    )


def _text(op: FieldOp) -> bool:
    """Whether a field is a text protocol's word or line, read straight from the frame's bytes:
    text, raw bytes, or words named by a struct (those may stand inline among their siblings)."""
    kind = type(op.codec)
    if (
        kind not in (TextCodec, WordsCodec, RawCodec, JsonCodec)
        or op.codec.delim is None
        or op.checks is not None
    ):
        return False
    if kind is WordsCodec or kind is JsonCodec:
        return op.hook is None  # its members may stand inline: no one value for a hook
    return not op.spec.inline


def _emit_text(src: _Source, op: FieldOp, out: str, depth: int) -> None:
    """A word or a line: found as delimited() finds it, then read as its codec reads it. What the
    general decoder would warn about (bytes that are not UTF-8, too few or too many words, a
    number that is not one) falls back to it."""
    src.needs_buf = True
    codec = op.codec
    if op.when is not None or op.optional:
        src.add(depth, f"if {src.name('op', op)}.present({out}, pos, end):")
        depth += 1
    start, stop, after = src.name("start"), src.name("stop"), src.name("after")
    src.add(depth, f"{start} = pos")
    if codec.delim == "word":
        found = src.name("found")
        src.add(depth, f"{found} = word_at(buf, pos, end)")
        src.add(depth, f"if {found} is None:")
        src.add(depth + 1, "raise Fallback")
        src.add(depth, f"{stop} = {found}.start(1)")
        src.add(depth, f"ctx.line_done = {found}.end(2) != -1")
        src.add(depth, f"{after} = {found}.end()")
    else:
        src.add(depth, "if ctx.line_done:")
        src.add(depth + 1, "ctx.line_done = False")
        src.add(depth + 1, f"{stop} = {after} = pos")
        src.add(depth, "else:")
        nl = src.name("nl")
        src.add(depth + 1, f'{nl} = buf.find(b"\\n", pos, end)')
        src.add(depth + 1, f"if {nl} < 0:")
        src.add(depth + 2, "raise Fallback")
        src.add(depth + 1, f"{stop} = {nl} - 1 if {nl} > pos and buf[{nl} - 1] == 13 else {nl}")
        src.add(depth + 1, f"{after} = {nl} + 1")
    value = src.name("value")
    if type(codec) is RawCodec:
        src.add(depth, f"{value} = mv[pos:{stop}]")
        src.add(depth, f"{out}[{op.name!r}] = {value}")
    elif type(codec) is JsonCodec:  # its line found here; its text read as the codec reads it
        src.add(
            depth, f"{value} = {src.name('codec', codec)}.parse(mv[pos:{stop}], pos, ctx, None, {op.name!r})"
        )
        if op.spec.inline:  # FieldOp._store's: an object's members stand among their siblings
            src.add(depth, f"if isinstance({value}, dict):")
            src.add(depth + 1, f"{out}.update({value})")
            src.add(depth, "else:")
            src.add(depth + 1, f"{out}[{op.name!r}] = {value}")
        else:
            src.add(depth, f"{out}[{op.name!r}] = {value}")
    elif type(codec) is TextCodec:
        src.add(depth, "try:")
        src.add(depth + 1, f"{value} = buf[pos:{stop}].decode()")
        src.add(depth, "except UnicodeDecodeError:")
        src.add(depth + 1, "raise Fallback from None")
        if codec.spec.secret:
            src.add(depth, f"if {value}:")
            src.add(depth + 1, f"{value} = MASKED")
        src.add(depth, f"{out}[{op.name!r}] = {value}")
    else:
        target = out if op.spec.inline else value
        if not op.spec.inline:
            src.add(depth, f"{value} = {{}}")
        _emit_words(src, codec, stop, target, depth)
        if not op.spec.inline:
            src.add(depth, f"{out}[{op.name!r}] = {value}")
    src.add(depth, f"pos = {after}")
    _emit_hook(src, op, value, out, start, depth)


def _emit_hook(src: _Source, op: FieldOp, value: str, out: str, start: str, depth: int) -> None:
    """The field's hook, run on its value where the spec names one. A hook without checks of its
    own costs nothing until a view expands the frame."""
    if op.hook is None:
        return
    hook = src.name("hook", op.hook)
    guard = "ctx.expand and " if type(op.hook).check is Hook.check else ""
    src.add(depth, f"if {guard}{value} is not None:")
    src.add(depth + 1, f"run_hook({hook}, {value}, {out}, {start}, ctx, None)")


def _emit_words(src: _Source, codec: WordsCodec, stop: str, target: str, depth: int) -> None:
    """A line's words into its struct's members, in order, the optional ones taken while words
    spare, as WordsCodec.parse names them."""
    members = codec.spec.fields
    words, spare = src.name("words"), src.name("spare")
    src.add(depth, f"{words} = words_of(buf, pos, {stop})")
    src.add(depth, f"if not {codec.required} <= len({words}) <= {len(members)}:")
    src.add(depth + 1, "raise Fallback")
    if any(m.optional for m in members):
        src.add(depth, f"{spare} = len({words}) - {codec.required}")
    index = src.name("index")
    src.add(depth, f"{index} = 0")
    src.add(depth, "try:")
    for member in members:
        at = depth + 1
        if member.optional:
            src.add(at, f"if {spare} > 0:")
            at += 1
            src.add(at, f"{spare} -= 1")
        word = src.name("word")
        src.add(at, f"{word} = {words}[{index}]")
        src.add(at, f"{index} += 1")
        if member.type in INT_TYPES:
            src.add(at, f"if not {word}.isdigit():")
            src.add(at + 1, "raise Fallback")
            number = src.name("number")
            src.add(at, f"{number} = int({word})")
            src.add(at, f"if {number} >= {1 << (8 * INT_TYPES[member.type][1])}:")
            src.add(at + 1, "raise Fallback")
            src.add(at, f"{target}[{member.name!r}] = {number}")
        else:
            src.add(at, f"{target}[{member.name!r}] = {word}.decode()")
    src.add(depth, "except UnicodeDecodeError:")
    src.add(depth + 1, "raise Fallback from None")


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
    elif type(codec) is RawCodec and codec.delim is None:
        # Bytes of a size the spec gives, or an earlier field's value gives, or to the end.
        if codec.fixed is not None:
            size = str(codec.fixed)
            src.add(depth, f"if end - pos < {size}:")
            src.add(depth + 1, "raise Fallback")
        elif codec.ref is not None:
            size = src.name("size")
            src.add(depth, f"{size} = {out}.get({codec.ref!r})")
            src.add(depth, f"if type({size}) is not int or {size} < 0 or end - pos < {size}:")
            src.add(depth + 1, "raise Fallback")
        else:
            size = src.name("size")
            src.add(depth, f"{size} = end - pos")
        src.add(depth, f"{value} = mv[pos : pos + {size}]")
        src.add(depth, f"pos += {size}")
        if op.checks is not None:  # a constant (_constant): anything else is the general decoder's to tell
            src.add(depth, f"if {value} != {src.name('const', op.checks.const)}:")
            src.add(depth + 1, "raise Fallback")
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
    _emit_hook(src, op, value, out, start, depth)


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
    whole = _items_hook(codec.element.ops)
    if whole is not None:
        # Elements a hook reads all at once (fixed integers, then its value): while nothing
        # expands, one call for the array; an element it does not take, and the frame is
        # decoded again by the general decoder.
        run, op = whole
        got = src.name("got")
        src.add(depth, "if not ctx.expand:")
        src.add(
            depth + 1,
            f"{got} = {src.name('hook', op.hook)}.read_items(mv, pos, end, {count}, "
            f"{src.name('st', run.st)}, {run.names!r}, {op.name!r})",
        )
        src.add(depth + 1, f"if {got} is None:")
        src.add(depth + 2, "raise Fallback")
        src.add(depth + 1, f"{value}, pos = {got}")
        src.add(depth, "else:")
        depth += 1
    src.add(depth, f"{value} = []")
    item = src.name("item")
    src.add(depth, f"for _ in range({count}):")
    src.add(depth + 1, f"{item} = {{}}")
    _emit_ops(src, codec.element.ops, item, depth + 1)
    src.add(depth + 1, f"{value}.append({item})")


def _items_hook(ops: tuple[Op, ...]) -> tuple[FixedRun, FieldOp] | None:
    """An array element a hook can read whole arrays of: a plain run of integers, then a field
    of the hook's own type, unconditional, that the hook checks nothing of (its checks would
    run per value)."""
    if len(ops) != 2:
        return None
    run, op = ops
    if not isinstance(run, FixedRun) or run.checks or not isinstance(op, FieldOp):
        return None
    hook = op.hook
    if (
        hook is None
        or op.codec is not hook
        or type(hook).read_items is Hook.read_items
        or type(hook).check is not Hook.check
        or op.checks is not None
        or op.when is not None
        or op.optional
    ):
        return None
    return run, op
