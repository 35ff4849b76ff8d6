"""The report against `stats` on the same capture, in one run: time and the page's size.

The report reads a capture as `stats` does, keeps its series over time as it goes and then
draws a dozen charts; the target is at most 2x the time of `stats` on a capture of 1,000,000
messages, and a page of at most 5 MB. Runs alternate between the two commands, so both meet
the same page cache and machine load; the best of --repeat counts.

    python bench/report_bench.py /tmp/streamdump-bench/flood1m-mtu1500.pcap [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from vs_tshark import Run, run_child

TIME_TARGET = 2.0
SIZE_TARGET = 5 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", type=Path, nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sd-report-") as tmp:
        for capture in args.captures:
            page = Path(tmp) / "report.html"
            commands = {
                "stats": [sys.executable, "-m", "streamdump", "stats", str(capture)],
                "report": [sys.executable, "-m", "streamdump", "report", str(capture), "-o", str(page)],
            }
            runs: dict[str, list[Run]] = {name: [] for name in commands}
            for _ in range(args.repeat):
                for name, argv in commands.items():
                    runs[name].append(run_child(argv))
            best = {name: min(r.seconds for r in found if r.ok) for name, found in runs.items()}
            rss = {name: max(r.rss_mib for r in found) for name, found in runs.items()}
            size = page.stat().st_size
            print(f"\n{capture} ({capture.stat().st_size / 1e6:.1f} MB), best of {args.repeat}")
            for name in commands:
                print(f"{name:<8} {best[name]:>8.2f} s {rss[name]:>7.0f} MiB")
            ratio = best["report"] / best["stats"]
            print(f"report / stats: {ratio:.2f}x (target at most {TIME_TARGET:.0f}x)")
            print(f"page: {size / (1 << 20):.2f} MiB (target at most {SIZE_TARGET >> 20} MiB)")


if __name__ == "__main__":
    main()
