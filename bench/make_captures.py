"""Make the two benchmark captures bench/vs_tshark.py reads, from real recordings.

This script owns the benchmark inputs: it runs bench/record_flood.py (a real RabbitMQ
broker, tcpdump on lo) twice with the same flood of messages and only the segment size
changed, so the runner can show how both decoders cope with TCP reassembly:

    <outdir>/flood1m-mtu1500.pcap   lo at MTU 1500, offloads off: segments of at most 1448 bytes
    <outdir>/flood1m-lo.pcap        lo left as it is (MTU 65536): segments of up to ~64 KiB

Each recording also leaves record_flood.py's `<pcap>.sent.json` sidecar. A capture that
already exists is kept unless --force; a failed recording is deleted so a rerun retries it.
Needs root and a running RabbitMQ (record_flood.py enables the stream plugin itself).

    sudo python bench/make_captures.py [--outdir /tmp/streamdump-bench] [--messages 1000000] [--force]

The captures are about 250 MB each and must stay out of the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RECORD_FLOOD = Path(__file__).resolve().parent / "record_flood.py"
DEFAULT_OUTDIR = Path("/tmp/streamdump-bench")
DEFAULT_MESSAGES = 1_000_000


@dataclass(frozen=True)
class Capture:
    name: str
    # Extra record_flood.py arguments that make this capture differ from the other.
    flood_args: tuple[str, ...]


# The MTU is spelled out rather than left to record_flood's default, so the file name
# stays true if that default ever changes.
CAPTURES = (
    Capture("flood1m-mtu1500.pcap", ("--mtu", "1500")),
    Capture("flood1m-lo.pcap", ("--mtu", "0")),
)


def default_paths(outdir: Path = DEFAULT_OUTDIR) -> list[Path]:
    """Where the captures are, for the runner's default arguments."""
    return [outdir / capture.name for capture in CAPTURES]


def record(out: Path, messages: int, flood_args: tuple[str, ...]) -> None:
    """Run record_flood.py in a child, so each recording starts from a clean interpreter and
    this script needs none of rstream's imports."""
    argv = [sys.executable, str(RECORD_FLOOD), "--messages", str(messages), "--out", str(out), *flood_args]
    print("+", " ".join(argv), flush=True)
    try:
        code = subprocess.run(argv, check=False).returncode
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    if code != 0:
        # A half-written pcap would otherwise be skipped as "already there" next time.
        out.unlink(missing_ok=True)
        raise SystemExit(f"make_captures: record_flood.py exited {code} for {out}")


def describe(path: Path) -> str:
    line = f"{path}  {path.stat().st_size:,} bytes ({path.stat().st_size / 1e6:.1f} MB)"
    sidecar = path.with_name(path.name + ".sent.json")
    if sidecar.is_file():
        sent = json.loads(sidecar.read_text())
        line += (
            f", {sent.get('file_packets', '?')} packets, {sent.get('messages', '?')} messages,"
            f" largest segment {sent.get('largest_tcp_payload', '?')} B"
        )
    return line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where the captures go")
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="messages per recording")
    parser.add_argument("--force", action="store_true", help="record again even if a capture exists")
    args = parser.parse_args(argv)
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    outdir: Path = args.outdir.resolve()
    todo = [c for c in CAPTURES if args.force or not (outdir / c.name).exists()]
    # Checked up front: record_flood.py would only fail after the broker checks, and
    # existing captures need no privileges at all.
    if todo and os.geteuid() != 0:
        raise SystemExit("make_captures: recording needs root (tcpdump, lo's MTU); rerun with sudo")
    outdir.mkdir(parents=True, exist_ok=True)
    for capture in CAPTURES:
        out = outdir / capture.name
        if capture in todo:
            record(out, args.messages, capture.flood_args)
        else:
            print(f"kept {out} (exists; --force records it again)")
    for path in default_paths(outdir):
        print(describe(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
