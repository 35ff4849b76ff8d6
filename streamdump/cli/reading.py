"""The commands that read a capture or bytes and show them: read, stats, follow, decode."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads these
# signatures whenever it builds a command, and every string annotation costs it an eval.
import sys
from enum import StrEnum
from typing import Annotated

import typer

from streamdump.cli.base import (
    EXIT_INPUT,
    EXIT_USAGE,
    ColumnOpt,
    CountOpt,
    DecodeAsOpt,
    DetailOpt,
    FailOnOpt,
    FieldOpt,
    FieldsOptionOpt,
    FileArg,
    FilterOpt,
    FormatOpt,
    HexOpt,
    KeylogOpt,
    LimitOpt,
    PortOpt,
    ProtocolOpt,
    QuietOpt,
    ReadFileOpt,
    TimeOpt,
    WriteFormatOpt,
    WriteOpt,
    app,
    capture_source,
    display,
    fail,
    finding,
    packet_writer,
    prepare,
    progress,
    reader_may_leave,
    tell_diagnoses,
    tell_end,
    tell_notice,
    tell_notices,
)
from streamdump.views.choices import TOP, Format
from streamdump.views.clock import TimeFormat


def message_columns(setup_decoders: dict, messages: bool, columns: list[str] | None) -> tuple[str, ...]:
    """The --column names, once they are checked to go with --messages."""
    from streamdump.analysis.session import OptionError, field_names

    if columns and not messages:
        raise fail("--column names values --messages lines show; add --messages", EXIT_USAGE)
    try:
        return field_names(setup_decoders.values(), columns or (), "--column")
    except OptionError as exc:
        raise fail(str(exc), EXIT_USAGE) from None


@app.command()
def read(
    file: FileArg = None,
    read_file: ReadFileOpt = None,
    port: PortOpt = None,
    detail: DetailOpt = False,
    messages: Annotated[
        bool,
        typer.Option(
            "--messages", "-m", help="One line per published or delivered message instead of per frame."
        ),
    ] = False,
    fmt: FormatOpt = None,
    field: FieldOpt = None,
    fields_option: FieldsOptionOpt = None,
    hex_dump: HexOpt = False,
    time_format: TimeOpt = TimeFormat.r,
    filter_text: FilterOpt = None,
    count: CountOpt = None,
    quiet: QuietOpt = False,
    write: WriteOpt = None,
    write_format: WriteFormatOpt = None,
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
    tls_keylog: KeylogOpt = None,
    column: ColumnOpt = None,
    fail_on: FailOnOpt = None,
) -> None:
    """Decode every frame of a capture file, as tshark -r does."""
    from streamdump.views.output import Views, write_frames
    from streamdump.views.progress import wanted
    from streamdump.wire.capture import STDIN

    source = capture_source(file, read_file)
    if two_pass and not source.rereadable:
        raise fail("--two-pass reads the capture twice; standard input can be read only once", EXIT_USAGE)
    setup = prepare(
        protocol,
        port,
        decode_as,
        limit,
        filter_text,
        two_pass=two_pass,
        count=count,
        fail_on=fail_on,
        keylogs=tls_keylog,
    )
    shown = display(
        setup,
        fmt,
        detail=detail,
        messages=messages,
        hex_dump=hex_dump,
        fields=field,
        fields_options=fields_option,
        time=time_format,
        quiet=quiet,
    )
    columns = message_columns(setup.decoders, messages, column)
    if columns and shown.fmt is not Format.text:
        raise fail("--column adds to --messages lines; with -T fields, name the fields with -e", EXIT_USAGE)
    writer = packet_writer(write, write_format)
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=not quiet)
    session = setup.session(on_notice=tell_notice, follow=progress(source.size, show), write=writer)
    views = Views(setup.decoders, columns)
    with reader_may_leave():
        frames = session.frames(source)
        flush = source.name == STDIN
        write_frames(frames, views, shown, sys.stdout, lambda: session.first_ts, flush=flush)
        sys.stdout.flush()
    tell_notices(session)
    tell_diagnoses(session)
    tell_end(session, fail_on)


class StatsFormat(StrEnum):
    text = "text"
    json = "json"


@app.command()
def stats(
    file: FileArg = None,
    read_file: ReadFileOpt = None,
    port: PortOpt = None,
    fmt: Annotated[
        StatsFormat, typer.Option("--format", "-T", help="text (tables) or json (one object).")
    ] = StatsFormat.text,
    filter_text: FilterOpt = None,
    count: CountOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    tls_keylog: KeylogOpt = None,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="Also count messages per value of this field (a filter name: content_type, "
            "application_properties.value...); decodes every message. Repeatable.",
        ),
    ] = None,
    fail_on: FailOnOpt = None,
    top: Annotated[
        int,
        typer.Option(
            "--top",
            help="Connections the text lists, those that moved the most bytes; the others are totalled "
            "on one line (0: all). JSON lists every one.",
        ),
    ] = TOP,
) -> None:
    """Response times, response codes, confirm latency, volumes per stream, connections and expert summary."""
    from streamdump.analysis.statistics import document
    from streamdump.views.output import write_statistics
    from streamdump.views.progress import wanted
    from streamdump.views.safe import write_json

    source = capture_source(file, read_file)
    setup = prepare(
        protocol, port, decode_as, limit, filter_text, by=by, count=count, fail_on=fail_on, keylogs=tls_keylog
    )
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=False)
    session = setup.session(statistics=True, follow=progress(source.size, show))
    for _ in session.frames(source):
        pass
    if session.failure() is not None and session.stats.packets == 0:
        tell_end(session)  # nothing was read: no tables of nothing before the error
    partials = session.partials()
    with reader_may_leave():
        if fmt is StatsFormat.json:
            # Streamed: every connection's summary, read back one at a time (analysis/rows.py).
            write_json(document(partials, stream=True), sys.stdout)
            sys.stdout.write("\n")
        else:
            write_statistics(partials, setup.decoders, sys.stdout, top=top, origin=session.first_ts)
        sys.stdout.flush()
    tell_notices(session)
    tell_end(session, fail_on)


@app.command()
def follow(
    file: FileArg = None,
    read_file: ReadFileOpt = None,
    connection: Annotated[
        int | None,
        typer.Option("--connection", help="Connection number (as in stats); default: every one."),
    ] = None,
    filter_text: FilterOpt = None,
    count: CountOpt = None,
    port: PortOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    tls_keylog: KeylogOpt = None,
    fail_on: FailOnOpt = None,
) -> None:
    """Each connection's dialogue: requests and their responses side by side, with the times between
    (since the capture's first packet, and since the row before)."""
    from streamdump.views.follow import write_dialogues
    from streamdump.views.output import Views
    from streamdump.views.progress import wanted

    if connection is not None and connection < 1:
        raise fail(f"--connection takes a connection number from 1, got {connection}", EXIT_USAGE)
    source = capture_source(file, read_file)
    setup = prepare(
        protocol, port, decode_as, limit, filter_text, count=count, fail_on=fail_on, keylogs=tls_keylog
    )
    show = wanted(sys.stdout, sys.stderr, frames_on_stdout=False)
    # Follow shows every connection's dialogue at the end: it keeps each one whole.
    session = setup.session(follow=progress(source.size, show), retire=False)
    frames = (f for f in session.frames(source) if connection is None or f.conn == connection)
    dialogues = write_dialogues(frames, Views(setup.decoders), session, connection)
    if connection is not None and not dialogues and session.error is None:
        known = ", ".join(map(str, sorted(session.tracker.connections))) or "none"
        raise fail(f"no connection {connection} in {source.name} (connections: {known})")
    with reader_may_leave():
        for n, lines in enumerate(dialogues):
            if n:
                sys.stdout.write("\n")
            sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()
    tell_notices(session)
    tell_diagnoses(session, {connection} if connection is not None else None)
    tell_end(session, fail_on)


@app.command()
def decode(
    hexdump: Annotated[
        list[str],
        typer.Argument(
            help="Frame bytes as hex: plain (spaces, colons and 0x are ignored), or a dump as tshark -x, "
            "Wireshark's Copy as Hex Dump and xxd print it (offsets and ASCII columns); - reads it from "
            "standard input.",
            show_default=False,
        ),
    ],
    detail: Annotated[
        bool, typer.Option("--detail/--brief", "-V", help="Tree (default) or one line.")
    ] = True,
    fmt: FormatOpt = None,
    field: FieldOpt = None,
    fields_option: FieldsOptionOpt = None,
    hex_dump: HexOpt = False,
    filter_text: FilterOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    fail_on: FailOnOpt = None,
) -> None:
    """Decode frames given as hex, as pasted from logs, tshark -x, Wireshark or xxd: by the protocol
    that reads them (or --protocol's); says so when none does."""
    from streamdump.analysis.hexdump import HexError, decodable, parse_dump
    from streamdump.analysis.session import HexBytes
    from streamdump.views.output import Views, write_frames

    setup = prepare(protocol, None, None, limit, filter_text, fail_on=fail_on)
    shown = display(setup, fmt, detail=detail, hex_dump=hex_dump, fields=field, fields_options=fields_option)
    text = sys.stdin.read() if hexdump == ["-"] else "\n".join(hexdump)
    try:
        dump = parse_dump(text)
    except HexError as exc:
        raise fail(str(exc)) from None
    for note in dump.notes:
        finding("note", note)
    session = setup.session()
    frames = list(session.frames(HexBytes(dump.data, dump.pieces)))
    for note in session.hex_notes:
        finding("note", note)
    if not protocol and filter_text is None and not decodable(frames):
        raise fail(
            f"no protocol reads these {len(dump.data)} bytes ({session.hex_tried}); "
            "give --protocol to see what one makes of them",
            EXIT_INPUT,
        )
    with reader_may_leave():
        write_frames(frames, Views(setup.decoders), shown, sys.stdout)
        sys.stdout.flush()
    if fail_on is not None and session.reached(fail_on.value):
        raise typer.Exit(3)
