"""From TCP segments to decoded frames: connections, reassembly, framing, decoding, notices.

A Reader owns the per-connection state and nothing else; it is fed segments in
capture order and yields frames, so files, the live sniffer and Spark tasks share it.
Which protocol a connection speaks is a Dissection's to say: by the server port the
specs (or the user) name, by a magic at the start of its bytes on any port, or, on ports
the user listed without a protocol, by which protocol's first frame decodes cleanly.
Everything the user must hear about that is not one frame (gaps, conflicting
retransmissions, bytes passed over) becomes a Notice in `stats.notices`, in the
order it happened; a caller may drain that list as it goes to keep memory flat.
"""

from __future__ import annotations

import copy
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from streamdump.analysis.decrypting import SPANS_KEPT, Decrypting, packets_of
from streamdump.analysis.recovering import Recovering
from streamdump.analysis.tail import HookTail, TailRule, tail_rule
from streamdump.spec.decoder import Decoder, DecodeState
from streamdump.spec.dissector import dissector_of
from streamdump.spec.framing_rules import LengthRule, WholeRule
from streamdump.spec.registry import SpecError
from streamdump.wire.capture import CaptureError, Segment, Skip, Tally, read_segments
from streamdump.wire.frame import Endpoint, Expert, Frame
from streamdump.wire.framing import Framer, FramingRule, Piece
from streamdump.wire.lifecycle import CLOSED, RESET, REUSED, Life, Mark
from streamdump.wire.limits import DEFAULT_LIMITS, hint
from streamdump.wire.packet import LINKS_READ, unknown_links_text
from streamdump.wire.reassembly import (
    BUFFERED_FULL,
    REORDER_FULL,
    SEQ_MOD,
    TCP_ACK,
    TCP_FIN,
    TCP_RST,
    TCP_SYN,
    Conflict,
    Gap,
    Stream,
)
from streamdump.wire.tls.keylog import KeyLog
from streamdump.wire.tls.records import is_client_hello
from streamdump.wire.wildcards import matches_any

if TYPE_CHECKING:  # the TLS layer (and cryptography) loads with the first ClientHello
    from streamdump.wire.tls.connection import TlsConnection

# Connections that ended are remembered (bounded) so stray late packets do not open new ones.
CLOSED_MEMORY = 4096
# How often, in bytes fed, the bytes held across all connections are counted against the
# buffered limit: counting walks every connection, so not on every segment.
HELD_CHECK_BYTES = 8 << 20
# Connections on no known port, watched for a protocol's magic or first frame: how many at
# once, and how many of their segments with bytes each gets before it is given up.
WATCHED = 4096
WATCHED_SEGMENTS = 4
# What ended a connection, as the framer words it for a frame it cut, and as its Life records it.
ENDINGS = {"the connection closed": CLOSED, "the connection was reset": RESET, "the port was reused": REUSED}


class Notice(Struct, frozen=True):
    """Something about the capture (not a single frame) the user should know."""

    severity: str
    message: str
    number: int  # packet number it relates to
    # gap, skipped, conflict, late, midstream, fragments, truncated, link type, ended, buffered
    kind: str = "note"
    src: Endpoint | None = None
    dst: Endpoint | None = None
    start: int | None = None  # TCP sequence numbers of the bytes concerned
    end: int | None = None
    length: int | None = None


class ReadStats(Tally):
    segments_matched: int = 0
    frames: int = 0
    incomplete: int = 0
    connections: int = 0
    gaps: int = 0
    gap_bytes: int = 0
    skipped_bytes: int = 0
    notices: list[Notice] = field(default_factory=list)
    lossy: set[int] = field(default_factory=set)  # connections that lost bytes (gaps, passed over)
    # Every connection's opening and ending (SYN, FINs, reset), by its number, once it ended
    # or the capture did.
    lives: dict[int, Life] = field(default_factory=dict)
    # When a list: the lives of connections that ended, each added once its last frame was
    # handed on, for a session to retire them (analysis/session.py) before the read ends.
    ended: list[Life] | None = None


class Side:
    """One direction of a connection: its byte stream and its framer."""

    __slots__ = (
        "beside",
        "cipher",
        "conn",
        "dst",
        "floors",
        "framer",
        "mixed",
        "passed_packets",
        "spans",
        "src",
        "stream",
        "waiting",
    )
    src: Endpoint
    dst: Endpoint
    stream: Stream
    framer: Framer
    floors: dict[tuple, int]  # layout -> last increasing value
    # Layouts with a hooked tail: the last frame's session and the values beside the field,
    # and the layouts whose frames in this direction belonged to more than one session.
    beside: dict[tuple, tuple[Any, dict[str, Any]]]
    mixed: set[tuple]
    # Bytes passed over with runs that may hold elements, waiting for the frame after them:
    # (the piece, its packet number, its time).
    waiting: tuple[Piece, int, float] | None
    conn: int  # the connection's number
    # (start, end, packet) of the segments whose bytes the framer has not cut into pieces yet.
    spans: deque[tuple[int, int, int]]
    passed_packets: tuple[int, ...]  # the packets of the bytes waiting in `waiting`
    # TLS: the spans of the encrypted stream (spans then holds the decrypted stream's).
    cipher: deque[tuple[int, int, int]] | None

    # Written out (see Stream): two sides are made per connection.
    def __init__(self, src: Endpoint, dst: Endpoint, stream: Stream, framer: Framer, conn: int = 0) -> None:
        self.src = src
        self.dst = dst
        self.stream = stream
        self.framer = framer
        self.floors = {}
        self.beside = {}
        self.mixed = set()
        self.waiting = None
        self.conn = conn
        self.spans = deque((), SPANS_KEPT)  # noqa: RUF037
        self.passed_packets = ()
        self.cipher = None

    def packets(self, start: int, end: int) -> tuple[int, ...]:
        """The packets that carried bytes in [start, end); those before end are forgotten (the
        framer hands on pieces in stream order)."""
        return packets_of(self.spans, start, end)

    def feed(self, pos: int, data: bytes | memoryview) -> list[Piece]:
        """Plain bytes to the framer; the first decide whether it starts in step with the frames
        (the SYN was seen) or hunts for a frame boundary (the capture began mid-stream)."""
        if self.framer.pos is None:
            if self.stream.syn_seen:
                self.framer.synced = True
            else:
                self.framer.start_hunting("at the start of the capture")
        return self.framer.feed(pos, data)

    @property
    def where(self) -> str:
        return f"{self.src} -> {self.dst}"


class Connection:
    __slots__ = (
        "client",
        "client_spoke",
        "finished",
        "life",
        "number",
        "parked",
        "runtime",
        "server",
        "state",
        "tls",
        "to_client",
        "to_server",
    )
    client: Endpoint
    server: Endpoint
    to_server: Side
    to_client: Side
    runtime: Runtime
    life: Life
    number: int  # 1, 2, ... in the order connections first appear in the capture
    finished: bool
    state: DecodeState | None  # what decoding remembers between frames (requests' commands)
    tls: TlsConnection | None  # the TLS layer, once the client's first bytes were a ClientHello
    client_spoke: bool  # the client's first bytes were seen (and checked for a ClientHello)
    # A TLS connection on no known port: decrypted pieces (from client, piece, packets) held until
    # one side's bytes show the protocol; None once it is known.
    parked: list[tuple[bool, Any, tuple[int, ...]]] | None

    # Written out (see Stream): one is made per connection.
    def __init__(
        self,
        client: Endpoint,
        server: Endpoint,
        to_server: Side,
        to_client: Side,
        runtime: Runtime,
        life: Life,
        number: int = 0,
        state: DecodeState | None = None,
    ) -> None:
        self.client = client
        self.server = server
        self.to_server = to_server
        self.to_client = to_client
        self.runtime = runtime
        self.life = life
        self.number = number
        self.finished = False
        self.state = state
        self.tls = None
        self.client_spoke = False
        self.parked = None


class Watch(Struct):
    """A connection on no known port, watched for the protocol its first bytes show."""

    segments: list[Segment] = field(default_factory=list)
    tries: int = 0  # segments with bytes seen
    client: tuple[str, int] | None = None  # the SYN's sender, when the capture has it


def framing_rule(decoder: Decoder) -> FramingRule:
    """The protocol package's framing rule, or the one the spec's length field gives."""
    protocol = decoder.protocol
    if protocol.wiring.carried_by is not None:
        return WholeRule(decoder)
    build = dissector_of(protocol).framing
    if build is None and protocol.wiring.length is None:
        raise SpecError(f"{protocol.source}: framing is 'rule: package', but its package has no framing rule")
    return build(decoder) if build is not None else LengthRule(decoder)


class Runtime:
    """One protocol as a read uses it: its decoder, framing rule and the layouts it recovers."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.name = decoder.protocol.name
        self.rule = framing_rule(decoder)
        self.stateful = decoder.by_request  # responses learn their command from their requests
        # Layouts whose last array can be recovered after a gap, by (key, response, version).
        self.tail_rules: dict[tuple, TailRule | HookTail] = {
            ident: rule
            for ident, (_, ops) in decoder.compiled.items()
            if (rule := tail_rule(ops)) is not None
        }
        # The field naming each command's session (a subscription id), for hooked tails.
        self.sessions: dict[str, str] = {
            command: session.id
            for session in decoder.protocol.conversation.sessions.values()
            for command in session.used_by
        }


class Dissection:
    """Which protocols a read decodes, and how it tells which one a connection speaks.

    ports: server port -> protocol name (the specs' ports, then decode-as, which wins);
    guess: ports to decode with whichever protocol's first frame decodes cleanly.
    """

    def __init__(
        self,
        decoders: Iterable[Decoder],
        ports: Mapping[int, str] | None = None,
        guess: Iterable[int] = (),
    ) -> None:
        decoders = list(decoders)
        self.runtimes = {
            d.protocol.name: Runtime(d) for d in decoders if d.protocol.wiring.carried_by is None
        }
        # Protocols inside other protocols' frames: carrier -> [(its field, the carried decoder)].
        self.carried: dict[str, list[tuple[str, Decoder]]] = {}
        for d in decoders:
            if d.protocol.wiring.carried_by is not None:
                carrier, field_name = d.protocol.wiring.carried_by
                self.carried.setdefault(carrier, []).append((field_name, d))
        self.ports: dict[int, Runtime] = {}
        for runtime in self.runtimes.values():
            wiring = runtime.decoder.protocol.wiring
            for port in (*wiring.ports, *wiring.tls_ports):
                self.ports.setdefault(port, runtime)
        for port, name in (ports or {}).items():
            self.ports[port] = self.runtimes[name]
        self.guess = frozenset(guess) - self.ports.keys()
        self.magic = [r for r in self.runtimes.values() if r.decoder.protocol.wiring.magic is not None]

    @classmethod
    def single(cls, decoder: Decoder, ports: Iterable[int]) -> Dissection:
        """One protocol on the given server ports (and no others)."""
        dissection = cls([decoder], {})
        runtime = dissection.runtimes[decoder.protocol.name]
        dissection.ports = dict.fromkeys(ports, runtime)
        dissection.magic = []
        return dissection

    def extended(self, ports: Mapping[int, str], guess: Iterable[int]) -> Dissection:
        """A copy that also decodes these ports: as these protocols, or by each connection's first
        frame (ports it already names keep their protocol)."""
        other = copy.copy(self)
        other.ports = dict(self.ports)
        for port, name in ports.items():
            other.ports.setdefault(port, self.runtimes[name])
        other.guess = (self.guess | frozenset(guess)) - other.ports.keys()
        return other

    def server_ports(self) -> dict[str, list[int]]:
        """Ports each protocol is decoded on, for messages to the user."""
        out: dict[str, list[int]] = {}
        for port, runtime in sorted(self.ports.items()):
            out.setdefault(runtime.name, []).append(port)
        return out

    def recognise(self, payload: bytes, port_guess: bool) -> Runtime | None:
        """The protocol whose magic (anywhere) or first frame (on a guessed port) payload shows."""
        for runtime in self.magic:
            wiring = runtime.decoder.protocol.wiring
            magic = wiring.magic or b""
            if payload[wiring.magic_offset : wiring.magic_offset + len(magic)] == magic:
                return runtime
        if not port_guess:
            return None
        for runtime in self.runtimes.values():
            rule = runtime.rule
            total = rule.total(payload, 0)
            if total is None or total <= 0 or not rule.plausible(payload[: rule.header_len]):
                continue
            if total <= len(payload) and not rule.clean(payload[:total]):
                continue
            if total > len(payload) and not rule.clean_prefix(payload):
                continue
            return runtime
        return None


def as_dissection(decoder: Decoder | Dissection, ports: Iterable[int] | None = None) -> Dissection:
    if isinstance(decoder, Dissection):
        return decoder
    return Dissection.single(decoder, ports if ports is not None else decoder.protocol.wiring.ports)


class Reader(Decrypting, Recovering):
    """Per-capture state: turns segments into frames of the protocols a Dissection names."""

    def __init__(
        self,
        decoder: Decoder | Dissection,
        ports: Iterable[int] | None = None,
        stats: ReadStats | None = None,
        numbering: Callable[[], int] | None = None,
        keylog: KeyLog | None = None,
    ) -> None:
        """numbering: gives each new connection its number (default 1, 2, ...); a reader of
        some connections of a capture numbers them by the packet that opened them instead.
        keylog: the TLS secrets the user gave (a capture's secrets blocks join them)."""
        self.dissection = as_dissection(decoder, ports)
        self._init_tls(keylog)
        self.numbering = numbering
        self.ports = self.dissection.ports
        self.stats = stats if stats is not None else ReadStats()
        self.connections: dict[tuple[str, int, str, int], Connection] = {}
        self.closed: OrderedDict[tuple[str, int, str, int], None] = OrderedDict()
        # Connections on other ports: recognised ones (client first), the ones still watched,
        # and those given up on (bounded, like the closed ones).
        self.assigned: dict[tuple[str, int, str, int], Runtime] = {}
        self.watched: OrderedDict[tuple[str, int, str, int], Watch] = OrderedDict()
        self.ignored: OrderedDict[tuple[str, int, str, int], None] = OrderedDict()
        # Connections whose handshake put the server on a port no protocol is decoded on: their
        # other segments are not placed by the client's port (bounded, like the closed ones).
        self.foreign: OrderedDict[tuple[str, int, str, int], None] = OrderedDict()
        self.watching = bool(self.dissection.magic or self.dissection.guess)
        self.ts = 0.0  # time of the latest packet, for frames handed on at the end
        # The buffered limit (every decoder has the same Limits), and bytes fed since it was checked.
        runtimes = list(self.dissection.runtimes.values())
        self.held_limit = runtimes[0].decoder.limits.buffered if runtimes else DEFAULT_LIMITS.buffered
        self.fed = 0
        # Connections that ended in the last call, whose frames the caller has not taken yet.
        self.ended_pending: list[Life] = []

    def adopt(self, dissection: Dissection) -> None:
        """Decode with this dissection from now on (one that names more ports)."""
        self.dissection = dissection
        self.ports = dissection.ports
        self.watching = bool(dissection.magic or dissection.guess)

    # ------------------------------------------------------------------ input

    def feed(self, seg: Segment) -> list[Frame]:
        """The frames this segment completes, in order (most segments complete none or one)."""
        if self.ended_pending:
            self.hand_over_ended()
        out: list[Frame] = []
        self._feed(seg, out)
        return out

    def hand_over_ended(self) -> None:
        """The connections that ended, to stats.ended, once the caller has taken the frames their
        ending handed on (the next feed, or the end of a read): a session then retires them."""
        assert self.stats.ended is not None
        self.stats.ended.extend(self.ended_pending)
        self.ended_pending.clear()

    def _feed(self, seg: Segment, out: list[Frame]) -> None:
        # Frames are handed back in a list, not yielded: a generator made per segment, and one
        # per step below, cost more than the work itself on a capture of small frames.
        self.ts = seg.ts
        if len(self.stats.secrets) != self.secrets_read or self.keylog.junk != self.junk_told:
            self._secrets(seg.number)
        syn = seg.flags & TCP_SYN
        # A connection already open is found in either direction before any port is looked at:
        # a client's port may be another protocol's server port.
        key = (seg.src, seg.sport, seg.dst, seg.dport)
        conn = self.connections.get(key)
        if conn is not None:
            runtime, from_server = conn.runtime, False
        elif (conn := self.connections.get(back := (seg.dst, seg.dport, seg.src, seg.sport))) is not None:
            key, runtime, from_server = back, conn.runtime, True
        else:
            foreign = self.foreign and min(key, back) in self.foreign
            placed = None if foreign else by_port(self.ports, self.foreign, seg, syn)
            if placed is None:
                # On no known port: a protocol's magic or first frame, or (with keys) a ClientHello.
                looking = self.watching or bool(self.keylog)
                if looking:
                    placed = self._placed(seg)
                if placed is None:
                    if looking:
                        self._watch(seg, out)
                    return
            key, from_server, runtime = placed
        self.stats.segments_matched += 1
        if conn is not None and syn and not from_server and self._reused(conn, seg.seq):
            # A new client SYN on a known 4-tuple is port reuse: a new connection.
            self._end(key, conn, seg.number, "the port was reused", out)
            conn = None
        if conn is None:
            if not syn and (key in self.closed or (key[2], key[3], key[0], key[1]) in self.closed):
                return  # a straggler of a connection that ended (its ports may name it the other way)
            if not syn and not seg.payload and seg.wire_len == 0:
                return  # pure ACKs of a connection we never saw carry nothing to decode
            self.closed.pop(key, None)
            conn = self._open(key, runtime, Mark(seg.number, seg.ts, not from_server))
        flags = seg.flags
        if flags & (TCP_SYN | TCP_FIN | TCP_RST):
            conn.life.saw(flags, not from_server, seg.number, seg.ts)
        else:  # what Life.saw does for a segment without those flags
            conn.life.last_ts = seg.ts
        side, other = (conn.to_client, conn.to_server) if from_server else (conn.to_server, conn.to_client)
        # An acknowledgement of exactly the bytes handed on (most are) declares nothing missing:
        # acked is not called for it (it would find nothing, at a call a packet).
        if flags & TCP_ACK and (acked := other.stream.next) is not None and (seg.ack - acked) % SEQ_MOD:
            events = other.stream.acked(seg.ack, seg.number)
            if events:
                self._events(conn, other, events, seg, 0, out)
        stream = side.stream
        payload = seg.payload
        # A bare ACK of a stream under way gives its own stream nothing (accept would hand on no
        # byte and change nothing): only its acknowledgement counted, above.
        if payload or flags & (TCP_SYN | TCP_FIN | TCP_RST) or stream.next is None or seg.wire_len:
            was_new = stream.next is None
            events = stream.accept(seg.seq, flags, payload, seg.wire_len, seg.number)
            if payload and stream.next is not None:
                start = stream.position((seg.seq + 1) % SEQ_MOD if syn else seg.seq)
                spans = side.spans if side.cipher is None else side.cipher
                spans.append((start, start + len(payload), seg.number))
            if was_new and not stream.syn_seen and stream.next is not None:
                self._notice(
                    "note",
                    seg.number,
                    f"{side.where}: capture starts mid-stream at seq "
                    f"{seg.seq}; framing starts at the first frame boundary found",
                    "midstream",
                    side,
                    start=seg.seq,
                )
            if events:
                self._events(conn, side, events, seg, 0, out)
        if flags & TCP_RST:
            self._end(key, conn, seg.number, "the connection was reset", out)
        elif conn.to_server.stream.closed and conn.to_client.stream.closed:
            self._end(key, conn, seg.number, "the connection closed", out)
        if payload:
            self.fed += len(payload)
            if self.fed >= HELD_CHECK_BYTES:
                self.fed = 0
                self._bound(seg.number, out)

    def _bound(self, number: int, out: list[Frame]) -> None:
        """Keep the bytes held across connections under the buffered limit: the directions
        holding most hand on what they hold (gaps declared, frames handed on incomplete)."""
        held = [
            (side.stream.pending_bytes + side.framer.held(), side, conn)
            for conn in self.connections.values()
            for side in (conn.to_server, conn.to_client)
        ]
        total = sum(h for h, _, _ in held)
        if total <= self.held_limit:
            return
        limit = hint("buffered", self.held_limit)
        for amount, side, conn in sorted(held, key=lambda h: h[0], reverse=True):
            if total <= self.held_limit or not amount:
                break
            self._notice(
                "warn",
                number,
                f"{side.where}: {amount} bytes held let go: {total} bytes held across "
                f"{len(self.connections)} connections is over {limit}",
                "buffered",
                side,
            )
            events = side.stream.release(number, BUFFERED_FULL)
            if events:
                self._events(conn, side, events, None, number, out)
            self._pieces(side, side.framer.release(BUFFERED_FULL), None, number, conn, out)
            total -= amount

    def finish(self) -> list[Frame]:
        """Flush every connection still open when the capture ends."""
        out: list[Frame] = []
        for key, conn in list(self.connections.items()):
            self._end(key, conn, self.stats.packets, "the capture ended", out)
        return out

    # ------------------------------------------------------------------ other ports

    def _placed(self, seg: Segment) -> tuple[tuple[str, int, str, int], bool, Runtime] | None:
        """A segment of a connection recognised on another port: its key, direction and protocol."""
        forward = (seg.src, seg.sport, seg.dst, seg.dport)
        runtime = self.assigned.get(forward)
        if runtime is not None:
            return forward, False, runtime
        backward = (seg.dst, seg.dport, seg.src, seg.sport)
        runtime = self.assigned.get(backward)
        if runtime is not None:
            return backward, True, runtime
        return None

    def _watch(self, seg: Segment, out: list[Frame]) -> None:
        """Look at the first bytes of a connection on no known port for a protocol they show."""
        forward = (seg.src, seg.sport, seg.dst, seg.dport)
        ident = min(forward, (seg.dst, seg.dport, seg.src, seg.sport))
        if ident in self.ignored:
            return
        if self.keylog and seg.payload and is_client_hello(seg.payload):
            self._watched_tls(seg, ident, out)
            return
        guessed = seg.dport in self.dissection.guess or seg.sport in self.dissection.guess
        if not guessed and not self.dissection.magic and not self.keylog:
            return
        watch = self.watched.get(ident)
        if watch is None:
            watch = self.watched[ident] = Watch()
            if len(self.watched) > WATCHED:
                self._ignore(self.watched.popitem(last=False)[0])
        if seg.flags & TCP_SYN and not seg.flags & TCP_ACK:
            watch.client = (seg.src, seg.sport)
        watch.segments.append(seg)
        if not seg.payload:
            if len(watch.segments) > 4 * WATCHED_SEGMENTS:
                self._ignore(ident)
            return
        watch.tries += 1
        runtime = self.dissection.recognise(seg.payload, guessed)
        if runtime is None:
            if watch.tries >= WATCHED_SEGMENTS:
                self._ignore(ident)
            return
        del self.watched[ident]
        if watch.client is not None:
            client = watch.client
        elif guessed:  # the port the user named is the server's
            client = (seg.src, seg.sport) if seg.dport in self.dissection.guess else (seg.dst, seg.dport)
        else:  # without the SYN, the lower port is the server's
            client = (seg.src, seg.sport) if seg.sport > seg.dport else (seg.dst, seg.dport)
        server = (seg.dst, seg.dport) if client == (seg.src, seg.sport) else (seg.src, seg.sport)
        self.assigned[(*client, *server)] = runtime
        for earlier in watch.segments:
            self._feed(earlier, out)

    def _ignore(self, ident: tuple[str, int, str, int]) -> None:
        self.watched.pop(ident, None)
        self.ignored[ident] = None
        if len(self.ignored) > CLOSED_MEMORY:
            self.ignored.popitem(last=False)

    # ------------------------------------------------------------------ connections

    @staticmethod
    def _reused(conn: Connection, seq: int) -> bool:
        stream = conn.to_server.stream
        return stream.next is not None and stream.position(seq) + 1 != stream.next  # not a repeated SYN

    def _open(self, key: tuple[str, int, str, int], runtime: Runtime, first: Mark) -> Connection:
        client, server = Endpoint(key[0], key[1]), Endpoint(key[2], key[3])
        self.stats.connections += 1
        number = self.numbering() if self.numbering is not None else self.stats.connections
        conn = Connection(
            client,
            server,
            self._side(client, server, number, runtime, True),
            self._side(server, client, number, runtime, False),
            runtime,
            Life(number, runtime.name, client, server, first),
            number,
            state=DecodeState() if runtime.stateful else None,
        )
        self.connections[key] = conn
        return conn

    def _side(self, src: Endpoint, dst: Endpoint, conn: int, runtime: Runtime, from_client: bool) -> Side:
        # The reorder limit, as the user set it for this protocol's decoder.
        stream = Stream(reorder_cap=runtime.decoder.limits.reorder)
        side = Side(src, dst, stream, Framer(runtime.rule, from_client=from_client), conn=conn)
        side.stream.on_conflict = lambda c: self._conflict(side, c)
        side.stream.on_late = lambda g, n: self._late(side, g, n)
        return side

    def _end(
        self, key: tuple[str, int, str, int], conn: Connection, number: int, why: str, out: list[Frame]
    ) -> None:
        if conn.finished:
            return
        conn.finished = True
        life = conn.life
        to_server, to_client = conn.to_server, conn.to_client
        held_to_server, held_to_client = to_server.framer.unfinished(), to_client.framer.unfinished()
        if held_to_server or held_to_client:
            life.cut = {
                from_client: held
                for from_client, held in ((True, held_to_server), (False, held_to_client))
                if held
            }
        life.finish(ENDINGS.get(why), number, self.ts)
        if conn.parked is None:  # a TLS connection whose protocol never showed is none of ours
            self.stats.lives[conn.number] = life
        for side in (to_server, to_client):
            if side.stream.next is None:
                continue
            events = side.stream.finish(number)
            if events:
                self._events(conn, side, events, None, number, out)
            if conn.tls is not None:
                self._tls_finish(conn, side, number, out)
            pieces = side.framer.finish(why)
            if pieces:
                self._pieces(side, pieces, None, number, conn, out)
            if side.waiting is not None:
                waiting, side.waiting = side.waiting, None
                self._passed_over(side, conn, *waiting, out)
        # The streams' callbacks hold their sides: let go, an ended connection is freed as soon
        # as the last reference goes, not left in a cycle for the collector to find.
        to_server.stream.on_conflict = to_server.stream.on_late = None
        to_client.stream.on_conflict = to_client.stream.on_late = None
        del self.connections[key]
        self.tls_pending.discard(key)
        self.closed[key] = None
        if len(self.closed) > CLOSED_MEMORY:
            self.closed.popitem(last=False)
        if self.stats.ended is not None:
            self.ended_pending.append(life)

    # ------------------------------------------------------------------ events

    def _events(
        self, conn: Connection, side: Side, events: list, seg: Segment | None, number: int, out: list[Frame]
    ) -> None:
        for event in events:
            if conn.tls is None and side.framer.pos is None:
                self._first_bytes(conn, side, event)
            if conn.tls is not None or conn.parked is not None:
                self._tls_event(conn, side, event, seg, number, out)
                continue
            if isinstance(event, Gap):
                self._gap(side, event)
                pieces = side.framer.gap(event)
            else:
                pieces = side.feed(*event)
            if pieces:
                self._pieces(side, pieces, seg, number, conn, out)

    def _pieces(
        self,
        side: Side,
        pieces: list[Piece],
        seg: Segment | None,
        number: int,
        conn: Connection,
        out: list[Frame],
    ) -> None:
        number = seg.number if seg is not None else number
        ts = seg.ts if seg is not None else self.ts
        from_client = side is conn.to_server
        for piece in pieces:
            frame = None
            if side.waiting is not None:
                # Bytes passed over wait for the frame found after them, which can say what
                # they held (the chunk after a chunk whose start was lost): decode it first.
                if piece.kind != "skipped":
                    frame = self._frame(side, piece, seg, number, conn, from_client)
                waiting, side.waiting = side.waiting, None
                self._passed_over(side, conn, *waiting, out, after=frame)
            if piece.kind == "skipped":
                carried_by = side.packets(piece.pos, piece.pos + piece.length)
                if piece.islands:  # the tail of a frame may be in them: it came in these packets
                    side.passed_packets = carried_by
                    side.waiting = (piece, number, ts)
                else:
                    self._passed_over(side, conn, piece, number, ts, out)
                continue
            if frame is None:
                frame = self._frame(side, piece, seg, number, conn, from_client)
            if piece.kind == "incomplete":
                self.stats.incomplete += 1
            else:
                self.stats.frames += 1
            if conn.runtime.tail_rules:
                self._note_floor(side, frame, conn.runtime)
            out.append(frame)
            carried = self.dissection.carried.get(frame.protocol)
            if carried and frame.incomplete is None:
                for inner in carried_frames(frame, carried):
                    inner.packets = frame.packets
                    out.append(inner)

    def _passed_over(
        self,
        side: Side,
        conn: Connection,
        piece: Piece,
        number: int,
        ts: float,
        out: list[Frame],
        after: Frame | None = None,
    ) -> None:
        """Bytes the framer passed over: a notice, and the whole elements they hold, if any."""
        self.stats.skipped_bytes += piece.length
        self.stats.lossy.add(conn.number)
        orphan = self._orphan(side, piece, conn.runtime, after) if piece.islands else None
        # What was recovered, and what could not be decided (two readings of the bytes).
        found = "".join(f"; {e.message}" for e in orphan.expert[1:]) if orphan is not None else ""
        self._notice(
            "warn",
            number,
            f"{side.where}: {piece.length} bytes from seq {piece.pos % SEQ_MOD} "
            f"passed over: {piece.reason}{found}",
            "skipped",
            side,
            start=piece.pos,
            end=piece.pos + piece.length,
            length=piece.length,
        )
        if orphan is not None:
            orphan.packets, side.passed_packets = side.passed_packets, ()
            orphan.number = number
            orphan.conn, orphan.from_client = conn.number, side is conn.to_server
            orphan.ts = ts
            self.stats.incomplete += 1
            out.append(orphan)

    def _frame(
        self, side: Side, piece: Piece, seg: Segment | None, number: int, conn: Connection, from_client: bool
    ) -> Frame:
        """A frame or an incomplete frame the framer cut, decoded, with what a gap left of it."""
        frame = conn.runtime.decoder.decode(
            piece.data, partial=piece.kind == "incomplete", state=conn.state, from_client=from_client
        )
        frame.number = number
        frame.ts = seg.ts if seg is not None else self.ts
        frame.src = side.src
        frame.dst = side.dst
        pos = piece.pos
        frame.seq = pos % SEQ_MOD
        frame.conn = conn.number
        frame.from_client = from_client
        length, have = piece.length, len(piece.data)
        frame.packets = packets_of(side.spans, pos, pos + (length if length > have else have))
        if conn.tls is not None:
            frame.tls = conn.tls.info
        if piece.kind == "incomplete":
            if piece.islands:
                self._recover_tail(side, frame, piece, conn.runtime)
            have = len(piece.data)
            whole = f" of {piece.length}" if piece.length >= 0 else ""
            frame.incomplete = piece.reason
            frame.expert.insert(
                0, Expert("error", f"incomplete frame ({have}{whole} bytes): {piece.reason}", 0)
            )
        return frame

    # ------------------------------------------------------------------ notices

    def _notice(
        self,
        severity: str,
        number: int,
        message: str,
        kind: str,
        side: Side | None = None,
        start: int | None = None,
        end: int | None = None,
        length: int | None = None,
    ) -> None:
        where = (side.src, side.dst) if side else (None, None)
        start, end = (None if at is None else at % SEQ_MOD for at in (start, end))
        self.stats.notices.append(Notice(severity, message, number, kind, *where, start, end, length))

    def _gap(self, side: Side, gap: Gap) -> None:
        self.stats.lossy.add(side.conn)
        self.stats.gaps += 1
        self.stats.gap_bytes += gap.length
        lo, hi = gap.seq_range
        cause = gap.cause
        if cause == REORDER_FULL:
            cause += f": {hint('reorder', side.stream.reorder_cap)}"
        elif cause == BUFFERED_FULL:
            cause += f": {hint('buffered', self.held_limit)}"
        self._notice(
            "warn",
            gap.number,
            f"{side.where}: {gap.length} bytes missing at seq {lo}..{hi} ({cause}), "
            f"found at packet {gap.number}",
            "gap",
            side,
            start=gap.start,
            end=gap.end,
            length=gap.length,
        )

    def _conflict(self, side: Side, c: Conflict) -> None:
        self._notice(
            "warn",
            c.number,
            f"{side.where}: packet {c.number} retransmits seq "
            f"{c.start % SEQ_MOD}..{c.end % SEQ_MOD} with different bytes; the first copy was used",
            "conflict",
            side,
            start=c.start,
            end=c.end,
            length=c.end - c.start,
        )

    def _late(self, side: Side, gap: Gap, number: int) -> None:
        lo, hi = gap.seq_range
        self._notice(
            "warn",
            number,
            f"{side.where}: packet {number} brings bytes of the gap at seq {lo}..{hi} "
            "after it was declared missing; they were not decoded",
            "late",
            side,
            start=gap.start,
            end=gap.end,
            length=gap.length,
        )


def by_port(
    ports: Mapping[int, Runtime],
    foreign: OrderedDict[tuple[str, int, str, int], None],
    seg: Segment,
    syn: int,
) -> tuple[tuple[str, int, str, int], bool, Runtime] | None:
    """A segment of no open connection placed by the server port it goes to or comes from: its
    key (client first), direction and protocol. The side that sends the SYN is the client, the
    side that answers it the server, whatever their ports; a handshake that puts the server on a
    port no protocol names is remembered in foreign (bounded), whose later segments are not
    placed by the client's port."""
    acked = seg.flags & TCP_ACK
    if not syn or not acked:  # a SYN goes to the server; other segments, either way
        runtime = ports.get(seg.dport)
        if runtime is not None:
            return (seg.src, seg.sport, seg.dst, seg.dport), False, runtime
    if not syn or acked:  # a SYN-ACK comes from the server
        runtime = ports.get(seg.sport)
        if runtime is not None:
            return (seg.dst, seg.dport, seg.src, seg.sport), True, runtime
    if syn and (seg.sport in ports or seg.dport in ports):
        foreign[min((seg.src, seg.sport, seg.dst, seg.dport), (seg.dst, seg.dport, seg.src, seg.sport))] = (
            None
        )
        if len(foreign) > CLOSED_MEMORY:
            foreign.popitem(last=False)
    return None


def carried_frames(frame: Frame, carried: list[tuple[str, Decoder]]) -> Iterator[Frame]:
    """The frames of other protocols a frame carries: a field's bytes that start with a carried
    protocol's magic, decoded whole, in the carrier's place in the capture (its packet, time,
    endpoints, connection and direction; its sequence number)."""
    for field_name, decoder in carried:
        value = frame.fields.get(field_name)
        wiring = decoder.protocol.wiring
        magic = wiring.magic or b""
        # The magic first: one comparison rules out most frames before any subject is matched.
        if not isinstance(value, bytes | bytearray | memoryview) or value[: len(magic)] != magic:
            continue
        if wiring.carried_where is not None:
            by, patterns = wiring.carried_where
            name = frame.fields.get(by)
            if not isinstance(name, str) or not matches_any(patterns, name):
                continue
        inner = decoder.decode(bytes(value))
        inner.number, inner.ts, inner.src, inner.dst = frame.number, frame.ts, frame.src, frame.dst
        inner.seq, inner.conn, inner.from_client = frame.seq, frame.conn, frame.from_client
        yield inner


def decode_segments(
    segments: Iterable[Segment],
    decoder: Decoder | Dissection,
    ports: Iterable[int] | None,
    stats: ReadStats,
) -> Iterator[Frame]:
    """Decoded frames, in capture order: of one protocol on the given server ports, or of a Dissection."""
    return frames_of(Reader(decoder, ports, stats), segments)


def frames_of(
    reader: Reader, segments: Iterable[Segment], before: Callable[[], None] | None = None
) -> Iterator[Frame]:
    """A reader's frames of the segments, the connections still open at the end flushed; a capture
    that turns out damaged still gives what was buffered up to the damage, then raises. before:
    called once the first segment is read (a capture file's header and comments with it)."""
    stats = reader.stats
    out: list[Frame] = []
    try:
        for seg in segments:
            if before is not None:
                before()
                before = None
            if seg.number > stats.packets:
                stats.packets = seg.number
            if stats.first_ts is None:  # segments without a capture file around them (a proxy's)
                stats.first_ts = seg.ts
            # Reader.feed's steps, with one list for every segment: this loop runs per packet.
            if reader.ended_pending:
                reader.hand_over_ended()
            reader._feed(seg, out)
            if out:
                yield from out
                out.clear()
    except CaptureError:
        yield from reader.finish()
        _ended(reader)
        report_skips(stats)
        raise
    yield from reader.finish()
    _ended(reader)
    report_skips(stats)


def _ended(reader: Reader) -> None:
    if reader.ended_pending:
        reader.hand_over_ended()


def read_frames(
    path: Path | str, decoder: Decoder | Dissection, ports: Iterable[int] | None, stats: ReadStats
) -> Iterator[Frame]:
    return decode_segments(read_segments(path, stats), decoder, ports, stats)


def report_skips(stats: ReadStats) -> None:
    if stats.unknown_links:
        stats.notices.append(
            Notice(
                "warn",
                f"{unknown_links_text(stats.unknown_links)} not read: streamdump reads {LINKS_READ}",
                stats.first_skipped[Skip.UNKNOWN_LINK],
                "link type",
            )
        )
    for skip, what in (
        (Skip.FRAGMENT, "IP fragments were not reassembled; their bytes show up as gaps"),
        (Skip.TRUNCATED, "packets were cut short inside their headers"),
    ):
        count = stats.skipped.get(skip)
        if count:
            first = stats.first_skipped[skip]
            stats.notices.append(
                Notice(
                    "note",
                    f"{count} {what}",
                    first,
                    "fragments" if skip is Skip.FRAGMENT else "truncated",
                )
            )


def loss_summary(stats: ReadStats) -> str:
    """What a read lost, in one line (empty when nothing)."""
    parts = []
    if stats.gaps:
        plural = "s" * (stats.gaps != 1)
        parts.append(f"{stats.gaps} gap{plural} ({stats.gap_bytes} bytes not in the capture)")
    if stats.incomplete:
        parts.append(f"{stats.incomplete} incomplete frame{'s' * (stats.incomplete != 1)}")
    if stats.skipped_bytes:
        parts.append(f"{stats.skipped_bytes} bytes passed over outside any frame")
    return "; ".join(parts)
