"""Are all published messages whose bytes are in a capture recovered, and is every loss accounted for?

Checks a large real recording (from bench/record_flood.py) twice:

1. as recorded: every message the client sent (its .sent.json sidecar) must be
   recovered from the Publish frames, minus messages whose bytes tcpdump did not
   capture, and those must lie in reported gaps;
2. with segments dropped at random (seeded) from a copy of the file, as a lossy
   capture would have them: the message byte ranges of the intact capture say
   exactly which messages lost bytes; everything else must still be recovered,
   whether it sits in a frame cut by a gap or not, and every lost message must lie
   in a reported gap.

Deliver records are checked the same way: each record's body names its index, which is
its stream offset, so a record recovered behind a gap is known by its body, and any
offset streamdump gives it must equal that index. Deliver must recover exactly what the
bytes allow; a record given a wrong offset, or one recovered despite missing bytes, fails
the check. (bench/byte_walk.py works out what the bytes allow by a walk of its own, apart
from streamdump, and compares the same way at several drop rates.)

Prints the figures and exits non-zero on any mismatch.

    python bench/record_flood.py --messages 500000 --out /tmp/flood.pcap
    python bench/recovery_check.py /tmp/flood.pcap [--drop-rate 0.002] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import struct
import subprocess
import sys
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry
from streamdump.wire.frame import Frame
from streamdump.wire.packet import Segment, parse
from streamdump.wire.reassembly import TCP_ACK

PCAP_RECORD = struct.Struct("<IIII")
SEQ_MOD = 1 << 32

Message = tuple[int, int]  # (publisher id, publishing id)
# The head every flood body starts with (record_flood.HEAD), after the AMQP data section header.
FLOOD_HEAD = re.compile(rb"flood (\d{9}) ")
# Deliver may fall short of what the bytes allow by this share: none, since records behind a
# lost chunk header are found too.
DELIVER_SLACK = 0.0


def recovered(frames: list[Frame], sole_publisher: int | None = None) -> set[Message]:
    """Messages present whole in Publish frames, complete or incomplete ones.

    A frame whose start a gap took has no publisher id; the recording has one publisher,
    so its messages are that publisher's.
    """
    out: set[Message] = set()
    for frame in frames:
        if frame.command != "Publish":
            continue
        publisher = frame.fields.get("publisher_id", sole_publisher)
        for m in frame.fields.get("messages") or []:
            if "entry" in m:  # a message the gap cut has only the fields before its entry
                out.add((publisher, m["publishing_id"]))
    return out


def message_ranges(frames: list[Frame], decoder: Decoder) -> dict[str, list[tuple[int, int, Message]]]:
    """Each message's stream position range [start, end) per direction, from the intact capture."""
    out: dict[str, list[tuple[int, int, Message]]] = {}
    for frame in frames:
        if frame.command != "Publish" or frame.incomplete is not None:
            continue
        publisher = frame.fields["publisher_id"]
        (array,) = [n for n in decoder.tree(frame) if n.spec is not None and n.spec.name == "messages"]
        rows = out.setdefault(f"{frame.src}->{frame.dst}", [])
        for node, m in zip(array.children, frame.fields["messages"], strict=True):
            start = frame.seq + node.offset  # type: ignore[operator]
            rows.append((start, start + node.length, (publisher, m["publishing_id"])))
    return out


def drop_segments(src: Path, dst: Path, rate: float, seed: int) -> dict[str, list[tuple[int, int]]]:
    """Copy a little-endian microsecond pcap without a random share of its data segments; the
    byte ranges the copy lacks, per direction, as streamdump's reassembler must count them.

    A byte is held only if a kept copy of it comes before the peer acknowledges past it: that
    acknowledgement makes the reassembler declare the byte missing, and a copy after it is
    reported late. So a dropped segment loses nothing when another copy comes in time (the
    original of a retransmission, a timely retransmission, or tcpdump's own duplicate: the MTU
    bench capture has one), and loses its bytes when the only other copy is a spurious
    retransmission that follows the acknowledgement.
    """
    rng = random.Random(seed)
    dropped: dict[str, list[tuple[int, int]]] = {}  # unwrapped positions, per direction
    held: dict[str, list[tuple[int, int]]] = {}
    near: dict[str, int] = {}  # per direction: the last data position, to unwrap against
    acked: dict[str, int] = {}  # per direction: the furthest position the peer acknowledged
    with src.open("rb") as fh, dst.open("wb") as out:
        header = fh.read(24)
        if header[:4] != b"\xd4\xc3\xb2\xa1":
            raise SystemExit(f"{src}: expected a little-endian microsecond pcap (as tcpdump writes)")
        (linktype,) = struct.unpack_from("<I", header, 20)
        out.write(header)
        number = 0
        while rec := fh.read(16):
            ts_s, ts_us, caplen, _wire = PCAP_RECORD.unpack(rec)
            data = fh.read(caplen)
            number += 1
            seg = parse(linktype, data, number, ts_s + ts_us / 1e6)
            if isinstance(seg, Segment):
                key = f"{seg.src}:{seg.sport}->{seg.dst}:{seg.dport}"
                if seg.payload:
                    start = near[key] = unwrap_near(seg.seq, near.get(key, seg.seq))
                    end = start + len(seg.payload)
                    if rng.random() < rate:
                        dropped.setdefault(key, []).append((start, end))
                        continue
                    start = max(start, acked.get(key, start))
                    if start < end:
                        held.setdefault(key, []).append((start, end))
                peer = f"{seg.dst}:{seg.dport}->{seg.src}:{seg.sport}"
                if seg.flags & TCP_ACK and peer in near:
                    ack = unwrap_near(seg.ack, near[peer])
                    acked[peer] = max(acked.get(peer, ack), ack)
            out.write(rec + data)
    return {
        key: [(s % SEQ_MOD, e % SEQ_MOD) for s, e in without(merged(rows), merged(held.get(key, [])))]
        for key, rows in dropped.items()
    }


def merged(rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges, sorted, with overlapping and touching ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(rows):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def without(rows: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of merged ranges rows that merged ranges holes do not cover."""
    out: list[tuple[int, int]] = []
    i = 0
    for start, end in rows:
        while i < len(holes) and holes[i][1] <= start:
            i += 1
        j = i
        while start < end and j < len(holes) and holes[j][0] < end:
            if holes[j][0] > start:
                out.append((start, holes[j][0]))
            start = max(start, holes[j][1])
            j += 1
        if start < end:
            out.append((start, end))
    return out


def unwrap_near(value: int, ref: int) -> int:
    return ref + ((value - ref + (1 << 31)) % SEQ_MOD) - (1 << 31)


def lost_messages(
    ranges: dict[str, list[tuple[int, int, Message]]], holes: dict[str, list[tuple[int, int]]]
) -> set[Message]:
    lost: set[Message] = set()
    for key, rows in ranges.items():
        starts = [r[0] for r in rows]
        for hole_start, hole_end in holes.get(key, []):
            start = unwrap_near(hole_start, rows[0][0])
            end = start + ((hole_end - hole_start) % SEQ_MOD)
            i = max(0, bisect_right(starts, start) - 1)
            while i < len(rows) and rows[i][0] < end:
                if rows[i][1] > start:
                    lost.add(rows[i][2])
                i += 1
    return lost


def gap_holes(stats: ReadStats) -> dict[str, list[tuple[int, int]]]:
    holes: dict[str, list[tuple[int, int]]] = {}
    for n in stats.notices:
        if n.kind == "gap":
            holes.setdefault(f"{n.src}->{n.dst}", []).append((n.start, n.start + n.length))  # type: ignore[operator]
    return holes


@dataclass
class Delivered:
    """What one read says about Deliver records."""

    # Per direction, each record's stream position range and offset (complete frames only).
    ranges: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    found: set[int] = field(default_factory=set)  # offsets (body indexes) recovered
    behind: int = 0  # of them, records recovered from frames a gap cut
    unknown: int = 0  # recovered records whose offset streamdump left unknown
    wrong: int = 0  # records given an offset that is not their body's index

    def take(self, frame: Frame, decoder: Decoder) -> None:
        chunk = frame.fields.get("chunk") or {}
        if frame.incomplete is None:
            first, count = chunk["chunk_id"], chunk["num_records"]
            self.found.update(range(first, first + count))
            data = frame.data
            at = len(data) - chunk["data_length"]  # the broker sends no trailer
            rows = self.ranges.setdefault(f"{frame.src}->{frame.dst}", [])
            for offset in range(first, first + count):
                (size,) = struct.unpack_from(">I", data, at)  # flood chunks hold simple entries
                start = frame.seq + at
                rows.append((start, start + 4 + size, offset))
                at += 4 + size
            return
        decoder.expand(frame)
        for record in chunk.get("records") or []:
            message = record.get("message")
            body = bytes(message.sections[0].value) if message is not None else b""
            match = FLOOD_HEAD.match(body)
            if match is None:
                self.wrong += 1
                continue
            index = int(match.group(1))
            self.found.add(index)
            self.behind += 1
            if record.get("offset") is None:
                self.unknown += 1
            elif record["offset"] != index:
                self.wrong += 1


def read_time(path: Path) -> float:
    """Wall seconds of `streamdump read path`, its output thrown away."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "streamdump", "read", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - start


def decode(path: Path, decoder: Decoder) -> tuple[list[Frame], Delivered, ReadStats, float]:
    """The Publish frames, what the Deliver frames held, the read's stats and its seconds."""
    stats = ReadStats()
    delivered = Delivered()
    frames: list[Frame] = []
    checking = 0.0  # the check's own work on Deliver records, left out of the time
    start = time.perf_counter()
    for frame in read_frames(path, decoder, [5552], stats):
        if frame.command == "Publish":
            frames.append(frame)
        elif frame.command == "Deliver":
            began = time.perf_counter()
            delivered.take(frame, decoder)
            checking += time.perf_counter() - began
    return frames, delivered, stats, time.perf_counter() - start - checking


def lost_records(
    ranges: dict[str, list[tuple[int, int, int]]], holes: dict[str, list[tuple[int, int]]]
) -> set[int]:
    """Offsets of the records some of whose bytes lie in the holes."""
    as_messages = {key: [(s, e, (0, o)) for s, e, o in rows] for key, rows in ranges.items()}
    return {offset for _, offset in lost_messages(as_messages, holes)}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture", type=Path)
    parser.add_argument("--drop-rate", type=float, default=0.002, help="share of data segments dropped")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sidecar_path = Path(f"{args.capture}.sent.json")
    try:
        sidecar = json.loads(sidecar_path.read_text())
    except (OSError, ValueError) as exc:
        # The sidecar says what was sent: without it there is nothing to check the capture against.
        reason = exc.strerror if isinstance(exc, OSError) else "not JSON"
        print(
            f"recovery_check: {sidecar_path}: {reason} (record_flood.py writes it beside the capture)",
            file=sys.stderr,
        )
        return 2
    decoder = Decoder(default_registry().get("rabbitmq_stream"))
    publisher = sidecar["publisher_id"]
    sent = {(publisher, i) for i in range(sidecar["first_publishing_id"], sidecar["last_publishing_id"] + 1)}
    ok = True

    frames, delivered, stats, took = decode(args.capture, decoder)
    clean_took = took
    got = recovered(frames, publisher)
    ranges = message_ranges(frames, decoder)
    lost = lost_messages(ranges, gap_holes(stats))
    print(f"capture: {args.capture} ({args.capture.stat().st_size / 1e6:.1f} MB, {stats.packets} packets)")
    print(f"  tcpdump: {sidecar['tcpdump']}")
    print(
        f"  as recorded: sent {len(sent)}, recovered {len(got & sent)}, in reported gaps {len(lost)}, "
        f"gaps {stats.gaps} ({stats.gap_bytes} bytes), decode {took:.1f} s"
    )
    if got != sent - lost or got - sent:
        missing = len(sent - got - lost)
        print(f"  MISMATCH: {missing} messages missing outside gaps, {len(got - sent)} unknown")
        ok = False

    lossy = args.capture.with_suffix(".lossy.pcap")
    try:
        holes = drop_segments(args.capture, lossy, args.drop_rate, args.seed)
        dropped_bytes = sum((e - s) % SEQ_MOD for rows in holes.values() for s, e in rows)
        expected_lost = lost_messages(ranges, holes)
        lossy_frames, lossy_delivered, lossy_stats, took = decode(lossy, decoder)
        lossy_got = recovered(lossy_frames, publisher)
        reported = lost_messages(ranges, gap_holes(lossy_stats))
        in_cut_frames = len(recovered([f for f in lossy_frames if f.incomplete is not None], publisher))
        print(
            f"  lossy copy (drop rate {args.drop_rate}, seed {args.seed}): "
            f"{sum(map(len, holes.values()))} segments / {dropped_bytes} bytes dropped"
        )
        print(
            f"    messages whose bytes are missing: {len(expected_lost)}; recovered {len(lossy_got)} of "
            f"{len(sent)} (expected {len(sent - expected_lost)}), {in_cut_frames} of them from "
            f"{lossy_stats.incomplete} incomplete frames"
        )
        print(
            f"    gap report: {lossy_stats.gaps} gaps, {lossy_stats.gap_bytes} bytes; lost messages inside "
            f"reported gaps: {len(reported & expected_lost)} of {len(expected_lost)}; decode {took:.1f} s"
        )
        records = delivered.found
        records_lost = lost_records(delivered.ranges, holes)
        allowed = records - records_lost
        got_records = lossy_delivered.found
        short = len(allowed - got_records)
        print(
            f"    Deliver records whose bytes are missing: {len(records_lost)}; recovered "
            f"{len(got_records & records)} of {len(records)} (the bytes allow {len(allowed)}, "
            f"{short} short: {short / max(1, len(allowed)):.4%}); {lossy_delivered.behind} from frames "
            f"a gap cut, {lossy_delivered.unknown} of those with an unknown offset, "
            f"{lossy_delivered.wrong} with a wrong one"
        )
        if short > DELIVER_SLACK * len(allowed) or lossy_delivered.wrong or got_records - allowed:
            print(
                f"    MISMATCH: Deliver short by more than {DELIVER_SLACK:.1%}, or records with wrong "
                f"offsets ({lossy_delivered.wrong}), or recovered despite missing bytes "
                f"({len(got_records - allowed)})"
            )
            ok = False
        # Resynchronising should cost in proportion to the bytes passed over: the target is 2x.
        # The decode above keeps every Publish frame for the checks; a read as users run it
        # streams them, so both files are also read by `streamdump read`, alternately, best of 2.
        print(f"    decode time, lossy copy / as recorded: {took / clean_took:.2f}x (frames kept)")
        clean_read, lossy_read = read_time(args.capture), read_time(lossy)
        clean_read, lossy_read = min(clean_read, read_time(args.capture)), min(lossy_read, read_time(lossy))
        print(
            f"    streamdump read: {lossy_read:.1f} s against {clean_read:.1f} s as recorded "
            f"({lossy_read / clean_read:.2f}x)"
        )
        if lossy_got != sent - expected_lost:
            print(
                f"    MISMATCH: {len(sent - expected_lost - lossy_got)} messages with all bytes present "
                f"not recovered; {len(lossy_got & expected_lost)} recovered despite missing bytes"
            )
            ok = False
        if reported != expected_lost or lossy_stats.gap_bytes != dropped_bytes:
            print("    MISMATCH: the gap report does not account for exactly the dropped bytes")
            ok = False
    finally:
        lossy.unlink(missing_ok=True)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
