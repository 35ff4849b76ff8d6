"""Peak memory of `streamdump read` on a capture and on the same capture repeated, in one run.

Reading must stream: the peak resident size may not grow with the length of the
capture. This script builds CAPTURE repeated --copies times (the pcap records
appended after one file header, so every connection appears again with a fresh SYN),
runs `streamdump read` on both files in child processes with the output thrown away,
and prints each child's peak RSS (from wait4), wall time and throughput, and the
ratio of the two peaks. The interpreter's own footprint (importing streamdump and
doing nothing) is printed as the floor.

    python bench/memory_bench.py CAPTURE.pcap [--copies 4] [--format text|jsonl]

The 250 MB capture of the issue comes from `python bench/record_flood.py --messages 1000000`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PCAP_HEADER = 24
PCAP_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
CHUNK = 8 << 20


def repeat_pcap(src: Path, copies: int, out: Path) -> None:
    with src.open("rb") as fh:
        header = fh.read(PCAP_HEADER)
        if header[:4] not in (
            b"\xd4\xc3\xb2\xa1",
            b"\xa1\xb2\xc3\xd4",
            b"\x4d\x3c\xb2\xa1",
            b"\xa1\xb2\x3c\x4d",
        ):
            raise SystemExit(f"{src}: only classic pcap files can be repeated by this script")
    with out.open("wb") as dst:
        dst.write(header)
        for _ in range(copies):
            with src.open("rb") as fh:
                fh.seek(PCAP_HEADER)
                while chunk := fh.read(CHUNK):
                    dst.write(chunk)


def peak(argv: list[str]) -> tuple[float, float, int]:
    """(peak RSS in MB, wall seconds, exit status) of one child process."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(argv, stdout=null, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    return usage.ru_maxrss / 1024, elapsed, code


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("capture", type=Path)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--format", default="text", choices=["text", "jsonl"])
    parser.add_argument("--tmpdir", type=Path, default=None, help="where the repeated file is written")
    args = parser.parse_args()
    if not args.capture.is_file():
        raise SystemExit(f"{args.capture}: no such file")

    floor, _, _ = peak([sys.executable, "-c", "import streamdump.cli"])
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        repeated = Path(tmp) / f"x{args.copies}.pcap"
        repeat_pcap(args.capture, args.copies, repeated)
        rows = []
        for path in (args.capture, repeated):
            argv = [sys.executable, "-m", "streamdump", "read", str(path), "--format", args.format]
            rss, wall, code = peak(argv)
            rows.append((path, path.stat().st_size, rss, wall, code))

    print(f"interpreter + imports floor: {floor:8.1f} MB")
    print(f"{'input':<34} {'size MB':>9} {'peak RSS MB':>12} {'wall s':>8} {'MB/s':>7} {'exit':>5}")
    for path, size, rss, wall, code in rows:
        print(f"{path.name:<34} {size / 1e6:9.1f} {rss:12.1f} {wall:8.2f} {size / 1e6 / wall:7.1f} {code:5d}")
    (_, _, one, _, _), (_, _, many, _, _) = rows
    print(f"peak ratio x{args.copies} / x1: {many / one:.3f} (target: within 20%, i.e. <= 1.20)")
    print(f"growth above the floor: x1 {one - floor:.1f} MB, x{args.copies} {many - floor:.1f} MB")
    return 0 if all(code == 0 for *_, code in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
