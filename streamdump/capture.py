"""Reads capture files (pcap, pcapng) and yields the TCP segments in them.

dpkt parses the file formats and the link, IP and TCP headers. This module
picks the right reader, maps link types to dpkt classes, and turns every
failure into a CaptureError with a one-line message; packets read before a
failure are already yielded, so nothing decoded is lost.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import dpkt

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


class CaptureError(Exception):
    """The capture cannot be read (further); str() is a one-line explanation."""


@dataclass(slots=True)
class Tally:
    """Counts every packet read, TCP or not, for reports."""

    packets: int = 0


@dataclass(slots=True)
class Segment:
    number: int  # 1-based packet number in the file
    ts: float
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    flags: int
    payload: bytes


def _ethernet(buf: bytes) -> dpkt.Packet:
    return dpkt.ethernet.Ethernet(buf)


def _raw_ip(buf: bytes) -> dpkt.Packet | None:
    if not buf:
        return None
    version = buf[0] >> 4
    return dpkt.ip.IP(buf) if version == 4 else dpkt.ip6.IP6(buf) if version == 6 else None


def _loopback(buf: bytes) -> dpkt.Packet:
    return dpkt.loopback.Loopback(buf)


def _sll(buf: bytes) -> dpkt.Packet:
    return dpkt.sll.SLL(buf)


def _sll2(buf: bytes) -> dpkt.Packet:
    return dpkt.sll2.SLL2(buf)


# Link types as numbered in pcap/pcapng (LINKTYPE_*).
LINK_DECODERS = {
    1: _ethernet,  # EN10MB
    0: _loopback,  # BSD loopback (NULL)
    108: _loopback,  # OpenBSD loopback
    101: _raw_ip,  # RAW
    12: _raw_ip,  # RAW on some systems
    228: _raw_ip,  # IPV4
    229: _raw_ip,  # IPV6
    113: _sll,  # LINUX_SLL
    276: _sll2,  # LINUX_SLL2
}


def _find_ip(pkt: dpkt.Packet | None) -> dpkt.Packet | None:
    # Walk down encapsulations (VLAN tags are handled by dpkt's Ethernet) to IP.
    for _ in range(4):
        if pkt is None or isinstance(pkt, bytes):
            return None
        if isinstance(pkt, dpkt.ip.IP | dpkt.ip6.IP6):
            return pkt
        pkt = getattr(pkt, "data", None)
    return None


def _address(ip: dpkt.Packet, raw: bytes) -> str:
    family = socket.AF_INET6 if isinstance(ip, dpkt.ip6.IP6) else socket.AF_INET
    return socket.inet_ntop(family, raw)


class _ShortReadWatch:
    """File wrapper noting short reads: dpkt's pcap reader yields a cut-off last packet silently."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.name = getattr(fh, "name", "<capture>")
        self.short = False

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        if 0 < len(data) < size:
            self.short = True
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fh.seek(offset, whence)

    def tell(self) -> int:
        return self.fh.tell()

    def fileno(self) -> int:
        return self.fh.fileno()


def open_reader(fh: BinaryIO, name: str) -> tuple[Iterator[tuple[float, bytes]], int]:
    """A packet iterator and the link type of a pcap or pcapng file."""
    head = fh.read(4)
    fh.seek(0)
    if not head:
        raise CaptureError(f"{name}: empty file, not a capture")
    try:
        if head in PCAP_MAGICS:
            pcap = dpkt.pcap.Reader(fh)
            return iter(pcap), pcap.datalink()
        if head == PCAPNG_MAGIC:
            ng = dpkt.pcapng.Reader(fh)
            return iter(ng), ng.datalink()
    except (ValueError, dpkt.dpkt.NeedData, dpkt.dpkt.UnpackError, struct.error) as exc:
        raise CaptureError(f"{name}: damaged capture header: {exc}") from None
    raise CaptureError(f"{name}: not a pcap or pcapng file (starts with {head.hex()})")


def read_segments(path: Path | str, tally: Tally | None = None) -> Iterator[Segment]:
    """Every TCP segment of a capture file, in file order, numbered like Wireshark's frames."""
    tally = tally if tally is not None else Tally()
    path = Path(path)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise CaptureError(f"{path}: cannot open: {exc.strerror}") from None
    with fh:
        watch = _ShortReadWatch(fh)
        packets, linktype = open_reader(watch, str(path))  # type: ignore[arg-type]
        link = LINK_DECODERS.get(linktype)
        if link is None:
            raise CaptureError(f"{path}: link type {linktype} is not supported")
        number = 0
        while True:
            try:
                ts, buf = next(packets)
            except StopIteration:
                return
            except (ValueError, dpkt.dpkt.NeedData, dpkt.dpkt.UnpackError, struct.error) as exc:
                raise CaptureError(
                    f"{path}: capture is cut short or damaged after packet {number} ({exc})"
                ) from None
            if watch.short:
                raise CaptureError(f"{path}: capture is cut short in the middle of packet {number + 1}")
            number += 1
            tally.packets = number
            segment = _segment(link, number, float(ts), buf)
            if segment is not None:
                yield segment


def _segment(link, number: int, ts: float, buf: bytes) -> Segment | None:  # type: ignore[no-untyped-def]
    try:
        ip = _find_ip(link(buf))
    except (dpkt.dpkt.UnpackError, dpkt.dpkt.NeedData, struct.error, ValueError, IndexError):
        return None
    if ip is None:
        return None
    tcp = ip.data
    if not isinstance(tcp, dpkt.tcp.TCP):
        return None
    payload = bytes(tcp.data)
    return Segment(
        number=number,
        ts=ts,
        src=_address(ip, ip.src),
        dst=_address(ip, ip.dst),
        sport=tcp.sport,
        dport=tcp.dport,
        seq=tcp.seq,
        flags=tcp.flags,
        payload=payload,
    )
