"""`streamdump ui`: the terminal UI over a capture file, standard input or a live capture."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads these
# signatures whenever it builds a command, and every string annotation costs it an eval.
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

from streamdump.cli.base import (
    EXIT_USAGE,
    CountOpt,
    DecodeAsOpt,
    FileArg,
    FilterOpt,
    KeylogOpt,
    LimitOpt,
    PortOpt,
    ProtocolOpt,
    ReadFileOpt,
    TimeOpt,
    app,
    capture_source,
    fail,
    prepare,
    say,
)
from streamdump.views.clock import TimeFormat

if TYPE_CHECKING:
    from streamdump.analysis.session import CaptureFile, Source


@app.command()
def ui(
    file: FileArg = None,
    read_file: ReadFileOpt = None,
    live: Annotated[
        bool, typer.Option("--live", help="Capture live traffic on the protocols' ports (needs root).")
    ] = False,
    interface: Annotated[
        str, typer.Option("--interface", "-i", help="With --live: the interface to capture on.")
    ] = "lo",
    port: PortOpt = None,
    filter_text: FilterOpt = None,
    count: CountOpt = None,
    two_pass: Annotated[
        bool,
        typer.Option(
            "--two-pass", "-2", help="Read the file twice, so requests also link to their responses."
        ),
    ] = False,
    time_format: TimeOpt = TimeFormat.r,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    tls_keylog: KeylogOpt = None,
) -> None:
    """Look at a capture in a terminal UI: packet list, detail tree and bytes, display filter bar,
    follow, stats and findings (press ? in it for the keys)."""
    from streamdump import ui as terminal
    from streamdump.analysis.session import CaptureStream

    lacking = terminal.missing()
    if lacking is not None:
        raise fail(lacking)
    if live and (file is not None or read_file is not None):
        raise fail("--live captures; give it no file", EXIT_USAGE)
    if count is not None and count < 1:
        raise fail(f"--count takes a number of packets from 1, got {count}", EXIT_USAGE)
    setup = prepare(
        protocol, port, decode_as, limit, filter_text, two_pass=two_pass, count=count, keylogs=tls_keylog
    )
    capture = None
    source: Source
    if live:
        if two_pass:
            raise fail("--two-pass reads a file twice; a live capture can be read only once", EXIT_USAGE)
        from streamdump.live.run import Capture

        ports = set(setup.dissection.ports) | set(setup.dissection.guess)
        capture = Capture(interface, ports, count or 0, 0.0, None)
        # The screen says "capturing" once packets are being taken (a capture that could not
        # open ends its stream at once, and the screen tells why).
        capture.opened()
        source = CaptureStream(capture.stream, f"capture on {interface}")
    else:
        source = capture_source(file, read_file)
        if source.rereadable:
            _check_readable(source)
        if two_pass and not source.rereadable:
            raise fail("--two-pass reads the capture twice; standard input can be read only once", EXIT_USAGE)
        if not source.rereadable:
            if sys.stdin.isatty():
                raise fail(
                    "standard input is the terminal: pipe a capture into `streamdump ui -`", EXIT_USAGE
                )
            source = CaptureStream(_terminal_for_keys(), "standard input")
    from streamdump.ui.app import StreamdumpApp
    from streamdump.ui.index import FrameIndex

    index = FrameIndex(setup, source)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is a key here; q quits
    app = StreamdumpApp(index, filter_text=filter_text or "", time_format=time_format, live=live)
    try:
        app.run()
    finally:
        if capture is not None:
            capture.stop()
        index.close()
    if capture is not None:
        outcome = capture.outcome()
        if outcome.error is not None and index.session.stats.packets == 0:
            raise fail(outcome.error if outcome.whole else f"cannot capture on {interface}: {outcome.error}")
    if index.error is not None:
        say(f"streamdump: error: {index.error}")
        raise typer.Exit(1)


def _check_readable(source: "CaptureFile") -> None:
    """A capture that cannot be opened, or is no capture, is said in one line before any screen."""
    from streamdump.wire.capture import CaptureError, Tally, read_records

    try:
        next(iter(read_records(source.path, Tally())), None)
    except CaptureError as exc:
        raise fail(str(exc)) from None


def _terminal_for_keys() -> BinaryIO:
    """With the capture on standard input, the keys come from the terminal: the capture keeps
    its own descriptor (returned) and standard input becomes the terminal again."""

    kept = os.dup(0)
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        os.close(kept)
        raise fail("the capture is on standard input and there is no terminal for the keys") from None
    os.dup2(tty, 0)
    os.close(tty)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  (the process's own standard input)
    return os.fdopen(kept, "rb")
