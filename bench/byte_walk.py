"""What the bytes allow, walked apart from streamdump, against what streamdump recovers of Deliver.

For each drop rate, a copy of a clean flood capture (bench/record_flood.py) is made without a
seeded random share of its data segments, as bench/recovery_check.py makes it (the same seed
drops the same segments). Then:

1. The walk (this file's own code: dpkt for packets, nothing of streamdump) puts the server's
   byte stream of the clean capture together, walks its Deliver frames, chunks and entries,
   and gives every delivered record its offset (chunk id plus its place) and the stream
   range of its entry. It checks that each flood body names that offset.
2. It reads which stream bytes the lossy copy still holds in time (a copy that comes after the
   client acknowledged past it is too late: streamdump has declared those bytes missing by
   then, as any reader that goes by ACKs must), and counts the records whose entry
   bytes all survive ("the bytes allow"), and of those, the ones whose chunk header survives
   too (their offsets can be counted from the header alone).
3. streamdump reads the lossy copy; each record it recovers is known by its body, and any
   offset it gives must be that body's. A complete chunk counts by its header, as its CRC
   vouches for its records.
4. `streamdump read` of the lossy copy and of the clean capture, alternately, best of 2, in
   wall time and in CPU time (which other work on the machine disturbs less).

Prints found against allowed per drop rate, and exits non-zero when any differ or a record
has a wrong offset or was recovered despite a missing byte.

    python bench/byte_walk.py /tmp/streamdump-bench/flood200k-mtu1500.pcap [--rates 0.01,0.002] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import struct
import subprocess
import sys
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

import dpkt

PCAP_RECORD = struct.Struct("<IIII")
SEQ_MOD = 1 << 32
PORT = 5552
DELIVER = 0x0008
CHUNK_HEADER = struct.Struct(">BBHIqQQIIIB3x")  # 48 bytes
SUB_BATCH = struct.Struct(">BHII")
FLOOD_HEAD = re.compile(rb"\x00\x53\x75(?:\xa0.|\xb0....)flood (\d{9}) ", re.S)

Key = tuple[str, int, str, int]  # (src, sport, dst, dport)


def packets(path: Path) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The pcap's file header and its records (record header, packet bytes), in file order."""
    out = []
    with path.open("rb") as fh:
        header = fh.read(24)
        if header[:4] != b"\xd4\xc3\xb2\xa1":
            raise SystemExit(f"{path}: expected a little-endian microsecond pcap (as tcpdump writes)")
        while rec := fh.read(16):
            caplen = PCAP_RECORD.unpack(rec)[2]
            out.append((rec, fh.read(caplen)))
    return header, out


def tcp_of(linktype: int, data: bytes) -> tuple[Key, dpkt.tcp.TCP] | None:
    if linktype == dpkt.pcap.DLT_EN10MB:
        ip = dpkt.ethernet.Ethernet(data).data
    elif linktype == dpkt.pcap.DLT_LINUX_SLL:
        ip = dpkt.sll.SLL(data).data
    else:
        raise SystemExit(f"link type {linktype}: the walk reads Ethernet and Linux cooked captures")
    if not isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6) or not isinstance(ip.data, dpkt.tcp.TCP):
        return None
    tcp = ip.data
    src = ip.src.hex()
    dst = ip.dst.hex()
    return (src, tcp.sport, dst, tcp.dport), tcp


@dataclass
class Side:
    """The server's bytes of one connection: its ISN and its segments by relative seq."""

    isn: int | None = None
    segments: dict[int, bytes] = field(default_factory=dict)


def server_sides(linktype: int, records: list[tuple[bytes, bytes]], in_time: bool = False) -> dict[Key, Side]:
    """The server's segments per connection. With in_time, a segment keeps only its bytes at or
    past the furthest the client had acknowledged when it came: a copy after that acknowledgement
    is too late for any reader that goes by ACKs (streamdump declares those bytes missing)."""
    sides: dict[Key, Side] = {}
    acked: dict[Key, int] = {}  # per server side: the furthest relative position acknowledged
    for _rec, data in records:
        found = tcp_of(linktype, data)
        if found is None:
            continue
        key, tcp = found
        if key[1] != PORT:
            server = (key[2], key[3], key[0], key[1])
            isn = sides[server].isn if server in sides else None
            if in_time and tcp.flags & dpkt.tcp.TH_ACK and isn is not None:
                rel = (tcp.ack - isn - 1) % SEQ_MOD
                if rel < 1 << 31:  # an ACK behind the server's first byte would wrap
                    acked[server] = max(acked.get(server, 0), rel)
            continue
        side = sides.setdefault(key, Side())
        if tcp.flags & dpkt.tcp.TH_SYN:
            side.isn = tcp.seq
        elif tcp.data and side.isn is not None:
            rel = (tcp.seq - side.isn - 1) % SEQ_MOD
            payload = bytes(tcp.data)
            late = acked.get(key, 0) - rel
            if late > 0:
                rel, payload = rel + late, payload[late:]
            if len(payload) > len(side.segments.get(rel, b"")):
                side.segments[rel] = payload
    return sides


def stream_of(side: Side) -> bytes:
    buf = bytearray()
    for rel in sorted(side.segments):
        seg = side.segments[rel]
        if rel > len(buf):
            raise SystemExit(f"the clean capture lacks server bytes at {len(buf)}..{rel}")
        buf[rel : rel + len(seg)] = seg
    return bytes(buf)


@dataclass
class Walked:
    """Every delivered record: offset -> (connection, entry start, entry end, chunk header range)."""

    records: dict[int, tuple[Key, int, int, int, int]] = field(default_factory=dict)
    chunks: int = 0


def walk(sides: dict[Key, Side]) -> Walked:
    out = Walked()
    for key, side in sides.items():
        data = stream_of(side)
        at = 0
        while len(data) - at >= 8:
            size, cmd, version = struct.unpack_from(">IHH", data, at)
            end = at + 4 + size
            if cmd == DELIVER:
                chunk = at + 9 + (8 if version >= 2 else 0)
                _m, _t, entries, num_records, _ts, _ep, chunk_id, _crc, length, _tr, _b = (
                    CHUNK_HEADER.unpack_from(data, chunk)
                )
                out.chunks += 1
                pos, offset = chunk + CHUNK_HEADER.size, chunk_id
                for _ in range(entries):
                    if data[pos] & 0x80:
                        _flags, count, _u, blen = SUB_BATCH.unpack_from(data, pos)
                        entry_end = pos + SUB_BATCH.size + blen
                    else:
                        count, entry_end = 1, pos + 4 + struct.unpack_from(">I", data, pos)[0]
                        match = FLOOD_HEAD.match(data, pos + 4)
                        if match is None or int(match.group(1)) != offset:
                            raise SystemExit(f"stream byte {pos}: the record's body does not name {offset}")
                    for i in range(count):
                        out.records[offset + i] = (key, pos, entry_end, at, chunk + CHUNK_HEADER.size)
                    offset += count
                    pos = entry_end
                if offset != chunk_id + num_records or pos != chunk + CHUNK_HEADER.size + length:
                    raise SystemExit(f"chunk {chunk_id}: its header and its entries disagree")
            at = end
    return out


def drop(header: bytes, records: list[tuple[bytes, bytes]], out: Path, rate: float, seed: int) -> None:
    """Write the copy without a random share of data segments (recovery_check's draws)."""
    rng = random.Random(seed)
    (linktype,) = struct.unpack_from("<I", header, 20)
    with out.open("wb") as fh:
        fh.write(header)
        for rec, data in records:
            found = tcp_of(linktype, data)
            if found is not None and found[1].data and rng.random() < rate:
                continue
            fh.write(rec + data)


def present(path: Path) -> dict[Key, list[tuple[int, int]]]:
    """The server's stream byte ranges the file holds in time (see server_sides), merged, per
    connection."""
    header, records = packets(path)
    (linktype,) = struct.unpack_from("<I", header, 20)
    out: dict[Key, list[tuple[int, int]]] = {}
    for key, side in server_sides(linktype, records, in_time=True).items():
        merged: list[tuple[int, int]] = []
        for rel in sorted(side.segments):
            end = rel + len(side.segments[rel])
            if merged and rel <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((rel, end))
        out[key] = merged
    return out


def covered(ranges: list[tuple[int, int]], starts: list[int], lo: int, hi: int) -> bool:
    i = bisect_right(starts, lo) - 1
    return i >= 0 and ranges[i][1] >= hi


@dataclass
class Found:
    records: set[int] = field(default_factory=set)
    with_offset: int = 0
    wrong: int = 0
    behind: int = 0


def streamdump_found(path: Path) -> Found:
    from streamdump.analysis.pipeline import ReadStats, read_frames
    from streamdump.spec.decoder import Decoder
    from streamdump.spec.registry import default_registry

    decoder = Decoder(default_registry().get("rabbitmq_stream"))
    out = Found()
    for frame in read_frames(path, decoder, [PORT], ReadStats()):
        if frame.command != "Deliver":
            continue
        chunk = frame.fields.get("chunk") or {}
        if frame.incomplete is None and chunk.get("crc_valid"):
            first = chunk["chunk_id"]
            out.records.update(range(first, first + chunk["num_records"]))
            out.with_offset += chunk["num_records"]
            continue
        decoder.expand(frame)
        for record in chunk.get("records") or []:
            message = record.get("message")
            body = bytes(message.sections[0].value) if message is not None else b""
            match = re.match(rb"flood (\d{9}) ", body)
            if match is None:
                out.wrong += 1
                continue
            index = int(match.group(1))
            out.records.add(index)
            out.behind += 1
            if record.get("offset") is not None:
                out.with_offset += 1
                out.wrong += record["offset"] != index
    return out


def read_time(path: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user and system) of `streamdump read path`, its output
    thrown away. CPU time says more on a machine other work shares."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "streamdump", "read", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best_of_two(clean: Path, lossy: Path) -> tuple[tuple[float, float], tuple[float, float]]:
    """Each file read twice, alternately; the least wall and CPU time of each."""
    runs = [read_time(clean), read_time(lossy), read_time(clean), read_time(lossy)]
    best = [(min(a[0], b[0]), min(a[1], b[1])) for a, b in (runs[0::2], runs[1::2])]
    return best[0], best[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture", type=Path)
    parser.add_argument("--rates", default="0.01,0.002", help="drop rates, comma-separated")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-time", action="store_true", help="skip the reading-time comparison")
    args = parser.parse_args()
    header, records = packets(args.capture)
    (linktype,) = struct.unpack_from("<I", header, 20)
    walked = walk(server_sides(linktype, records))
    print(f"{args.capture}: {len(walked.records)} delivered records in {walked.chunks} chunks (walked)")
    ok = True
    for rate in (float(r) for r in args.rates.split(",")):
        lossy = args.capture.with_suffix(f".lossy{rate}.pcap")
        try:
            drop(header, records, lossy, rate, args.seed)
            kept = present(lossy)
            starts = {key: [s for s, _ in rows] for key, rows in kept.items()}
            allowed: set[int] = set()
            headed = 0
            headless: set[int] = set()  # allowed records whose chunk header was lost
            for offset, (key, lo, hi, head_lo, head_hi) in walked.records.items():
                rows = kept.get(key, [])
                if covered(rows, starts.get(key, []), lo, hi):
                    allowed.add(offset)
                    if covered(rows, starts.get(key, []), head_lo, head_hi):
                        headed += 1
                    else:
                        headless.add(offset)
            found = streamdump_found(lossy)
            extra = found.records - allowed
            missing = allowed - found.records
            print(
                f"  drop rate {rate} (seed {args.seed}): the bytes allow {len(allowed)} records "
                f"({headed} with their chunk header, {len(headless)} behind a lost one); streamdump "
                f"recovers {len(found.records & allowed)} ({found.with_offset} with offsets, "
                f"{len(headless & found.records)} behind a lost header), missing {len(missing)}, "
                f"recovered despite missing bytes {len(extra)}, wrong offsets {found.wrong}"
            )
            if missing or extra or found.wrong:
                ok = False
                print(f"    MISMATCH: first missing {sorted(missing)[:10]}, first extra {sorted(extra)[:10]}")
            if not args.no_time:
                (clean_s, clean_cpu), (lossy_s, lossy_cpu) = best_of_two(args.capture, lossy)
                print(
                    f"    streamdump read: {lossy_s:.1f} s against {clean_s:.1f} s clean "
                    f"({lossy_s / clean_s:.2f}x); CPU {lossy_cpu:.1f} s against {clean_cpu:.1f} s "
                    f"({lossy_cpu / clean_cpu:.2f}x)"
                )
        finally:
            lossy.unlink(missing_ok=True)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
