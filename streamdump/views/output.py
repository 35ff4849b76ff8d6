"""Frames and statistics written out: the chosen view of each frame, in order, to a stream.

Which view (one line, the detail tree, JSON lines, `--messages`) is the caller's choice;
each protocol's frames are drawn by that protocol's Renderer. Statistics are drawn as
`streamdump stats` prints them, one section per protocol the capture holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import TextIO

from rich.console import Console

from streamdump.analysis.statistics import Partial
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.views.messages import MessageLines
from streamdump.views.render import Renderer
from streamdump.views.stats import render
from streamdump.wire.frame import Frame


class Format(StrEnum):
    text = "text"
    jsonl = "jsonl"


class Views:
    """Each protocol's views, picked by the frame's protocol."""

    def __init__(self, decoders: Mapping[str, Decoder], columns: tuple[str, ...] = ()) -> None:
        self.decoders = dict(decoders)
        self.renderers = {name: Renderer(decoder) for name, decoder in decoders.items()}
        self.columns = columns  # --column: names whose values --messages lines show

    def __getitem__(self, frame: Frame) -> Renderer:
        return self.renderers[frame.protocol]

    def messages(self) -> MessageLines:
        return MessageLines(
            {name: dissector_of(d.protocol).messages(d.protocol) for name, d in self.decoders.items()},
            self.columns,
        )


class PipeConsole(Console):
    """rich exits with status 1 on a closed pipe; hand it back to the caller as BrokenPipeError,
    which a filter's reader leaving (`| head`) is."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def write_frames(
    frames: Iterable[Frame],
    views: Views | Renderer,
    fmt: Format,
    detail: bool,
    out: TextIO,
    messages: bool = False,
    t0: float | Callable[[], float | None] | None = None,
    flush: bool = False,
) -> int:
    """Write frames in the chosen view; returns how many were written. flush: each as it is
    written (frames of a capture still being made, read from a pipe or live).

    t0: what times count from, the capture's first frame (which a filter may have hidden),
    known once the first frame went by: a callable's answer is read then. Without it, from the
    first frame written.
    """
    if isinstance(views, Renderer):
        views = Views({views.protocol.name: views.decoder})
    count = 0
    zero: float | None = None
    console = None
    lines = views.messages() if messages else None
    # JSON lines go to the bytes under a UTF-8 text stream as orjson makes them, once what
    # the text layer holds is out; a stream without such bytes (a StringIO) gets text.
    binary = None
    if fmt is Format.jsonl and lines is None and _utf8(out):
        out.flush()
        binary = out.buffer  # type: ignore[attr-defined]
    if detail and fmt is Format.text:
        # A pipe or file gets no terminal width: never crop a value there.
        width = None if out.isatty() else 1000
        console = PipeConsole(file=out, highlight=False, width=width)
    for frame in frames:
        if zero is None:
            zero = t0() if callable(t0) else t0
            if zero is None:
                zero = frame.ts
        count += 1
        renderer = views[frame]
        if lines is not None:
            if lines.carries(frame):
                renderer.decoder.expand(frame)
            rows = lines.lines(frame, zero)  # hundreds in a frame: one write for them all
            if rows:
                out.write("\n".join(rows) + "\n")
        elif binary is not None:
            text = renderer.json_text(frame)
            binary.write(text if isinstance(text, bytes) else text.encode(out.encoding, out.errors))
            binary.write(b"\n")
        elif fmt is Format.jsonl:
            out.write(renderer.json_line(frame) + "\n")
        elif console is not None:
            console.print(renderer.tree(frame, zero))
        else:
            out.write(renderer.line(frame, zero) + "\n")
        if flush:
            (binary or out).flush()
    return count


def _utf8(out: TextIO) -> bool:
    encoding = getattr(out, "encoding", None)
    return hasattr(out, "buffer") and isinstance(encoding, str) and encoding.lower() in ("utf-8", "utf8")


def write_statistics(
    partials: Mapping[str, Partial], decoders: Mapping[str, Decoder], out: TextIO, titled: bool = False
) -> None:
    """Statistics as `streamdump stats` prints them: the protocols the capture holds (when it
    holds none, the first asked for, with its empty tables), each titled when more than one is."""
    shown = [name for name, p in partials.items() if p.connections] or list(partials)[:1]
    console = PipeConsole(file=out, highlight=False, width=None if out.isatty() else 200)
    for n, name in enumerate(shown):
        protocol = decoders[name].protocol
        if titled or len(shown) > 1:
            console.print(("\n" if n else "") + f"== {protocol.title} ==", style="bold")
        render(partials[name].result(), console, partials[name].subject, partials[name].acked)
