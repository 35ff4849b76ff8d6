"""The reader's TLS layer: a connection whose client starts with a ClientHello is decrypted
with the key logs given (and the capture's secrets blocks), and the plaintext each direction
yields goes to that direction's framer as a plaintext connection's bytes do, so gaps, limits
and recovery behave the same. The packets of a decrypted frame are those of its records. On no
known port, the decrypted bytes are held until one side's first bytes show the protocol.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

from streamdump.spec.decoder import DecodeState
from streamdump.wire.framing import Framer
from streamdump.wire.reassembly import Gap
from streamdump.wire.tls.keylog import KeyLog
from streamdump.wire.tls.records import is_client_hello, plausible_header

if TYPE_CHECKING:
    from streamdump.analysis.pipeline import Connection, Dissection, ReadStats, Runtime, Side, Watch
    from streamdump.wire.capture import Segment
    from streamdump.wire.frame import Frame
    from streamdump.wire.framing import Piece
    from streamdump.wire.tls.connection import Resumption

# Decrypted bytes held while a TLS connection on no known port waits for its protocol to show.
PARKED_LIMIT = 64 << 10
# Segments remembered per direction to say which packets made a frame: those of the bytes the
# framer holds; past this many, the oldest are forgotten (a frame then names its later packets).
SPANS_KEPT = 1 << 16


def packets_of(spans: deque[tuple[int, int, int]], start: int, end: int) -> tuple[int, ...]:
    if len(spans) == 1:  # a frame in one segment, the commonest: the loops below, unrolled
        first, last, number = spans[0]
        if last <= start:
            spans.popleft()
            return ()
        if first >= end:
            return ()
        if last <= end:
            spans.popleft()
        return (number,)
    while spans and spans[0][1] <= start:
        spans.popleft()
    found: list[int] = []
    for first, last, number in spans:
        if first >= end:
            break
        if last > start and (not found or found[-1] != number):
            found.append(number)
    while spans and spans[0][1] <= end:
        spans.popleft()
    return tuple(found)


class Decrypting:
    """What the Reader does for TLS connections (its own state is set up by the Reader)."""

    keylog: KeyLog
    sessions: Resumption | None
    secrets_read: int
    junk_told: int
    stats: ReadStats
    dissection: Dissection
    tls_pending: set[tuple[str, int, str, int]]
    watched: OrderedDict[tuple[str, int, str, int], Watch]
    assigned: dict[tuple[str, int, str, int], Runtime]

    def _feed(self, seg: Segment, out: list[Frame]) -> None:
        raise NotImplementedError

    def _notice(self, severity: str, number: int, message: str, kind: str, side: Side | None = None) -> None:
        raise NotImplementedError

    def _gap(self, side: Side, gap: Gap) -> None:
        raise NotImplementedError

    def _pieces(
        self,
        side: Side,
        pieces: list[Piece],
        seg: Segment | None,
        number: int,
        conn: Connection,
        out: list[Frame],
    ) -> None:
        raise NotImplementedError

    def _init_tls(self, keylog: KeyLog | None) -> None:
        self.keylog = keylog.copy() if keylog is not None else KeyLog()
        self.secrets_read = 0  # the capture's secrets blocks already in keylog
        self.junk_told = 0  # junk lines of the key logs already told
        self.sessions = None  # TLS 1.2 sessions a later connection may resume, once one is TLS
        self.tls_pending: set[tuple[str, int, str, int]] = set()  # TLS on no known port
        self.undecrypted: set[int] = set()  # TLS connections whose keys were missing or wrong

    def _watched_tls(self, seg: Segment, ident: tuple[str, int, str, int], out: list[Frame]) -> None:
        """A ClientHello on no known port, when the user gave keys: its sender is the client;
        which protocol the connection carries, the decrypted bytes tell."""
        earlier = self.watched.pop(ident, None)
        forward = (seg.src, seg.sport, seg.dst, seg.dport)
        self.assigned[forward] = next(iter(self.dissection.runtimes.values()))
        self.tls_pending.add(forward)
        for before in earlier.segments if earlier is not None else ():
            self._feed(before, out)
        self._feed(seg, out)

    def _first_bytes(self, conn: Connection, side: Side, event: Any) -> None:
        """A direction's first bytes: the client's ClientHello makes the connection TLS; so does
        a TLS record where the capture starts inside a connection (its handshake missing: the
        records are not decrypted, and not decoded as frames either)."""
        if isinstance(event, Gap):
            return
        key = (conn.client.ip, conn.client.port, conn.server.ip, conn.server.port)
        if conn.parked is None and key in self.tls_pending:
            self.tls_pending.discard(key)
            conn.parked = []  # on no known port, with TLS: the bytes will say which protocol
        data = event[1]
        if side is conn.to_server and not conn.client_spoke:
            conn.client_spoke = True
            if is_client_hello(data):
                self._start_tls(conn)
                return
        if not side.stream.syn_seen and data[:1] == b"\x17" and plausible_header(data):
            number = side.spans[-1][2] if side.spans else 0
            self._start_tls(conn)
            assert conn.tls is not None
            conn.tls.midstream(number)

    def _tls_event(
        self, conn: Connection, side: Side, event: Any, seg: Segment | None, number: int, out: list[Frame]
    ) -> None:
        """Bytes of a TLS connection's stream, or a gap in it, through its TLS layer."""
        if isinstance(event, Gap):
            self._gap(side, event)
            if conn.tls is None:  # the plaintext before TLS, waiting for its protocol to show
                self._park(conn, side is conn.to_server, event, (), seg, number, out)
                return
            conn.tls.gap(side is conn.to_server, event)
            self._tls_notes(conn, side)
            return
        pos, data = event
        if conn.tls is None:
            packets = side.packets(pos, pos + len(data))
            self._park(
                conn, side is conn.to_server, (pos, data, pos, pos + len(data)), packets, seg, number, out
            )
            return
        outputs = conn.tls.data(side is conn.to_server, pos, data, seg.number if seg else number)
        self._tls_notes(conn, side)
        if outputs:
            self._plain(conn, side, outputs, seg, number, out)

    def _tls_finish(self, conn: Connection, side: Side, number: int, out: list[Frame]) -> None:
        assert conn.tls is not None
        outputs = conn.tls.finish(side is conn.to_server, number)
        self._tls_notes(conn, side)
        if outputs:
            self._plain(conn, side, outputs, None, number, out)

    def _secrets(self, number: int) -> None:
        """Take in the key logs of the capture's secrets blocks read so far; tell junk lines once."""
        for data in self.stats.secrets[self.secrets_read :]:
            self.keylog.add(data, "the capture's secrets block")
        self.secrets_read = len(self.stats.secrets)
        note = self.keylog.junk_note()
        if note is not None and self.keylog.junk != self.junk_told:
            self.junk_told = self.keylog.junk
            self._notice("warn", number, note, "tls")

    def _start_tls(self, conn: Connection) -> None:
        """The client's first bytes are a ClientHello: what follows in both directions is TLS."""
        # The record layer and cryptography load here: a capture without TLS never needs them.
        from streamdump.wire.tls.connection import Resumption, TlsConnection

        where = f"{conn.client} -> {conn.server}"
        if self.sessions is None:
            self.sessions = Resumption()
        conn.tls = TlsConnection(self.keylog, where, self.sessions)
        client, server = conn.to_server, conn.to_client
        client.cipher, client.spans = client.spans, deque(maxlen=SPANS_KEPT)
        server.cipher = deque(maxlen=SPANS_KEPT)

    def _tls_notes(self, conn: Connection, side: Side) -> None:
        tls = conn.tls
        if tls is None or not tls.notes:
            return
        for note in tls.notes:
            self._notice(note.severity, note.number, note.message, "tls", side)
        tls.notes.clear()
        if tls.info.keys in ("missing", "wrong"):
            self.undecrypted.add(conn.number)

    def _plain(
        self, conn: Connection, side: Side, outputs: list, seg: Segment | None, number: int, out: list[Frame]
    ) -> None:
        """Decrypted bytes (and what losses took of them) to the direction's framer."""
        from_client = side is conn.to_server
        for plain in outputs:
            packets: tuple[int, ...] = ()
            if not isinstance(plain, Gap):
                assert side.cipher is not None
                packets = packets_of(side.cipher, plain[2], plain[3])
            if conn.parked is not None:
                self._park(conn, from_client, plain, packets, seg, number, out)
                continue
            self._to_framer(conn, side, plain, packets, seg, number, out)

    def _to_framer(
        self,
        conn: Connection,
        side: Side,
        plain: Any,
        packets: tuple[int, ...],
        seg: Segment | None,
        number: int,
        out: list[Frame],
    ) -> None:
        if isinstance(plain, Gap):
            pieces = side.framer.gap(plain)
        else:
            pos, data = plain[0], plain[1]
            for packet in packets:
                side.spans.append((pos, pos + len(data), packet))
            pieces = side.feed(pos, data)
        if pieces:
            self._pieces(side, pieces, seg, number, conn, out)

    def _park(
        self,
        conn: Connection,
        from_client: bool,
        plain: Any,
        packets: tuple[int, ...],
        seg: Segment | None,
        number: int,
        out: list[Frame],
    ) -> None:
        """A TLS connection on no known port: hold its plaintext until one side's first bytes
        show a protocol (by magic, or by a first frame that decodes cleanly), then decode all."""
        parked = conn.parked
        assert parked is not None
        if (
            len(parked) > 4096
            or sum(len(o[1]) for _, o, _ in parked if not isinstance(o, Gap)) > PARKED_LIMIT
        ):
            return  # told once when it went over
        parked.append((from_client, plain, packets))
        mine = b"".join(o[1] for side, o, _ in parked if side == from_client and not isinstance(o, Gap))
        runtime = self.dissection.recognise(mine[:PARKED_LIMIT], True) if mine else None
        if runtime is None:
            if sum(len(o[1]) for _, o, _ in parked if not isinstance(o, Gap)) > PARKED_LIMIT:
                self._notice(
                    "note",
                    seg.number if seg is not None else number,
                    f"{conn.client} -> {conn.server}: decrypted TLS bytes of no protocol streamdump "
                    "reads (give --decode-as for this port)",
                    "tls",
                )
            return
        conn.parked = None
        conn.runtime = runtime
        conn.life.protocol = runtime.name
        conn.state = DecodeState() if runtime.stateful else None
        conn.to_server.framer = Framer(runtime.rule, from_client=True)
        conn.to_client.framer = Framer(runtime.rule, from_client=False)
        for client_side, held, held_packets in parked:
            side = conn.to_server if client_side else conn.to_client
            self._to_framer(conn, side, held, held_packets, seg, number, out)
