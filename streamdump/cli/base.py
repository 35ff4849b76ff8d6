"""What every command shares: the typer app, the options a read takes, and how a command says
what went wrong (one line on stderr, an exit status) and what a read found.

Exit codes: 0 the input was read, whatever it holds; 1 the input cannot be read (a missing,
damaged or cut-short capture, bad hex, a spec that does not load), 2 usage errors, 3 findings
that reach --fail-on's level, 70 internal errors. Frames decoded before an error are already
printed.

On stderr, a tool failure is `streamdump: error: ...`; a finding (a diagnosis, a notice about
the capture) starts with its severity in brackets, `[error] packet 11: ...`, `[warn] ...`,
`[note] ...`. Everything printed there is escaped as the text views escape (views/safe.py).

Start-up: declaring the commands and their options loads typer and a few enums only; what a
command runs (the session, the registry, the views) is imported when it runs, so `--help`
and a small capture's read load no more than they use (bench/startup_bench.py).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import streamdump
from streamdump.views.choices import Format
from streamdump.views.clock import DESCRIBED, TimeFormat
from streamdump.wire.limits import DEFAULT_LIMITS, LimitError, Limits, described
from streamdump.wire.writer import WriteFormat

if TYPE_CHECKING:
    from streamdump.analysis.pipeline import Notice
    from streamdump.analysis.session import CaptureFile, Follow, Session, Setup
    from streamdump.views.output import Display
    from streamdump.wire.capture import Tally
    from streamdump.wire.frame import Frame
    from streamdump.wire.writer import PacketWriter

# Help is plain text, as tshark's and git's are: typer's boxed help loads rich's markdown,
# tables and traceback modules, three times what the rest of `--help` costs.
PLAIN_HELP = None
app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=PLAIN_HELP,
    help="Decode messaging wire protocols from captures and hex dumps, with tshark's options.",
)

EXIT_INPUT = 1
EXIT_USAGE = 2
EXIT_FINDINGS = 3
EXIT_INTERNAL = 70
# Conversation warnings and errors printed after a read; `stats` lists them all.
MAX_DIAGNOSES = 10


def _version(shown: bool) -> None:
    if shown:
        print(f"streamdump {streamdump.__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool | None,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print streamdump's version and exit."
        ),
    ] = None,
) -> None:
    """Decode messaging wire protocols (RabbitMQ Streams, RocketMQ, EventMesh, NATS, Liftbridge)
    from captures, live traffic and hex dumps, with tshark's options."""


def say(line: str) -> None:
    """One line on stderr, after what stdout already holds, escaped for the terminal."""
    from streamdump.views.safe import escape

    sys.stdout.flush()
    print(escape(line), file=sys.stderr)


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    """A tool failure: `streamdump: error: ...` on stderr; the caller raises the exit it returns."""
    say(f"streamdump: error: {message}")
    return typer.Exit(code)


def finding(severity: str, message: str, number: int | None = None) -> None:
    """A finding on stderr, its severity first: `[warn] packet 115: ...`."""
    say(f"[{severity}] packet {number}: {message}" if number is not None else f"[{severity}] {message}")


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Stop quietly with status 0 when the output pipe closes (e.g. `| head`), like other filters."""
    try:
        yield
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


# ---------------------------------------------------------------------- options


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
    Path | None,
    typer.Argument(
        help="pcap or pcapng capture file (or -r FILE); - reads it from standard input.", show_default=False
    ),
]
ReadFileOpt = Annotated[
    Path | None,
    typer.Option("--read-file", "-r", help="The capture file, as tshark's -r (the same as the argument).",
                 show_default=False),
]  # fmt: skip
CountOpt = Annotated[
    int | None,
    typer.Option("--count", "-c", help="Stop after this many packets of the capture.", show_default=False),
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
        help="With --messages: show this field's values on each line (a filter name: message_id, "
        "application_properties.value...). Repeatable.",
    ),
]
FieldOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--field",
        "-e",
        help="With -T fields (which it implies): print this field's values, a column each, as tshark's -e "
        "(a filter name, or frame.number, frame.time_epoch, frame.time_relative). Repeatable.",
        show_default=False,
    ),
]
FieldsOptionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--fields-option",
        "-E",
        help="With -T fields, as tshark's -E: header=y|n, separator=C (/t, /s), quote=d|s|n, aggregator=C, "
        "occurrence=f|l|a|N. Repeatable.",
        metavar="NAME=VALUE",
        show_default=False,
    ),
]
HexOpt = Annotated[
    bool,
    typer.Option(
        "--hex",
        "-x",
        help="After each frame's line or tree, its bytes in hex and ASCII (the reassembled PDU, and the "
        "packets it came from); in JSON, its bytes as hex and its packets.",
    ),
]
TimeOpt = Annotated[
    TimeFormat,
    typer.Option(
        "--time-format",
        "-t",
        help="How times are written, as tshark's -t: "
        + "; ".join(f"{k}: {v}" for k, v in DESCRIBED.items())
        + ".",
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="Print no frames (findings still go to stderr; -w still writes)."),
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
KeylogOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--tls-keylog",
        help="An NSS key log (SSLKEYLOGFILE) to decrypt TLS with, as Wireshark's tls.keylog_file "
        "(repeatable); a pcapng file's own secrets blocks are read too.",
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
    Format | None,
    typer.Option(
        "--format",
        "-T",
        help="text (a line or a tree per frame, default), fields (the -e fields), json (one array) "
        "or jsonl (one object a line).",
        show_default=False,
    ),
]
WriteOpt = Annotated[
    Path | None,
    typer.Option(
        "--write",
        "-w",
        help="Write the packets of the frames shown (the filter's) to this capture file, as tshark's -w.",
        show_default=False,
    ),
]
WriteFormatOpt = Annotated[
    WriteFormat | None,
    typer.Option(
        "--write-format",
        "-F",
        help="The -w file's format: pcapng (default; pcap when its name ends .pcap) or pcap.",
        show_default=False,
    ),
]


class Level(StrEnum):
    note = "note"
    warn = "warn"
    error = "error"


FailOnOpt = Annotated[
    Level | None,
    typer.Option(
        "--fail-on",
        help=f"Exit with status {EXIT_FINDINGS} when a finding (a frame's expert note, a notice about the "
        "capture, a diagnosis) reaches this severity: for CI jobs.",
        show_default=False,
    ),
]


def limits(settings: list[str] | None) -> Limits:
    """The bounds --limit NAME=VALUE sets (the defaults for the rest)."""
    found = DEFAULT_LIMITS
    for text in settings or []:
        try:
            found = found.setting(text)
        except LimitError as exc:
            raise fail(str(exc), EXIT_USAGE) from None
    return found


def decode_as_pairs(items: list[str] | None) -> tuple[tuple[int, str], ...]:
    pairs = []
    for item in items or []:
        port_text, _, name = item.partition("=")
        if not port_text.strip().isdigit() or not 0 < int(port_text) < 65536 or not name:
            raise fail(
                f"--decode-as takes PORT=PROTOCOL (e.g. 15552=rabbitmq_stream), got {item!r}", EXIT_USAGE
            )
        pairs.append((int(port_text), name))
    return tuple(pairs)


def prepare(
    protocol: list[str] | None,
    port: list[int] | None,
    decode_as: list[str] | None,
    limit: list[str] | None,
    filter_text: str | None = None,
    *,
    two_pass: bool = False,
    by: list[str] | None = None,
    count: int | None = None,
    fail_on: Level | None = None,
    keylogs: list[Path] | None = None,
) -> Setup:
    """The read's options, checked: a usage error or a spec that does not load ends the command."""
    from streamdump.analysis.session import OptionError, Options
    from streamdump.spec.registry import SpecError

    options = Options(
        protocols=tuple(protocol or ()),
        ports=tuple(port or ()),
        limits=limits(limit),
        decode_as=decode_as_pairs(decode_as),
        filter=filter_text,
        two_pass=two_pass,
        by=tuple(by or ()),
        count=count,
        expand_kept=fail_on is not None,
        keylogs=tuple(keylogs or ()),
    )
    try:
        setup = options.prepare()
    except SpecError as exc:
        raise fail(str(exc)) from None
    except OptionError as exc:
        raise fail(str(exc), EXIT_USAGE) from None
    # The command started without the collector (streamdump/__main__.py): what lives as long as
    # the process is made and frozen now, and what the read makes next may need collecting.
    gc.enable()
    return setup


# ---------------------------------------------------------------------- what a read found


def capture_source(file: Path | None, read_file: Path | None) -> CaptureFile:
    """The capture named by the argument or by -r (one of them, once)."""
    from streamdump.analysis.session import CaptureFile

    if file is not None and read_file is not None:
        raise fail("give the capture once: as the argument or with -r", EXIT_USAGE)
    path = file if file is not None else read_file
    if path is None:
        raise fail("which capture? give a file (or -r FILE; - for standard input)", EXIT_USAGE)
    return CaptureFile(path)


def display(
    setup: Setup,
    fmt: Format | None,
    *,
    detail: bool = False,
    messages: bool = False,
    hex_dump: bool = False,
    fields: list[str] | None = None,
    fields_options: list[str] | None = None,
    time: TimeFormat = TimeFormat.r,
    quiet: bool = False,
) -> Display:
    """How frames are shown, once the options are checked to go together (a usage error if not)."""
    from streamdump.views.output import Display

    if fields and fmt not in (None, Format.fields):
        raise fail(f"-e names the columns of -T fields, not of -T {fmt}", EXIT_USAGE)
    if fields:
        fmt = Format.fields
    fmt = fmt or Format.text
    if fmt is Format.fields and not fields:
        raise fail("-T fields prints the fields -e names: add -e NAME", EXIT_USAGE)
    if fields_options and fmt is not Format.fields:
        raise fail("-E sets how -T fields prints; add -T fields -e NAME", EXIT_USAGE)
    if messages and (detail or fmt in (Format.json, Format.jsonl)):
        raise fail(
            "--messages is a text view of its own (or -T fields with -e); it does not combine with "
            "--detail or JSON",
            EXIT_USAGE,
        )
    if hex_dump and fmt is Format.fields:
        raise fail("-x shows bytes after a line or a tree, or in JSON; not with -T fields", EXIT_USAGE)
    layout = None
    if fields:
        from streamdump.analysis.session import OptionError, field_names
        from streamdump.views.fields import FRAME_ALIASES, FieldsError, FieldsLayout

        columns = []
        for name in fields:
            if name in FRAME_ALIASES:
                columns.append((name, FRAME_ALIASES[name]))
                continue
            try:
                (bare,) = field_names(setup.decoders.values(), (name,), "-e")
            except OptionError as exc:
                raise fail(str(exc), EXIT_USAGE) from None
            columns.append((name, bare))
        try:
            layout = FieldsLayout.parse(columns, fields_options or ())
        except FieldsError as exc:
            raise fail(str(exc), EXIT_USAGE) from None
    return Display(fmt, detail, messages, hex_dump, layout, time, quiet)


def packet_writer(path: Path | None, fmt: WriteFormat | None) -> PacketWriter | None:
    """The -w file, opened (a file that cannot be written ends the command before any reading)."""
    from streamdump.wire.writer import PacketWriter

    if path is None:
        if fmt is not None:
            raise fail("-F sets the format of the -w file; add -w FILE", EXIT_USAGE)
        return None
    if str(path) == "-":
        raise fail("-w writes a file; standard output holds the frames", EXIT_USAGE)
    chosen = fmt or (WriteFormat.pcap if path.suffix == ".pcap" else WriteFormat.pcapng)
    try:
        out = path.open("wb")
    except OSError as exc:
        raise fail(f"{path}: cannot write: {exc.strerror}") from None
    return PacketWriter(out, chosen)


# ---------------------------------------------------------------------- what a read found


def tell_notice(notice: Notice) -> None:
    """A notice about the capture, on stderr, after the frames already written."""
    finding(notice.severity, notice.message, notice.number)


def tell_notices(session: Session) -> None:
    for notice in session.take_notices():
        tell_notice(notice)


def tell_diagnoses(session: Session, connections: set[int] | None = None) -> None:
    """The conversation's warnings and errors, one line each, after the frames."""
    shown = [
        d
        for d in session.diagnoses
        if d.severity in ("warn", "error") and (connections is None or d.conn in connections)
    ]
    for d in shown[:MAX_DIAGNOSES]:
        finding(d.severity, d.message, d.number)
    if len(shown) > MAX_DIAGNOSES:
        finding(
            "note",
            f"{len(shown) - MAX_DIAGNOSES} more warnings and errors; `streamdump stats FILE` lists them all",
        )


def tell_end(session: Session, fail_on: Level | None = None) -> None:
    """What the read lost, then why it failed (the exit status), that it found nothing, or that
    its findings reached --fail-on's level (status 3)."""
    loss = session.loss()
    if loss:
        finding("note", loss)
    if session.write is not None and session.write_error is not None:
        raise fail(session.write_error)
    failure = session.failure()
    if failure is not None:
        raise fail(failure)
    nothing = session.nothing_found()
    if nothing is not None:
        finding("note", nothing)
    if fail_on is not None and session.reached(fail_on.value):
        raise typer.Exit(EXIT_FINDINGS)


def progress(size: int | None, show: bool) -> Follow | None:
    """A progress bar for each pass of a read over a file of this size, when show allows."""
    if not show or size is None:
        return None
    from rich.console import Console

    from streamdump.views.progress import ReadProgress

    def follow(frames: Iterable[Frame], label: str, tally: Tally) -> Iterable[Frame]:
        def position() -> int:
            try:
                return tally.position() if tally.position is not None else 0
            except (OSError, ValueError):  # the file is closed once reading ends
                return size

        return ReadProgress(size, position, Console(stderr=True), label=label).follow(frames)

    return follow
