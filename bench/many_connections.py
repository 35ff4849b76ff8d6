"""Many connections and many small frames: cost per connection, cost per frame and memory, in one run.

Builds synthetic NATS captures of SESSIONS client sessions (default 50,000), each the client's
CONNECT, PUB and PING and the server's INFO and PONG, one frame per packet, written straight to
pcap (dpkt's writer; the headers from a template, so a million connections take seconds):

- short: one TCP connection per session (SYN, SYN-ACK, ACK, INFO, CONNECT, PUB, PING, PONG,
  FIN, FIN): ten packets each;
- long: the same sessions over 50 long connections (one handshake and one INFO each, then
  CONNECT, PUB, PING and PONG per session);
- long with INFO: the same, each session's INFO kept (a server sends INFO again when its cluster
  changes): the frames are then the short capture's, and short minus this is what opening and
  ending the connections costs, no frame's decoding in it;
- with --million, a third: 1,000,000 short connections (10,000,000 packets), for the memory bound.

Each client has its own address (10.x.y.z) and a port from 32768 up; the server is 10.0.0.1:4222.
Then `streamdump read` (one line per frame), `stats` and `stats -T json` run in child processes
with their output thrown away (the best of --repeat wall times; peak RSS from wait4's rusage),
and tshark's TCP pass over the long capture (`tshark -n -r FILE -T fields -e tcp.stream`: every
packet dissected to TCP with its stream index, the pass Wireshark itself makes before any
protocol above TCP; tshark has no NATS dissector). It prints per-frame and per-connection costs
and every ratio against its target (issue 41). Wall times on a shared machine are noisy: take
the best of 3 there.

    python bench/many_connections.py [--sessions 50000] [--repeat 3] [--million] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dpkt

STREAMDUMP = [sys.executable, "-m", "streamdump"]
SERVER = (bytes([10, 0, 0, 1]), 4222)
LONG_CONNECTIONS = 50
# TCP flags.
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

INFO = (
    b'INFO {"server_id":"NBENCH","server_name":"bench","version":"2.9.10","proto":1,'
    b'"host":"0.0.0.0","port":4222,"headers":true,"max_payload":1048576} \r\n'
)
CONNECT = (
    b'CONNECT {"verbose":false,"pedantic":false,"lang":"python3","version":"2.6.0",'
    b'"protocol":1,"headers":true,"no_responders":true} \r\n'
)
PING, PONG = b"PING\r\n", b"PONG\r\n"


def pub(n: int) -> bytes:
    body = b'{"order":%d,"state":"paid"}' % n
    return b"PUB orders.created %d\r\n%s\r\n" % (len(body), body)


class Writer:
    """Ethernet, IPv4 and TCP headers packed from a template, each record through dpkt's writer."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("wb")
        self.pcap = dpkt.pcap.Writer(self.file, snaplen=65535)
        self.eth = b"\x04" * 6 + b"\x02" * 6 + b"\x08\x00"
        self.ts = 1_800_000_000.0

    def packet(self, src: tuple[bytes, int], dst: tuple[bytes, int], seq: int, ack: int, flags: int,
               payload: bytes = b"", step: float = 0.0001) -> None:  # fmt: skip
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + len(payload), 0, 0x4000, 64, 6, 0, src[0], dst[0])
        tcp = struct.pack("!HHIIBBHHH", src[1], dst[1], seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 0x50, flags,
                          65535, 0, 0)  # fmt: skip
        self.pcap.writepkt(self.eth + ip + tcp + payload, ts=self.ts)
        self.ts += step

    def close(self) -> None:
        self.pcap.close()


@dataclass
class Tcp:
    """One connection's two sequence numbers as its packets go by."""

    client: tuple[bytes, int]
    server: tuple[bytes, int] = SERVER
    cseq: int = 1000
    sseq: int = 900000

    def open(self, out: Writer) -> None:
        out.packet(self.client, self.server, self.cseq, 0, SYN)
        out.packet(self.server, self.client, self.sseq, self.cseq + 1, SYN | ACK)
        self.cseq += 1
        self.sseq += 1
        out.packet(self.client, self.server, self.cseq, self.sseq, ACK)

    def send(self, out: Writer, from_client: bool, data: bytes) -> None:
        if from_client:
            out.packet(self.client, self.server, self.cseq, self.sseq, PSH | ACK, data)
            self.cseq += len(data)
        else:
            out.packet(self.server, self.client, self.sseq, self.cseq, PSH | ACK, data)
            self.sseq += len(data)

    def close(self, out: Writer) -> None:
        out.packet(self.client, self.server, self.cseq, self.sseq, FIN | ACK)
        self.cseq += 1
        out.packet(self.server, self.client, self.sseq, self.cseq, FIN | ACK)
        self.sseq += 1


def client(n: int) -> tuple[bytes, int]:
    """Session n's client: an address of its own (10.1.0.0 up) and a port from 32768 up."""
    host = 0x0A010000 + n
    return struct.pack("!I", host), 32768 + n % 28000


def session(out: Writer, tcp: Tcp, n: int, info: bool) -> None:
    if info:
        tcp.send(out, False, INFO)
    tcp.send(out, True, CONNECT)
    tcp.send(out, True, pub(n))
    tcp.send(out, True, PING)
    tcp.send(out, False, PONG)


def write_short(path: Path, sessions: int) -> None:
    out = Writer(path)
    for n in range(sessions):
        tcp = Tcp(client(n))
        tcp.open(out)
        session(out, tcp, n, info=True)
        tcp.close(out)
    out.close()


def write_long(path: Path, sessions: int, info: bool = False) -> None:
    out = Writer(path)
    conns = [Tcp(client(n)) for n in range(LONG_CONNECTIONS)]
    for tcp in conns:
        tcp.open(out)
        tcp.send(out, False, INFO)
    for n in range(sessions):
        session(out, conns[n % LONG_CONNECTIONS], n, info=info)
    for tcp in conns:
        tcp.close(out)
    out.close()


@dataclass
class Run:
    seconds: float  # wall time
    cpu: float  # user and system time: steadier than wall time on a machine others share
    rss_mib: float
    ok: bool
    error: str = ""


def run(argv: list[str]) -> Run:
    """One child process, its output thrown away: wall time and peak RSS (wait4's rusage)."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(argv, stdout=null, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    ok = os.waitstatus_to_exitcode(status) == 0
    cpu = usage.ru_utime + usage.ru_stime
    return Run(seconds, cpu, usage.ru_maxrss / 1024, ok, "" if ok else err.decode(errors="replace")[-500:])


def best_of(argv: list[str], repeat: int) -> Run:
    runs = [run(argv) for _ in range(repeat)]
    good = [r for r in runs if r.ok]
    if not good:
        return runs[-1]
    return Run(min(r.seconds for r in good), min(r.cpu for r in good), max(r.rss_mib for r in good), True)


def modes(path: Path) -> Iterator[tuple[str, list[str]]]:
    yield "read", [*STREAMDUMP, "read", str(path)]
    yield "stats", [*STREAMDUMP, "stats", str(path)]
    yield "stats json", [*STREAMDUMP, "stats", str(path), "-T", "json"]


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "OVER"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; the best time counts")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 short connections (memory)")
    parser.add_argument("--keep", type=Path, help="write the captures here and keep them")
    parser.add_argument("--build", action="store_true", help="only write the captures")
    parser.add_argument("--wall", action="store_true", help="figures from wall time, not CPU time")
    parser.add_argument("--only", choices=["read", "stats", "stats json"], action="append",
                        help="time only these commands (repeatable)")  # fmt: skip
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="streamdump-many-"))
    folder.mkdir(parents=True, exist_ok=True)
    short, long_ = folder / f"short{args.sessions}.pcap", folder / f"long{args.sessions}.pcap"
    long_info = folder / f"longinfo{args.sessions}.pcap"
    million = folder / "short1000000.pcap"
    wanted = [
        (short, write_short, args.sessions),
        (long_, write_long, args.sessions),
        (long_info, lambda path, n: write_long(path, n, info=True), args.sessions),
    ]
    if args.million:
        wanted.append((million, write_short, 1_000_000))
    for path, write, sessions in wanted:
        if not path.exists():
            began = time.perf_counter()
            write(path, sessions)
            print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - began:.1f} s")
    if args.build:
        return 0
    frames_long = 4 * args.sessions + LONG_CONNECTIONS
    results: dict[tuple[str, str], Run] = {}
    for name, path in (("short", short), ("long", long_), ("longinfo", long_info)):
        for mode, argv in modes(path):
            if (args.only and mode not in args.only) or (name == "longinfo" and mode != "read"):
                continue
            results[name, mode] = r = best_of(argv, args.repeat)
            status = "" if r.ok else f"  FAILED: {r.error}"
            print(
                f"{name:<6} {mode:<11} {r.seconds:8.2f} s wall {r.cpu:8.2f} s CPU  "
                f"peak RSS {r.rss_mib:7.1f} MiB{status}"
            )
    tshark = shutil.which("tshark")
    # tshark's TCP pass over each capture: the reference for the long read, and the same ratios
    # for a C dissector that only tracks TCP (its conversations, its streams), for scale.
    passes: dict[str, Run] = {}
    if tshark:
        for name, path in (("long", long_), ("short", short), ("longinfo", long_info)):
            argv = [tshark, "-n", "-r", str(path), "-T", "fields", "-e", "tcp.stream"]
            passes[name] = best_of(argv, args.repeat)
            print(f"tshark TCP pass over {name} ({' '.join(argv[1:])}): {passes[name].seconds:.2f} s wall "
                  f"{passes[name].cpu:.2f} s CPU")  # fmt: skip
    tshark_run = passes.get("long")
    print()
    print("figures from CPU time (user + system, best of the runs); --wall: from wall time")

    def took(r: Run) -> float:
        return r.seconds if args.wall else r.cpu

    if ("short", "read") not in results:
        return 0 if all(r.ok for r in results.values()) else 1
    s_read, l_read = results["short", "read"], results["long", "read"]
    per_frame = took(l_read) / frames_long * 1e6
    print(f"per frame (long read): {per_frame:.1f} µs over {frames_long} frames")
    per_conn = (took(s_read) - took(l_read)) / args.sessions * 1e6
    print(f"per connection (short minus long read, over {args.sessions} connections): {per_conn:.1f} µs   "
          f"target <= 50 µs: {verdict(per_conn, 50)}")  # fmt: skip
    ratio = took(s_read) / took(l_read)
    print(f"short read / long read: {ratio:.2f}x   target <= 1.5x: {verdict(ratio, 1.5)}")
    # The short capture carries an INFO frame per session more than the long one; against the
    # long capture with the same frames, what is left is the connections' own cost.
    li_read = results["longinfo", "read"]
    own = (took(s_read) - took(li_read)) / args.sessions * 1e6
    info = (took(li_read) - took(l_read)) / args.sessions * 1e6
    print(f"of the per-connection figure: {info:.1f} µs its INFO frame (long with INFO minus long), "
          f"{own:.1f} µs the handshake, FINs and the connection itself (short minus long "
          "with INFO)")  # fmt: skip
    # What the 1.5x ratio leaves the connections at this per-frame cost: half a long session's
    # frames, less the INFO frame the short capture carries a session more.
    budget = 0.5 * took(l_read) / args.sessions * 1e6 - info
    print(f"the 1.5x ratio at this cost a frame leaves opening and ending {budget:.1f} µs a "
          f"connection; they take {own:.1f} µs   target <= 50 µs: {verdict(own, 50)}")  # fmt: skip
    if tshark_run is not None and tshark_run.ok:
        vs = took(l_read) / took(tshark_run)
        print(f"long read / tshark TCP pass: {vs:.2f}x   target <= 2x: {verdict(vs, 2)}")
        if all(r.ok for r in passes.values()):
            t_short, t_long, t_info = (took(passes[n]) for n in ("short", "long", "longinfo"))
            print(f"for scale, tshark's TCP pass: short / long {t_short / t_long:.2f}x, opening and ending "
                  f"{(t_short - t_info) / args.sessions * 1e6:.1f} µs a connection (short minus long "
                  "with INFO)")  # fmt: skip
    else:
        print("long read / tshark TCP pass: tshark not found")
    for (name, mode), r in results.items():
        print(
            f"peak RSS {name} {mode}: {r.rss_mib:.1f} MiB   "
            f"target < 200 MB: {verdict(r.rss_mib * 1.048576, 200)}"
        )
    if args.million:
        print()
        for mode, argv in modes(million):
            if args.only and mode not in args.only:
                continue
            r = run(argv)
            status = "" if r.ok else f"  FAILED: {r.error}"
            print(f"1,000,000 short connections, {mode}: {r.seconds:.1f} s wall, {r.cpu:.1f} s CPU, "
                  f"peak RSS {r.rss_mib:.1f} MiB   target < 200 MB: "
                  f"{verdict(r.rss_mib * 1.048576, 200)}{status}")  # fmt: skip
    return 0 if all(r.ok for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
