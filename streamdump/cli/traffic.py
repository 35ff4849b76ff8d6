"""The commands that decode traffic as it happens: live (a capture) and proxy (no privileges).

The capture and the proxy (asyncio, libpcap) are imported when their command runs.
"""

# Annotations stay objects (no `from __future__ import annotations`): typer reads these
# signatures whenever it builds a command, and every string annotation costs it an eval.
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streamdump.cli.base import (
    EXIT_USAGE,
    ColumnOpt,
    DecodeAsOpt,
    DetailOpt,
    FieldOpt,
    FieldsOptionOpt,
    FilterOpt,
    FormatOpt,
    HexOpt,
    KeylogOpt,
    LimitOpt,
    MessagesOpt,
    PortOpt,
    ProtocolOpt,
    TimeOpt,
    app,
    display,
    fail,
    prepare,
    reader_may_leave,
    say,
    tell_diagnoses,
    tell_notice,
    tell_notices,
)
from streamdump.cli.reading import message_columns
from streamdump.views.clock import TimeFormat

if TYPE_CHECKING:
    from streamdump.analysis.session import Session
    from streamdump.wire.frame import Frame
    from streamdump.wire.packet import Segment

# Segments the proxy may hold while decoding catches up; past this it waits (back-pressure).
PROXY_BACKLOG = 4096


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
    fmt: FormatOpt = None,
    field: FieldOpt = None,
    fields_option: FieldsOptionOpt = None,
    hex_dump: HexOpt = False,
    time_format: TimeOpt = TimeFormat.r,
    filter_text: FilterOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    tls_keylog: KeylogOpt = None,
    column: ColumnOpt = None,
) -> None:
    """Capture live traffic on the protocols' ports and decode it as `read` does; Ctrl-C stops,
    then prints the stats summary on stderr."""
    from streamdump.analysis.session import CaptureStream
    from streamdump.live.run import Capture, bpf
    from streamdump.views.output import Views, write_frames

    if count < 0 or duration < 0:
        raise fail("--count and --duration take numbers of 0 or more", EXIT_USAGE)
    setup = prepare(protocol, port, decode_as, limit, filter_text, keylogs=tls_keylog)
    shown = display(
        setup,
        fmt,
        detail=detail,
        messages=messages,
        hex_dump=hex_dump,
        fields=field,
        fields_options=fields_option,
        time=time_format,
    )
    columns = message_columns(setup.decoders, messages, column)
    ports = set(setup.dissection.ports) | set(setup.dissection.guess)
    capture = Capture(interface, ports, count, duration, str(write) if write else None)
    # Ctrl-C goes to the capturing process, which ends the stream; what it took is still decoded.
    signal.signal(signal.SIGINT, lambda *_: capture.stop())
    if capture.opened():
        # As tshark says it, once packets are being taken: a script may start its traffic then.
        say(f"Capturing on '{interface}'")
    session = setup.session(statistics=True, on_notice=tell_notice)
    with reader_may_leave():
        frames = session.frames(CaptureStream(capture.stream, f"capture on {interface}"))
        views = Views(setup.decoders, columns)
        write_frames(frames, views, shown, sys.stdout, lambda: session.first_ts, flush=True)
        sys.stdout.flush()
    outcome = capture.outcome()
    if outcome.error is not None and session.stats.packets == 0:
        if outcome.privilege:
            raise fail(
                f"capturing on {interface} needs root or CAP_NET_RAW (libpcap: {outcome.error}); "
                "`streamdump proxy --listen HOST:PORT --upstream HOST:PORT` decodes without either"
            )
        raise fail(outcome.error if outcome.whole else f"cannot capture on {interface}: {outcome.error}")
    tell_notices(session)
    tell_diagnoses(session)
    _summary(session)
    say(
        f"streamdump: {outcome.packets} packets captured on {interface} ({bpf(ports)}); "
        f"{outcome.dropped} dropped by the kernel, {outcome.ifdropped} by the interface"
    )
    if session.error is not None:
        raise fail(session.error)


def _summary(session: "Session") -> None:
    """The stats tables of the protocols that had connections, on stderr: how live and proxy end."""
    from streamdump.views.output import write_statistics

    assert session.statistics is not None
    partials = {name: s.partial() for name, s in session.statistics.items()}
    partials = {name: p for name, p in partials.items() if p.connections}
    write_statistics(partials, session.setup.decoders, sys.stderr, titled=True, origin=session.first_ts)


def _address(text: str, what: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise fail(f"{what} takes HOST:PORT (e.g. 127.0.0.1:5553), got {text!r}", EXIT_USAGE)
    return host.strip("[]"), int(port)


@app.command()
def proxy(
    listen: Annotated[str, typer.Option("--listen", "-l", help="Where clients connect: HOST:PORT.")],
    upstream: Annotated[str, typer.Option("--upstream", "-u", help="The real server: HOST:PORT.")],
    write: Annotated[
        Path | None,
        typer.Option(
            "--write",
            "-w",
            help="Also save what passes as a pcapng, which `read` decodes as the proxy did, with no options.",
        ),
    ] = None,
    detail: DetailOpt = False,
    messages: MessagesOpt = False,
    fmt: FormatOpt = None,
    field: FieldOpt = None,
    fields_option: FieldsOptionOpt = None,
    hex_dump: HexOpt = False,
    time_format: TimeOpt = TimeFormat.r,
    filter_text: FilterOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    tls_keylog: KeylogOpt = None,
    column: ColumnOpt = None,
) -> None:
    """Pass clients' connections through to the real server unchanged and decode every frame on
    the way: no privileges needed. Ctrl-C stops, then prints the stats summary on stderr."""
    import asyncio
    import queue
    import threading

    from streamdump.analysis.advertised import addresses
    from streamdump.analysis.session import Segments
    from streamdump.live.proxy import Proxy, Recorder
    from streamdump.views.output import Views, write_frames
    from streamdump.wire.writer import PacketWriter, WriteFormat

    here, there = _address(listen, "--listen"), _address(upstream, "--upstream")
    setup = prepare(protocol, [there[1]], decode_as, limit, filter_text, keylogs=tls_keylog)
    shown = display(
        setup,
        fmt,
        detail=detail,
        messages=messages,
        hex_dump=hex_dump,
        fields=field,
        fields_options=fields_option,
        time=time_format,
    )
    columns = message_columns(setup.decoders, messages, column)
    try:
        out = write.open("wb") if write is not None else None
    except OSError as exc:
        raise fail(f"{write}: cannot write: {exc.strerror}") from None
    # The file says how the proxy decoded the upstream's port, so a read of it needs no options.
    saved = PacketWriter(out, WriteFormat.pcapng, setup.hints()) if out is not None else None
    segments: queue.Queue[Segment | None] = queue.Queue(maxsize=PROXY_BACKLOG)
    told: set[tuple[str, int]] = set()

    def tell(line: str) -> None:
        say(f"streamdump: warn: {line}")

    def sent_elsewhere(frame: "Frame") -> None:
        for address in addresses(setup.decoders[frame.protocol].protocol, frame):
            if address != here and address not in told:  # the client will connect past the proxy
                told.add(address)
                tell(
                    f"{frame.name} {frame.kind} (packet {frame.number}) tells the client to connect to "
                    f"{address[0]}:{address[1]}, past this proxy ({listen}): the client leaves it there"
                )

    session = setup.session(statistics=True, on_notice=tell_notice, on_frame=sent_elsewhere)

    def taken() -> Iterator["Segment"]:
        while (seg := segments.get()) is not None:
            yield seg

    def decode() -> None:
        with reader_may_leave():
            frames = session.frames(Segments(taken(), f"proxy on {listen}"))
            views = Views(setup.decoders, columns)
            write_frames(frames, views, shown, sys.stdout, lambda: session.first_ts, flush=True)

    async def serve() -> None:
        loop = asyncio.get_running_loop()

        def hand_on(seg: "Segment") -> None:
            segments.put(seg)  # a full backlog holds the proxy up: decoding sets the pace

        service = Proxy(here, there, Recorder(hand_on, saved), tell)
        try:
            await service.start()
        except OSError as exc:
            raise fail(f"cannot listen on {listen}: {exc.strerror}") from None
        say(f"streamdump: proxying {listen} to {upstream}; Ctrl-C stops")
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
        if saved is not None and out is not None:
            saved.close()
            out.close()
    tell_notices(session)
    tell_diagnoses(session)
    _summary(session)
