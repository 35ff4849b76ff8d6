"""Packets written to a capture file, pcap or pcapng, by dpkt's writers: what `read -w` keeps,
what the proxy saw, a standard input kept aside to be read again.

pcapng takes packets of any link type (an interface block for each, written when its first
packet comes) and comments in its section header; pcap holds one link type, the first packet's.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from dpkt import pcap, pcapng

# Ethernet: the link type of a file that holds no packet.
DLT_EN10MB = 1
# No link layer captures more in one packet than this (the readers' own bound).
SNAPLEN = 262144


class WriteFormat(StrEnum):
    pcap = "pcap"
    pcapng = "pcapng"


class WriteError(ValueError):
    """Packets a format cannot hold; str() says why in one line."""


class PacketWriter:
    """Writes packets (time, link type, bytes) to out as pcap or pcapng.

    comments: lines for the pcapng section header (what wrote the file and how to read it).
    dpkt is imported when the writer is made: it loads every protocol module it has, which
    commands that write nothing should not pay for at start-up.
    """

    def __init__(self, out: BinaryIO, fmt: WriteFormat = WriteFormat.pcapng, comments: tuple[str, ...] = ()):
        self.out = out
        self.fmt = fmt
        self.comments = comments
        self.count = 0
        from dpkt import pcap, pcapng

        self._dpkt: Any = (pcap, pcapng)
        self._pcap: pcap.Writer | None = None
        self._pcap_link: int | None = None
        self._ng: pcapng.Writer | None = None
        self._interfaces: dict[int, int] = {}  # link type -> interface id

    def write(self, ts: float, linktype: int, data: bytes | memoryview) -> None:
        packet = bytes(data)
        pcap, pcapng = self._dpkt
        if self.fmt is WriteFormat.pcap:
            if self._pcap is None:
                self._pcap = pcap.Writer(self.out, snaplen=SNAPLEN, linktype=linktype)
                self._pcap_link = linktype
            elif linktype != self._pcap_link:
                raise WriteError(
                    f"pcap holds packets of one link type ({self._pcap_link}); packet of link type "
                    f"{linktype} needs pcapng"
                )
            self._pcap.writepkt_time(packet, ts)
        else:
            iface = self._interface(linktype)
            block = pcapng.EnhancedPacketBlockLE(
                iface_id=iface, caplen=len(packet), pkt_len=len(packet), pkt_data=packet
            )
            assert self._ng is not None
            self._ng.writepkt(block, ts=ts)
        self.count += 1

    def close(self) -> None:
        """Finish the file: a pcap or pcapng of no packets still has its headers."""
        if self.fmt is WriteFormat.pcap and self._pcap is None:
            self._pcap = self._dpkt[0].Writer(self.out, snaplen=SNAPLEN)
        elif self.fmt is WriteFormat.pcapng and self._ng is None:
            self._interface(DLT_EN10MB)
        self.out.flush()

    def _interface(self, linktype: int) -> int:
        found = self._interfaces.get(linktype)
        if found is not None:
            return found
        pcapng = self._dpkt[1]
        idb = pcapng.InterfaceDescriptionBlockLE(snaplen=SNAPLEN, linktype=linktype)
        if self._ng is None:
            options = [pcapng.PcapngOptionLE(code=pcapng.PCAPNG_OPT_COMMENT, text=c) for c in self.comments]
            options.append(pcapng.PcapngOptionLE(code=pcapng.PCAPNG_OPT_SHB_USERAPPL, data=b"streamdump"))
            options.append(pcapng.PcapngOptionLE(code=pcapng.PCAPNG_OPT_ENDOFOPT))
            shb = pcapng.SectionHeaderBlockLE(opts=options)
            self._ng = pcapng.Writer(self.out, shb=shb, idb=idb)
        else:
            self.out.write(bytes(idb))  # an interface block may come anywhere before its packets
        self._interfaces[linktype] = found = len(self._interfaces)
        return found
