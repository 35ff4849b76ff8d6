"""`streamdump live` under load, with tcpdump recording the same traffic alongside: rstream
publishing and consuming as fast as it can against the real broker on loopback. Prints the frames
live decoded against the frames streamdump decodes from tcpdump's file, and the kernel drops both
report (the target: none lost). Needs root.

    sudo python bench/live_bench.py [--messages 200000] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proxy_bench import load

STREAMDUMP = [sys.executable, "-m", "streamdump"]


def count_frames(lines: bytes) -> tuple[int, int]:
    """Frames, and messages published, in JSON lines."""
    frames = messages = 0
    for line in lines.splitlines():
        frame = json.loads(line)
        frames += 1
        if frame["command"] == "Publish":
            messages += len(frame["fields"].get("messages") or [])
    return frames, messages


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="streamdump-live-bench-"))
    dumped = folder / "tcpdump.pcap"
    tcpdump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-s", "0", "-B", "65536", "--immediate-mode", "-w", str(dumped),
         "tcp port 5552"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    live_out = (folder / "live.jsonl").open("wb")
    live = subprocess.Popen([*STREAMDUMP, "live", "-P", "rabbitmq_stream", "-T", "jsonl"], stdout=live_out,
                            stderr=subprocess.PIPE)  # fmt: skip
    time.sleep(2)
    seconds = asyncio.run(load(5552, args.messages, args.size))
    time.sleep(1)
    for proc in (live, tcpdump):
        proc.send_signal(signal.SIGINT)
    _, live_err = live.communicate(timeout=600)
    _, dump_err = tcpdump.communicate(timeout=60)
    live_out.close()
    live_frames, live_messages = count_frames((folder / "live.jsonl").read_bytes())
    read = subprocess.run([*STREAMDUMP, "read", str(dumped), "-P", "rabbitmq_stream", "-T", "jsonl"],
                          capture_output=True, check=False)  # fmt: skip
    dump_frames, dump_messages = count_frames(read.stdout)
    print(f"{args.messages} messages of {args.size} bytes published and consumed in {seconds:.2f} s")
    print(f"  live:    {live_frames} frames, {live_messages} messages published")
    print(
        f"  tcpdump: {dump_frames} frames, {dump_messages} messages published (streamdump read of its file)"
    )
    print(f"  frames live lost against tcpdump: {dump_frames - live_frames} (target: 0)")
    print("  live says:", live_err.decode().strip().splitlines()[-1])
    print("  tcpdump says:", " ".join(dump_err.decode().split("\n")[-4:]).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
