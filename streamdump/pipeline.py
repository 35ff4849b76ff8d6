"""From a capture file to decoded frames: picks the protocol's traffic, reassembles, frames, decodes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from streamdump.capture import Segment, Tally, read_segments
from streamdump.decoder import Decoder
from streamdump.frame import Endpoint, Frame
from streamdump.reassembly import TCP_SYN, Direction, Framer, Notice


@dataclass(slots=True)
class Connection:
    client: Endpoint
    server: Endpoint
    to_server: Direction
    to_client: Direction


@dataclass(slots=True)
class ReadStats(Tally):
    segments_matched: int = 0
    frames: int = 0
    connections: int = 0
    notices: list[Notice] = field(default_factory=list)


def read_frames(
    path: Path | str, decoder: Decoder, ports: Iterable[int], stats: ReadStats
) -> Iterator[Frame]:
    """Decoded frames of the protocol on the given server ports, in capture order."""
    return decode_segments(read_segments(path, stats), decoder, ports, stats)


def decode_segments(
    segments: Iterable[Segment], decoder: Decoder, ports: Iterable[int], stats: ReadStats
) -> Iterator[Frame]:
    server_ports = frozenset(ports)
    connections: dict[tuple[str, int, str, int], Connection] = {}
    wiring = decoder.protocol.wiring

    def new_direction() -> Direction:
        return Direction(Framer(decoder.size_st, wiring.max_size, decoder.plausible))

    for seg in segments:
        stats.packets = max(stats.packets, seg.number)
        if seg.dport in server_ports:
            key, from_server = (seg.src, seg.sport, seg.dst, seg.dport), False
        elif seg.sport in server_ports:
            key, from_server = (seg.dst, seg.dport, seg.src, seg.sport), True
        else:
            continue
        stats.segments_matched += 1
        conn = connections.get(key)
        if conn is None or (seg.flags & TCP_SYN and not from_server and conn.to_server.next_seq is not None):
            # A client SYN on a known 4-tuple is port reuse: a new connection.
            if conn is not None:
                _report_pending(conn, stats, seg.number)
            conn = Connection(
                Endpoint(key[0], key[1]), Endpoint(key[2], key[3]), new_direction(), new_direction()
            )
            connections[key] = conn
            stats.connections += 1
        direction = conn.to_client if from_server else conn.to_server
        src, dst = (conn.server, conn.client) if from_server else (conn.client, conn.server)
        data = direction.accept(seq=seg.seq, flags=seg.flags, payload=seg.payload)
        if data is None:
            stats.notices.append(
                Notice(
                    "warn",
                    f"{src} -> {dst}: bytes missing before packet {seg.number}; "
                    "partial frame dropped, waiting for a frame start",
                    seg.number,
                )
            )
            direction.skip_gap(seg.seq)
            data = direction.accept(seq=seg.seq, flags=seg.flags, payload=seg.payload)
        elif direction.late:
            stats.notices.append(
                Notice(
                    "warn",
                    f"{src} -> {dst}: packet {seg.number} arrived out of order into bytes already "
                    "skipped; its bytes were not decoded",
                    seg.number,
                )
            )
        if not data:
            continue
        for raw in direction.framer.feed(data, seg.number, stats.notices, f"{src} -> {dst}"):
            frame = decoder.decode(raw)
            frame.number = seg.number
            frame.ts = seg.ts
            frame.src = src
            frame.dst = dst
            stats.frames += 1
            yield frame
    for conn in connections.values():
        _report_pending(conn, stats, stats.packets)


def _report_pending(conn: Connection, stats: ReadStats, number: int) -> None:
    """Say which directions of a finished connection stopped inside a frame."""
    for direction, src, dst in (
        (conn.to_server, conn.client, conn.server),
        (conn.to_client, conn.server, conn.client),
    ):
        pending = len(direction.framer.buf)
        if pending:
            stats.notices.append(
                Notice(
                    "note",
                    f"{src} -> {dst}: connection ends inside a frame ({pending} bytes buffered)",
                    number,
                )
            )
