"""Link, IP and TCP headers of one captured packet, parsed with precompiled structs.

Only what reassembly needs is read: addresses, ports, sequence and acknowledgement
numbers, flags, and the TCP payload together with the length the IP header says it
had on the wire (snaplen-truncated packets carry less). Packets that are not TCP, or
are IP fragments, or are cut inside their headers come back as a `Skip` with a reason,
so the reader can count and report them instead of guessing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from enum import Enum

from msgspec import Struct

_U16 = struct.Struct("!H")
_U32_LE = struct.Struct("<I")
_U32_BE = struct.Struct("!I")
_IPV4 = struct.Struct("!BBHHHBBHII")
_IPV6 = struct.Struct("!IHBB16s16s")
_TCP = struct.Struct("!HHIIBB")
# The commonest packet of all, Ethernet then IPv4 without options then TCP, read in one step:
# ethertype, the IPv4 header (_IPV4's fields) and TCP's fixed start (_TCP's).
_ETHER_IPV4_TCP = struct.Struct("!12xHBBHHHBBHIIHHIIBB")
_FUSED_MIN = 14 + 20 + 20

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
ETH_VLAN = frozenset({0x8100, 0x88A8, 0x9100})  # 802.1Q, 802.1ad (QinQ) and its pre-standard tag

# Address families seen in BSD loopback headers: Linux, the BSDs and macOS number AF_INET6 differently.
AF_IPV4 = frozenset({2})
AF_IPV6 = frozenset({10, 24, 28, 30})

IPPROTO_TCP = 6
# IPv6 extension headers that may sit between the fixed header and TCP.
IPV6_EXTENSIONS = frozenset({0, 43, 60, 51})
IPV6_FRAGMENT = 44


class Skip(Enum):
    """Why a packet yields no TCP segment."""

    NOT_TCP = "not TCP"
    FRAGMENT = "IP fragment"
    TRUNCATED = "cut short inside its headers"
    UNKNOWN_LINK = "unknown link type"


class Segment(Struct):
    """One TCP segment as reassembly sees it."""

    number: int  # 1-based packet number in the file
    ts: float
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes  # the captured part of the payload
    wire_len: int = -1  # payload length on the wire; -1: as captured

    def __post_init__(self) -> None:
        if self.wire_len < 0:
            self.wire_len = len(self.payload)


# A link parser returns (ethertype-like IP version selector, offset of the IP header) or None.
LinkParser = Callable[[memoryview], "tuple[int, int] | None"]


def _ethernet(buf: memoryview) -> tuple[int, int] | None:
    if len(buf) < 14:
        return None
    off = 12
    (ethertype,) = _U16.unpack_from(buf, off)
    off += 2
    while ethertype in ETH_VLAN:
        if len(buf) < off + 4:
            return None
        (ethertype,) = _U16.unpack_from(buf, off + 2)
        off += 4
    return ethertype, off


def _sll(buf: memoryview) -> tuple[int, int] | None:
    if len(buf) < 16:
        return None
    return _U16.unpack_from(buf, 14)[0], 16


def _sll2(buf: memoryview) -> tuple[int, int] | None:
    if len(buf) < 20:
        return None
    return _U16.unpack_from(buf, 0)[0], 20


def _family(family: int) -> int:
    return ETH_IPV4 if family in AF_IPV4 else ETH_IPV6 if family in AF_IPV6 else -1


def _null(buf: memoryview) -> tuple[int, int] | None:
    # LINKTYPE_NULL stores the family in the writer's byte order; small values tell which.
    if len(buf) < 4:
        return None
    (family,) = _U32_LE.unpack_from(buf, 0)
    if family > 0xFFFF:
        (family,) = _U32_BE.unpack_from(buf, 0)
    return _family(family), 4


def _loop(buf: memoryview) -> tuple[int, int] | None:
    if len(buf) < 4:
        return None
    return _family(_U32_BE.unpack_from(buf, 0)[0]), 4


def _raw(buf: memoryview) -> tuple[int, int] | None:
    if not buf:
        return None
    version = buf[0] >> 4
    return (ETH_IPV4 if version == 4 else ETH_IPV6 if version == 6 else -1), 0


# Link types as numbered in pcap/pcapng (LINKTYPE_*).
LINK_PARSERS: dict[int, LinkParser] = {
    1: _ethernet,  # EN10MB
    0: _null,  # BSD loopback, host byte order
    108: _loop,  # OpenBSD loopback, network byte order
    101: _raw,  # RAW
    12: _raw,  # RAW as some systems number it
    14: _raw,  # RAW as OpenBSD numbers it
    228: _raw,  # IPV4
    229: _raw,  # IPV6
    113: _sll,  # LINUX_SLL (tcpdump -i any)
    276: _sll2,  # LINUX_SLL2 (tcpdump -i any, libpcap 1.10+)
}


# What the report calls the link types read, in LINK_PARSERS' order of importance.
LINKS_READ = "Ethernet, Linux cooked (SLL and SLL2), raw IP, and BSD and OpenBSD loopback"


def unknown_links_text(links: Mapping[int, int]) -> str:
    """The link types no parser reads, with their packet counts: "link type 147 (3 packets)"."""
    return ", ".join(
        f"link type {link} ({count} packet{'s' * (count != 1)})" for link, count in sorted(links.items())
    )


# IPv4 addresses as text, by their four bytes read as one number (no bytes object made and hashed
# per packet): a capture names a few hosts over and over. Bounded: cleared when full (a capture of
# many hosts only makes them again).
_IPV4_TEXT: dict[int, str] = {}
_IPV4_KEPT = 1 << 16


def _ipv4_text(raw: int) -> str:
    text = _IPV4_TEXT.get(raw)
    if text is None:
        if len(_IPV4_TEXT) >= _IPV4_KEPT:
            _IPV4_TEXT.clear()
        text = _IPV4_TEXT[raw] = f"{raw >> 24}.{raw >> 16 & 255}.{raw >> 8 & 255}.{raw & 255}"
    return text


def parse(linktype: int, buf: bytes, number: int, ts: float) -> Segment | Skip:
    """The TCP segment in one captured packet, or why there is none."""
    if linktype == 1 and len(buf) >= _FUSED_MIN:
        # _ethernet, _ipv4 and _tcp's steps for the commonest packet; anything else (a VLAN
        # tag, IP options, not TCP, a fragment) takes them one by one below.
        (
            ethertype,
            vhl,
            _,
            total,
            _,
            frag,
            _,
            proto,
            _,
            src,
            dst,
            sport,
            dport,
            seq,
            ack,
            data_off,
            flags,
        ) = _ETHER_IPV4_TCP.unpack_from(buf, 0)
        if ethertype == ETH_IPV4 and vhl == 0x45 and proto == IPPROTO_TCP and not frag & 0x3FFF:
            start = 34 + (data_off >> 4) * 4
            size = len(buf)
            if size < start:
                return Skip.TRUNCATED
            end = 14 + total if total >= 20 else size
            src_text, dst_text = _IPV4_TEXT.get(src), _IPV4_TEXT.get(dst)
            return Segment(
                number,
                ts,
                src_text if src_text is not None else _ipv4_text(src),
                dst_text if dst_text is not None else _ipv4_text(dst),
                sport,
                dport,
                seq,
                ack,
                flags,
                bytes(buf[start : min(end, size)]) if start < end else b"",  # a bare ACK: no slice
                max(0, end - start),
            )
    return parse_steps(linktype, buf, number, ts)


def parse_steps(linktype: int, buf: bytes, number: int, ts: float) -> Segment | Skip:
    """parse's result through the link, IP and TCP steps one by one, for any packet."""
    link = LINK_PARSERS.get(linktype)
    if link is None:
        return Skip.UNKNOWN_LINK
    mv = memoryview(buf)
    found = link(mv)
    if found is None:
        return Skip.TRUNCATED
    ethertype, off = found
    if ethertype == ETH_IPV4:
        return _ipv4(mv, off, number, ts)
    if ethertype == ETH_IPV6:
        return _ipv6(mv, off, number, ts)
    return Skip.NOT_TCP


def _ipv4(mv: memoryview, off: int, number: int, ts: float) -> Segment | Skip:
    if len(mv) < off + 20:
        return Skip.TRUNCATED
    vhl, _tos, total, _ident, frag, _ttl, proto, _sum, src, dst = _IPV4.unpack_from(mv, off)
    if proto != IPPROTO_TCP:
        return Skip.NOT_TCP
    if frag & 0x3FFF:  # more-fragments flag or a fragment offset
        return Skip.FRAGMENT
    hlen = (vhl & 0x0F) * 4
    # TSO captures write 0 as the total length of a large segment; trust the capture then.
    end = off + total if total >= hlen else len(mv)
    return _tcp(
        mv,
        off + hlen,
        end,
        _ipv4_text(src),
        _ipv4_text(dst),
        number,
        ts,
    )


def _ipv6(mv: memoryview, off: int, number: int, ts: float) -> Segment | Skip:
    import socket  # for IPv6 text only: its import costs a start-up 14 million instructions

    if len(mv) < off + 40:
        return Skip.TRUNCATED
    _vtf, plen, nxt, _hops, src, dst = _IPV6.unpack_from(mv, off)
    end = off + 40 + plen if plen else len(mv)  # 0 = jumbogram or TSO; trust the capture
    pos = off + 40
    while nxt in IPV6_EXTENSIONS:
        if len(mv) < pos + 2:
            return Skip.TRUNCATED
        # AH counts its length in 4-byte units, the others in 8-byte units beyond the first 8.
        step = (mv[pos + 1] + 2) * 4 if nxt == 51 else (mv[pos + 1] + 1) * 8
        nxt = mv[pos]
        pos += step
    if nxt == IPV6_FRAGMENT:
        return Skip.FRAGMENT
    if nxt != IPPROTO_TCP:
        return Skip.NOT_TCP
    return _tcp(
        mv,
        pos,
        end,
        socket.inet_ntop(socket.AF_INET6, src),
        socket.inet_ntop(socket.AF_INET6, dst),
        number,
        ts,
    )


def _tcp(mv: memoryview, off: int, end: int, src: str, dst: str, number: int, ts: float) -> Segment | Skip:
    if len(mv) < off + 20:
        return Skip.TRUNCATED
    sport, dport, seq, ack, data_off, flags = _TCP.unpack_from(mv, off)
    start = off + (data_off >> 4) * 4
    if len(mv) < start:
        return Skip.TRUNCATED
    wire_len = max(0, end - start)
    payload = bytes(mv[start : min(end, len(mv))])
    return Segment(number, ts, src, dst, sport, dport, seq, ack, flags, payload, wire_len)
