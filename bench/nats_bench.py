"""NATS (and Liftbridge inside it) against RocketMQ: the same traffic shape, in one run.

Builds three captures with streamdump's encoders, each N publishes of the same ~300-byte JSON
body and N deliveries (NATS) or answers (RocketMQ) over one connection, cut into 1448-byte
segments: NATS with plain JSON payloads (a text protocol: lines found by scanning, words split),
NATS whose payloads are Liftbridge envelopes with a CRC-32C (a second protocol decoded from each
payload, protobuf through Google's library), and RocketMQ SEND_MESSAGE_V2 with the same body (a
binary, length-prefixed protocol: the reference). Each is read by `streamdump read` (one line per
frame) and `streamdump stats` in child processes, alternating; the best of --repeat runs counts.
Prints seconds, frames per second, peak RSS and the ratio to RocketMQ (above 1.0: slower per
frame). No test asserts these figures.

    python bench/nats_bench.py [--frames 100000] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import crc32c
from eventmesh_bench import BURST, MSS, pcap, report, rocketmq_frames

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry


def body(n: int) -> bytes:
    items = [{"sku": f"A-{n % 97}", "qty": n % 5 + 1}]
    data = {"order": n, "state": "paid", "items": items, "note": "x" * 120, "subject": "BENCH-TOPIC"}
    return json.dumps(data, separators=(",", ":")).encode()


def nats_frames(n: int, liftbridge: bool = False) -> tuple[list[bytes], list[bytes]]:
    nats = Decoder(default_registry().get("nats"))
    lb = Decoder(default_registry().get("liftbridge"))
    ask = [nats.encode("Subscribe", "command", {"subject": "orders.>", "sid": "1"})]
    answer = [b'INFO {"server_id":"bench","version":"2.9.10","max_payload":1048576} \r\n']
    for i in range(n):
        payload = body(i)
        if liftbridge:
            message = lb.encode("Publish", "command", {
                "envelope_version": 0, "header_length": 8, "flags": 0, "stream": "orders",
                "subject": "orders.created", "value": payload, "correlation_id": f"c-{i}",
                "ack_inbox": "_INBOX.bench", "ack_policy": 1,
            })[8:]  # fmt: skip
            payload = bytes.fromhex("b90e43b4000c0100") + struct.pack(">I", crc32c.crc32c(message)) + message
        ask.append(nats.encode("Publish", "command", {"subject": "orders.created", "data": payload}))
        answer.append(
            nats.encode("Message", "command", {"subject": "orders.created", "sid": "1", "data": payload})
        )
    return ask, answer


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=100_000, help="publishes (each delivered or answered)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the captures here and keep them")
    parser.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="streamdump-nats-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    captures = {
        "nats": (folder / "nats.pcap", nats_frames, 4222),
        "liftbridge": (folder / "liftbridge.pcap", lambda n: nats_frames(n, liftbridge=True), 4222),
        "rocketmq": (folder / "rocketmq.pcap", rocketmq_frames, 10911),
    }
    if args.build:
        for path, make, port in captures.values():
            path.write_bytes(pcap(*make(args.frames), port))
        return 0
    # Built in a child: a child forked from a parent holding them would count its pages as peak RSS.
    build = [sys.executable, __file__, "--build", "--frames", str(args.frames), "--keep", str(folder)]
    subprocess.run(build, check=True)
    print(f"{args.frames} publishes and {args.frames} deliveries or answers per capture, {MSS}-byte segments,"
          f" bursts of {BURST}")  # fmt: skip
    report({name: path for name, (path, _, _) in captures.items()}, args.frames, args.repeat, "rocketmq")
    return 0


if __name__ == "__main__":
    sys.exit(main())
