"""Frames and statistics written out: the chosen view of each frame, in order, to a stream.

Which view (one line, the detail tree, JSON lines, `--messages`) is the caller's choice;
each protocol's frames are drawn by that protocol's Renderer. Statistics are drawn as
`streamdump stats` prints them, one section per protocol the capture holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, BinaryIO, TextIO

from msgspec import Struct

from streamdump.analysis.fieldnames import names_of
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import MessageRules, dissector_of
from streamdump.views.choices import TOP, Format
from streamdump.views.clock import Clock, TimeFormat
from streamdump.views.render import Renderer
from streamdump.views.safe import escape, escape_lines
from streamdump.wire.frame import Frame

if TYPE_CHECKING:
    from rich.console import Console

    from streamdump.analysis.statistics import Partial
    from streamdump.views.fields import FieldRows, FieldsLayout
    from streamdump.views.messages import MessageLines


class Display(Struct, frozen=True):
    """How frames are shown: the view (-T), its tree (-V), messages (-m), bytes (-x), -T fields'
    columns, the time format (-t), and whether frames are shown at all (-q)."""

    fmt: Format = Format.text
    detail: bool = False
    messages: bool = False
    hex: bool = False
    fields: FieldsLayout | None = None
    time: TimeFormat = TimeFormat.r
    quiet: bool = False


class Views:
    """Each protocol's views, picked by the frame's protocol."""

    def __init__(self, decoders: Mapping[str, Decoder], columns: tuple[str, ...] = ()) -> None:
        self.decoders = dict(decoders)
        self.renderers = {name: Renderer(decoder) for name, decoder in decoders.items()}
        # One Protocol column for all: as wide as the widest short name of the read's protocols.
        width = max((r.column for r in self.renderers.values()), default=0)
        for renderer in self.renderers.values():
            renderer.column = width
        self.columns = columns  # --column: names whose values --messages lines show

    def __getitem__(self, frame: Frame) -> Renderer:
        return self.renderers[frame.protocol]

    def rules(self) -> dict[str, MessageRules]:
        return {name: dissector_of(d.protocol).messages(d.protocol) for name, d in self.decoders.items()}

    def messages(self) -> MessageLines:
        from streamdump.views.messages import MessageLines  # --messages only

        return MessageLines(self.rules(), self.columns)

    def field_rows(self, layout: FieldsLayout, messages: bool) -> FieldRows:
        from streamdump.views.fields import FieldRows  # -T fields only

        names = {name: names_of(d.protocol) for name, d in self.decoders.items()}
        return FieldRows(layout, names, self.rules() if messages else None)


def pipe_console(out: TextIO, width: int | None) -> Console:
    """A rich Console on out that hands a closed pipe back as BrokenPipeError (rich would exit
    with status 1), which a filter's reader leaving (`| head`) is. rich loads here: the views
    that draw with it (trees, tables) are not the ones most reads print."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return PipeConsole(file=out, highlight=False, markup=False, width=width)


def write_frames(
    frames: Iterable[Frame],
    views: Views | Renderer,
    display: Display,
    out: TextIO,
    t0: float | Callable[[], float | None] | None = None,
    flush: bool = False,
) -> int:
    """Write frames in the chosen view; returns how many there were. flush: each as it is
    written (frames of a capture still being made, read from a pipe or live).

    t0: what times count from, the capture's first packet (before any frame a filter hid),
    known once the first frame went by: a callable's answer is read then. Without it, from the
    first frame written. Text views escape what they write (views/safe.py); JSON is exact.
    """
    if isinstance(views, Renderer):
        views = Views({views.protocol.name: views.decoder})
    fmt, detail = display.fmt, display.detail
    count = 0
    clock = Clock(display.time, t0)
    if display.quiet:
        for _ in frames:
            count += 1
        return count
    console = None
    lines = views.messages() if display.messages and fmt is Format.text else None
    fields = None
    if fmt is Format.fields:
        assert display.fields is not None, "-T fields without its columns"
        fields = views.field_rows(display.fields, display.messages)
        if display.fields.header:
            out.write(display.fields.heading() + "\n")
    # JSON goes to the bytes under a UTF-8 text stream as orjson makes them, once what the text
    # layer holds is out; a stream without such bytes (a StringIO) gets text.
    binary = None
    json_kind = fmt in (Format.json, Format.jsonl)
    if json_kind and _utf8(out):
        out.flush()
        binary = out.buffer  # type: ignore[attr-defined]
    if fmt is Format.json:
        _put(out, binary, "[\n")
    if detail and fmt is Format.text:
        # A pipe or file gets no terminal width: never crop a value there.
        width = None if out.isatty() else 1000
        console = pipe_console(out, width)
    renderers = views.renderers
    for frame in frames:
        count += 1
        renderer = renderers[frame.protocol]
        if json_kind:
            if fmt is Format.json and count > 1:
                _put(out, binary, ",\n")
            text = renderer.json_text(frame, display.hex)
            _put(out, binary, text)
            if fmt is Format.jsonl:
                _put(out, binary, "\n")
        elif fields is not None:
            renderer.decoder.expand(frame)  # the fields named may be below the headers
            relative = clock.relative(frame.ts)
            delta = frame.ts - (clock.previous if clock.previous is not None else frame.ts)
            clock.previous = frame.ts
            rows = list(fields.rows(frame, relative, delta))
            if rows:
                out.write("\n".join(rows) + "\n")  # each cell escaped already
        elif lines is not None:
            # Hundreds in a frame: one write for them all. Expanded when its rows need it.
            rows = lines.lines(frame, clock.text(frame.ts), renderer.decoder)
            if rows:
                out.write(escape_lines(rows))
        elif console is not None:
            console.print(renderer.tree(frame, clock.text(frame.ts)))
        else:
            out.write(escape(renderer.line(frame, clock.text(frame.ts))) + "\n")
        if display.hex and not json_kind:
            _write_hex(out, console, renderer.short, frame)
        if flush:
            (binary or out).flush()
    if fmt is Format.json:
        _put(out, binary, "\n]\n" if count else "]\n")
    return count


def _put(out: TextIO, binary: BinaryIO | None, text: str | bytes) -> None:
    if binary is None:
        out.write(text if isinstance(text, str) else text.decode())
    else:
        binary.write(text if isinstance(text, bytes) else text.encode(out.encoding, out.errors))


def _write_hex(out: TextIO, console: Console | None, short: str, frame: Frame) -> None:
    from streamdump.views.dump import heading, hex_lines  # -x only

    block = [heading(short, frame.data, frame.packets, frame.incomplete is not None), *hex_lines(frame.data)]
    text = "\n".join(block) + "\n\n"
    if console is not None:
        console.file.write(text)
    else:
        out.write(text)


def _utf8(out: TextIO) -> bool:
    encoding = getattr(out, "encoding", None)
    return hasattr(out, "buffer") and isinstance(encoding, str) and encoding.lower() in ("utf-8", "utf8")


def write_statistics(
    partials: Mapping[str, Partial],
    decoders: Mapping[str, Decoder],
    out: TextIO,
    titled: bool = False,
    top: int = TOP,
    origin: float | None = None,
) -> None:
    """Statistics as `streamdump stats` prints them: the protocols the capture holds (when it
    holds none, the first asked for, with its empty tables), each titled when more than one is.
    top: connections listed (the most bytes; 0: all); origin: the capture's first packet's time."""
    from rich.text import Text

    from streamdump.views.stats import render

    shown = [name for name, p in partials.items() if p.connections] or list(partials)[:1]
    console = pipe_console(out, None if out.isatty() else 200)
    for n, name in enumerate(shown):
        protocol = decoders[name].protocol
        if titled or len(shown) > 1:
            console.print(Text(("\n" if n else "") + f"== {protocol.title} ==", style="bold"))
        partial = partials[name]
        render(partial.result(stream=True), console, partial.subject, partial.acked, top, origin)
