"""Decoder throughput on the frames of the committed captures, against a header-only floor.

Prints frames/s and MB/s for: the header-only floor (one struct unpack per frame),
streamdump's decode (all fields, chunk CRCs checked), decode plus expand (every record
decompressed and decoded, as JSON and --messages need), and decode plus the detail tree. Ratios are
against the floor, measured in the same run, so machines can be compared.

    python bench/decode_bench.py [--frames N]
"""

from __future__ import annotations

import argparse
import struct
import time
from collections.abc import Callable
from pathlib import Path

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry

CAPTURES = Path(__file__).resolve().parent.parent / "captures" / "rabbitmq_stream"
HEADER = struct.Struct(">IHH")


def corpus(decoder: Decoder, count: int) -> list[bytes]:
    frames = [
        f.data
        for path in sorted(CAPTURES.glob("*.pcap"))
        for f in read_frames(path, decoder, [5552], ReadStats())
    ]
    return (frames * (count // len(frames) + 1))[:count]


def timed(label: str, frames: list[bytes], fn: Callable[[bytes], object], floor: float | None) -> float:
    start = time.perf_counter()
    for data in frames:
        fn(data)
    elapsed = time.perf_counter() - start
    size = sum(map(len, frames))
    ratio = f"{elapsed / floor:6.1f}x floor" if floor else "  (floor)"
    print(f"{label:<22} {len(frames) / elapsed:>12,.0f} frames/s {size / elapsed / 1e6:>8.1f} MB/s {ratio}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000)
    args = parser.parse_args()
    decoder = Decoder(default_registry().get("rabbitmq_stream"))
    frames = corpus(decoder, args.frames)
    print(f"{len(frames):,} frames, {sum(map(len, frames)) / 1e6:.1f} MB, from {CAPTURES}")
    floor = timed("header only", frames, HEADER.unpack_from, None)
    timed("decode", frames, decoder.decode, floor)
    timed("decode + records", frames, lambda d: decoder.expand(decoder.decode(d)), floor)
    timed("decode + tree", frames, lambda d: decoder.tree(decoder.decode(d)), floor)


if __name__ == "__main__":
    main()
