"""The floor under the one-line view in Python, against the framing-only tshark, in one run.

Issue 40 asks the one-line read for at most 1.3x tshark with a Lua dissector that only frames.
This measures what no Python read can skip and still do what a read does, each step in a child
process of its own, CPU time (user and system), best of --repeat:

    start    the interpreter starting and importing what the steps below use
    wire     + every packet read and parsed, TCP reassembled, the frames cut by the spec's
             framing rule (nothing decoded)
    ids      + every Publish's messages walked for their publishing ids (a u64 and a u32 size
             each, one struct unpack): the least a read that links confirms to their publishes
             (publish-to-confirm latency, unconfirmed publishes) must read
    link     + those ids kept in flight with the packet that sent them, and each confirm's ids
             (one struct unpack a confirm) paired with theirs: a dict filled and emptied in C
             (dict.fromkeys, update, map of pop), the least the links publish_in and
             confirm_time cost
    crc      + every Deliver's chunk checked against its CRC-32 (zlib over the bytes after the
             chunk's header), as every read checks it

Each step runs twice: on streamdump's own wire layer (above), and on a bare wire written here
for the bench captures alone (`--bare`): the file mapped, one unpack for a packet's headers,
each direction's bytes appended in arrival order, frames cut by their size. It checks nothing a
real read must (out of order, retransmitted or lost segments, other link types, IPv6, the
handshake), so it is a floor under the floor: what Python pays for the bytes at the least.

and beside them streamdump's one-line read and tshark's framing-only pass (bench/vs_tshark.py's
Lua). The last lines compare `crc`, the whole floor, with 1.3x the framing-only pass: where the
floor is over it, the target is out of reach for any Python read, before a field is decoded, a
frame tracked or a line written.

    python bench/one_line_floor.py [CAPTURE ...] [--repeat 3]

The captures are bench/make_captures.py's (root and a running RabbitMQ make them).
"""

from __future__ import annotations

import argparse
import mmap
import shutil
import struct
import sys
import tempfile
import zlib
from collections.abc import Iterator
from itertools import repeat
from pathlib import Path

from vs_tshark import FRAMING_LUA, STREAMDUMP, best_of, tshark_argv, tshark_env

TARGET = 1.3
STEPS = ("start", "wire", "ids", "link", "crc")
CAPTURES = [Path("/tmp/streamdump-bench/flood1m-mtu1500.pcap"), Path("/tmp/streamdump-bench/flood1m-lo.pcap")]
PUBLISH = b"\x00\x02"  # the key of a Publish request
CONFIRM = b"\x00\x03"  # a PublishConfirm: size, key, version, publisher id, id count, ids
DELIVER = b"\x00\x08"
# A Deliver (v1): size, key, version, subscription id, then the chunk header (48 bytes).
CHUNK_DATA = 4 + 2 + 2 + 1 + 48
HEAD = struct.Struct(">IHHBI")  # size, key, version, publisher id, message count
MESSAGE = struct.Struct(">QI")  # publishing id, message size


RECORD = struct.Struct("<IIII")  # classic pcap: seconds, microseconds, captured, original
# Ethernet, then IPv4 without options and TCP: the IP header's first byte, its protocol, the
# addresses, the ports and the TCP header's length.
ETHER_IP_TCP = struct.Struct("!14xB8xB2x4s4sHH8xB")
SIZE = struct.Struct(">I")


def streamdump_frames(capture: str) -> Iterator[tuple[bytes | memoryview, int]]:
    """Every frame's bytes and its first packet, as streamdump's wire layer cuts them."""
    from streamdump.analysis.pipeline import framing_rule
    from streamdump.analysis.session import decoders_of
    from streamdump.wire.capture import read_segments
    from streamdump.wire.framing import Framer
    from streamdump.wire.reassembly import Stream

    rule = framing_rule(decoders_of(("rabbitmq_stream",))["rabbitmq_stream"])
    sides: dict[tuple[str, int, str, int], tuple[Stream, Framer]] = {}
    for seg in read_segments(capture):
        key = (seg.src, seg.sport, seg.dst, seg.dport)
        side = sides.get(key)
        if side is None:
            stream = Stream()
            stream.syn_seen = True
            stream.next = (seg.seq + (1 if seg.flags & 2 else 0)) & 0xFFFFFFFF
            side = sides[key] = (stream, Framer(rule, synced=True))
        stream, framer = side
        for event in stream.accept(seg.seq, seg.flags, seg.payload, seg.wire_len, seg.number):
            if type(event) is not tuple:
                continue  # a gap: the bench captures have none
            for piece in framer.feed(event[0], event[1]):
                yield piece.data, piece.pos


def bare_frames(capture: str) -> Iterator[tuple[bytes | memoryview, int]]:
    """The same frames from a bare wire that trusts the bench captures (see the docstring)."""
    with open(capture, "rb") as f:
        whole = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    pending: dict[tuple[bytes, int, bytes, int], bytearray] = {}
    head = RECORD.unpack_from
    tcp = ETHER_IP_TCP.unpack_from
    size_of = SIZE.unpack_from
    at, end, number = 24, len(whole), 0
    while at < end:
        caplen = head(whole, at)[2]
        at += 16
        number += 1
        vihl, proto, src, dst, sport, dport, offset = tcp(whole, at)
        start = at + 14 + (vihl & 15) * 4 + (offset >> 4) * 4
        at += caplen
        if proto != 6 or start >= at:
            continue
        key = (src, sport, dst, dport)
        buf = pending.get(key)
        if buf is None:
            buf = pending[key] = bytearray()
        buf += whole[start:at]
        pos, have = 0, len(buf)
        while have - pos >= 4:
            size = size_of(buf, pos)[0] + 4
            if have - pos < size:
                break
            yield bytes(buf[pos : pos + size]), number
            pos += size
        if pos:
            del buf[:pos]


def floor(capture: str, step: str, bare: bool) -> None:
    """One step of the floor (run in a child: its CPU time is the step's, start included)."""
    if step == "start":
        return
    frames = bare_frames if bare else streamdump_frames
    ids = 0
    at = STEPS.index(step)
    link, crc = at >= STEPS.index("link"), at >= STEPS.index("crc")
    flight: dict[int, int] = {}
    paired = 0
    for data, first in frames(capture):
        kind = data[4:6]
        if crc and kind == DELIVER:
            zlib.crc32(memoryview(data)[CHUNK_DATA:])
        if link and kind == CONFIRM and len(data) >= HEAD.size:
            count = HEAD.unpack_from(data, 0)[4]
            confirmed = struct.unpack_from(f">{count}Q", data, HEAD.size)
            paired += len(confirmed) - list(map(flight.pop, confirmed, repeat(None))).count(None)
        if step == "wire" or kind != PUBLISH or len(data) < HEAD.size:
            continue
        count = HEAD.unpack_from(data, 0)[4]
        pos = HEAD.size
        unpack = MESSAGE.unpack_from
        if link:
            sent = []
            add = sent.append
            for _ in range(count):
                pid, size = unpack(data, pos)
                add(pid)
                pos += MESSAGE.size + size
            flight.update(dict.fromkeys(sent, first))
        else:
            for _ in range(count):
                _, size = unpack(data, pos)
                pos += MESSAGE.size + size
        ids += count
    print(f"{step}: {ids} publishing ids, {paired} confirmed", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", type=Path, nargs="*", default=CAPTURES)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tshark", default=shutil.which("tshark") or "/usr/bin/tshark")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # the child's side
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        floor(str(args.captures[0]), args.step, args.bare)
        return
    with tempfile.TemporaryDirectory() as tmp:
        lua = Path(tmp) / "framing.lua"
        lua.write_text(FRAMING_LUA)
        env = tshark_env(Path(tmp))
        for capture in args.captures:
            cpu: dict[str, float] = {}
            for wire in ("", "bare "):
                for step in STEPS:
                    argv = [sys.executable, __file__, str(capture), "--step", step]
                    run = best_of(argv + (["--bare"] if wire else []), args.repeat)
                    cpu[wire + step] = run.cpu
            cpu["streamdump read"] = best_of([*STREAMDUMP, "read", str(capture)], args.repeat).cpu
            framing = tshark_argv(args.tshark, capture, lua, [])
            cpu["tshark framing-only"] = best_of(framing, args.repeat, env).cpu
            report(capture, cpu, args.repeat)


def report(capture: Path, cpu: dict[str, float], repeat: int) -> None:
    reference = cpu["tshark framing-only"]
    allowed = TARGET * reference
    print(f"\n{capture.name}, CPU seconds (user + system), best of {repeat}")
    for name, seconds in cpu.items():
        print(f"  {name:22s} {seconds:6.2f} s")
    for wire in ("", "bare "):
        whole = cpu[wire + "crc"]
        left = "over: out of reach in Python" if whole > allowed else f"{allowed - whole:.2f} s left"
        against = f"{TARGET}x framing-only, {allowed:.2f} s"
        print(f"  the {wire}floor ({wire}crc) {whole:.2f} s against {against}: {left}")
    print(f"  streamdump read / framing-only: {cpu['streamdump read'] / reference:.2f}x")


if __name__ == "__main__":
    main()
