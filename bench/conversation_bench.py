"""What the conversation tracker, a filter and `stats` add to reading a capture.

Reads the same capture several times per step and prints frames/s and MB/s for: the
pipeline alone (packets to decoded frames), plus the conversation tracker, plus a filter
on a linked field, plus the statistics. Ratios are against the pipeline alone, measured in
the same run.

    python bench/conversation_bench.py [CAPTURE] [--repeat N]

Without CAPTURE it uses captures/rabbitmq_stream/bulk.pcap (a real broker, MTU 1500); for a large one, make
/tmp/flood1m.pcap with bench/record_flood.py.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from streamdump.analysis.fieldnames import FrameFilter
from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.analysis.statistics import Statistics
from streamdump.analysis.tracker import Tracker
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry
from streamdump.wire.frame import Frame

DEFAULT = Path(__file__).resolve().parent.parent / "captures" / "rabbitmq_stream" / "bulk.pcap"


def run(path: Path, decoder: Decoder, step: Callable[[], Callable[[Frame], object]]) -> tuple[int, int]:
    """Read the capture once, handing every frame to a fresh step; returns (frames, bytes)."""
    on_frame = step()
    frames = size = 0
    for frame in read_frames(path, decoder, [5552], ReadStats()):
        on_frame(frame)
        frames += 1
        size += len(frame.data)
    return frames, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    protocol = default_registry().get("rabbitmq_stream")
    decoder = Decoder(protocol)

    def tracked() -> Callable[[Frame], object]:
        return Tracker(protocol).feed

    def filtered() -> Callable[[Frame], object]:
        tracker, selection = Tracker(protocol), FrameFilter(decoder, 'command == "Deliver" and stream == "x"')
        return lambda frame: (tracker.feed(frame), selection(frame))

    def statistics() -> Callable[[Frame], object]:
        tracker = Tracker(protocol)
        stats = Statistics(protocol, tracker)
        return lambda frame: (tracker.feed(frame), stats.add(frame))

    steps = {
        "pipeline": lambda: lambda frame: None,
        "+ tracker": tracked,
        "+ tracker + filter": filtered,
        "+ tracker + stats": statistics,
    }
    base = None
    print(f"{args.capture}, read {args.repeat} times per step")
    for label, step in steps.items():
        start = time.perf_counter()
        for _ in range(args.repeat):
            frames, size = run(args.capture, decoder, step)
        elapsed = time.perf_counter() - start
        base = base or elapsed
        rate = frames * args.repeat / elapsed
        mb = size * args.repeat / elapsed / 1e6
        print(f"{label:<22} {rate:>10,.0f} frames/s {mb:>8.1f} MB/s {elapsed / base:6.2f}x pipeline")


if __name__ == "__main__":
    main()
