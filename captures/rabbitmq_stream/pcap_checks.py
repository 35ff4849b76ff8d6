"""Reading a finished capture back: is it whole, and what frames does it carry.

Owns the checks every recording gets (`check_capture`: whole TCP connections, their count,
the link type in the file header, segment sizes), the stream-protocol frames of a capture
joined per direction with dpkt (`capture_frames`, `publish_entries`, `deliver_chunk`) for
the scenarios that compare them with what they sent, and the pcapng copy of session.pcap
(`write_pcapng`), checked packet by packet against its source.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from broker import PORT
from loopback import WIRE_MSS
from osiris_chunks import CHUNK_HEADER_LEN, Entry, StoredChunk, chunk_entries, read_entry
from scenario_tools import expect
from system_tools import give_to_dir_owner

KEY_PUBLISH = 0x0002
KEY_DELIVER = 0x0008

# pcap link types (DLT_*) as written in the file header.
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276


def capture_frames(pcap: Path) -> tuple[list[bytes], list[bytes]]:
    """Stream-protocol frames of a one-connection Ethernet capture: (client→server, server→client).

    Each frame is given without its u32 size: key, version, then the body.
    """
    import dpkt

    data: dict[bool, bytearray] = {True: bytearray(), False: bytearray()}
    next_seq: dict[bool, int] = {}
    with pcap.open("rb") as fh:
        for _ts, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.tcp.TCP):
                continue
            tcp = ip.data
            to_server = tcp.dport == PORT
            if tcp.flags & dpkt.tcp.TH_SYN:
                next_seq[to_server] = tcp.seq + 1
                continue
            payload = bytes(tcp.data)
            if not payload:
                continue
            # Bytes already seen (a retransmission) are skipped; a gap fails the check.
            skip = (next_seq[to_server] - tcp.seq) % 2**32
            if skip >= 2**31:
                raise RuntimeError(f"{pcap}: bytes missing before seq {tcp.seq}")
            data[to_server] += payload[skip:]
            next_seq[to_server] = max(next_seq[to_server], tcp.seq + len(payload)) % 2**32
    frames: tuple[list[bytes], list[bytes]] = ([], [])
    for to_server, out in ((True, frames[0]), (False, frames[1])):
        buf, pos = bytes(data[to_server]), 0
        while pos < len(buf):
            (size,) = struct.unpack_from(">I", buf, pos)
            out.append(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
        expect(pos == len(buf), f"{pcap}: the last frame is cut short")
    return frames


def frame_key(frame: bytes) -> int:
    return struct.unpack_from(">H", frame)[0]


def publish_entries(frame: bytes) -> list[tuple[int, Entry]]:
    """(publishing id, entry) of each message of a version-1 Publish frame."""
    (count,) = struct.unpack_from(">i", frame, 5)
    pos = 9
    entries = []
    for _ in range(count):
        (publishing_id,) = struct.unpack_from(">Q", frame, pos)
        entry, pos = read_entry(frame, pos + 8)
        entries.append((publishing_id, entry))
    expect(pos == len(frame), "Publish frame ends after its messages")
    return entries


def deliver_chunk(frame: bytes) -> tuple[StoredChunk, list[Entry]]:
    """The chunk of a version-1 Deliver frame; it must end right after the data."""
    chunk = StoredChunk.unpack(frame, 5, "deliver")
    expect(len(frame) == 5 + CHUNK_HEADER_LEN + chunk.data_length, "Deliver ends right after the chunk data")
    expect(chunk.crc_ok(), f"data CRC of chunk {chunk.chunk_id}")
    return chunk, chunk_entries(chunk.data, chunk.num_entries) if chunk.chunk_type == 0 else []


def _raw_packets(path: Path) -> list[tuple[int, int, bytes]]:
    """(timestamp in µs, wire length, bytes) of every packet, pcap or pcapng alike."""
    from scapy.utils import RawPcapReader

    packets: list[tuple[int, int, bytes]] = []
    with RawPcapReader(str(path)) as reader:  # picks the pcapng reader by itself
        for data, meta in reader:
            if hasattr(meta, "tshigh"):
                ticks = (meta.tshigh << 32) | meta.tslow
                micros = ticks * 1_000_000 // meta.tsresol
            else:
                micros = meta.sec * 1_000_000 + meta.usec
            packets.append((micros, meta.wirelen, bytes(data)))
    return packets


def pcap_linktype(path: Path) -> int:
    """Link type from a classic pcap file header (either byte order)."""
    with path.open("rb") as fh:
        header = fh.read(24)
    order = "<" if header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    return struct.unpack(order + "IHHiIII", header)[6]


@dataclass
class CaptureSummary:
    packets: int
    connections: int
    linktype: int
    # TCP payload bytes: the largest segment, and how many segments had exactly WIRE_MSS.
    max_payload: int
    mss_segments: int
    syn_mss: list[int]


def check_capture(pcap: Path) -> CaptureSummary:
    """Summarise `pcap`; fail unless every connection is whole.

    Whole means its SYN and a FIN or RST are in the file: a capture cut short at either
    end is useless as a decoder test even when tcpdump itself reported no error.
    """
    from scapy.layers.inet import IP, TCP
    from scapy.utils import rdpcap

    packets = rdpcap(str(pcap))
    opened: set[int] = set()
    closed: set[int] = set()
    max_payload = mss_segments = 0
    syn_mss: list[int] = []
    for pkt in packets:
        if TCP not in pkt:
            continue
        tcp = pkt[TCP]
        client_port = tcp.dport if tcp.sport == PORT else tcp.sport
        if tcp.flags.S:
            syn_mss += [value for kind, value in tcp.options if kind == "MSS"]
            if not tcp.flags.A:
                opened.add(client_port)
        if tcp.flags.F or tcp.flags.R:
            closed.add(client_port)
        # From the IP total length, not len(tcp.payload), which would count link padding.
        payload = pkt[IP].len - pkt[IP].ihl * 4 - tcp.dataofs * 4
        max_payload = max(max_payload, payload)
        mss_segments += payload == WIRE_MSS
    if not opened or opened != closed:
        raise RuntimeError(f"{pcap}: connections opened {sorted(opened)}, closed {sorted(closed)}")
    return CaptureSummary(len(packets), len(opened), pcap_linktype(pcap), max_payload, mss_segments, syn_mss)


def write_pcapng(pcap: Path, pcapng: Path) -> int:
    """Copy every packet of `pcap` into `pcapng`, keeping bytes and timestamps exact."""
    # Importing the layer registers Ether for link type 1; without it scapy reads raw
    # packets and the pcapng writer cannot tell which link type to declare.
    from scapy.layers.l2 import Ether  # noqa: F401
    from scapy.utils import PcapNgWriter, rdpcap

    packets = rdpcap(str(pcap))
    pcapng.unlink(missing_ok=True)
    with PcapNgWriter(str(pcapng)) as writer:
        # write_packet() skips the header logic of write(); the first packet tells scapy
        # which link type the interface block must declare.
        writer.write_header(packets[0])
        for pkt in packets:
            # Passing the EDecimal time through avoids scapy's float conversion, which can
            # shift a timestamp by one microsecond.
            writer.write_packet(pkt, sec=pkt.time, wirelen=pkt.wirelen)
    # Compare raw file contents, not re-dissected scapy packets, so that a scapy rebuild
    # quirk cannot hide a difference.
    if _raw_packets(pcapng) != _raw_packets(pcap):
        raise RuntimeError(f"{pcapng} does not hold the same packets as {pcap}")
    give_to_dir_owner(pcapng)
    return len(packets)


def _ones_complement_update(checksum: int, old: int, new: int) -> int:
    """A 16-bit Internet checksum after one 16-bit word changed from old to new (RFC 1624, eqn. 3)."""
    total = (~checksum & 0xFFFF) + (~old & 0xFFFF) + new
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def rewrite_port(pcap: Path, old: int, new: int) -> int:
    """Give TCP port old the number new in a classic Ethernet pcap, in place: the ports and the TCP
    checksums change (updated, not recomputed, so a bad checksum stays bad), nothing else.
    Returns the packets changed."""
    data = bytearray(pcap.read_bytes())
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    expect(struct.unpack_from(order + "I", data, 20)[0] == LINKTYPE_ETHERNET, f"{pcap}: not Ethernet")
    at, changed = 24, 0
    while at + 16 <= len(data):
        incl = struct.unpack_from(order + "I", data, at + 8)[0]
        pkt = at + 16
        ip = pkt + 14
        is_tcp = incl >= 14 + 20 + 20 and data[pkt + 12 : pkt + 14] == b"\x08\x00" and data[ip + 9] == 6
        if is_tcp:
            tcp = ip + (data[ip] & 0x0F) * 4
            for field in (tcp, tcp + 2):
                if struct.unpack_from(">H", data, field)[0] == old:
                    struct.pack_into(">H", data, field, new)
                    checksum = struct.unpack_from(">H", data, tcp + 16)[0]
                    struct.pack_into(">H", data, tcp + 16, _ones_complement_update(checksum, old, new))
                    changed += 1
        at = pkt + incl
    pcap.write_bytes(bytes(data))
    return changed
