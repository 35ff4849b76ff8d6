"""From TCP segments to decoded frames: connections, reassembly, framing, decoding, notices.

A Reader owns the per-connection state and nothing else; it is fed segments in
capture order and yields frames, so files, the live sniffer and Spark tasks share it.
Everything the user must hear about that is not one frame (gaps, conflicting
retransmissions, bytes passed over) becomes a Notice in `stats.notices`, in the
order it happened; a caller may drain that list as it goes to keep memory flat.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from streamdump.core.capture import CaptureError, Segment, Skip, Tally, read_segments
from streamdump.core.frame import Endpoint, Expert, Frame
from streamdump.core.framing import FrameCheck, Framer, Piece
from streamdump.core.reassembly import SEQ_MOD, TCP_ACK, TCP_RST, TCP_SYN, Conflict, Gap, Stream
from streamdump.core.tail import TailRule, last_value, recover, tail_rule
from streamdump.spec.decoder import Decoder

# Connections that ended are remembered (bounded) so stray late packets do not open new ones.
CLOSED_MEMORY = 4096


@dataclass(frozen=True, slots=True)
class Notice:
    """Something about the capture (not a single frame) the user should know."""

    severity: str
    message: str
    number: int  # packet number it relates to
    kind: str = "note"  # gap, skipped, conflict, late, midstream, fragments, truncated, ended
    src: Endpoint | None = None
    dst: Endpoint | None = None
    start: int | None = None  # TCP sequence numbers of the bytes concerned
    end: int | None = None
    length: int | None = None


@dataclass(slots=True)
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


@dataclass(slots=True)
class Side:
    """One direction of a connection: its byte stream and its framer."""

    src: Endpoint
    dst: Endpoint
    stream: Stream
    framer: Framer
    floors: dict[int, int] = field(default_factory=dict)  # wire key -> last increasing value
    conn: int = 0  # the connection's number

    @property
    def where(self) -> str:
        return f"{self.src} -> {self.dst}"


@dataclass(slots=True)
class Connection:
    client: Endpoint
    server: Endpoint
    to_server: Side
    to_client: Side
    number: int = 0  # 1, 2, ... in the order connections first appear in the capture
    finished: bool = False


def frame_check(decoder: Decoder) -> FrameCheck:
    """The protocol knowledge hunting needs, derived from the decoder's spec."""
    size_len = decoder.size_st.size
    keys = sorted({key for key, _version in decoder.compiled})
    key_st = decoder.key_struct
    # A frame start shows a known key right after the size prefix; finding those with one
    # regex keeps hunting at C speed even through megabytes of unsynced bytes.
    alternatives = b"|".join(re.escape(key_st.pack(k)) for k in keys)
    pattern = re.compile(b"(?=[\\x00-\\xff]{%d}(?:%s))" % (size_len, alternatives))

    def candidates(buf: bytearray, start: int) -> list[int]:
        # A list, not a generator: a live finditer would pin buf against resizing.
        return [m.start() for m in pattern.finditer(buf, start)]

    def clean(data: bytes) -> bool:
        frame = decoder.decode(data)
        return frame.command is not None and frame.worst_severity not in ("warn", "error")

    def clean_prefix(data: bytes) -> bool:
        frame = decoder.decode(data, partial=True)
        return frame.command is not None and all(
            e.cut or e.severity not in ("warn", "error") for e in frame.expert
        )

    return FrameCheck(
        size_st=decoder.size_st,
        min_size=decoder.header_size,
        header_len=size_len + decoder.header_size,
        candidates=candidates,
        plausible=decoder.plausible,
        clean=clean,
        clean_prefix=clean_prefix,
    )


class Reader:
    """Per-capture state: turns segments into frames for the given server ports."""

    def __init__(self, decoder: Decoder, ports: Iterable[int], stats: ReadStats) -> None:
        self.decoder = decoder
        self.ports = frozenset(ports)
        self.stats = stats
        self.check = frame_check(decoder)
        self.connections: dict[tuple[str, int, str, int], Connection] = {}
        self.closed: OrderedDict[tuple[str, int, str, int], None] = OrderedDict()
        wiring = decoder.protocol.wiring
        self.limit = wiring.max_size
        self.ts = 0.0  # time of the latest packet, for frames handed on at the end
        # Layouts whose last array can be recovered after a gap, by (wire key, version).
        self.tail_rules: dict[tuple[int, int], TailRule] = {
            key: rule for key, (_, ops) in decoder.compiled.items() if (rule := tail_rule(ops)) is not None
        }

    # ------------------------------------------------------------------ input

    def feed(self, seg: Segment) -> Iterator[Frame]:
        self.ts = seg.ts
        if seg.dport in self.ports:
            key, from_server = (seg.src, seg.sport, seg.dst, seg.dport), False
        elif seg.sport in self.ports:
            key, from_server = (seg.dst, seg.dport, seg.src, seg.sport), True
        else:
            return
        self.stats.segments_matched += 1
        conn = self.connections.get(key)
        syn = seg.flags & TCP_SYN
        if conn is not None and syn and not from_server and self._reused(conn, seg.seq):
            # A new client SYN on a known 4-tuple is port reuse: a new connection.
            yield from self._end(key, conn, seg.number, "the port was reused")
            conn = None
        if conn is None:
            if key in self.closed and not syn:
                return  # a straggler of a connection that ended
            if not syn and not seg.payload and seg.wire_len == 0:
                return  # pure ACKs of a connection we never saw carry nothing to decode
            self.closed.pop(key, None)
            conn = self._open(key)
        side, other = (conn.to_client, conn.to_server) if from_server else (conn.to_server, conn.to_client)
        if seg.flags & TCP_ACK:
            events = other.stream.acked(seg.ack, seg.number)
            if events:
                yield from self._events(conn, other, events, seg)
        was_new = side.stream.next is None
        events = side.stream.accept(seg.seq, seg.flags, seg.payload, seg.wire_len, seg.number)
        if was_new and not side.stream.syn_seen and side.stream.next is not None:
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
            yield from self._events(conn, side, events, seg)
        if seg.flags & TCP_RST:
            yield from self._end(key, conn, seg.number, "the connection was reset")
        elif conn.to_server.stream.closed and conn.to_client.stream.closed:
            yield from self._end(key, conn, seg.number, "the connection closed")

    def finish(self) -> Iterator[Frame]:
        """Flush every connection still open when the capture ends."""
        for key, conn in list(self.connections.items()):
            yield from self._end(key, conn, self.stats.packets, "the capture ended")

    # ------------------------------------------------------------------ connections

    @staticmethod
    def _reused(conn: Connection, seq: int) -> bool:
        stream = conn.to_server.stream
        return stream.next is not None and stream.position(seq) + 1 != stream.next  # not a repeated SYN

    def _open(self, key: tuple[str, int, str, int]) -> Connection:
        client, server = Endpoint(key[0], key[1]), Endpoint(key[2], key[3])
        self.stats.connections += 1
        number = self.stats.connections
        conn = Connection(
            client, server, self._side(client, server, number), self._side(server, client, number), number
        )
        self.connections[key] = conn
        return conn

    def _side(self, src: Endpoint, dst: Endpoint, conn: int) -> Side:
        side = Side(src, dst, Stream(), Framer(self.check, self.limit), conn=conn)
        side.stream.on_conflict = lambda c: self._conflict(side, c)
        side.stream.on_late = lambda g, n: self._late(side, g, n)
        return side

    def _end(
        self, key: tuple[str, int, str, int], conn: Connection, number: int, why: str
    ) -> Iterator[Frame]:
        if conn.finished:
            return
        conn.finished = True
        for side in (conn.to_server, conn.to_client):
            if side.stream.next is None:
                continue
            events = side.stream.finish(number)
            if events:
                yield from self._events(conn, side, events, None, number)
            yield from self._pieces(side, side.framer.finish(why), None, number, conn)
        del self.connections[key]
        self.closed[key] = None
        if len(self.closed) > CLOSED_MEMORY:
            self.closed.popitem(last=False)

    # ------------------------------------------------------------------ events

    def _events(
        self, conn: Connection, side: Side, events: list, seg: Segment | None, number: int = 0
    ) -> Iterator[Frame]:
        for event in events:
            if isinstance(event, Gap):
                self._gap(side, event)
                pieces = side.framer.gap(event)
            else:
                pos, data = event
                if side.framer.pos is None and side.stream.syn_seen:
                    side.framer.synced = True
                elif side.framer.pos is None:
                    side.framer.start_hunting("at the start of the capture")
                pieces = side.framer.feed(pos, data)
            if pieces:
                yield from self._pieces(side, pieces, seg, number, conn)

    def _pieces(
        self,
        side: Side,
        pieces: list[Piece],
        seg: Segment | None,
        number: int,
        conn: Connection,
    ) -> Iterator[Frame]:
        number = seg.number if seg is not None else number
        from_client = side is conn.to_server
        for piece in pieces:
            if piece.kind == "skipped":
                self.stats.skipped_bytes += piece.length
                self.stats.lossy.add(conn.number)
                orphan = self._orphan(side, piece) if piece.islands else None
                found = f"; {orphan.expert[1].message}" if orphan is not None else ""
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
                    orphan.number = number
                    orphan.conn, orphan.from_client = conn.number, from_client
                    orphan.ts = seg.ts if seg is not None else self.ts
                    self.stats.incomplete += 1
                    yield orphan
                continue
            frame = self.decoder.decode(piece.data, partial=piece.kind == "incomplete")
            frame.number = number
            frame.ts = seg.ts if seg is not None else self.ts
            frame.src = side.src
            frame.dst = side.dst
            frame.seq = piece.pos % SEQ_MOD
            frame.conn, frame.from_client = conn.number, from_client
            if piece.kind == "incomplete":
                if piece.islands:
                    self._recover_tail(frame, piece)
                self.stats.incomplete += 1
                have = len(piece.data)
                whole = f" of {piece.length}" if piece.length >= 0 else ""
                frame.incomplete = piece.reason
                frame.expert.insert(
                    0, Expert("error", f"incomplete frame ({have}{whole} bytes): {piece.reason}", 0)
                )
            else:
                self.stats.frames += 1
            self._note_floor(side, frame)
            yield frame

    def _note_floor(self, side: Side, frame: Frame) -> None:
        """Remember the last increasing value (e.g. publishing id) each layout had in this direction."""
        rule = self.tail_rules.get((frame.wire_key, frame.version))
        if rule is None:
            return
        items = frame.fields.get(rule.array)
        value = last_value(items, rule.increasing) if isinstance(items, list) else None
        if value is not None:
            side.floors[frame.wire_key] = value

    def _orphan(self, side: Side, piece: Piece) -> Frame | None:
        """Whole elements in bytes that end where a found frame starts: the tail of a frame whose
        start a gap took. Tried only for layouts seen before in this direction, whose last value
        bounds the chain from below; the command is inferred, and the frame says so."""
        for (wire_key, version), rule in self.tail_rules.items():
            floor = side.floors.get(wire_key)
            if floor is None:
                continue
            items, unused = recover(rule, piece.islands, True, [], floor)
            if not items:
                continue
            layout = self.decoder.compiled[wire_key, version][0]
            command = self.decoder.protocol.commands[layout.command]
            return Frame(
                protocol=self.decoder.protocol.name,
                wire_key=wire_key,
                key=command.key,
                kind=layout.kind,
                command=command.name,
                version=version,
                size=0,
                fields={rule.array: items},
                expert=[
                    Expert(
                        "error",
                        "incomplete frame: its start was lost in a gap; the command is "
                        f"inferred from the {rule.array} chained to the next frame",
                        0,
                    ),
                    Expert(
                        "note",
                        f"{len(items)} whole {rule.array} recovered from {sum(map(len, piece.islands))} "
                        f"bytes ({unused} bytes belong to elements a gap cut)",
                        0,
                    ),
                ],
                data=b"",
                src=side.src,
                dst=side.dst,
                seq=piece.pos % SEQ_MOD,
                incomplete="start lost in a gap",
            )
        return None

    def _recover_tail(self, frame: Frame, piece: Piece) -> None:
        """Add the whole elements found after the gap to the frame's last array, and say so."""
        rule = self.tail_rules.get((frame.wire_key, frame.version))
        if rule is None:
            return
        before = frame.fields.get(rule.array)
        if not isinstance(before, list):
            return
        items, unused = recover(rule, piece.islands, piece.anchored, before, span=piece.length)
        if items:
            before.extend(items)
            present = sum(map(len, piece.islands))
            frame.expert.insert(
                1,
                Expert(
                    "note",
                    f"{len(items)} whole {rule.array} recovered from the {present} bytes present after "
                    f"the gap ({unused} bytes belong to elements the gap cut)",
                    0,
                ),
            )

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
        self.stats.notices.append(
            Notice(
                severity,
                message,
                number,
                kind,
                side.src if side else None,
                side.dst if side else None,
                None if start is None else start % SEQ_MOD,
                None if end is None else end % SEQ_MOD,
                length,
            )
        )

    def _gap(self, side: Side, gap: Gap) -> None:
        self.stats.lossy.add(side.conn)
        self.stats.gaps += 1
        self.stats.gap_bytes += gap.length
        lo, hi = gap.seq_range
        self._notice(
            "warn",
            gap.number,
            f"{side.where}: {gap.length} bytes missing at seq {lo}..{hi} "
            f"({gap.cause}), found at packet {gap.number}",
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


def decode_segments(
    segments: Iterable[Segment], decoder: Decoder, ports: Iterable[int], stats: ReadStats
) -> Iterator[Frame]:
    """Decoded frames of the protocol on the given server ports, in capture order."""
    reader = Reader(decoder, ports, stats)
    try:
        for seg in segments:
            stats.packets = max(stats.packets, seg.number)
            yield from reader.feed(seg)
    except CaptureError:
        # The capture turned out damaged: what was buffered up to there is still shown.
        yield from reader.finish()
        _report_skips(stats)
        raise
    yield from reader.finish()
    _report_skips(stats)


def read_frames(
    path: Path | str, decoder: Decoder, ports: Iterable[int], stats: ReadStats
) -> Iterator[Frame]:
    return decode_segments(read_segments(path, stats), decoder, ports, stats)


def _report_skips(stats: ReadStats) -> None:
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
                    first,
                    f"{count} {what} (first: packet {first})",
                    "fragments" if skip is Skip.FRAGMENT else "truncated",
                )
            )
