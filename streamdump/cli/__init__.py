"""The streamdump command line: thin typer commands over plain functions.

Exit codes: 0 success, 1 bad input (unreadable or damaged capture, bad hex,
bad spec), 2 usage errors (typer), 70 internal errors. Errors are one line on
stderr; frames decoded before an error are already printed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import queue
import re
import signal
import struct
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from rich.console import Console

from streamdump.analysis.advertised import addresses
from streamdump.analysis.fieldnames import FrameFilter
from streamdump.analysis.filter import FilterError
from streamdump.analysis.grouping import Grouping, UnknownName, check_names
from streamdump.analysis.pipeline import (
    Dissection,
    ReadStats,
    decode_segments,
    framing_rule,
    loss_summary,
    read_frames,
)
from streamdump.analysis.tracker import Conversations, Tracker
from streamdump.live.proxy import Proxy, Recorder
from streamdump.live.run import Capture, bpf
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.spec.registry import SpecError, default_registry
from streamdump.views.follow import Dialogue
from streamdump.views.messages import MessageLines
from streamdump.views.progress import ReadProgress, wanted
from streamdump.views.render import Renderer
from streamdump.views.stats import Partial, Statistics, document
from streamdump.views.stats import render as render_stats
from streamdump.wire.capture import STDIN, CaptureError, read_stream
from streamdump.wire.frame import Frame
from streamdump.wire.limits import DEFAULT_LIMITS, LimitError, Limits, described
from streamdump.wire.packet import LINKS_READ, Segment, Skip, unknown_links_text
from streamdump.wireshark import luagen

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Decode messaging wire protocols from captures and hex dumps.",
)

EXIT_INPUT = 1
EXIT_INTERNAL = 70
# Conversation warnings and errors printed after a read; `stats` lists them all.
MAX_DIAGNOSES = 10


class Format(StrEnum):
    text = "text"
    jsonl = "jsonl"


class StatsFormat(StrEnum):
    text = "text"
    json = "json"


class InputError(Exception):
    """Bad input the user can fix; str() is the one-line message."""


def _fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    print(f"streamdump: error: {message}", file=sys.stderr)
    return typer.Exit(code)


@contextmanager
def _reader_may_leave() -> Iterator[None]:
    """Stop quietly with status 0 when the output pipe closes (e.g. `| head`), like other filters."""
    try:
        yield
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


def _limits(settings: list[str] | None) -> Limits:
    """The bounds --limit NAME=VALUE sets (the defaults for the rest)."""
    limits = DEFAULT_LIMITS
    for text in settings or []:
        try:
            limits = limits.setting(text)
        except LimitError as exc:
            raise _fail(str(exc), 2) from None
    return limits


def _decoders(protocols: list[str] | None, limits: Limits | None = None) -> dict[str, Decoder]:
    """Decoders of the protocols named (every protocol the registry has, when none is)."""
    registry = default_registry()
    names = list(protocols or sorted(registry.protocols))
    # A protocol carried inside another's frames is read through its carrier.
    for name in list(names):
        carried_by = registry.get(name).wiring.carried_by
        if carried_by is not None and carried_by[0] not in names:
            names.append(carried_by[0])
    return {
        name: Decoder(registry.get(name), limits=limits or DEFAULT_LIMITS) for name in dict.fromkeys(names)
    }


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


class _FilterConsole(Console):
    """rich exits with status 1 on a closed pipe; hand it back to _reader_may_leave instead."""

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
    tracker: Tracker | Conversations | None = None,
    flush: bool = False,
) -> int:
    """Write frames in the chosen view; returns how many were written. flush: each as it is
    written (frames of a capture still being made, read from a pipe or live).

    Times count from the capture's first frame, which the tracker saw even when a filter
    hid it; without a tracker, from the first frame written.
    """
    if isinstance(views, Renderer):
        views = Views({views.protocol.name: views.decoder})
    count = 0
    t0: float | None = None
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
        console = _FilterConsole(file=out, highlight=False, width=width)
    for frame in frames:
        if t0 is None:
            t0 = tracker.first_ts if tracker is not None and tracker.first_ts is not None else frame.ts
        count += 1
        renderer = views[frame]
        if lines is not None:
            if lines.carries(frame):
                renderer.decoder.expand(frame)
            rows = lines.lines(frame, t0)  # hundreds in a frame: one write for them all
            if rows:
                out.write("\n".join(rows) + "\n")
        elif binary is not None:
            text = renderer.json_text(frame)
            binary.write(text if isinstance(text, bytes) else text.encode(out.encoding, out.errors))
            binary.write(b"\n")
        elif fmt is Format.jsonl:
            out.write(renderer.json_line(frame) + "\n")
        elif console is not None:
            console.print(renderer.tree(frame, t0))
        else:
            out.write(renderer.line(frame, t0) + "\n")
        if flush:
            (binary or out).flush()
    return count


def _utf8(out: TextIO) -> bool:
    encoding = getattr(out, "encoding", None)
    return hasattr(out, "buffer") and isinstance(encoding, str) and encoding.lower() in ("utf-8", "utf8")


def analysed(
    frames: Iterable[Frame], tracker: Tracker | Conversations, later: dict[int, dict[str, Any]] | None = None
) -> Iterator[Frame]:
    """Frames as the conversation tracker links them (request_in, stream, expert notes).

    later: links a first pass found only after a frame went by (a request's response_in),
    by the frame's place in the output; reading is deterministic, so places match.
    """
    for index, frame in enumerate(frames):
        tracker.feed(frame)
        if later and index in later:
            frame.links = (frame.links or {}) | later[index]
        yield frame


def _first_pass(file: Path, setup: Setup, show: bool) -> dict[int, dict[str, Any]]:
    """What frames learn from frames after them, by output place: requests their response,
    frames that sent items (publishes) the frames that confirmed or refused them."""
    tracker = Conversations(d.protocol for d in setup.decoders.values())
    # Besides requests, a credit grant is answered when the server refuses it.
    grants = {
        (d.protocol.name, ref.command)
        for d in setup.decoders.values()
        if d.protocol.conversation.credit is not None
        for ref in d.protocol.conversation.credit.grant
    }
    # ... and items sent (publishes) by their confirms, which name the packet that sent them.
    senders = {
        (d.protocol.name, ack.send.command)
        for d in setup.decoders.values()
        for ack in d.protocol.conversation.acks.values()
    }
    requests: list[tuple[int, Frame]] = []
    sends: list[tuple[int, int, int]] = []  # (output place, connection, packet)
    confirmed: dict[tuple[int, int], list[int]] = {}  # (connection, sending packet) -> confirms
    stats = ReadStats()
    try:
        frames = _progress(read_frames(file, setup.dissection, None, stats), file, stats, show, "pass 1 of 2")
        for index, frame in enumerate(analysed(frames, tracker)):
            if frame.kind == "request" or (frame.protocol, frame.command) in grants:
                requests.append((index, frame))
                frame.data, frame.fields = b"", {}  # only its links are wanted; keep memory flat
            elif (frame.protocol, frame.command) in senders and frame.kind != "response":
                sends.append((index, frame.conn, frame.number))
            sent_in = frame.links.get("publish_in") if frame.links else None
            if sent_in:
                for packet in dict.fromkeys(sent_in):
                    if packet is not None:
                        confirmed.setdefault((frame.conn, packet), []).append(frame.number)
    except CaptureError:
        pass  # the second pass meets the same damage and reports it
    later = {
        index: {"response_in": frame.links["response_in"]}
        for index, frame in requests
        if frame.links and "response_in" in frame.links
    }
    for index, conn, packet in sends:
        confirms = confirmed.get((conn, packet))
        if confirms:
            later[index] = {"confirm_in": list(dict.fromkeys(confirms))}
    return later


ProtocolOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--protocol",
        "-P",
        help="Decode only this protocol (repeatable); default: every protocol the registry has.",
        show_default=False,
    ),
]
FileArg = Annotated[
    Path,
    typer.Argument(help="pcap or pcapng capture file; - reads it from standard input.", show_default=False),
]
LimitOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--limit",
        help="NAME=VALUE: raise or lower a bound decoding keeps (repeatable): "
        + "; ".join(f"{name} ({default}): {what}" for name, default, what in described())
        + ". Sizes take K, M, G.",
        metavar="NAME=VALUE",
    ),
]
DetailOpt = Annotated[bool, typer.Option("--detail", "-V", help="Print the field tree of every frame.")]
MessagesOpt = Annotated[
    bool, typer.Option("--messages", "-m", help="One line per published or delivered message.")
]
ColumnOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--column",
        "-e",
        help="With --messages: show this field's values on each line (a filter name: message_id, "
        "application_properties.value...). Repeatable.",
    ),
]


PortOpt = Annotated[
    list[int] | None,
    typer.Option(
        "--port",
        "-p",
        help="Extra server port (repeatable): for the one --protocol given, else whichever protocol's "
        "first frame decodes cleanly there.",
    ),
]
DecodeAsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--decode-as",
        "-d",
        help="PORT=PROTOCOL: decode traffic to or from this server port as this protocol, like tshark's -d "
        "(repeatable).",
        show_default=False,
    ),
]
FilterOpt = Annotated[
    str | None,
    typer.Option(
        "--filter",
        "-Y",
        help="Show only frames matching this expression, e.g. 'response_code != 1', "
        "'command == \"Deliver\" and stream == \"orders\"' or 'rocketmq.code == 105'.",
        show_default=False,
    ),
]
FormatOpt = Annotated[
    Format, typer.Option("--format", "-T", help="text (one line or tree per frame) or jsonl.")
]


@dataclass(frozen=True, slots=True)
class Setup:
    """The protocols a command decodes and how a read tells which one a connection speaks."""

    decoders: dict[str, Decoder]
    dissection: Dissection

    def describe_ports(self) -> str:
        return "; ".join(
            f"{self.decoders[name].protocol.title} on {', '.join(map(str, ports))}"
            for name, ports in self.dissection.server_ports().items()
        )


@app.command()
def read(
    file: FileArg,
    port: PortOpt = None,
    detail: Annotated[
        bool, typer.Option("--detail", "-V", help="Print the field tree of every frame.")
    ] = False,
    messages: Annotated[
        bool,
        typer.Option(
            "--messages", "-m", help="One line per published or delivered message instead of per frame."
        ),
    ] = False,
    fmt: FormatOpt = Format.text,
    filter_text: FilterOpt = None,
    two_pass: Annotated[
        bool,
        typer.Option(
            "--two-pass",
            "-2",
            help="Read the file twice, so requests also link to their responses (response_in), "
            "like tshark -2.",
        ),
    ] = False,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    column: ColumnOpt = None,
) -> None:
    """Decode every frame of a capture file."""
    streaming = str(file) == STDIN
    if two_pass and streaming:
        raise _fail("--two-pass reads the capture twice; standard input can be read only once", 2)
    setup = _setup(protocol, port, decode_as, limit)
    columns = _message_columns(setup, messages, detail, fmt, column)
    selection = _selection(setup, filter_text)
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=True)
    later = _first_pass(file, setup, show) if two_pass else None
    stats = ReadStats()
    tracker = Conversations(d.protocol for d in setup.decoders.values())
    views = Views(setup.decoders, columns)
    error: str | None = None
    with _reader_may_leave():
        try:
            read = _progress(read_frames(file, setup.dissection, None, stats), file, stats, show)
            frames: Iterable[Frame] = analysed(_telling_notices(read, stats), tracker, later)
            if selection is not None:
                frames = filter(selection, frames)
            write_frames(frames, views, fmt, detail, sys.stdout, messages, tracker, flush=streaming)
        except CaptureError as exc:
            error = str(exc)
        sys.stdout.flush()
    _print_notices(stats)
    tracker.finish(stats.lossy, stats.lives)
    _print_diagnoses(tracker)
    _finish_read(setup, stats, error)


@app.command()
def stats(
    file: FileArg,
    port: PortOpt = None,
    fmt: Annotated[
        StatsFormat, typer.Option("--format", "-T", help="text (tables) or json (one object).")
    ] = StatsFormat.text,
    filter_text: FilterOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="Also count messages per value of this field (a filter name: content_type, "
            "application_properties.value...); decodes every message. Repeatable.",
        ),
    ] = None,
) -> None:
    """Response times, response codes, confirm latency, volumes per stream, connections and expert summary."""
    setup = _setup(protocol, port, decode_as, limit)
    selection = _selection(setup, filter_text)
    fields = _field_names(setup, by, "--by")
    read_stats = ReadStats()
    tracker = Conversations(d.protocol for d in setup.decoders.values())
    statistics = _statistics(setup, tracker, fields)
    error: str | None = None
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=False)
    try:
        read = _progress(read_frames(file, setup.dissection, None, read_stats), file, read_stats, show)
        if selection is not None:
            for counted in statistics.values():
                counted.filtered = True
        for frame in analysed(read, tracker):
            statistics[frame.protocol].add(frame, selection is None or selection(frame))
    except CaptureError as exc:
        error = str(exc)
    tracker.finish(read_stats.lossy, read_stats.lives)
    partials = {name: s.partial() for name, s in statistics.items()}
    with _reader_may_leave():
        if fmt is StatsFormat.json:
            sys.stdout.write(json.dumps(document(partials), ensure_ascii=False, indent=1) + "\n")
        else:
            _print_partials(partials, setup, sys.stdout)
        sys.stdout.flush()
    _print_notices(read_stats)
    _finish_read(setup, read_stats, error)


@app.command()
def live(
    interface: Annotated[str, typer.Option("--interface", "-i", help="Interface to capture on.")] = "lo",
    port: PortOpt = None,
    write: Annotated[
        Path | None, typer.Option("--write", "-w", help="Also save the capture here (pcap), as it is taken.")
    ] = None,
    count: Annotated[
        int, typer.Option("--count", "-c", help="Stop after this many packets (0: no limit).")
    ] = 0,
    duration: Annotated[
        float, typer.Option("--duration", "-a", help="Stop after this many seconds (0: no limit).")
    ] = 0.0,
    detail: DetailOpt = False,
    messages: MessagesOpt = False,
    fmt: FormatOpt = Format.text,
    filter_text: FilterOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    column: ColumnOpt = None,
) -> None:
    """Capture live traffic on the protocols' ports and decode it as `read` does; Ctrl-C stops,
    then prints the stats summary on stderr."""
    if count < 0 or duration < 0:
        raise _fail("--count and --duration take numbers of 0 or more", 2)
    setup = _setup(protocol, port, decode_as, limit)
    columns = _message_columns(setup, messages, detail, fmt, column)
    selection = _selection(setup, filter_text)
    ports = set(setup.dissection.ports) | set(setup.dissection.guess)
    capture = Capture(interface, ports, count, duration, str(write) if write else None)
    # Ctrl-C goes to the capturing process, which ends the stream; what it took is still decoded.
    signal.signal(signal.SIGINT, lambda *_: capture.stop())
    stats = ReadStats()
    tracker = Conversations(d.protocol for d in setup.decoders.values())
    statistics = _statistics(setup, tracker)
    error: str | None = None

    with _reader_may_leave():
        try:
            segments = read_stream(capture.stream, f"capture on {interface}", stats)
            read = decode_segments(segments, setup.dissection, None, stats)
            frames: Iterable[Frame] = _counted(analysed(_telling_notices(read, stats), tracker), statistics)
            if selection is not None:
                frames = filter(selection, frames)
            write_frames(
                frames, Views(setup.decoders, columns), fmt, detail, sys.stdout, messages, tracker, flush=True
            )
        except CaptureError as exc:
            error = str(exc)
        sys.stdout.flush()
    outcome = capture.outcome()
    if outcome.error is not None and stats.packets == 0:
        if outcome.privilege:
            raise _fail(
                f"capturing on {interface} needs root or CAP_NET_RAW (libpcap: {outcome.error}); "
                "`streamdump proxy --listen HOST:PORT --upstream HOST:PORT` decodes without either"
            )
        raise _fail(outcome.error if outcome.whole else f"cannot capture on {interface}: {outcome.error}")
    _print_notices(stats)
    tracker.finish(stats.lossy, stats.lives)
    _print_diagnoses(tracker)
    _print_summary(statistics, setup)
    print(
        f"streamdump: note: {outcome.packets} packets captured on {interface} ({bpf(ports)}); "
        f"{outcome.dropped} dropped by the kernel, {outcome.ifdropped} by the interface",
        file=sys.stderr,
    )
    if error is not None:
        raise _fail(error)


def _statistics(setup: Setup, tracker: Conversations, by: tuple[str, ...] = ()) -> dict[str, Statistics]:
    """One Statistics per protocol of the read, fed by the tracker's findings; by: stats --by."""
    out = {}
    for name, d in setup.decoders.items():
        statistics = Statistics(d.protocol, tracker.trackers[name])
        if by:
            assert statistics.rules is not None
            statistics.grouping = Grouping(d, statistics.rules, by)
        out[name] = statistics
    return out


def _message_columns(
    setup: Setup, messages: bool, detail: bool, fmt: Format, columns: list[str] | None
) -> tuple[str, ...]:
    """The --column names, once the --messages options are checked to go together."""
    if messages and (detail or fmt is not Format.text):
        raise _fail("--messages is a text view of its own; it does not combine with --detail or --format", 2)
    if columns and not messages:
        raise _fail("--column names values --messages lines show; add --messages", 2)
    return _field_names(setup, columns, "--column")


def _field_names(setup: Setup, names: list[str] | None, option: str) -> tuple[str, ...]:
    """Names given to --by or --column, refused in one line when no protocol of the read has them."""
    try:
        return check_names(setup.decoders.values(), names or (), option)
    except UnknownName as exc:
        raise _fail(str(exc), 2) from None


def _counted(frames: Iterable[Frame], statistics: Mapping[str, Statistics]) -> Iterator[Frame]:
    """The frames, each counted in its protocol's statistics on the way."""
    for frame in frames:
        statistics[frame.protocol].add(frame)
        yield frame


def _print_summary(statistics: Mapping[str, Statistics], setup: Setup) -> None:
    """The stats tables of the protocols that had connections, on stderr: how live and proxy end."""
    partials = {name: s.partial() for name, s in statistics.items() if s.tracker.connections}
    _print_partials(partials, setup, sys.stderr, titled=True)


def _print_partials(partials: Mapping[str, Partial], setup: Setup, out: TextIO, titled: bool = False) -> None:
    """Statistics as `streamdump stats` prints them: the protocols the capture holds (when it
    holds none, the first asked for, with its empty tables), each titled when more than one is."""
    shown = [name for name, p in partials.items() if p.connections] or list(partials)[:1]
    console = _FilterConsole(file=out, highlight=False, width=None if out.isatty() else 200)
    for n, name in enumerate(shown):
        protocol = setup.decoders[name].protocol
        if titled or len(shown) > 1:
            console.print(("\n" if n else "") + f"== {protocol.title} ==", style="bold")
        ack = next(iter(protocol.conversation.acks.values()), None)
        acked = ack.send.command if ack is not None else None
        render_stats(partials[name].result(), console, partials[name].subject, acked)


# Segments the proxy may hold while decoding catches up; past this it waits (back-pressure).
PROXY_BACKLOG = 4096


def _address(text: str, what: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _fail(f"{what} takes HOST:PORT (e.g. 127.0.0.1:5553), got {text!r}", 2)
    return host.strip("[]"), int(port)


@app.command()
def proxy(
    listen: Annotated[str, typer.Option("--listen", "-l", help="Where clients connect: HOST:PORT.")],
    upstream: Annotated[str, typer.Option("--upstream", "-u", help="The real server: HOST:PORT.")],
    write: Annotated[
        Path | None,
        typer.Option("--write", "-w", help="Also save what passes as a pcap (read decodes it the same)."),
    ] = None,
    detail: DetailOpt = False,
    messages: MessagesOpt = False,
    fmt: FormatOpt = Format.text,
    filter_text: FilterOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    column: ColumnOpt = None,
) -> None:
    """Pass clients' connections through to the real server unchanged and decode every frame on
    the way: no privileges needed. Ctrl-C stops, then prints the stats summary on stderr."""
    here, there = _address(listen, "--listen"), _address(upstream, "--upstream")
    setup = _setup(protocol, [there[1]], decode_as, limit)
    columns = _message_columns(setup, messages, detail, fmt, column)
    selection = _selection(setup, filter_text)
    try:
        saved = write.open("wb") if write is not None else None
    except OSError as exc:
        raise _fail(f"{write}: cannot write: {exc.strerror}") from None
    segments: queue.Queue[Segment | None] = queue.Queue(maxsize=PROXY_BACKLOG)
    stats = ReadStats()
    tracker = Conversations(d.protocol for d in setup.decoders.values())
    statistics = _statistics(setup, tracker)

    told: set[tuple[str, int]] = set()

    def counted(frames: Iterable[Frame]) -> Iterator[Frame]:
        for frame in _counted(frames, statistics):
            for address in addresses(setup.decoders[frame.protocol].protocol, frame):
                if address != here and address not in told:  # the client will connect past the proxy
                    told.add(address)
                    tell(
                        f"{frame.name} {frame.kind} (packet {frame.number}) tells the client to connect to "
                        f"{address[0]}:{address[1]}, past this proxy ({listen}): the client leaves it there"
                    )
            yield frame

    def taken() -> Iterator[Segment]:
        while (seg := segments.get()) is not None:
            yield seg

    def decode() -> None:
        read = decode_segments(taken(), setup.dissection, None, stats)
        frames: Iterable[Frame] = counted(analysed(_telling_notices(read, stats), tracker))
        if selection is not None:
            frames = filter(selection, frames)
        with _reader_may_leave():
            write_frames(
                frames, Views(setup.decoders, columns), fmt, detail, sys.stdout, messages, tracker, flush=True
            )

    def tell(line: str) -> None:
        print(f"streamdump: warn: {line}", file=sys.stderr, flush=True)

    async def serve() -> None:
        loop = asyncio.get_running_loop()

        def hand_on(seg: Segment) -> None:
            segments.put(seg)  # a full backlog holds the proxy up: decoding sets the pace

        service = Proxy(here, there, Recorder(hand_on, saved), tell)
        try:
            await service.start()
        except OSError as exc:
            raise _fail(f"cannot listen on {listen}: {exc.strerror}") from None
        print(f"streamdump: proxying {listen} to {upstream}; Ctrl-C stops", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await service.stop()

    worker = threading.Thread(target=decode, daemon=True)
    worker.start()
    try:
        asyncio.run(serve())
    finally:
        segments.put(None)
        worker.join()
        if saved is not None:
            saved.close()
    _print_notices(stats)
    tracker.finish(stats.lossy, stats.lives)
    _print_diagnoses(tracker)
    _print_summary(statistics, setup)


@app.command(name="spark")
def spark_command(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Capture files or folders (pcap, pcapng, compressed), local paths or any URI Spark "
            "and pyarrow read (hdfs://, s3://).",
            show_default=False,
        ),
    ],
    out: Annotated[
        str,
        typer.Option("--out", "-o", help="Folder for the Parquet tables and stats.json.", show_default=False),
    ],
    master: Annotated[
        str | None,
        typer.Option(
            "--master", help="Spark master URL (default local[*]; under spark-submit, spark-submit's own)."
        ),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions", help="Partitions connections are decoded in (default: 4 per core).", min=1
        ),
    ] = None,
    split_mb: Annotated[
        int | None,
        typer.Option(
            "--split-mb", help="Size of the byte ranges capture files are read in (default: by cores).", min=1
        ),
    ] = None,
    driver_memory: Annotated[
        str, typer.Option("--driver-memory", help="Driver memory of a local run (Spark's notation).")
    ] = "2g",
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    port: PortOpt = None,
    decode_as: DecodeAsOpt = None,
) -> None:
    """Decode captures too big for one process on Spark, into Parquet tables (frames, messages,
    exchanges, expert, gaps) and the stats of each capture."""
    from streamdump import spark as pipeline

    lacking = pipeline.missing()
    if lacking is not None:
        raise _fail(lacking)
    if master is not None and not pipeline.MASTER.fullmatch(master):
        raise _fail(
            f"--master {master}: Spark takes local, local[N], local[*], spark://HOST:PORT, yarn or k8s://URL",
            2,
        )
    setup = _setup(protocol, port, decode_as, limit)
    out_dir = Path(out)
    if (
        "://" not in out
        and out_dir.exists()
        and any(out_dir.iterdir())
        and not (out_dir / "stats.json").exists()
    ):
        raise _fail(f"--out {out}: the folder holds other files; give an empty or new folder", 2)
    from streamdump.spark.job import PipelineError, find_inputs, run, write_stats
    from streamdump.spark.tasks import Settings

    try:
        found = find_inputs(inputs)
    except PipelineError as exc:
        raise _fail(str(exc)) from None

    settings = Settings(
        tuple(setup.decoders),
        tuple((port, runtime.name) for port, runtime in sorted(setup.dissection.ports.items())),
        tuple(sorted(setup.dissection.guess)),
        next(iter(setup.decoders.values())).limits,
    )
    show = sys.stderr.isatty()
    parts = partitions or 0
    session = pipeline.session(master, driver_memory, parts or 200, show)
    try:
        outcome = run(
            session,
            found,
            out,
            settings,
            partitions,
            split_mb << 20 if split_mb else None,
            lambda line: print(f"streamdump: {line}", file=sys.stderr),
        )
    except PipelineError as exc:
        raise _fail(str(exc)) from None
    finally:
        session.stop()
    write_stats(outcome)
    for name, doc in outcome.stats.items():
        results = doc["protocols"].values() if "protocols" in doc else [doc]
        frames = sum(r["frames"] for r in results)
        connections = sum(len(r["connections"]) for r in results)
        findings = Counter(d["severity"] for r in results for d in r["expert"] for _ in range(d["count"]))
        told = ", ".join(f"{n} {s}" for s, n in sorted(findings.items())) or "no findings"
        summary = outcome.summaries.get(name)
        print(
            f"{name}: {frames} frames, {connections} connections, {told}"
            + (f"; {summary}" if summary else "")
        )
    if len(outcome.partials) == 1:  # one capture: its stats tables, as `streamdump stats` prints them
        _print_partials(next(iter(outcome.partials.values())), setup, sys.stdout)
    rows = ", ".join(f"{table} {count}" for table, count in outcome.rows.items())
    print(f"wrote {out}: {rows} rows; stats.json")
    if outcome.skipped_files:
        print(
            f"streamdump: note: {len(outcome.skipped_files)} files in the folders given are no captures "
            f"(first: {outcome.skipped_files[0]})",
            file=sys.stderr,
        )
    for error in outcome.errors:
        print(f"streamdump: error: {error}", file=sys.stderr)
    if outcome.errors:
        raise typer.Exit(EXIT_INPUT)


@app.command()
def follow(
    file: FileArg,
    connection: Annotated[
        int | None,
        typer.Option("--connection", "-c", help="Connection number (as in stats); default: every one."),
    ] = None,
    port: PortOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
) -> None:
    """One connection's dialogue: requests and their responses side by side, with the times between."""
    if connection is not None and connection < 1:
        raise _fail(f"--connection takes a connection number from 1, got {connection}", 2)
    setup = _setup(protocol, port, decode_as, limit)
    read_stats = ReadStats()
    tracker = Conversations(d.protocol for d in setup.decoders.values())
    views = Views(setup.decoders)
    dialogues: dict[int, Dialogue] = {}
    error: str | None = None
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=False)
    try:
        read = _progress(read_frames(file, setup.dissection, None, read_stats), file, read_stats, show)
        for frame in analysed(read, tracker):
            if connection is None or frame.conn == connection:
                dialogue = dialogues.get(frame.conn)
                renderer = views[frame]
                if dialogue is None:
                    correlation = renderer.protocol.conversation.correlation
                    dialogue = dialogues[frame.conn] = Dialogue(frame.conn, correlation)
                dialogue.add(frame, f"{frame.name} {renderer.info(frame)}".rstrip())
    except CaptureError as exc:
        error = str(exc)
    tracker.finish(read_stats.lossy, read_stats.lives)
    for number, life in sorted(read_stats.lives.items()):
        if connection is None or number == connection:
            dialogues.setdefault(number, Dialogue(number)).end(life)
    dialogues = dict(sorted(dialogues.items()))
    connections = tracker.connections
    if connection is not None and connection not in dialogues and error is None:
        known = ", ".join(map(str, sorted(connections))) or "none"
        raise _fail(f"no connection {connection} in {file} (connections: {known})")
    with _reader_may_leave():
        for n, dialogue in enumerate(dialogues.values()):
            if n:
                sys.stdout.write("\n")
            conn = connections.get(dialogue.number)
            server = tracker.trackers[conn.protocol].server(conn) if conn is not None else "server"
            for line in dialogue.lines(conn, server):
                sys.stdout.write(line + "\n")
        sys.stdout.flush()
    _print_notices(read_stats)
    _print_diagnoses(tracker, {connection} if connection is not None else None)
    _finish_read(setup, read_stats, error)


def _progress(
    frames: Iterable[Frame], file: Path, stats: ReadStats, show: bool, label: str = "reading"
) -> Iterable[Frame]:
    """The frames, with a progress bar on stderr when the read turns out slow and show allows."""
    if not show:
        return frames
    try:
        total = file.stat().st_size
    except OSError:
        return frames  # reading will say what is wrong with the file

    def position() -> int:
        try:
            return stats.position() if stats.position is not None else 0
        except (OSError, ValueError):  # the file is closed once reading ends
            return total

    return ReadProgress(total, position, Console(stderr=True), label=label).follow(frames)


def _setup(
    protocols: list[str] | None,
    ports: list[int] | None,
    decode_as: list[str] | None,
    limit: list[str] | None = None,
) -> Setup:
    limits = _limits(limit)
    try:
        decoders = _decoders(protocols, limits)
    except SpecError as exc:
        raise _fail(str(exc)) from None
    bad_ports = [p for p in ports or [] if not 0 < p < 65536]
    if bad_ports:
        raise _fail(f"--port takes TCP ports 1..65535, got {bad_ports[0]}", 2)
    forced: dict[int, str] = {}
    for item in decode_as or []:
        port_text, _, name = item.partition("=")
        if not port_text.strip().isdigit() or not 0 < int(port_text) < 65536 or not name:
            raise _fail(f"--decode-as takes PORT=PROTOCOL (e.g. 15552=rabbitmq_stream), got {item!r}", 2)
        if name not in decoders:
            known = ", ".join(sorted(decoders))
            raise _fail(f"--decode-as {item}: unknown protocol {name!r} (known: {known})", 2)
        forced[int(port_text)] = name
    guess: list[int] = []
    if len([d for d in decoders.values() if d.protocol.wiring.carried_by is None]) == 1 and protocols:
        # One protocol asked for: --port adds its server ports, as before protocols were many.
        only = next(name for name, d in decoders.items() if d.protocol.wiring.carried_by is None)
        forced = {**dict.fromkeys(ports or [], only), **forced}
    else:
        guess = list(ports or [])
    setup = Setup(decoders, Dissection(decoders.values(), forced, guess))
    # The registry and the compiled layouts live as long as the process: the collector need
    # not walk them again each time decoding's short-lived dicts and lists trigger it.
    gc.freeze()
    return setup


def _selection(setup: Setup, text: str | None) -> FrameFilter | None:
    if text is None:
        return None
    try:
        return FrameFilter(setup.decoders.values(), text)
    except FilterError as exc:
        raise _fail(f"--filter: {exc}", 2) from None


def _print_diagnoses(tracker: Tracker | Conversations, connections: set[int] | None = None) -> None:
    """The conversation's warnings and errors, one line each, after the frames."""
    shown = [
        d
        for d in tracker.diagnoses
        if d.severity in ("warn", "error") and (connections is None or d.conn in connections)
    ]
    for d in shown[:MAX_DIAGNOSES]:
        print(f"streamdump: {d.severity}: packet {d.number}: {d.message}", file=sys.stderr)
    if len(shown) > MAX_DIAGNOSES:
        print(
            f"streamdump: note: {len(shown) - MAX_DIAGNOSES} more warnings and errors; "
            "`streamdump stats FILE` lists them all",
            file=sys.stderr,
        )


def _finish_read(setup: Setup, stats: ReadStats, error: str | None) -> None:
    summary = loss_summary(stats)
    if summary:
        print(f"streamdump: note: {summary}", file=sys.stderr)
    if error is not None:
        raise _fail(error)
    if stats.frames == 0 and _all_unreadable(stats):
        raise _fail(
            f"{unknown_links_text(stats.unknown_links)}: not a link type streamdump reads ({LINKS_READ})"
        )
    if stats.frames == 0:
        what = "no" if stats.segments_matched == 0 else "no complete"
        print(
            f"streamdump: {what} frames of {setup.describe_ports()} in {stats.packets} packets; "
            "add ports with --port or --decode-as PORT=PROTOCOL",
            file=sys.stderr,
        )


def _all_unreadable(stats: ReadStats) -> bool:
    """Every packet is of a link type streamdump has no parser for: an error, not a note."""
    return stats.packets > 0 and stats.skipped.get(Skip.UNKNOWN_LINK, 0) == stats.packets


def _print_notices(stats: ReadStats) -> None:
    for notice in stats.notices:
        if notice.kind == "link type" and _all_unreadable(stats):
            continue  # the read's one-line error says it
        print(f"streamdump: {notice.severity}: packet {notice.number}: {notice.message}", file=sys.stderr)
    stats.notices.clear()


def _telling_notices(frames: Iterable[Frame], stats: ReadStats) -> Iterator[Frame]:
    """Print capture notices as they happen, so a long read neither hides nor hoards them."""
    for frame in frames:
        if stats.notices:
            sys.stdout.flush()
            _print_notices(stats)
        yield frame


_HEX_NOISE = re.compile(r"0x|[\s:,\-]", re.IGNORECASE)


def parse_hex(text: str) -> bytes:
    cleaned = _HEX_NOISE.sub("", text)
    if not cleaned:
        raise InputError("no hex digits given")
    bad = re.search(r"[^0-9a-fA-F]", cleaned)
    if bad:
        raise InputError(f"not hex: {bad.group()!r} at position {bad.start()} of the cleaned input")
    if len(cleaned) % 2:
        raise InputError(f"odd number of hex digits ({len(cleaned)})")
    return bytes.fromhex(cleaned)


def split_frames(data: bytes, decoder: Decoder) -> Iterator[tuple[bytes, str | None]]:
    """Frames in a hex dump: frames back to back, or one frame without its length field."""
    pos = 0
    # A protocol its package frames (no length field, or one with two meanings) is cut by its rule.
    rule = None if decoder.framed_by_length else framing_rule(decoder)
    while pos < len(data):
        rest = data[pos:]
        if rule is not None:
            total = rule.total(rest, 0)
            if total is None or total <= 0 or total > len(rest):
                yield rest, None
                return
            yield rest[:total], None
            pos += total
            continue
        total = decoder.frame_length(rest)
        if total is not None and decoder.header_size <= total <= len(rest):
            yield rest[:total], None
            pos += total
            continue
        framed = _with_length(rest, decoder)
        if pos == 0 and framed is not None and decoder.plausible(framed):
            yield framed, "input has no size prefix; decoded it as one frame starting at the key"
        else:
            yield rest, None
        return


def _with_length(rest: bytes, decoder: Decoder) -> bytes | None:
    """rest with the length field put in front, for protocols whose frames start with it."""
    wiring = decoder.protocol.wiring
    if wiring.length is None or decoder.length_at != 0:
        return None
    value = len(rest) + decoder.length_end - decoder.uncounted
    try:
        return decoder.length_st.pack(value) + rest
    except struct.error:
        return None


def _decoded(data: bytes, decoder: Decoder) -> tuple[list[Frame], list[str]]:
    frames, notes = [], []
    for number, (raw, note) in enumerate(split_frames(data, decoder), start=1):
        if note:
            notes.append(note)
        frame = decoder.decode(raw)
        frame.number = number
        frames.append(frame)
    return frames, notes


def _best(data: bytes, decoders: Mapping[str, Decoder]) -> tuple[list[Frame], list[str]]:
    """The decoding of data by the protocol that reads it best: most clean frames, then fewest notes."""
    scored = []
    for order, decoder in enumerate(decoders.values()):
        frames, notes = _decoded(data, decoder)
        clean = sum(1 for f in frames if f.command is not None and f.worst_severity not in ("warn", "error"))
        worst = sum(1 for f in frames for e in f.expert if e.severity in ("warn", "error"))
        scored.append((-clean, worst, order, frames, notes))
    scored.sort(key=lambda s: s[:3])
    return scored[0][3], scored[0][4]


@app.command()
def decode(
    hexdump: Annotated[
        list[str], typer.Argument(help="Frame bytes as hex (spaces, colons and 0x are ignored).")
    ],
    detail: Annotated[
        bool, typer.Option("--detail/--brief", "-V", help="Tree (default) or one line.")
    ] = True,
    fmt: FormatOpt = Format.text,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
) -> None:
    """Decode frames given as hex, as pasted from logs or Wireshark (the protocol that reads them best)."""
    try:
        decoders = _decoders(protocol, _limits(limit))
        data = parse_hex(" ".join(hexdump))
    except (SpecError, InputError) as exc:
        raise _fail(str(exc)) from None
    frames, notes = _best(data, decoders)
    for note in notes:
        print(f"streamdump: note: {note}", file=sys.stderr)
    with _reader_may_leave():
        write_frames(frames, Views(decoders), fmt, detail, sys.stdout)
        sys.stdout.flush()


lua_app = typer.Typer(
    no_args_is_help=True,
    help="The Wireshark plugin generated from the registry: write it, install it, list its fields.",
)
app.add_typer(lua_app, name="lua")


@lua_app.command("generate")
def lua_generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the plugins into.")] = Path("lua"),
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a plugin there is not current.")
    ] = False,
) -> None:
    """Write one Wireshark Lua dissector per spec in the registry (lua/ in the repository)."""
    protocols = list(default_registry().protocols.values())
    if check:
        stale = [
            luagen.plugin_name(p)
            for p in protocols
            if not (out / luagen.plugin_name(p)).is_file()
            or (out / luagen.plugin_name(p)).read_text(encoding="utf-8") != luagen.generate(p, protocols)
        ]
        if stale:
            raise _fail(f"stale in {out}: {', '.join(stale)} (run `streamdump lua generate`)")
        print(f"{out}: current")
        return
    try:
        written = luagen.write(protocols, out)
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc.strerror or exc}") from None
    for path in written:
        print(path)


@lua_app.command("install")
def lua_install(
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="Plugins folder (default: Wireshark's personal Lua plugins folder)."),
    ] = None,
) -> None:
    """Install the plugins into Wireshark's personal plugins folder and say where."""
    target = folder or luagen.personal_plugins_folder()
    try:
        written = luagen.write(default_registry().protocols.values(), target)
    except OSError as exc:
        raise _fail(f"cannot write {target}: {exc.strerror or exc}") from None
    for path in written:
        print(f"installed {path}")
    print("Wireshark loads them when it starts (Analyze > Reload Lua Plugins in a running one).")


@lua_app.command("fields")
def lua_fields(
    protocol: Annotated[
        str | None, typer.Option("--protocol", help="Only this protocol's (default: every protocol's).")
    ] = None,
) -> None:
    """List the plugins' display-filter fields and expert entries: abbreviation, type, title.

    Without its protocol's prefix, a field's name is the one --filter takes."""
    registry = default_registry()
    if protocol is not None and protocol not in registry.protocols:
        raise _fail(f"no protocol {protocol!r} (known: {', '.join(sorted(registry.protocols))})")
    for name in sorted(registry.protocols):
        if protocol in (None, name):
            for abbreviation, ftype, title in luagen.glossary(registry.protocols[name]):
                print(f"{abbreviation}\t{ftype}\t{title}")


def _usage_error(exc: typer.TyperException) -> int:
    """Tell a command line typer refused on one line (with where help is); its exit status."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
        print(ctx.get_help())  # no arguments at all: the help is the answer
        return 2
    said = " ".join(str(getattr(exc, "format_message", exc.__str__)()).split())
    where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    print(f"streamdump: error: {said}{where}", file=sys.stderr)
    return int(getattr(exc, "exit_code", 2))


def main() -> None:
    """Entry point: run the app with one-line errors and no tracebacks."""
    # Decoding allocates many short-lived containers and few cycles: collect the youngest
    # generation every 10,000 allocations, not every 700 (a fifth of a read's time otherwise).
    gc.set_threshold(10_000, 10, 10)
    # Text a peer sent may hold what UTF-8 cannot encode (a lone surrogate from a JSON escape):
    # it is written escaped, not refused.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        # Not standalone: a usage error comes back here to be told on one line, not in a box.
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # a usage error (typer's click): one line, not a box
        sys.exit(_usage_error(exc))
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except (struct.error, ValueError, TypeError, OSError, RuntimeError, KeyError, IndexError) as exc:
        print(f"streamdump: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    if isinstance(code, int) and code:
        sys.exit(code)
