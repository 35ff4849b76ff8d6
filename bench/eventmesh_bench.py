"""EventMesh against RocketMQ: the same traffic shape, decoded by the same streamdump, in one run.

Builds two captures with streamdump's encoders: N publishes of a CloudEvent (about 300
bytes of JSON) and their acknowledgements over one connection, cut into 1448-byte segments
as a real network would, for EventMesh (half 1.9 frames, half 1.8: the framing rule that
tells them apart is what this measures) and for RocketMQ (SEND_MESSAGE_V2 with the same
body, and its responses). Each is read by `streamdump read` (one line per frame) and
`streamdump stats` in child processes, alternating; the best of --repeat runs counts.
Prints seconds, frames per second and peak RSS, and the ratio EventMesh / RocketMQ
(above 1.0: EventMesh is slower per frame). No test asserts these figures.

    python bench/eventmesh_bench.py [--frames 100000] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from streamdump.dissectors.eventmesh.framing import build
from vs_tshark import STREAMDUMP_ARGS, best_of

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry

# The tests' pcap writer (one segment per payload), importable from the repo root and tests/.
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
from test_wireshark import tcp_pcap  # noqa: E402

MSS = 1448
BURST = 64  # exchanges a client has in flight
STREAMDUMP = [sys.executable, "-m", "streamdump"]


def event(n: int) -> bytes:
    items = [{"sku": f"A-{n % 97}", "qty": n % 5 + 1}]
    data = {"order": n, "state": "paid", "items": items, "note": "x" * 120}
    return json.dumps({
        "specversion": "1.0", "id": f"{n:036d}", "source": "/bench", "type": "cloudevents",
        "datacontenttype": "application/cloudevents+json", "subject": "BENCH-TOPIC", "data": data,
    }, separators=(",", ":")).encode()  # fmt: skip


def eventmesh_frames(n: int) -> tuple[list[bytes], list[bytes]]:
    decoder = Decoder(default_registry().get("eventmesh"))
    props = {"protocol_type": "cloudevents", "protocol_version": "1.0", "protocol_desc": "tcp"}
    ask: list[bytes] = []
    answer: list[bytes] = []
    for i in range(n):
        generation = "1.9" if i % 2 else "1.8"
        seq = f"{i:010d}"
        ask.append(build(decoder, "AsyncMessage", "request", {"seq": seq, "code": 0, "properties": props,
                                                         "package": event(i)}, generation))  # fmt: skip
        answer.append(build(decoder, "AsyncMessage", "response", {"seq": seq, "code": 0, "desc": "success",
                                                             "properties": {}}, generation))  # fmt: skip
    return ask, answer


def rocketmq_frames(n: int) -> tuple[list[bytes], list[bytes]]:
    decoder = Decoder(default_registry().get("rocketmq"))
    ask: list[bytes] = []
    answer: list[bytes] = []
    for i in range(n):
        header = {"serialize_type": 0, "language": 0, "version": 401, "opaque": i}
        ask.append(decoder.encode("SEND_MESSAGE_V2", "request", {**header, "producer_group": "PID_bench",
                              "topic": "BENCH-TOPIC", "queue_id": i % 4, "body": event(i)}))  # fmt: skip
        answer.append(decoder.encode("SEND_MESSAGE_V2", "response", {**header, "code": 0, "queue_id": i % 4,
                                 "queue_offset": i, "msg_id": f"{i:032X}"}))  # fmt: skip
    return ask, answer


def pcap(ask: list[bytes], answer: list[bytes], port: int) -> bytes:
    """One connection: bursts of 64 requests, then their 64 answers, each burst in MSS-sized
    segments (the tests' writer): every answer comes after its request, as on a real wire."""
    segments: list[tuple[bool, bytes]] = []
    for at in range(0, len(ask), BURST):
        for side, frames in ((True, ask), (False, answer)):
            data = b"".join(frames[at : at + BURST])
            segments += [(side, data[cut : cut + MSS]) for cut in range(0, len(data), MSS)]
    return tcp_pcap(segments, server=("10.0.0.2", port), client=("10.0.0.1", 40000))


def report(captures: dict[str, Path], frames: int, repeat: int, reference: str) -> None:
    """Check that each capture is clean traffic, then time `read` and `stats` on each, best of
    repeat, with the ratio to the reference capture's time."""
    for name, path in captures.items():
        # What is timed must be clean traffic: every frame decoded, nothing to diagnose.
        stats = subprocess.run(
            [*STREAMDUMP, "stats", str(path), "-T", "json"], capture_output=True, text=True
        )
        summary = json.loads(stats.stdout)
        per = summary["protocols"].values() if "protocols" in summary else [summary]
        count = sum(c["client_frames"] + c["server_frames"] for s in per for c in s["connections"])
        findings = sum(len(s["diagnoses"]) + s["diagnoses_not_listed"] for s in per)
        print(f"  {name}: {path} ({path.stat().st_size / 1e6:.1f} MB, {count} frames, {findings} findings)")
    print(f"{'mode':<10} {'capture':<11} {'seconds':>8} {'frames/s':>10} {'RSS MiB':>8}  ratio")
    for mode in ("one-line", "stats"):
        runs = {}
        for name, path in captures.items():
            argv = [*STREAMDUMP, *(a.format(capture=path) for a in STREAMDUMP_ARGS[mode])]
            runs[name] = best_of(argv, repeat)
        for name, run in runs.items():
            rate = 2 * frames / run.seconds if run.ok else 0
            ratio = run.seconds / runs[reference].seconds
            status = "" if run.ok else f"  failed: {run.last_stderr}"
            figures = f"{run.seconds:>8.2f} {rate:>10.0f} {run.rss_mib:>8.1f}"
            print(f"{mode:<10} {name:<11} {figures}  {ratio:.2f}{status}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=100_000, help="publishes (each answered)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the captures here and keep them")
    parser.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="streamdump-eventmesh-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    captures = {
        "eventmesh": (folder / "eventmesh.pcap", eventmesh_frames, 10000),
        "rocketmq": (folder / "rocketmq.pcap", rocketmq_frames, 10911),
    }
    if args.build:
        for path, make, port in captures.values():
            path.write_bytes(pcap(*make(args.frames), port))
        return 0
    # Built in a child: a child forked from a parent holding them would count its pages as peak RSS.
    build = [sys.executable, __file__, "--build", "--frames", str(args.frames), "--keep", str(folder)]
    subprocess.run(build, check=True)
    print(f"{args.frames} publishes and {args.frames} answers per capture, {MSS}-byte segments")
    report({name: path for name, (path, _, _) in captures.items()}, args.frames, args.repeat, "rocketmq")
    return 0


if __name__ == "__main__":
    sys.exit(main())
