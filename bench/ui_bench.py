"""The terminal UI on a large capture: time to the first screen, keys while it indexes, memory.

Targets (issue 37): the first screen of a 250 MB capture within 2 s; the UI answers keys while
the rest is indexed in the background; memory bounded (frames decoded on demand from the index,
not kept). The reference, in the same run, is `streamdump read -q` on the same capture (one pass
of the same session that keeps nothing): the UI's full indexing time and peak RSS are given as
ratios to it; `streamdump read -c 100` (a process's start, its imports and options, the first
lines) says what part of the first screen's time any command pays on this machine.

Each UI run is a child process (headless Textual, the app as `streamdump ui` makes it) that
times itself from its first line, imports included: the first screen (the first rows drawn), a
key pressed every 0.2 s while indexing goes on (20 of them) (the time from the key, posted as the terminal
posts it, to the next frame's tree made and shown), then the end of indexing and its
peak RSS, and a frame's tree opened on demand at the end.

    python bench/ui_bench.py /tmp/streamdump-bench/flood1m-lo.pcap [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from vs_tshark import run_child

FIRST_SCREEN_TARGET = 2.0

CHILD = r"""
import time
start = time.perf_counter()
import asyncio, json, resource, sys
from streamdump.analysis.session import CaptureFile, Options
from streamdump.ui.app import StreamdumpApp
from streamdump.ui.index import FrameIndex
from streamdump.ui.panes import DetailTree, PacketList

KEYS = 20

async def main():
    setup = Options().prepare()
    ready = time.perf_counter() - start
    index = FrameIndex(setup, CaptureFile(sys.argv[1]))
    app = StreamdumpApp(index)
    out = {}
    async with app.run_test(size=(160, 48)) as pilot:
        packets = app.query_one(PacketList)
        while not app.first_drawn:  # set once the refresh that drew the first rows is done
            await asyncio.sleep(0.001)
        out["first_screen"] = app.first_drawn - start
        out["ready"] = ready
        out["first_rows"] = index.count
        keys = []
        tree = app.query_one(DetailTree)
        while not index.finished and len(keys) < KEYS:
            # A key as the terminal sends it, until the next frame's tree is shown.
            before = tree.root.data
            t = time.perf_counter()
            app.simulate_key("down")
            while tree.root.data is before and time.perf_counter() - t < 30:
                await asyncio.sleep(0.001)
            keys.append(time.perf_counter() - t)
            await asyncio.sleep(0.2)
        while not index.finished:
            await asyncio.sleep(0.05)
        out["indexed"] = time.perf_counter() - start
        out["keys"] = keys
        out["frames"] = index.count
        out["index_bytes"] = sum(
            a.itemsize * len(a)
            for a in (index.numbers, index.times, index.conns, index.sides, index.protocols,
                      index.commands, index.severities, index.offsets, index.sizes, index.extras)
        )
        biggest = max(range(index.count), key=lambda i: index.sizes[i])
        t = time.perf_counter()
        packets.go_to_row(biggest)
        await pilot.pause()
        out["open_biggest"] = time.perf_counter() - t
        out["biggest_bytes"] = index.sizes[biggest]
        t = time.perf_counter()
        await pilot.press("end")
        await pilot.pause()
        out["end_key"] = time.perf_counter() - t
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    index.close()
    print(json.dumps(out))

asyncio.run(main())
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", type=Path, nargs="+")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    for capture in args.captures:
        reads, starts, uis = [], [], []
        for _ in range(args.repeat):
            reads.append(run_child([sys.executable, "-m", "streamdump", "read", "-q", str(capture)]))
            starts.append(run_child([sys.executable, "-m", "streamdump", "read", "-c", "100", str(capture)]))
            done = subprocess.run([sys.executable, "-c", CHILD, str(capture)], capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(done.stderr)
            uis.append(json.loads(done.stdout.strip().splitlines()[-1]))
        read_s = min(r.seconds for r in reads)
        read_rss = max(r.rss_mib for r in reads)
        best = min(uis, key=lambda u: u["first_screen"])
        keys = [k for u in uis for k in u["keys"]]
        indexed = min(u["indexed"] for u in uis)
        rss = max(u["peak_rss_mib"] for u in uis)
        print(f"\n{capture} ({capture.stat().st_size / 1e6:.1f} MB), best of {args.repeat}")
        started = min(r.seconds for r in starts)
        print(
            f"first screen: {best['first_screen']:.2f} s (target at most {FIRST_SCREEN_TARGET:.0f} s), "
            f"{best['first_rows']} rows indexed by then; imports and options took {best['ready']:.2f} s of "
            f"it; `read -c 100` (the command line's own start and first lines): {started:.2f} s"
        )
        if keys:
            print(
                f"a key while indexing: median {statistics.median(keys) * 1000:.0f} ms, "
                f"max {max(keys) * 1000:.0f} ms ({len(keys)} keys)"
            )
        print(
            f"indexed: {best['frames']:,} frames in {indexed:.2f} s; read -q: {read_s:.2f} s "
            f"({indexed / read_s:.2f}x)"
        )
        print(
            f"peak RSS: ui {rss:.0f} MiB, read -q {read_rss:.0f} MiB ({rss / read_rss:.2f}x); the index "
            f"{best['index_bytes'] / max(1, best['frames']):.0f} bytes a frame in memory"
        )
        print(
            f"largest frame ({best['biggest_bytes']:,} bytes) selected, tree and bytes shown: "
            f"{best['open_biggest'] * 1000:.0f} ms; End: {best['end_key'] * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
