"""The decoding proxy: clients connect to it, bytes pass through to the upstream server unchanged,
and every byte is decoded on the way, as if captured.

Each connection's bytes become TCP segments of a made-up capture (handshake, data with
consistent sequence numbers, FIN), numbered in the order the proxy saw them, between the
client's address and the upstream's: the pipeline decodes them exactly as it decodes a file,
and --write saves them as a pcapng that `read` decodes to the same frames. A side is read only as
fast as the other side takes its bytes (asyncio's drain), so a slow peer slows the proxy instead
of filling its memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import dpkt

from streamdump.wire.packet import Segment
from streamdump.wire.reassembly import TCP_ACK, TCP_FIN, TCP_SYN
from streamdump.wire.writer import PacketWriter

# How much one read takes from a side before it is passed on.
CHUNK = 64 << 10
TCP_PSH = 0x08


@dataclass
class Side:
    host: str
    port: int
    seq: int


@dataclass
class Recorder:
    """Turns what passes through into numbered segments, and a capture file when asked."""

    on_segment: Callable[[Segment], None]
    writer: PacketWriter | None = None
    number: int = 0

    def segment(self, src: Side, dst: Side, flags: int, payload: bytes = b"") -> None:
        self.number += 1
        # Whole microseconds, as a pcap keeps them: the file read back gives the same times.
        sec, usec = divmod(int(time.time() * 1_000_000), 1_000_000)
        ts = sec + usec / 1e6
        seg = Segment(
            self.number, ts, src.host, dst.host, src.port, dst.port, src.seq, dst.seq, flags, payload
        )
        src.seq = (src.seq + len(payload) + (1 if flags & (TCP_SYN | TCP_FIN) else 0)) % (1 << 32)
        if self.writer is not None:
            self.writer.write(ts, dpkt.pcap.DLT_EN10MB, _packet(seg))
            self.writer.out.flush()
        self.on_segment(seg)


def _packet(seg: Segment) -> bytes:
    tcp = dpkt.tcp.TCP(sport=seg.sport, dport=seg.dport, seq=seg.seq, ack=seg.ack, flags=seg.flags,
                       win=65535, data=seg.payload)  # fmt: skip
    family = socket.AF_INET6 if ":" in seg.src else socket.AF_INET
    if family == socket.AF_INET:
        ip = dpkt.ip.IP(
            src=socket.inet_aton(seg.src), dst=socket.inet_aton(seg.dst), p=dpkt.ip.IP_PROTO_TCP, data=tcp
        )
        ip.len = 20 + len(bytes(tcp))
        kind = dpkt.ethernet.ETH_TYPE_IP
    else:
        ip = dpkt.ip6.IP6(src=socket.inet_pton(family, seg.src), dst=socket.inet_pton(family, seg.dst),
                          nxt=dpkt.ip.IP_PROTO_TCP, hlim=64, data=tcp)  # fmt: skip
        ip.plen = len(bytes(tcp))
        kind = dpkt.ethernet.ETH_TYPE_IP6
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=kind, data=ip))


class Proxy:
    """Accepts clients on listen, connects each to upstream, passes and records the bytes."""

    def __init__(
        self,
        listen: tuple[str, int],
        upstream: tuple[str, int],
        recorder: Recorder,
        tell: Callable[[str], None],
    ) -> None:
        self.listen = listen
        self.upstream = upstream
        self.recorder = recorder
        self.tell = tell
        self.server: asyncio.base_events.Server | None = None
        self.open: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, *self.listen)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for task in list(self.open):
            task.cancel()
        if self.open:
            await asyncio.gather(*self.open, return_exceptions=True)

    async def _client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.open.add(task)
        peer = c_writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}"
        try:
            try:
                u_reader, u_writer = await asyncio.open_connection(*self.upstream)
            except OSError as exc:
                self.tell(f"upstream {self.upstream[0]}:{self.upstream[1]} refused the client {where}: "
                          f"{exc.strerror or exc}; its connection is closed")  # fmt: skip
                c_writer.close()
                return
            client = Side(peer[0], peer[1], 1000)
            server = Side(self.upstream[0], self.upstream[1], 5000)
            rec = self.recorder
            rec.segment(client, server, TCP_SYN)
            rec.segment(server, client, TCP_SYN | TCP_ACK)
            rec.segment(client, server, TCP_ACK)
            up = asyncio.create_task(self._pump(c_reader, u_writer, client, server))
            down = asyncio.create_task(self._pump(u_reader, c_writer, server, client))
            try:
                await asyncio.gather(up, down, return_exceptions=True)
            except asyncio.CancelledError:
                # The proxy stops: both sides are closed, and the capture says so (their FINs).
                for pump in (up, down):
                    pump.cancel()
                await asyncio.gather(up, down, return_exceptions=True)
        finally:
            self.open.discard(task)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, src: Side, dst: Side
    ) -> None:
        """One direction: read, record, pass on; the end of one side ends the other's writing."""
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                self.recorder.segment(src, dst, TCP_ACK | TCP_PSH, data)
                writer.write(data)
                await writer.drain()  # back-pressure: no more reading until the other side took it
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.recorder.segment(src, dst, TCP_FIN | TCP_ACK)
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()
