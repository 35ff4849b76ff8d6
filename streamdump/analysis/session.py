"""One analysis session: a source read with a set of options, the one path every front end takes.

A front end says what to read (a `Source`: a capture file or standard input, a stream a live
capture writes, segments a proxy or a Spark task hands over, or hex bytes) and how (`Options`:
protocols, ports, decode-as, limits, the display filter, two passes, and what statistics to
keep). `Options.prepare()` checks them once into a `Setup` (decoders, the dissection, the
compiled filter); a `Session` then reads: segments become frames in the pipeline, the
conversation tracker links every frame, the statistics count them, and the frames the filter
keeps come out, in capture order. What a read adds up to (the tracker's findings, the
statistics, each connection's end, what the capture lost) is the session's once it finished.

A session prints nothing. Notices about the capture (gaps, bytes passed over) go to the
`on_notice` callback as they happen, so a long read neither hides nor hoards them; a
`follow` callback may wrap each pass over the frames (a progress bar).
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from msgspec import Struct, field

from streamdump.analysis.conversations import Conversations
from streamdump.analysis.fieldnames import FrameFilter
from streamdump.analysis.filter import FilterError
from streamdump.analysis.grouping import Grouping, UnknownName, check_names
from streamdump.analysis.pipeline import Dissection, Notice, Reader, ReadStats, frames_of, loss_summary
from streamdump.analysis.state import Diagnosis
from streamdump.analysis.timeline import Timeline, observe
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.spec.registry import default_registry
from streamdump.wire.capture import STDIN, CaptureError, Tally, read_records, read_segments, read_stream
from streamdump.wire.frame import SEVERITIES, Frame
from streamdump.wire.lifecycle import Life
from streamdump.wire.limits import DEFAULT_LIMITS, Limits
from streamdump.wire.packet import LINKS_READ, Segment, Skip, unknown_links_text
from streamdump.wire.tls.keylog import KeyLog, KeyLogError
from streamdump.wire.writer import PacketWriter, WriteError, WriteFormat

if TYPE_CHECKING:
    from streamdump.analysis.statistics import Partial, Statistics

# What may watch each pass over a source's frames (a progress bar): the frames, the pass's label
# and its tally (how far into the source it has come); it hands the frames on.
Follow = Callable[[Iterable[Frame], str, Tally], Iterable[Frame]]

# A capture file's comment that says how to decode a port (Setup.hints), as a proxy writes it.
HINT_PREFIX = "streamdump: "
_HINT = re.compile(r"streamdump: --(decode-as|port) (\d{1,5})(?:=([a-z0-9_]+))?")


class OptionError(ValueError):
    """Options that do not go together or name nothing known: the user's to mend (a usage error)."""


# ---------------------------------------------------------------------- options


class Options(Struct, frozen=True):
    """How to read: which protocols, on which server ports, within which bounds, which frames shown.

    protocols: every protocol the registry has when empty. ports: extra server ports, for the
    one protocol named, else for whichever protocol's first frame decodes cleanly there.
    decode_as: (port, protocol) pairs, as tshark's -d. by: fields the statistics also count
    messages by (stats --by). keylogs: TLS key log files, for when TLS is decrypted.
    """

    protocols: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    decode_as: tuple[tuple[int, str], ...] = ()
    limits: Limits = DEFAULT_LIMITS
    filter: str | None = None
    two_pass: bool = False
    by: tuple[str, ...] = ()
    keylogs: tuple[Path, ...] = ()
    # Stop after this many packets of the capture (tshark's -c); None: read them all.
    count: int | None = None
    # Expand every frame the filter keeps, so that the notes on its messages count in
    # Session.worst (--fail-on); the views need not show them.
    expand_kept: bool = False

    def prepare(self) -> Setup:
        """The options checked and compiled once: OptionError for what the user must mend,
        SpecError for a spec that does not load."""
        known = default_registry().protocols
        unknown = [name for name in self.protocols if name not in known]
        if unknown:
            raise OptionError(
                f"--protocol {unknown[0]}: unknown protocol (known: {', '.join(sorted(known))})"
            )
        if self.count is not None and self.count < 1:
            raise OptionError(f"--count takes a number of packets from 1, got {self.count}")
        decoders = decoders_of(self.protocols, self.limits)
        bad = [p for p in self.ports if not 0 < p < 65536]
        if bad:
            raise OptionError(f"--port takes TCP ports 1..65535, got {bad[0]}")
        forced: dict[int, str] = {}
        for port, name in self.decode_as:
            if not 0 < port < 65536:
                raise OptionError(f"--decode-as takes PORT=PROTOCOL (e.g. 15552=rabbitmq_stream), got {port}")
            if name not in decoders:
                known = ", ".join(sorted(decoders))
                raise OptionError(f"--decode-as {port}={name}: unknown protocol {name!r} (known: {known})")
            forced[port] = name
        guess: list[int] = []
        own = [name for name, d in decoders.items() if d.protocol.wiring.carried_by is None]
        if len(own) == 1 and self.protocols:
            # One protocol asked for: --port adds its server ports.
            forced = {**dict.fromkeys(self.ports, own[0]), **forced}
        else:
            guess = list(self.ports)
        selection = None
        if self.filter is not None:
            try:
                selection = FrameFilter(decoders.values(), self.filter)
            except FilterError as exc:
                raise OptionError(f"--filter: {exc}") from None
        by = field_names(decoders.values(), self.by, "--by")
        keylog = None
        if self.keylogs:
            keylog = KeyLog()
            for path in self.keylogs:
                try:
                    keylog.load(path)
                except KeyLogError as exc:
                    raise OptionError(str(exc)) from None
        setup = Setup(
            self,
            decoders,
            Dissection(decoders.values(), forced, guess),
            selection,
            by,
            forced,
            tuple(guess),
            keylog,
        )
        # The registry and the compiled layouts live as long as the process: the collector need
        # not walk them again each time decoding's short-lived dicts and lists trigger it.
        gc.freeze()
        return setup


def decoders_of(protocols: Iterable[str], limits: Limits = DEFAULT_LIMITS) -> dict[str, Decoder]:
    """Decoders of the protocols named (every protocol the registry has, when none is); a
    protocol carried inside another's frames brings its carrier."""
    registry = default_registry()
    names = list(protocols or sorted(registry.protocols))
    for name in list(names):
        carried_by = registry.get(name).wiring.carried_by
        if carried_by is not None and carried_by[0] not in names:
            names.append(carried_by[0])
    return {name: Decoder(registry.get(name), limits=limits) for name in dict.fromkeys(names)}


def field_names(decoders: Iterable[Decoder], names: Iterable[str], option: str) -> tuple[str, ...]:
    """Field names given to an option, refused in one line when no protocol of the read has them."""
    try:
        return check_names(decoders, names, option)
    except UnknownName as exc:
        raise OptionError(str(exc)) from None


class Setup(Struct, frozen=True):
    """Options made ready: the protocols' decoders, how a connection's protocol is told, the filter."""

    options: Options
    decoders: dict[str, Decoder]
    dissection: Dissection
    selection: FrameFilter | None = None
    by: tuple[str, ...] = ()
    forced: dict[int, str] = field(default_factory=dict)  # ports the options gave a protocol
    guessed: tuple[int, ...] = ()  # ports whose protocol each connection's first frame tells
    keylog: KeyLog | None = None  # the TLS key logs given (--tls-keylog), read

    def hints(self) -> tuple[str, ...]:
        """How these options decode ports the specs do not name, as a capture file's comments
        say it (a proxy's --write): a read of that file decodes them the same, with no options."""
        return tuple(
            f"{HINT_PREFIX}--decode-as {port}={name}" for port, name in sorted(self.forced.items())
        ) + tuple(f"{HINT_PREFIX}--port {port}" for port in sorted(self.guessed))

    def describe_ports(self) -> str:
        parts = []
        for name, ports in self.dissection.server_ports().items():
            protocol = self.decoders[name].protocol
            tls = protocol.wiring.tls_ports
            shown = [str(p) for p in ports if p not in tls] + [f"{p} (TLS)" for p in ports if p in tls]
            parts.append(f"{protocol.title} on {', '.join(shown)}")
        return "; ".join(parts)

    def session(self, **kwargs: Any) -> Session:
        return Session(self, **kwargs)


# ---------------------------------------------------------------------- sources


class Source:
    """Where the packets come from."""

    name = "input"
    # Whether it can be read twice (two passes read the capture twice).
    rereadable = False
    # Its size in bytes, when known: how far a read has come is told against it.
    size: int | None = None

    def segments(self, tally: Tally) -> Iterator[Segment]:
        raise NotImplementedError


class CaptureFile(Source):
    """A pcap or pcapng file (compressed or not); "-" is standard input."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.rereadable = str(path) != STDIN
        try:
            self.size = self.path.stat().st_size if self.rereadable else None
        except OSError:
            self.size = None  # reading says what is wrong with the file

    def segments(self, tally: Tally) -> Iterator[Segment]:
        return read_segments(self.path, tally)

    def records(self, tally: Tally) -> Iterator[tuple[int, float, int, bytes | memoryview]]:
        return read_records(self.path, tally)


class CaptureStream(Source):
    """A capture arriving on a stream that cannot seek (a live capture's pipe)."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self.stream, self.name = stream, name

    def segments(self, tally: Tally) -> Iterator[Segment]:
        return read_stream(self.stream, self.name, tally)


class Segments(Source):
    """TCP segments already cut from their packets (a proxy's, a Spark task's), numbered."""

    def __init__(self, segments: Iterable[Segment], name: str = "segments") -> None:
        self.given, self.name = segments, name

    def segments(self, tally: Tally) -> Iterator[Segment]:
        return iter(self.given)


class HexBytes(Source):
    """The bytes of PDUs given as hex: decoded by the protocol that reads them best, numbered
    from 1, with no capture around them (no connection, no time, no conversation). pieces: parts
    decoded one after the other (a dump's packets), each by the protocol that reads it best."""

    def __init__(self, data: bytes, pieces: Iterable[bytes] | None = None) -> None:
        self.data = data
        self.pieces = list(pieces) if pieces is not None else [data]
        self.name = "hex"


# ---------------------------------------------------------------------- the session


class _Pass(Struct):
    """What a first pass gives the second: links frames learn from frames after them, by place."""

    later: dict[int, dict[str, Any]] = field(default_factory=dict)


class Session:
    """One read of one source with one Setup: analysed frames out, what they add up to kept.

    statistics: keep `stats`' counters as frames go by (live, proxy and Spark tasks want them;
    `read` does not pay for them). numbering: gives each new connection its number (a Spark
    task's reader numbers them as the whole capture would). on_notice: told each notice about
    the capture as it happens; without one, they wait in take_notices() for the caller.
    on_frame: shown every analysed frame, the ones the filter does not keep too. follow: watches
    each pass over the frames (a progress bar).
    """

    def __init__(
        self,
        setup: Setup,
        *,
        statistics: bool = False,
        timeline: bool = False,
        numbering: Callable[[], int] | None = None,
        on_notice: Callable[[Notice], None] | None = None,
        follow: Follow | None = None,
        on_frame: Callable[[Frame], None] | None = None,
        write: PacketWriter | None = None,
        retire: bool = True,
    ) -> None:
        """write: the packets of the frames the filter keeps go there once the read ends (-w).
        retire: what a connection leaves behind once it ended is only its findings and summary
        (its state, its Life, its counters let go), so memory holds the connections open, not
        every one the read met; without, `lives` and the tracker keep every connection (follow)."""
        self.setup = setup
        self.write = write
        self.kept_packets: set[int] = set()  # with write: the packets of the frames kept
        self.kept_connections: set[int] = set()  # and their connections, whose opening and end go too
        self.write_error: str | None = None
        self.worst: str | None = None  # the highest severity of what the read found
        self.numbering = numbering
        self.on_notice = on_notice
        self.follow = follow
        self.on_frame = on_frame
        self.stats = ReadStats()
        if retire:
            self.stats.ended = []
        self.tracker = Conversations(d.protocol for d in setup.decoders.values())
        self.statistics: dict[str, Statistics] | None = None
        if statistics or setup.by:
            from streamdump.analysis.statistics import Statistics  # a read that counts nothing needs none

            self.statistics = {}
            for name, decoder in setup.decoders.items():
                counted = Statistics(decoder.protocol, self.tracker.trackers[name])
                counted.filtered = setup.selection is not None
                if setup.by:
                    assert counted.rules is not None
                    counted.grouping = Grouping(decoder, counted.rules, setup.by)
                self.statistics[name] = counted
        # The series a report draws over time, of the frames the filter keeps.
        self.timeline = Timeline() if timeline else None
        self.message_rules = {
            name: dissector_of(decoder.protocol).messages(decoder.protocol)
            for name, decoder in setup.decoders.items()
        }
        self.reader = Reader(setup.dissection, None, self.stats, numbering, keylog=setup.keylog)
        self.error: str | None = None  # why the capture could not be read to its end
        self.hex_notes: list[str] = []  # what decoding hex assumed (a frame without its size)
        self.finished = False

    # ------------------------------------------------------------------ reading

    def frames(self, source: Source) -> Iterator[Frame]:
        """The frames the filter keeps, analysed, in capture order; the session is finished after
        the last. A capture that turns out damaged ends them early, its error in `error`."""
        if isinstance(source, HexBytes):
            yield from self._hex(source)
            return
        first = self._first_pass(source) if self.setup.options.two_pass else None
        self.stats.stop_after = self.setup.options.count
        spool = None
        if self.write is not None and not isinstance(source, CaptureFile | CaptureStream):
            raise OptionError(f"{source.name}: only a capture's packets can be written")
        if self.write is not None and not source.rereadable:
            spool = _Spool()  # a pipe is read once: its packets are kept aside to be copied from
            self.stats.on_record = spool.keep
        segments = source.segments(self.stats)
        # The capture file's decoding hints (a proxy's) are taken in before its first segment.
        hinted = frames_of(self.reader, segments, lambda: self._adopt(self.stats.comments))
        frames = self._watched(hinted, "reading", self.stats)
        try:
            for frame, kept in self._analysed(frames, first):
                if kept:
                    yield frame
        except CaptureError as exc:
            self.error = str(exc)
        self._tell()
        self.finish()
        if self.write is not None:
            self._write_packets(source, spool)

    def feed(self, seg: Segment) -> Iterator[Frame]:
        """Every frame a segment completes, analysed (filter or not), for a caller that holds the
        segments itself: a Spark task feeds one connection's segments after another's."""
        self.stats.packets = seg.number  # the packet a connection it opens is opened by
        for frame, _ in self._analysed(self.reader.feed(seg)):
            yield frame

    def end(self, packets: int | None = None, ts: float | None = None) -> Iterator[Frame]:
        """End every connection still open, as the capture's end does: at its last packet and
        time when given (a task that saw only some of a capture's packets knows them)."""
        if packets is not None:
            self.stats.packets = packets
        if ts is not None:
            self.reader.ts = ts
        for frame, _ in self._analysed(self.reader.finish()):
            yield frame
        if self.reader.ended_pending:
            self.reader.hand_over_ended()

    def finish(self, whole: bool = True) -> None:
        """What only the end shows: unanswered requests, silences, how connections ended. whole:
        these are all of the capture's connections (a Spark task's are not)."""
        if self.finished:
            return
        self.finished = True
        if self.stats.ended:
            self._retire()
        self.tracker.finish(self.stats.lossy, self.stats.lives, whole=whole)

    def _analysed(self, frames: Iterable[Frame], first: _Pass | None = None) -> Iterator[tuple[Frame, bool]]:
        """Every frame, linked by the tracker and counted, with whether the filter keeps it; the
        notices its decoding raised are told before it."""
        tracker, statistics, selection, stats = (
            self.tracker,
            self.statistics,
            self.setup.selection,
            self.stats,
        )
        timeline, rules = self.timeline, self.message_rules
        later = first.later if first is not None else None
        keeping = self.kept_packets if self.write is not None else None
        expand = self.setup.options.expand_kept
        decoders = self.setup.decoders
        for index, frame in enumerate(frames):
            if stats.notices and self.on_notice is not None:
                self._tell()
            if stats.ended:
                self._retire()
            tracker.feed(frame)
            if later and index in later:
                frame.links = (frame.links or {}) | later[index]
            kept = selection is None or selection(frame)
            if kept:
                if keeping is not None:
                    keeping.update(frame.packets)
                    self.kept_connections.add(frame.conn)
                if expand:
                    decoders[frame.protocol].expand(frame)
                if frame.expert:
                    self._found(frame.worst_severity)
            moved = statistics[frame.protocol].add(frame, kept) if statistics is not None else None
            if timeline is not None and kept:
                protocol = rules[frame.protocol]
                if statistics is None:
                    moved = protocol.volume(frame)
                observe(timeline, frame, protocol, moved)
            if self.on_frame is not None:
                self.on_frame(frame)
            yield frame, kept

    def _retire(self) -> None:
        """Let go of the connections that ended, their frames all analysed: the tracker finds
        what their end shows, the statistics summarise them, -w keeps their SYN, FINs and reset."""
        stats = self.stats
        assert stats.ended is not None
        ended, stats.ended = stats.ended, []
        for life in ended:
            number = life.conn
            lossy = number in stats.lossy
            if lossy:
                stats.lossy.discard(number)
            stats.lives.pop(number, None)
            conn = self.tracker.retire(life, lossy)
            if self.statistics is not None:
                counted = self.statistics.get(life.protocol)
                if counted is not None:
                    counted.retire(life, conn)
            if self.write is not None and number in self.kept_connections:
                marks = [life.syn, life.syn_ack, life.reset, *life.fins.values()]
                self.kept_packets.update(mark.number for mark in marks if mark is not None)

    def _found(self, severity: str | None) -> None:
        if severity is not None and (
            self.worst is None or SEVERITIES.index(severity) > SEVERITIES.index(self.worst)
        ):
            self.worst = severity

    def _adopt(self, comments: list[str]) -> None:
        """Ports a capture's comments name, for protocols of this read on ports it left unnamed."""
        forced: dict[int, str] = {}
        guess: list[int] = []
        for comment in comments:
            found = _HINT.fullmatch(comment.strip())
            if found is None or not 0 < int(found.group(2)) < 65536:
                continue
            port = int(found.group(2))
            if port in self.setup.forced or port in self.setup.guessed:
                continue  # the user's own options win
            if found.group(1) == "decode-as" and found.group(3) in self.reader.dissection.runtimes:
                forced[port] = found.group(3)
            elif found.group(1) == "port":
                guess.append(port)
        if forced or guess:
            self.reader.adopt(self.reader.dissection.extended(forced, guess))

    def _write_packets(self, source: Source, spool: _Spool | None) -> None:
        """Copy the packets of the frames kept to the writer, from the file or the spool."""
        assert self.write is not None
        wanted = set(self.kept_packets)
        # The SYNs, FINs and reset of the connections kept: the file reads back as they were read.
        for number in self.kept_connections:
            life = self.stats.lives.get(number)
            if life is not None:
                marks = [life.syn, life.syn_ack, life.reset, *life.fins.values()]
                wanted.update(mark.number for mark in marks if mark is not None)
        last = max(wanted, default=0)
        try:
            if spool is not None:
                records = spool.records()
            else:
                assert isinstance(source, CaptureFile)
                records = source.records(Tally())
            for number, ts, linktype, data in records:
                if number > last:
                    break
                if number in wanted:
                    self.write.write(ts, linktype, data)
            self.write.close()
        except (CaptureError, WriteError, OSError) as exc:
            self.write_error = f"cannot write the packets: {exc}"
        finally:
            if spool is not None:
                spool.close()

    def _watched(self, frames: Iterable[Frame], label: str, tally: Tally) -> Iterable[Frame]:
        return self.follow(frames, label, tally) if self.follow is not None else frames

    def _first_pass(self, source: Source) -> _Pass:
        """Read the capture once for what frames learn from frames after them (a request its
        response, a publish its confirms), by their place in the read: reading is deterministic."""
        if not source.rereadable:
            raise OptionError(f"two passes read the capture twice; {source.name} can be read only once")
        tracker = Conversations(d.protocol for d in self.setup.decoders.values())
        tracker.first_pass()
        stats = ReadStats()
        reader = Reader(self.setup.dissection, None, stats, self.numbering, keylog=self.setup.keylog)
        kept: list[tuple[int, Frame]] = []
        try:
            frames = frames_of(reader, source.segments(stats))
            for index, frame in enumerate(self._watched(frames, "pass 1 of 2", stats)):
                tracker.feed(frame)
                if tracker.awaits_later(frame):
                    kept.append((index, frame))
                    frame.data, frame.fields = b"", {}  # only its links are wanted: keep memory flat
        except CaptureError:
            pass  # the second pass meets the same damage and reports it
        found = _Pass()
        for index, frame in kept:
            links = tracker.later(frame)
            if links:
                found.later[index] = links
        return found

    def _hex(self, source: HexBytes) -> Iterator[Frame]:
        from streamdump.analysis.hexdump import best  # hex given, not a capture

        number = 0
        selection = self.setup.selection
        for piece in source.pieces:
            frames, notes = best(piece, self.setup.decoders)
            self.hex_notes += notes
            for frame in frames:
                number += 1
                frame.number = number
                if selection is not None and not selection(frame):
                    continue
                if self.setup.options.expand_kept:
                    self.setup.decoders[frame.protocol].expand(frame)
                if frame.expert:
                    self._found(frame.worst_severity)
                yield frame
        self.finished = True

    @property
    def hex_tried(self) -> str:
        """Which protocols decoding hex tried, for the line saying none reads it."""
        return "tried " + ", ".join(d.protocol.title for d in self.setup.decoders.values())

    # ------------------------------------------------------------------ what it found

    def _tell(self) -> None:
        if self.on_notice is not None:
            for notice in self.take_notices():
                self.on_notice(notice)

    def take_notices(self) -> list[Notice]:
        """The notices about the capture not yet told (all of them, without an on_notice)."""
        notices, self.stats.notices = self.stats.notices, []
        # Packets of link types nothing reads, when they are all there is: the read's error says it.
        notices = [n for n in notices if not (n.kind == "link type" and self.unreadable())]
        for notice in notices:
            self._found(notice.severity)
        return notices

    @property
    def first_ts(self) -> float | None:
        """The time of the capture's first packet, which every view counts from (Wireshark's
        time zero); the first frame's when no packet came through a capture file."""
        return self.stats.first_ts if self.stats.first_ts is not None else self.tracker.first_ts

    @property
    def diagnoses(self) -> list[Diagnosis]:
        return self.tracker.diagnoses

    def reached(self, level: str) -> bool:
        """Whether what the read found (the kept frames' notes, the notices told, the tracker's
        findings) reaches this severity: note, warn or error."""
        for d in self.diagnoses:
            self._found(d.severity)
        return self.worst is not None and SEVERITIES.index(self.worst) >= SEVERITIES.index(level)

    @property
    def lives(self) -> dict[int, Life]:
        """How each connection opened and ended, by its number."""
        return self.stats.lives

    def partials(self) -> dict[str, Partial]:
        """The statistics of each protocol, as plain data that merges with other reads'."""
        assert self.statistics is not None, "a session made without statistics"
        return {name: s.partial() for name, s in self.statistics.items()}

    def loss(self) -> str:
        """What the read lost, in one line (empty when nothing)."""
        return loss_summary(self.stats)

    def unreadable(self) -> bool:
        """Every packet is of a link type streamdump has no parser for: an error, not a note."""
        stats = self.stats
        return stats.packets > 0 and stats.skipped.get(Skip.UNKNOWN_LINK, 0) == stats.packets

    def failure(self) -> str | None:
        """Why the read failed, in one line: a capture that could not be read to its end, or one
        whose packets are all of link types nothing reads."""
        if self.error is not None:
            return self.error
        if self.stats.frames == 0 and self.unreadable():
            links = unknown_links_text(self.stats.unknown_links)
            return f"{links}: not a link type streamdump reads ({LINKS_READ})"
        return None

    def nothing_found(self) -> str | None:
        """What to say when the capture held no frame of the protocols read, with where it looked."""
        stats = self.stats
        if stats.frames:
            return None
        what = "no" if stats.segments_matched == 0 else "no complete"
        undecrypted = len(self.reader.undecrypted)
        if undecrypted:
            plural = "s" * (undecrypted != 1)
            hint = f"{undecrypted} TLS connection{plural} not decrypted: give the key log with --tls-keylog"
        else:
            hint = "add ports with --port or --decode-as PORT=PROTOCOL"
        return f"{what} frames of {self.setup.describe_ports()} in {stats.packets} packets; {hint}"

    def server_name(self, conn: int) -> str:
        """What the server of a connection is called (its port's role, or its protocol's word)."""
        state = self.tracker.connections.get(conn)
        if state is None:
            return "server"
        return self.tracker.trackers[state.protocol].server(state)


class _Spool:
    """The packets of a capture read once (a pipe), kept in a temporary pcapng to be copied from."""

    def __init__(self) -> None:
        import tempfile  # a pipe read twice, not a file

        self.file = tempfile.TemporaryFile()  # noqa: SIM115  (closed by close(), after the copy)
        self.writer = PacketWriter(self.file, WriteFormat.pcapng)  # type: ignore[arg-type]

    def keep(self, number: int, ts: float, linktype: int, data: bytes | memoryview) -> None:
        self.writer.write(ts, linktype, data)

    def records(self) -> Iterator[tuple[int, float, int, bytes | memoryview]]:
        self.writer.close()
        self.file.seek(0)
        return read_records("spool", Tally(), self.file)  # type: ignore[arg-type]

    def close(self) -> None:
        self.file.close()
