"""Derive pathological test captures, with their ground truth, from real recordings.

A real capture (Ethernet, IPv4, TCP, from `record.py`) goes in; variants come out that have what real
captures have and the clean recordings lack: resegmentation, reordering, retransmissions (exact, partial,
conflicting), lost segments, a start in the middle of the connection, keep-alives and zero-window probes,
a snap length, IP fragments, other link types and other file formats. `manifest.json` says, for each
file, which TCP byte ranges are absent and why, where copies conflict, and which packets are fragments,
so a test can check that every frame whose bytes are all present decodes and that every gap is reported.

    cd captures/rabbitmq_stream
    python make_pathologies.py --source session.pcap --source offset_specs.pcap \\
        --source bulk.pcap \\
        --select bulk=reordered,duplicated,overlap_conflict,dropped,midstream,snaplen,ipfrag \\
        --outdir pathological --seed 1

TCP pathologies are made from every --source, link-layer and file-format variants from --link-source
(default: the first --source). `regenerate()` rebuilds what a manifest lists, for a test to compare.

The output depends only on the sources, the seed and the options: timestamps come from the source, every
random choice comes from a `random.Random` seeded with a string, and the JSON is written with sorted keys.
Sequence numbers in the manifest are absolute TCP sequence numbers; ranges are [start, end).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import gzip
import ipaddress
import itertools
import json
import random
import struct
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scapy.layers.inet import IP, TCP, fragment
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Ether
from scapy.packet import Raw

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
SEQ_MOD = 1 << 32
NS = 1_000_000_000
DEFAULT_SNAPLEN = 262144

MSS = 1448  # Ethernet MTU 1500 - 20 (IPv4) - 20 (TCP) - 12 (timestamp option), what Linux sends at MTU 1500
SNAPLEN = 200  # short enough to cut the larger frames of the small recordings
FRAGSIZE = 64  # IP payload bytes per fragment (a multiple of 8), so even a 40-byte segment splits

TCP_PATHOLOGIES = (
    "mss1448",
    "reordered",
    "duplicated",
    "overlap_conflict",
    "dropped",
    "midstream",
    "keepalive_zwp",
    "snaplen",
    "ipfrag",
)
LINK_PATHOLOGIES = (
    "vlan",
    "sll",
    "sll2",
    "null_le",
    "loop",
    "rawip",
    "ipv6",
    "pcap_be_nsec",
    "pcapng_multi",
    "pcapng_sections",
    "gz",
    "zst",
)


# --- File formats -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One captured packet: time in integer nanoseconds (no float rounding), bytes as captured."""

    ts: int
    data: bytes
    orig_len: int


_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}


def read_pcap(path: Path) -> tuple[int, list[Record]]:
    """Return (link type, records) of a classic pcap file in either byte order and resolution."""
    buf = path.read_bytes()
    if buf[:4] not in _PCAP_MAGICS:
        raise ValueError(f"{path}: not a pcap file (pcapng sources are not supported)")
    endian, mult = _PCAP_MAGICS[buf[:4]]
    linktype = struct.unpack_from(endian + "I", buf, 20)[0]
    records: list[Record] = []
    off = 24
    while off + 16 <= len(buf):
        sec, frac, incl, orig = struct.unpack_from(endian + "IIII", buf, off)
        off += 16
        records.append(Record(sec * NS + frac * mult, buf[off : off + incl], orig))
        off += incl
    return linktype, records


def pcap_bytes(
    records: Iterable[Record],
    linktype: int,
    *,
    snaplen: int = DEFAULT_SNAPLEN,
    big_endian: bool = False,
    nsec: bool = False,
) -> bytes:
    """Serialise a classic pcap file (version 2.4)."""
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nsec else 0xA1B2C3D4
    out = [struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for r in records:
        sec, rem = divmod(r.ts, NS)
        out.append(struct.pack(e + "IIII", sec, rem if nsec else rem // 1000, len(r.data), r.orig_len))
        out.append(r.data)
    return b"".join(out)


def _pad4(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def _options(e: str, opts: Sequence[tuple[int, bytes]]) -> bytes:
    if not opts:
        return b""
    body = b"".join(struct.pack(e + "HH", code, len(v)) + _pad4(v) for code, v in opts)
    return body + struct.pack(e + "HH", 0, 0)  # opt_endofopt


def _block(e: str, btype: int, body: bytes) -> bytes:
    body = _pad4(body)
    total = 12 + len(body)
    return struct.pack(e + "II", btype, total) + body + struct.pack(e + "I", total)


@dataclass(frozen=True)
class NgInterface:
    linktype: int
    name: str
    tsresol: int = 6  # power of ten; 6 (microseconds) is the pcapng default and is then left out
    snaplen: int = DEFAULT_SNAPLEN


@dataclass(frozen=True)
class NgSection:
    big_endian: bool
    interfaces: Sequence[NgInterface]
    packets: Sequence[tuple[int, Record]]  # (interface id within this section, record)
    write_length: bool = False  # fill in the SHB section length instead of -1 ("unknown")


def pcapng_bytes(sections: Sequence[NgSection]) -> bytes:
    """Serialise a pcapng file: per section one SHB, its IDBs, then EPBs."""
    out = []
    for sec in sections:
        e = ">" if sec.big_endian else "<"
        blocks = []
        for itf in sec.interfaces:
            opts = [(2, itf.name.encode())]  # if_name
            if itf.tsresol != 6:
                opts.append((9, bytes([itf.tsresol])))  # if_tsresol
            body = struct.pack(e + "HHI", itf.linktype, 0, itf.snaplen) + _options(e, opts)
            blocks.append(_block(e, 0x00000001, body))
        for iface, r in sec.packets:
            units = r.ts // 10 ** (9 - sec.interfaces[iface].tsresol)
            head = struct.pack(e + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(r.data), r.orig_len)
            blocks.append(_block(e, 0x00000006, head + _pad4(r.data)))
        rest = b"".join(blocks)
        shb_opts = _options(e, [(4, b"streamdump captures/make_pathologies.py")])  # shb_userappl
        length = len(rest) if sec.write_length else -1
        out.append(_block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, length) + shb_opts))
        out.append(rest)
    return b"".join(out)


# --- Packets ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tcp:
    """Parsed TCP view of a packet. seq/ack are unwrapped per direction (linear, may pass 2**32)."""

    src: str
    dst: str
    seq: int
    ack: int
    flags: int
    window: int
    ip_id: int
    hdr_len: int  # link + IP + TCP header bytes before the payload
    payload: bytes

    @property
    def key(self) -> str:
        return f"{self.src}->{self.dst}"

    @property
    def rkey(self) -> str:
        return f"{self.dst}->{self.src}"

    @property
    def end(self) -> int:
        return self.seq + len(self.payload)


@dataclass(eq=False)  # identity matters: the manifest refers to packets by their final position
class Pkt:
    ts: int
    raw: bytes
    orig_len: int
    tcp: Tcp | None


def _parse_eth_tcp(raw: bytes) -> tuple[str, str, int, int, int, int, int, int, bytes] | None:
    """Ethernet/IPv4/TCP header fields, or None for anything else (including IP fragments)."""
    if len(raw) < 34 or raw[12:14] != b"\x08\x00":
        return None
    ihl = (raw[14] & 0x0F) * 4
    total, ip_id, frag = struct.unpack_from(">HHH", raw, 16)
    if raw[23] != 6 or frag & 0x3FFF:
        return None
    t = 14 + ihl
    sport, dport, seq, ack, offflags, win = struct.unpack_from(">HHIIHH", raw, t)
    doff = (offflags >> 12) * 4
    src = f"{ipaddress.IPv4Address(raw[26:30])}:{sport}"
    dst = f"{ipaddress.IPv4Address(raw[30:34])}:{dport}"
    return src, dst, seq, ack, offflags & 0x1FF, win, ip_id, t + doff, raw[t + doff : 14 + total]


def parse_packets(records: Sequence[Record]) -> list[Pkt]:
    """Parse Ethernet records; unwrap sequence numbers against each direction's first one."""
    base: dict[str, int] = {}

    def unwrap(key: str, value: int) -> int:
        b = base.setdefault(key, value)
        return b + ((value - b) % SEQ_MOD)

    pkts = []
    for r in records:
        f = _parse_eth_tcp(r.data)
        tcp = None
        if f is not None:
            src, dst, seq, ack, flags, win, ip_id, hdr, payload = f
            key, rkey = f"{src}->{dst}", f"{dst}->{src}"
            useq = unwrap(key, seq)
            uack = unwrap(rkey, ack) if flags & ACK else ack
            tcp = Tcp(src, dst, useq, uack, flags, win, ip_id, hdr, payload)
        pkts.append(Pkt(r.ts, r.data, r.orig_len, tcp))
    return pkts


def is_data(p: Pkt) -> bool:
    """A plain data segment: payload, and no SYN/FIN/RST that would make moving it unrealistic."""
    return p.tcp is not None and bool(p.tcp.payload) and not p.tcp.flags & (SYN | FIN | RST)


def tcp_of(p: Pkt) -> Tcp:
    """The TCP view of a packet known to be TCP."""
    assert p.tcp is not None
    return p.tcp


def has_key(p: Pkt, key: str) -> bool:
    return p.tcp is not None and p.tcp.key == key


def rebuild(p: Pkt, *, ts: int | None = None, **changes: int | bytes) -> Pkt:
    """Copy of an Ethernet/IPv4/TCP packet with TCP fields (seq, ack, flags, window, ip_id, payload)
    changed; scapy recomputes the IP length and both checksums."""
    assert p.tcp is not None
    t = dataclasses.replace(p.tcp, **changes)  # type: ignore[arg-type]
    e = Ether(p.raw)
    ip, tcp = e[IP], e[TCP]
    ip.id = t.ip_id & 0xFFFF
    tcp.seq, tcp.ack = t.seq % SEQ_MOD, t.ack % SEQ_MOD
    tcp.flags, tcp.window = t.flags, t.window
    tcp.remove_payload()  # also drops any Ethernet padding scapy hung below TCP
    if t.payload:
        tcp.add_payload(Raw(t.payload))
    del ip.len, ip.chksum, tcp.chksum
    raw = bytes(e)
    return Pkt(p.ts if ts is None else ts, raw, len(raw), t)


def retime(p: Pkt, ts: int) -> Pkt:
    return Pkt(ts, p.raw, p.orig_len, p.tcp)


def split(p: Pkt, offsets: Sequence[int]) -> list[Pkt]:
    """Cut a data segment at payload offsets, as a sender with a smaller MSS would have sent it."""
    assert p.tcp is not None
    t = p.tcp
    cuts = [0, *offsets, len(t.payload)]
    pieces = []
    for n, (a, b) in enumerate(itertools.pairwise(cuts)):
        last = b == len(t.payload)
        flags = t.flags if last else t.flags & ~PSH
        pieces.append(rebuild(p, seq=t.seq + a, payload=t.payload[a:b], flags=flags, ip_id=t.ip_id + n))
    return pieces


def _between(a: int, b: int, i: int, k: int) -> int:
    """i-th of k-1 evenly spaced microsecond instants in (a, b), so pcap's microsecond field keeps order."""
    return (a + (b - a) * i // k) // 1000 * 1000


# --- Sources ------------------------------------------------------------------------------------------


@dataclass
class Stream:
    """One direction's byte stream in the source, and where its frames (uint32 size + body) lie. A frame
    cut off by the end of the capture is not listed."""

    base: int
    data: bytes
    frames: list[tuple[int, int]]  # (start seq, end seq) of each complete frame

    def frame_at(self, seq: int) -> tuple[int, int] | None:
        n = bisect.bisect_right(self.frames, (seq, SEQ_MOD << 32)) - 1  # last frame starting at or before seq
        if n >= 0 and seq < self.frames[n][1]:
            return self.frames[n]
        return None

    def is_boundary(self, seq: int) -> bool:
        f = self.frame_at(seq)
        return f is not None and f[0] == seq


@dataclass
class Source:
    path: Path
    stem: str
    pkts: list[Pkt]
    streams: dict[str, Stream]
    client: str  # direction key of the connection's SYN (or of the first TCP packet)


def load_source(path: Path) -> Source:
    linktype, records = read_pcap(path)
    if linktype != LINKTYPE_ETHERNET:
        raise ValueError(f"{path}: link type {linktype}; sources must be Ethernet captures")
    pkts = parse_packets(records)
    tcps = [p.tcp for p in pkts if p.tcp is not None]
    keys = {t.key for t in tcps}
    if len(keys) > 2:
        raise ValueError(f"{path}: {len(keys)} TCP directions; sources must hold one connection")
    syn = next((t for t in tcps if t.flags & SYN and not t.flags & ACK), tcps[0])
    streams = {}
    for key in sorted(keys):
        ts = [t for t in tcps if t.key == key]
        syns = [t for t in ts if t.flags & SYN]
        base = syns[0].seq + 1 if syns else min(t.seq for t in ts if t.payload)
        buf = bytearray()
        for t in sorted((t for t in ts if t.payload), key=lambda t: t.seq):
            if t.seq > base + len(buf):
                raise ValueError(
                    f"{path}: {key} has a gap at seq {base + len(buf)}; the source must be whole"
                )
            buf[t.seq - base : t.end - base] = t.payload
        frames, off = [], 0
        while off + 4 <= len(buf):
            size = struct.unpack_from(">I", buf, off)[0]
            if off + 4 + size > len(buf):
                break
            frames.append((base + off, base + off + 4 + size))
            off += 4 + size
        streams[key] = Stream(base, bytes(buf), frames)
    return Source(path, path.name.split(".")[0], pkts, streams, syn.key)


# --- Variants -----------------------------------------------------------------------------------------

Numbering = Callable[[Pkt], int]


@dataclass
class Variant:
    """A TCP pathology: the packets to write and the ground truth, with packets referred to by identity."""

    pkts: list[Pkt]
    describe: Callable[[Numbering], str]
    # (direction key, start, end, cause) of each absent byte range
    missing: list[tuple[str, int, int, str]] = field(default_factory=list)
    conflicts: list[tuple[Pkt, str, int, int]] = field(default_factory=list)  # (copy, key, start, end)
    first_seq: dict[str, int] = field(default_factory=dict)
    fragments: list[Pkt] = field(default_factory=list)
    probes: list[tuple[Pkt, str]] = field(default_factory=list)  # (packet, "keepalive" | "zero_window_probe")
    snaplen: int = DEFAULT_SNAPLEN


def _nums(num: Numbering, pkts: Iterable[Pkt]) -> str:
    return ", ".join(str(n) for n in sorted(num(p) for p in pkts)) or "none"


def _pick(rng: random.Random, cands: Sequence[int], k: int, keyof: Callable[[int], str]) -> list[int]:
    """Up to k of the candidate indexes, seeded, taking one per direction first so both are covered."""
    order = list(cands)
    rng.shuffle(order)
    chosen: list[int] = []
    for key in sorted({keyof(i) for i in order}):
        first = next(i for i in order if keyof(i) == key)
        chosen.append(first)
    chosen += [i for i in order if i not in chosen][: max(0, k - len(chosen))]
    return sorted(chosen[:k])


def t_mss1448(src: Source, rng: random.Random) -> Variant:
    pk, out = src.pkts, []
    runs = cut = 0
    i = 0
    while i < len(pk):
        p = pk[i]
        if not is_data(p):
            out.append(p)
            i += 1
            continue
        run = [p]
        j = i + 1
        # Back-to-back segments of one direction, contiguous in sequence space, with nothing from the other
        # side in between: a sender that had them all queued could have sent them as one stream.
        while (
            j < len(pk)
            and is_data(pk[j])
            and tcp_of(pk[j]).key == tcp_of(p).key
            and tcp_of(pk[j]).seq == tcp_of(run[-1]).end
        ):
            run.append(pk[j])
            j += 1
        i = j
        pieces = _recut(run)
        runs += len(run) > 1
        cut += sum(len(r.tcp.payload) > MSS for r in run)
        out.extend(pieces)
    return Variant(
        out,
        lambda num: (
            f"Each direction's back-to-back data segments coalesced and cut again at {MSS} bytes "
            f"(MSS at MTU 1500): {runs} runs of 2+ segments joined, {cut} segments over {MSS} bytes split. "
            "No bytes missing."
        ),
    )


def _recut(run: list[Pkt]) -> list[Pkt]:
    ts = [r.tcp for r in run]
    base, data = ts[0].seq, b"".join(t.payload for t in ts)
    bounds = [*range(base, base + len(data), MSS), base + len(data)]
    pieces: list[Pkt] = []
    used: dict[int, int] = {}
    for a, b in itertools.pairwise(bounds):
        # The piece goes out when its last byte was available: with the packet that carried that byte.
        n = next(n for n, t in enumerate(ts) if t.seq < b <= t.end)
        owner, t = run[n], ts[n]
        assert t is not None
        if (a, b) == (t.seq, t.end):
            pieces.append(owner)  # unchanged: keep the real bytes
            continue
        push = any(u.end == b and u.flags & PSH for u in ts)
        flags = (t.flags & ~PSH) | (PSH if push else 0)
        k = used[n] = used.get(n, -1) + 1
        pieces.append(
            rebuild(owner, seq=a, payload=data[a - base : b - base], flags=flags, ip_id=t.ip_id + k)
        )
    return pieces


def _swappable(pk: Sequence[Pkt], i: int, j: int) -> bool:
    """May pk[i] and pk[j] (same direction) trade places? Not if a packet between them from the other side
    acknowledges bytes of pk[i] (it would then be acknowledged before it was seen), nor if one carries data
    (pk[j] might be the answer to it, and would then arrive before its question)."""
    t = tcp_of(pk[i])
    return not any(
        has_key(q, t.rkey) and (tcp_of(q).payload or (tcp_of(q).flags & ACK and tcp_of(q).ack > t.seq))
        for q in pk[i + 1 : j]
    )


def _next_data(pk: Sequence[Pkt], i: int) -> int | None:
    key = tcp_of(pk[i]).key
    return next((j for j in range(i + 1, len(pk)) if is_data(pk[j]) and tcp_of(pk[j]).key == key), None)


def t_reordered(src: Source, rng: random.Random) -> Variant:
    pk = src.pkts
    pairs: dict[int, int] = {}
    for i, p in enumerate(pk):
        j = _next_data(pk, i) if is_data(p) else None
        if j is not None and tcp_of(pk[j]).seq == tcp_of(p).end and _swappable(pk, i, j):
            pairs[i] = j
    order = list(pairs)
    rng.shuffle(order)
    chosen: list[int] = []
    # One pair per direction first, then more, never two pairs whose spans overlap.
    for want_new_dir in (True, False):
        for i in order:
            if len(chosen) >= 4 or i in chosen:
                continue
            if want_new_dir and tcp_of(pk[i]).key in {tcp_of(pk[c]).key for c in chosen}:
                continue
            if all(pairs[i] < c or i > pairs[c] for c in chosen):
                chosen.append(i)
    out = list(pk)
    swapped = []
    for i in sorted(chosen):
        j = pairs[i]
        # Packets change places; the timestamps stay where they were, so time still runs forward.
        out[i], out[j] = retime(pk[j], pk[i].ts), retime(pk[i], pk[j].ts)
        swapped.append((out[i], out[j]))
    return Variant(
        out,
        lambda num: (
            "Adjacent same-direction data segments swapped, each later one now arriving first "
            "(packet pairs, later-sequence first: "
            + ("; ".join(f"{num(a)} before {num(b)}" for a, b in swapped) or "none: no pair qualifies")
            + "). Nothing from the other side came between the two of a pair but pure ACKs that do not "
            "acknowledge the delayed one. No bytes missing."
        ),
    )


def _inserted(
    pk: Sequence[Pkt], after: Mapping[int, list[Pkt]], before: Mapping[int, list[Pkt]]
) -> list[Pkt]:
    out: list[Pkt] = []
    for i, p in enumerate(pk):
        out.extend(before.get(i, []))
        out.append(p)
        out.extend(after.get(i, []))
    return out


def _last_ack(pk: Sequence[Pkt], upto: int, key: str) -> int | None:
    """Highest ACK number sent in direction `key` by packets before position `upto`."""
    acks = [tcp_of(q).ack for q in pk[:upto] if has_key(q, key) and tcp_of(q).flags & ACK]
    return max(acks) if acks else None


def _xor(b: bytes) -> bytes:
    return bytes(x ^ 0xFF for x in b)  # every byte changes, so the conflict range is exactly these bytes


def _retransmissions(src: Source, rng: random.Random, conflict: bool) -> Variant:
    pk = src.pkts
    fin = next((i for i, p in enumerate(pk) if p.tcp is not None and tcp_of(p).flags & FIN), len(pk))
    delay = 3  # a retransmission shows up this many packets after the original
    # Partial overlaps: R = tail of A + head of the next segment B, sent right after A (a repacketised
    # retransmission that overtook B), so R is the first copy of B's head and B then overlaps R. Only
    # where nothing from the other side came between A and B, so B's bytes already existed.
    partial_c = [
        i
        for i, p in enumerate(pk[:fin])
        if is_data(p)
        and len(tcp_of(p).payload) >= 2
        and (j := _next_data(pk, i)) is not None
        and j < fin
        and tcp_of(pk[j]).seq == tcp_of(p).end
        and len(tcp_of(pk[j]).payload) >= 2
        and _swappable(pk, i, j)  # B's bytes must have existed when A was sent
    ]
    partial = _pick(rng, partial_c, 2, lambda i: tcp_of(pk[i]).key)
    exact_c = [
        i
        for i, p in enumerate(pk)
        if is_data(p) and i + delay < fin and i not in partial and len(tcp_of(p).payload) >= 6
    ]
    exact = _pick(rng, exact_c, 4, lambda i: tcp_of(pk[i]).key)
    after: dict[int, list[Pkt]] = {}
    conflicts: list[tuple[Pkt, str, int, int]] = []
    dups: list[Pkt] = []
    altered_keys: set[str] = set()
    for i in exact:
        p = pk[i]
        t = p.tcp
        assert t is not None
        at = i + delay
        ack = max(t.ack, _last_ack(pk, at + 1, t.key) or t.ack)
        payload = t.payload
        if conflict and t.key not in altered_keys:
            # One altered copy per direction; its first 6 bytes differ, which, when the segment starts a
            # frame, includes the size field, so a "last copy wins" decoder derails.
            altered_keys.add(t.key)
            payload = _xor(payload[:6]) + payload[6:]
        copy = rebuild(p, ts=pk[at].ts, ack=ack, payload=payload)
        if payload != t.payload:
            conflicts.append((copy, t.key, t.seq, t.seq + 6))
        after.setdefault(at, []).append(copy)
        dups.append(copy)
    partials: list[Pkt] = []
    for n, i in enumerate(partial):
        a = pk[i]
        ta, tb = a.tcp, pk[_next_data(pk, i)].tcp
        assert ta is not None and tb is not None
        k, m = len(ta.payload) // 2, max(1, len(tb.payload) // 2)
        old, new = ta.payload[k:], tb.payload[:m]
        if conflict and n == 0:
            conflicts_entry = (ta.key, ta.seq + k, ta.end)
            old = _xor(old)
        else:
            conflicts_entry = None
        r = rebuild(a, seq=ta.seq + k, payload=old + new)
        if conflicts_entry:
            conflicts.append((r, *conflicts_entry))
        after.setdefault(i, []).insert(0, r)
        partials.append(r)
    out = _inserted(pk, after, {})

    def describe(num: Numbering) -> str:
        s = (
            f"Exact retransmissions of earlier data segments {delay} packets later "
            f"(packets {_nums(num, dups)}), and retransmissions that start inside a segment and run into "
            f"the next one's bytes, placed right after the first segment (packets {_nums(num, partials)})."
        )
        if conflict:
            s += (
                " Some copies carry different bytes over the range they overlap (see conflicts); the first "
                "copy in the file is the truth. New bytes in every copy are correct."
            )
        return s + " No bytes missing."

    return Variant(out, describe, conflicts=conflicts)


def t_duplicated(src: Source, rng: random.Random) -> Variant:
    return _retransmissions(src, rng, conflict=False)


def t_overlap_conflict(src: Source, rng: random.Random) -> Variant:
    return _retransmissions(src, rng, conflict=True)


def _frame_cases(src: Source, pk: Sequence[Pkt]) -> tuple[list[int], list[int]]:
    """Positions of segments whose loss removes a frame header while the frame goes on in later segments,
    and of segments that lie strictly inside a frame (neither its first nor its last bytes)."""
    header, middle = [], []
    for i, p in enumerate(pk):
        if not is_data(p):
            continue
        t = p.tcp
        assert t is not None
        st = src.streams[t.key]
        starts = [a for a, b in st.frames if t.seq <= a and a + 4 <= t.end and b > t.end]
        if starts:
            header.append(i)
        f = st.frame_at(t.seq)
        if f and f[0] < t.seq and t.end < f[1]:
            middle.append(i)
    return header, middle


def t_dropped(src: Source, rng: random.Random) -> Variant:
    pk = src.pkts
    last: dict[str, int] = {}  # position of each direction's last data segment: never lose that one, or
    for i, p in enumerate(pk):  # the gap would only show through ACK/FIN numbers
        if is_data(p):
            last[tcp_of(p).key] = i
    # position -> (the pieces that stand in for that packet, index of the piece that is lost)
    plan: dict[int, tuple[list[Pkt], int]] = {}
    notes: list[str] = []

    def lose(i: int, pieces: list[Pkt], n: int, what: str) -> None:
        plan[i] = (pieces, n)
        t = tcp_of(pieces[n])
        notes.append(f"{what} ({t.key} [{t.seq}, {t.end}))")

    header, middle = _frame_cases(src, pk)
    header = [i for i in header if i < last[tcp_of(pk[i]).key]]
    middle = [i for i in middle if i < last[tcp_of(pk[i]).key]]
    header_key = None
    if header:
        i = rng.choice(header)
        header_key = tcp_of(pk[i]).key
        lose(i, [pk[i]], 0, "a segment with a frame's header, the frame going on in later segments")
    # Lose mid-frame bytes in the other direction than the header if it can, so both directions lose a
    # frame's middle or head.
    middle = [i for i in middle if i not in plan]
    middle = [i for i in middle if tcp_of(pk[i]).key != header_key] or middle
    if middle:
        i = rng.choice(middle)
        lose(i, [pk[i]], 0, "a segment strictly inside a frame that spans 3+ segments")
    # The small recordings send every frame in one segment, so make these cases by splitting a segment
    # first (as a smaller MSS would have), then losing one piece.
    big = sorted(
        (i for i, p in enumerate(pk) if is_data(p) and i < last[tcp_of(p).key] and i not in plan),
        key=lambda i: (-len(tcp_of(pk[i]).payload), i),
    )
    if not header:
        for i in big:
            t = tcp_of(pk[i])
            f = src.streams[t.key].frame_at(t.seq)
            if f and f[0] == t.seq and f[1] - f[0] >= 24:
                header_key = t.key
                lose(
                    i, split(pk[i], [8]), 0, "a frame's first 8 bytes (size, key, version), its rest present"
                )
                break
    if not middle:
        for i in sorted(big, key=lambda i: tcp_of(pk[i]).key == header_key):
            t = tcp_of(pk[i])
            f = src.streams[t.key].frame_at(t.seq)
            if i in plan or not f or f[1] > t.end or f[1] - f[0] < 48:
                continue
            third = (f[1] - f[0]) // 3
            pieces = split(pk[i], [f[0] + third - t.seq, f[0] + 2 * third - t.seq])
            lose(i, pieces, 1, "the middle third of a large frame, its first and last thirds present")
            break
    # Plus a whole segment in each direction, away from the other losses.
    whole_c = [
        i
        for i, p in enumerate(pk)
        if is_data(p) and 0 < i < last[tcp_of(p).key] and all(abs(i - d) > 2 for d in plan)
    ]
    for i in _pick(rng, whole_c, 2, lambda i: tcp_of(pk[i]).key):
        lose(i, [pk[i]], 0, "a whole segment")
    out: list[Pkt] = []
    missing: list[tuple[str, int, int, str]] = []
    for i, p in enumerate(pk):
        pieces, lost = plan.get(i, ([p], -1))
        for n, q in enumerate(pieces):
            if n == lost:
                missing.append((tcp_of(q).key, tcp_of(q).seq, tcp_of(q).end, "dropped"))
            else:
                out.append(q)
    return Variant(
        out,
        lambda num: (
            "Data segments lost from the capture (the endpoints' ACKs still cover them): "
            + "; ".join(notes)
            + "."
        ),
        missing=missing,
    )


def t_midstream(src: Source, rng: random.Random) -> Variant:
    pk = src.pkts
    lo = max(3, len(pk) // 3)  # past the handshake and the first exchanges
    start: int | None = None
    head: Pkt | None = None
    for i in range(lo, len(pk)):
        if is_data(pk[i]):
            t = pk[i].tcp
            assert t is not None
            if not src.streams[t.key].is_boundary(t.seq):
                start = i
                break
    how = "the first packet kept starts inside a frame"
    if start is None:
        # Every segment starts a frame here; split one inside its first frame and keep only the tail, as if
        # the capture had started between two segments of a frame.
        for i in range(lo, len(pk)):
            if is_data(pk[i]):
                t = pk[i].tcp
                assert t is not None
                f = src.streams[t.key].frame_at(t.seq)
                if f and len(t.payload) >= 8:
                    off = min(f[1] - f[0], len(t.payload)) // 2
                    start, head = i, split(pk[i], [off])[1]
                    how = f"the first packet kept is the tail of a segment split {off} bytes into a frame"
                    break
    assert start is not None, "no data segment to start in"
    out = ([head] if head else [pk[start]]) + list(pk[start + 1 :])
    first: dict[str, int] = {}
    for p in out:
        if p.tcp is not None:
            first.setdefault(tcp_of(p).key, tcp_of(p).seq)
    return Variant(
        out,
        lambda num: (
            f"The capture starts in the middle of the connection: source packets 1..{start} dropped "
            f"(no SYN), and {how}. first_seq gives each direction's first sequence number present; "
            "nothing before it counts as missing."
        ),
        first_seq=first,
    )


@dataclass
class _Before:
    """Connection state just before a position: per direction the next seq it would send, the highest
    ACK it has sent, its last non-SYN packet (a header template); and whether a FIN/RST has been seen."""

    nxt: dict[str, int]
    acked: dict[str, int]
    tmpl: dict[str, Pkt]
    closing: bool


def _states(pk: Sequence[Pkt]) -> list[_Before]:
    """_Before for every position 0..len(pk), in one pass (keeps the scans below linear)."""
    cur = _Before({}, {}, {}, False)
    out = []
    for p in pk:
        out.append(_Before(dict(cur.nxt), dict(cur.acked), dict(cur.tmpl), cur.closing))
        if p.tcp is None:
            continue
        t = p.tcp
        cur.closing |= bool(t.flags & (FIN | RST))
        cur.nxt[t.key] = max(cur.nxt.get(t.key, 0), t.end + (1 if t.flags & (SYN | FIN) else 0))
        if t.flags & ACK:
            cur.acked[t.key] = max(cur.acked.get(t.key, 0), t.ack)
        if not t.flags & SYN:
            cur.tmpl[t.key] = p
    out.append(cur)
    return out


def t_keepalive_zwp(src: Source, rng: random.Random) -> Variant:
    pk = src.pkts
    c, s = sorted(src.streams, key=lambda k: k != src.client)  # client direction first
    st = _states(pk)
    # Quiet points: positions where both sides have sent data and had all of it acknowledged, before any
    # FIN. Keep-alives go into the longest such pause (in session.pcap, the 0.5 s before QueryOffset).
    quiet = [
        (-(pk[k].ts - pk[k - 1].ts), k)  # (-idle ns, position): min() is the longest, then the earliest
        for k in range(1, len(pk))
        if not st[k].closing
        and c in st[k].tmpl
        and s in st[k].tmpl
        and st[k].acked.get(s, 0) >= st[k].nxt[c]
        and st[k].acked.get(c, 0) >= st[k].nxt[s]
    ]
    k = min(quiet)[1]
    prev, nx = pk[k - 1].ts, pk[k].ts
    tc, tsv = st[k].tmpl[c], st[k].tmpl[s]
    nc, ns_ = st[k].nxt[c], st[k].nxt[s]
    idc, ids = tcp_of(tc).ip_id, tcp_of(tsv).ip_id
    # Linux sends no payload; some stacks (Windows) one garbage byte. Both use seq = next - 1, a byte the
    # peer has already acknowledged, which makes the peer answer with a pure ACK.
    ka = [
        rebuild(tc, ts=_between(prev, nx, 1, 5), seq=nc - 1, ack=ns_, flags=ACK, payload=b"", ip_id=idc + 1),
        rebuild(tsv, ts=_between(prev, nx, 2, 5), seq=ns_, ack=nc, flags=ACK, payload=b"", ip_id=ids + 1),
        rebuild(
            tsv, ts=_between(prev, nx, 3, 5), seq=ns_ - 1, ack=nc, flags=ACK, payload=b"\0", ip_id=ids + 2
        ),
        rebuild(tc, ts=_between(prev, nx, 4, 5), seq=nc, ack=ns_, flags=ACK, payload=b"", ip_id=idc + 2),
    ]
    probes = [(ka[0], "keepalive"), (ka[2], "keepalive")]
    before: dict[int, list[Pkt]] = {k: ka}
    # Zero-window probe before a data segment D whose sender had everything before D acknowledged: the
    # receiver announces window 0, the sender probes with D's first byte, the receiver still says 0 (so
    # the byte is not taken), then opens the window, and D goes out in full from the same seq.
    d = next(
        (
            i
            for i in [*range(k + 1, len(pk)), *range(k)]
            if is_data(pk[i])
            and len(tcp_of(pk[i]).payload) >= 2
            and st[i].acked.get(tcp_of(pk[i]).rkey) == tcp_of(pk[i]).seq
            and tcp_of(pk[i]).rkey in st[i].tmpl
        ),
        None,
    )
    zwp_desc = ""
    if d is not None:
        dp, td = pk[d], tcp_of(pk[d])
        r = st[d].tmpl[td.rkey]
        rseq, rid = st[d].nxt[td.rkey], tcp_of(r).ip_id
        a, b = pk[d - 1].ts, dp.ts
        zw = [
            rebuild(
                r,
                ts=_between(a, b, 1, 5),
                seq=rseq,
                ack=td.seq,
                flags=ACK,
                window=0,
                payload=b"",
                ip_id=rid + 1,
            ),
            rebuild(dp, ts=_between(a, b, 2, 5), flags=ACK, payload=td.payload[:1], ip_id=td.ip_id - 1),
            rebuild(
                r,
                ts=_between(a, b, 3, 5),
                seq=rseq,
                ack=td.seq,
                flags=ACK,
                window=0,
                payload=b"",
                ip_id=rid + 2,
            ),
            rebuild(r, ts=_between(a, b, 4, 5), seq=rseq, ack=td.seq, flags=ACK, payload=b"", ip_id=rid + 3),
        ]
        before.setdefault(d, []).extend(zw)
        probes.append((zw[1], "zero_window_probe"))
        zwp_desc = (
            " Zero-window probe: a window-0 ACK, a 1-byte probe carrying the real next byte, another "
            "window-0 ACK, a window update, then the normal segment from the same sequence number."
        )
    return Variant(
        _inserted(pk, {}, before),
        lambda num: (
            "Keep-alives inserted in the longest idle period (seq = next - 1, ACK flag; the client's "
            "has no payload, the broker's one 0x00 garbage byte over an already acknowledged byte), each "
            "answered by a pure ACK." + zwp_desc + " See probes. No bytes missing."
        ),
        probes=probes,
    )


def t_snaplen(src: Source, rng: random.Random) -> Variant:
    out, missing = [], []
    for p in src.pkts:
        if len(p.raw) <= SNAPLEN:
            out.append(p)
            continue
        out.append(Pkt(p.ts, p.raw[:SNAPLEN], p.orig_len, p.tcp))
        t = p.tcp
        if t is not None and t.payload:
            missing.append((t.key, t.seq + max(0, SNAPLEN - t.hdr_len), t.end, "snaplen"))
    return Variant(
        out,
        lambda num: (
            f"Captured with snapshot length {SNAPLEN}: every packet longer than {SNAPLEN} bytes "
            "is cut (the record's orig_len keeps the real length, the IP total length still says the full "
            "size), so those segments' tails are missing."
        ),
        missing=missing,
        snaplen=SNAPLEN,
    )


def t_ipfrag(src: Source, rng: random.Random) -> Variant:
    pk = src.pkts
    cands = [i for i, p in enumerate(pk) if is_data(p) and len(tcp_of(p).payload) >= 40]
    chosen = _pick(rng, cands, 3, lambda i: tcp_of(pk[i]).key)
    out, missing, frags = [], [], []
    for i, p in enumerate(pk):
        if i not in chosen:
            out.append(p)
            continue
        e = Ether(p.raw)
        ip = e[IP]
        ip.flags = 0  # DF off, or fragmenting would be a protocol violation
        del ip.chksum, e[TCP].chksum  # the TCP checksum is over the whole segment, computed before cutting
        for f in fragment(ip, fragsize=FRAGSIZE):
            raw = bytes(Ether(src=e.src, dst=e.dst, type=0x0800) / f)
            q = Pkt(p.ts, raw, len(raw), None)
            out.append(q)
            frags.append(q)
        t = p.tcp
        assert t is not None
        missing.append((t.key, t.seq, t.end, "fragment"))
    return Variant(
        out,
        lambda num: (
            f"{len(chosen)} data segments sent as IPv4 fragments of {FRAGSIZE} bytes of IP payload "
            "(DF cleared, checksums recomputed). A decoder that does not reassemble IP may skip them: their "
            "TCP byte ranges are listed as missing with cause 'fragment', and a decoder that does "
            "reassemble must produce exactly the source bytes there."
        ),
        missing=missing,
        fragments=frags,
    )


TCP_TRANSFORMS: dict[str, Callable[[Source, random.Random], Variant]] = {
    "mss1448": t_mss1448,
    "reordered": t_reordered,
    "duplicated": t_duplicated,
    "overlap_conflict": t_overlap_conflict,
    "dropped": t_dropped,
    "midstream": t_midstream,
    "keepalive_zwp": t_keepalive_zwp,
    "snaplen": t_snaplen,
    "ipfrag": t_ipfrag,
}


# --- Link-layer and file-format variants ----------------------------------------------------------------


def _ip(p: Pkt) -> bytes:
    return p.raw[14:]  # the sources are untagged Ethernet


def _pkttype(src: Source, p: Pkt) -> int:
    # As if captured on the client's host: its packets are outgoing (4), the broker's are to us (0).
    return 4 if has_key(p, src.client) else 0


def to_sll(src: Source, p: Pkt) -> bytes:
    hdr = CookedLinux(
        pkttype=_pkttype(src, p), lladdrtype=1, lladdrlen=6, src=p.raw[6:12] + b"\0\0", proto=0x0800
    )
    return bytes(hdr / Raw(_ip(p)))


def to_sll2(src: Source, p: Pkt) -> bytes:
    hdr = CookedLinuxV2(
        proto=0x0800,
        ifindex=1,
        lladdrtype=1,
        pkttype=_pkttype(src, p),
        lladdrlen=6,
        src=p.raw[6:12] + b"\0\0",
    )
    return bytes(hdr / Raw(_ip(p)))


def to_ipv6(p: Pkt) -> bytes:
    e = Ether(p.raw)
    ihl, total = (p.raw[14] & 0x0F) * 4, struct.unpack_from(">H", p.raw, 16)[0]
    tcp = TCP(p.raw[14 + ihl : 14 + total])
    del tcp.chksum  # the pseudo-header changes, so the checksum must be recomputed for ::1
    return bytes(Ether(src=e.src, dst=e.dst, type=0x86DD) / IPv6(src="::1", dst="::1", hlim=64) / tcp)


def _records(pkts: Iterable[Pkt], conv: Callable[[Pkt], bytes]) -> list[Record]:
    out = []
    for p in pkts:
        data = conv(p)
        out.append(Record(p.ts, data, len(data)))
    return out


@dataclass
class FileVariant:
    data: bytes
    ext: str
    description: str


def link_variant(name: str, src: Source) -> FileVariant:
    pk = src.pkts
    if name == "vlan":
        biggest = max(range(len(pk)), key=lambda i: (len(pk[i].raw), -i))

        def tag(i: int, p: Pkt) -> bytes:
            if i == biggest:  # QinQ: 802.1ad S-tag 200 outside the 802.1Q C-tag 100
                return p.raw[:12] + struct.pack(">HHHH", 0x88A8, 200, 0x8100, 100) + p.raw[12:]
            return p.raw[:12] + struct.pack(">HH", 0x8100, 100) + p.raw[12:]

        recs = [Record(p.ts, d, len(d)) for i, p in enumerate(pk) for d in [tag(i, p)]]
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_ETHERNET),
            "pcap",
            f"Every packet carries an 802.1Q tag (VLAN 100); packet {biggest + 1} is double-tagged (QinQ: "
            "outer 802.1ad 0x88a8 VLAN 200, inner 802.1Q VLAN 100). No bytes missing.",
        )
    if name == "sll":
        recs = _records(pk, lambda p: to_sll(src, p))
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_LINUX_SLL),
            "pcap",
            "LINKTYPE_LINUX_SLL (113): 16-byte cooked header, ARPHRD_ETHER, client packets outgoing (4), "
            "broker packets to-us (0). No bytes missing.",
        )
    if name == "sll2":
        recs = _records(pk, lambda p: to_sll2(src, p))
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_LINUX_SLL2),
            "pcap",
            "LINKTYPE_LINUX_SLL2 (276): 20-byte cooked header (protocol first, ifindex 1). No bytes missing.",
        )
    if name == "null_le":
        recs = _records(pk, lambda p: struct.pack("<I", 2) + _ip(p))
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_NULL),
            "pcap",
            "LINKTYPE_NULL (0) as macOS lo0 writes it: 4-byte AF_INET (2) in little-endian (host) byte "
            "order. No bytes missing.",
        )
    if name == "loop":
        recs = _records(pk, lambda p: struct.pack(">I", 2) + _ip(p))
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_LOOP),
            "pcap",
            "LINKTYPE_LOOP (108, OpenBSD loopback): 4-byte AF_INET (2) in network byte order. No bytes "
            "missing.",
        )
    if name == "rawip":
        recs = _records(pk, _ip)
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_RAW), "pcap", "LINKTYPE_RAW (101): bare IPv4 packets. No bytes missing."
        )
    if name == "ipv6":
        recs = _records(pk, to_ipv6)
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_ETHERNET),
            "pcap",
            "Rewritten to IPv6 over Ethernet, ::1 to ::1 with the same ports, TCP header and payload, "
            "TCP checksums recomputed. No bytes missing.",
        )
    if name == "pcap_be_nsec":
        recs = [Record(p.ts, p.raw, p.orig_len) for p in pk]
        return FileVariant(
            pcap_bytes(recs, LINKTYPE_ETHERNET, big_endian=True, nsec=True),
            "pcap",
            "Big-endian pcap with the nanosecond magic (a1 b2 3c 4d); the same packets and times. "
            "No bytes missing.",
        )
    if name == "pcapng_multi":
        ifaces = [NgInterface(LINKTYPE_ETHERNET, "lo"), NgInterface(LINKTYPE_LINUX_SLL2, "any", tsresol=9)]
        packets = []
        for i, p in enumerate(pk):
            data = p.raw if i % 2 == 0 else to_sll2(src, p)
            packets.append((i % 2, Record(p.ts, data, len(data))))
        return FileVariant(
            pcapng_bytes([NgSection(False, ifaces, packets)]),
            "pcapng",
            "pcapng, one section with two interfaces: 0 = Ethernet (microsecond timestamps, the default), "
            "1 = LINUX_SLL2 with if_tsresol 9 (nanoseconds). Odd-numbered packets are on interface 0, "
            "even-numbered on interface 1. No bytes missing.",
        )
    if name == "pcapng_sections":
        half = len(pk) // 2
        s1 = NgSection(
            False,
            [NgInterface(LINKTYPE_ETHERNET, "lo")],
            [(0, Record(p.ts, p.raw, p.orig_len)) for p in pk[:half]],
            write_length=True,
        )
        sll = [(0, Record(p.ts, d, len(d))) for p in pk[half:] for d in [to_sll(src, p)]]
        s2 = NgSection(True, [NgInterface(LINKTYPE_LINUX_SLL, "any", tsresol=9)], sll)
        return FileVariant(
            pcapng_bytes([s1, s2]),
            "pcapng",
            "pcapng with two sections. Section 1: little-endian, its section length filled in, "
            f"interface 0 = Ethernet, packets 1..{half}. Section 2: big-endian, section length -1, "
            f"its own interface 0 = LINUX_SLL with if_tsresol 9, packets {half + 1}..{len(pk)}. "
            "Interface ids restart per section. No bytes missing.",
        )
    if name == "gz":
        # mtime=0 and no file name in the header, so the output is the same on every run.
        return FileVariant(
            gzip.compress(src.path.read_bytes(), compresslevel=9, mtime=0),
            "pcap.gz",
            "The source pcap, gzip-compressed. No bytes missing.",
        )
    if name == "zst":
        try:
            import zstandard  # optional: only this variant needs it
        except ImportError as exc:
            raise SystemExit("the zst variant needs the 'zstandard' package (pip install zstandard)") from exc
        data = zstandard.ZstdCompressor(level=19, write_content_size=True, write_checksum=True).compress(
            src.path.read_bytes()
        )
        return FileVariant(
            data, "pcap.zst", "The source pcap, Zstandard-compressed (one frame). No bytes missing."
        )
    raise ValueError(f"unknown link variant {name!r}")


# --- Manifest and driver ----------------------------------------------------------------------------------


def _split_key(key: str) -> tuple[str, str]:
    a, b = key.split("->")
    return a, b


def _merge(missing: Iterable[tuple[str, int, int, str]]) -> list[dict[str, object]]:
    """Sorted ranges, adjacent ones of the same direction and cause merged (they are one gap)."""
    out: list[list[object]] = []
    for key, a, b, cause in sorted(missing):
        if out and out[-1][0] == key and out[-1][3] == cause and out[-1][2] == a:
            out[-1][2] = b
        else:
            out.append([key, a, b, cause])
    return [
        {"src": _split_key(k)[0], "dst": _split_key(k)[1], "start": a, "end": b, "cause": c}  # type: ignore[arg-type]
        for k, a, b, c in out
    ]


def _entry(
    file: str, source: str, pathology: str, seed: int, description: str, **rest: object
) -> dict[str, object]:
    entry: dict[str, object] = {
        "file": file,
        "source": source,
        "pathology": pathology,
        "seed": seed,
        "description": description,
        "missing": [],
        "conflicts": [],
        "first_seq": {},
        "fragments": [],
        "probes": [],
    }
    entry.update(rest)
    return entry


def render_variant(src: Source, name: str, seed: int, v: Variant) -> tuple[bytes, dict[str, object]]:
    numbers = {id(p): n for n, p in enumerate(v.pkts, 1)}

    def num(p: Pkt) -> int:
        return numbers[id(p)]

    recs = [Record(p.ts, p.raw, p.orig_len) for p in v.pkts]
    data = pcap_bytes(recs, LINKTYPE_ETHERNET, snaplen=v.snaplen)
    file = f"{src.stem}.{name}.pcap"
    conflicts = sorted(
        (
            {"src": _split_key(k)[0], "dst": _split_key(k)[1], "start": a, "end": b, "packet": num(p)}
            for p, k, a, b in v.conflicts
        ),
        key=lambda c: (c["packet"], c["start"]),
    )
    probes = sorted(
        (
            {
                "packet": num(p),
                "kind": kind,
                "src": tcp_of(p).src,
                "dst": tcp_of(p).dst,
                "seq": tcp_of(p).seq,
                "len": len(tcp_of(p).payload),
            }
            for p, kind in v.probes
        ),
        key=lambda e: e["packet"],
    )
    entry = _entry(
        file,
        src.path.name,
        name,
        seed,
        v.describe(num),
        missing=_merge(v.missing),
        conflicts=conflicts,
        first_seq={k: v.first_seq[k] for k in sorted(v.first_seq)},
        fragments=sorted(num(p) for p in v.fragments),
        probes=probes,
    )
    return data, entry


def build_all(
    sources: Sequence[Path | str],
    outdir: Path | str,
    seed: int = 1,
    *,
    link_sources: Sequence[Path | str] | None = None,
    select: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, dict[str, object]]:
    """Write every variant of every source into outdir, plus manifest.json; return the manifest keyed by
    file name. TCP pathologies are made from each source; link/file variants from link_sources (default:
    the first source). `select` maps a source stem to the pathologies wanted for it (default: all)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    srcs = [Path(s) for s in sources]
    links = [Path(s) for s in (link_sources if link_sources is not None else srcs[:1])]
    manifest: dict[str, dict[str, object]] = {}
    loaded = {p: load_source(p) for p in dict.fromkeys([*srcs, *links])}
    for path in srcs:
        src = loaded[path]
        wanted = (select or {}).get(src.stem, TCP_PATHOLOGIES + LINK_PATHOLOGIES)
        for name in TCP_PATHOLOGIES:
            if name not in wanted:
                continue
            rng = random.Random(f"{seed}/{src.stem}/{name}")  # str seeds hash with SHA-512: stable
            data, entry = render_variant(src, name, seed, TCP_TRANSFORMS[name](src, rng))
            (outdir / str(entry["file"])).write_bytes(data)
            manifest[str(entry["file"])] = entry
    for path in links:
        src = loaded[path]
        wanted = (select or {}).get(src.stem, TCP_PATHOLOGIES + LINK_PATHOLOGIES)
        for name in LINK_PATHOLOGIES:
            if name not in wanted:
                continue
            fv = link_variant(name, src)
            file = f"{src.stem}.{name}.{fv.ext}"
            (outdir / file).write_bytes(fv.data)
            manifest[file] = _entry(file, path.name, name, seed, fv.description)
    manifest = {k: manifest[k] for k in sorted(manifest)}
    # Files an earlier run listed and this one does not make are stale; nothing else in outdir is touched.
    old = outdir / "manifest.json"
    if old.exists():
        for e in json.loads(old.read_text()):
            if e["file"] not in manifest and "/" not in e["file"]:
                (outdir / e["file"]).unlink(missing_ok=True)
    old.write_text(json.dumps(list(manifest.values()), indent=1, sort_keys=True) + "\n")
    return manifest


def regenerate(
    manifest: Path | str, source_dir: Path | str, outdir: Path | str
) -> dict[str, dict[str, object]]:
    """Rebuild exactly the files a manifest lists (same sources, pathologies and seed) into outdir, e.g. a
    test's tmp dir, to compare them with the committed ones."""
    entries = json.loads(Path(manifest).read_text())
    seeds = {e["seed"] for e in entries}
    if len(seeds) != 1:
        raise ValueError(f"{manifest}: entries made with different seeds {sorted(seeds)}")
    tcp = [e["source"] for e in entries if e["pathology"] in TCP_PATHOLOGIES]
    link = [e["source"] for e in entries if e["pathology"] in LINK_PATHOLOGIES]
    select: dict[str, list[str]] = {}
    for e in entries:
        select.setdefault(e["source"].split(".")[0], []).append(e["pathology"])
    src = Path(source_dir)
    return build_all(
        [src / s for s in dict.fromkeys(tcp)],
        outdir,
        seeds.pop(),
        link_sources=[src / s for s in dict.fromkeys(link)],
        select=select,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", action="append", required=True, type=Path, help="real Ethernet pcap (repeat)")
    ap.add_argument("--outdir", type=Path, default=Path(__file__).parent / "pathological")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--link-source",
        action="append",
        type=Path,
        help="source for the link/file-format variants (repeat; default: the first --source)",
    )
    ap.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="STEM=NAME,NAME",
        help="only these pathologies for the source with this stem, e.g. bulk=mss1448,dropped (repeat)",
    )
    args = ap.parse_args(argv)
    select = {}
    for s in args.select:
        stem, _, names = s.partition("=")
        unknown = set(names.split(",")) - set(TCP_PATHOLOGIES + LINK_PATHOLOGIES)
        if unknown:
            ap.error(f"unknown pathologies {sorted(unknown)}")
        select[stem] = names.split(",")
    manifest = build_all(args.source, args.outdir, args.seed, link_sources=args.link_source, select=select)
    total = sum((args.outdir / f).stat().st_size for f in manifest)
    print(f"{len(manifest)} files, {total} bytes, in {args.outdir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
