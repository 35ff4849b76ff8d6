"""The commands that read a capture or bytes and show them: read, stats, follow, decode."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated

import typer

from streamdump.analysis.hexdump import HexError, parse_hex
from streamdump.analysis.session import CaptureFile, HexBytes, OptionError, field_names
from streamdump.analysis.statistics import document
from streamdump.cli.base import (
    EXIT_USAGE,
    ColumnOpt,
    DecodeAsOpt,
    FileArg,
    FilterOpt,
    FormatOpt,
    LimitOpt,
    PortOpt,
    ProtocolOpt,
    app,
    fail,
    prepare,
    progress,
    reader_may_leave,
    tell_diagnoses,
    tell_end,
    tell_notice,
    tell_notices,
)
from streamdump.spec.decoder import Decoder
from streamdump.views.follow import Dialogue
from streamdump.views.output import Format, Views, write_frames, write_statistics
from streamdump.views.progress import wanted
from streamdump.wire.capture import STDIN


def message_columns(
    decoders: Mapping[str, Decoder], messages: bool, detail: bool, fmt: Format, columns: list[str] | None
) -> tuple[str, ...]:
    """The --column names, once the --messages options are checked to go together."""
    if messages and (detail or fmt is not Format.text):
        raise fail(
            "--messages is a text view of its own; it does not combine with --detail or --format", EXIT_USAGE
        )
    if columns and not messages:
        raise fail("--column names values --messages lines show; add --messages", EXIT_USAGE)
    try:
        return field_names(decoders.values(), columns or (), "--column")
    except OptionError as exc:
        raise fail(str(exc), EXIT_USAGE) from None


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
    source = CaptureFile(file)
    if two_pass and not source.rereadable:
        raise fail("--two-pass reads the capture twice; standard input can be read only once", EXIT_USAGE)
    setup = prepare(protocol, port, decode_as, limit, filter_text, two_pass=two_pass)
    columns = message_columns(setup.decoders, messages, detail, fmt, column)
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=True)
    session = setup.session(on_notice=tell_notice, follow=progress(source.size, show))
    views = Views(setup.decoders, columns)
    with reader_may_leave():
        frames = session.frames(source)
        flush = str(file) == STDIN
        write_frames(frames, views, fmt, detail, sys.stdout, messages, lambda: session.first_ts, flush=flush)
        sys.stdout.flush()
    tell_notices(session)
    tell_diagnoses(session)
    tell_end(session)


class StatsFormat(StrEnum):
    text = "text"
    json = "json"


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
    setup = prepare(protocol, port, decode_as, limit, filter_text, by=by)
    source = CaptureFile(file)
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=False)
    session = setup.session(statistics=True, follow=progress(source.size, show))
    for _ in session.frames(source):
        pass
    partials = session.partials()
    with reader_may_leave():
        if fmt is StatsFormat.json:
            sys.stdout.write(json.dumps(document(partials), ensure_ascii=False, indent=1) + "\n")
        else:
            write_statistics(partials, setup.decoders, sys.stdout)
        sys.stdout.flush()
    tell_notices(session)
    tell_end(session)


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
        raise fail(f"--connection takes a connection number from 1, got {connection}", EXIT_USAGE)
    setup = prepare(protocol, port, decode_as, limit)
    source = CaptureFile(file)
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=False)
    session = setup.session(follow=progress(source.size, show))
    views = Views(setup.decoders)
    dialogues: dict[int, Dialogue] = {}
    for frame in session.frames(source):
        if connection is None or frame.conn == connection:
            dialogue = dialogues.get(frame.conn)
            renderer = views[frame]
            if dialogue is None:
                correlation = renderer.protocol.conversation.correlation
                dialogue = dialogues[frame.conn] = Dialogue(frame.conn, correlation)
            dialogue.add(frame, f"{frame.name} {renderer.info(frame)}".rstrip())
    for number, life in sorted(session.lives.items()):
        if connection is None or number == connection:
            dialogues.setdefault(number, Dialogue(number)).end(life)
    dialogues = dict(sorted(dialogues.items()))
    connections = session.tracker.connections
    if connection is not None and connection not in dialogues and session.error is None:
        known = ", ".join(map(str, sorted(connections))) or "none"
        raise fail(f"no connection {connection} in {file} (connections: {known})")
    with reader_may_leave():
        for n, dialogue in enumerate(dialogues.values()):
            if n:
                sys.stdout.write("\n")
            conn = connections.get(dialogue.number)
            server = session.server_name(dialogue.number) if conn is not None else "server"
            for line in dialogue.lines(conn, server):
                sys.stdout.write(line + "\n")
        sys.stdout.flush()
    tell_notices(session)
    tell_diagnoses(session, {connection} if connection is not None else None)
    tell_end(session)


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
    setup = prepare(protocol, None, None, limit)
    try:
        data = parse_hex(" ".join(hexdump))
    except HexError as exc:
        raise fail(str(exc)) from None
    session = setup.session()
    frames = list(session.frames(HexBytes(data)))
    for note in session.hex_notes:
        print(f"streamdump: note: {note}", file=sys.stderr)
    with reader_may_leave():
        write_frames(frames, Views(setup.decoders), fmt, detail, sys.stdout)
        sys.stdout.flush()
