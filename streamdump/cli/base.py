"""What every command shares: the typer app, the options a read takes, and how a command says
what went wrong (one line on stderr, an exit status) and what a read found.

Exit codes: 0 success, 1 bad input (unreadable or damaged capture, bad hex, bad spec), 2 usage
errors, 70 internal errors. Frames decoded before an error are already printed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streamdump.analysis.pipeline import Notice
from streamdump.analysis.session import Follow, OptionError, Options, Session, Setup
from streamdump.spec.registry import SpecError
from streamdump.views.output import Format
from streamdump.views.progress import ReadProgress
from streamdump.wire.capture import Tally
from streamdump.wire.frame import Frame
from streamdump.wire.limits import DEFAULT_LIMITS, LimitError, Limits, described

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Decode messaging wire protocols from captures and hex dumps.",
)

EXIT_INPUT = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70
# Conversation warnings and errors printed after a read; `stats` lists them all.
MAX_DIAGNOSES = 10


def fail(message: str, code: int = EXIT_INPUT) -> typer.Exit:
    print(f"streamdump: error: {message}", file=sys.stderr)
    return typer.Exit(code)


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
) -> Setup:
    """The read's options, checked: a usage error or a spec that does not load ends the command."""
    options = Options(
        protocols=tuple(protocol or ()),
        ports=tuple(port or ()),
        limits=limits(limit),
        decode_as=decode_as_pairs(decode_as),
        filter=filter_text,
        two_pass=two_pass,
        by=tuple(by or ()),
    )
    try:
        return options.prepare()
    except SpecError as exc:
        raise fail(str(exc)) from None
    except OptionError as exc:
        raise fail(str(exc), EXIT_USAGE) from None


# ---------------------------------------------------------------------- what a read found


def tell_notice(notice: Notice) -> None:
    """A notice about the capture, on stderr, after the frames already written."""
    sys.stdout.flush()
    print(f"streamdump: {notice.severity}: packet {notice.number}: {notice.message}", file=sys.stderr)


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
        print(f"streamdump: {d.severity}: packet {d.number}: {d.message}", file=sys.stderr)
    if len(shown) > MAX_DIAGNOSES:
        print(
            f"streamdump: note: {len(shown) - MAX_DIAGNOSES} more warnings and errors; "
            "`streamdump stats FILE` lists them all",
            file=sys.stderr,
        )


def tell_end(session: Session) -> None:
    """What the read lost, then why it failed (the exit status) or that it found nothing."""
    loss = session.loss()
    if loss:
        print(f"streamdump: note: {loss}", file=sys.stderr)
    failure = session.failure()
    if failure is not None:
        raise fail(failure)
    nothing = session.nothing_found()
    if nothing is not None:
        print(f"streamdump: {nothing}", file=sys.stderr)


def progress(size: int | None, show: bool) -> Follow | None:
    """A progress bar for each pass of a read over a file of this size, when show allows."""
    if not show or size is None:
        return None

    def follow(frames: Iterable[Frame], label: str, tally: Tally) -> Iterable[Frame]:
        def position() -> int:
            try:
                return tally.position() if tally.position is not None else 0
            except (OSError, ValueError):  # the file is closed once reading ends
                return size

        return ReadProgress(size, position, Console(stderr=True), label=label).follow(frames)

    return follow
