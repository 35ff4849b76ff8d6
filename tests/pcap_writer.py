"""A pcap of one TCP connection built from frames: what tests and the hostile corpus feed readers."""

from __future__ import annotations

import io
import socket
from collections.abc import Sequence

import dpkt

# IPv4 caps a packet at 64 KiB: a longer payload goes in several segments.
MAX_SEGMENT = 60000


def tcp_pcap(
    frames: list[tuple[bool, bytes]],
    server: tuple[str, int] = ("127.0.0.1", 5552),
    client: tuple[str, int] = ("127.0.0.1", 40000),
    ending: Sequence[tuple[bool, int]] = (),
    refused: bool = False,
    segment: int = MAX_SEGMENT,
) -> bytes:
    """A pcap of one TCP connection (handshake, then a segment per frame, or a few for a frame
    longer than `segment`), (from_client, bytes) each, built with dpkt; then the segments of
    ending, (from_client, TCP flags) each. refused: the server answers the SYN with a reset,
    and nothing follows."""
    out = io.BytesIO()
    writer = dpkt.pcap.Writer(out)
    seq = {True: 1000, False: 5000}
    ts = 1_800_000_000.0

    def packet(from_client: bool, flags: int, payload: bytes = b"") -> None:
        nonlocal ts
        (src, sport), (dst, dport) = (client, server) if from_client else (server, client)
        tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq[from_client], ack=seq[not from_client],
                           flags=flags, win=65535, data=payload)  # fmt: skip
        ip = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=dpkt.ip.IP_PROTO_TCP)
        ip.data = tcp
        ip.len = 20 + len(bytes(tcp))
        eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP)
        eth.data = ip
        writer.writepkt(bytes(eth), ts=ts)
        ts += 0.001
        seq[from_client] += len(payload) + (1 if flags & (dpkt.tcp.TH_SYN | dpkt.tcp.TH_FIN) else 0)

    packet(True, dpkt.tcp.TH_SYN)
    if refused:
        packet(False, dpkt.tcp.TH_RST | dpkt.tcp.TH_ACK)
        return out.getvalue()
    packet(False, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)
    packet(True, dpkt.tcp.TH_ACK)
    for from_client, payload in frames:
        for at in range(0, max(len(payload), 1), segment):
            packet(from_client, dpkt.tcp.TH_PUSH | dpkt.tcp.TH_ACK, payload[at : at + segment])
    for from_client, flags in ending:
        packet(from_client, flags)
    return out.getvalue()
