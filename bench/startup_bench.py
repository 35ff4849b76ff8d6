"""Start-up: what a person feels on a small capture, against tshark on the same file, in one run.

Most commands people type read a capture of a few dozen frames, where start-up is all the time
there is. Each round runs every command once, in turn, so all meet the same page cache and
machine load; the best of --repeat counts (the least disturbed run), the median is printed
beside it. Targets: reading a small capture in at most 0.6x tshark's time, `--help` in at most
0.5x tshark's read of the same capture. `python -c pass` is the floor no Python program passes.

    python bench/startup_bench.py [CAPTURE ...] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from vs_tshark import Run, run_child

ROOT = Path(__file__).resolve().parent.parent
SMALL = [ROOT / "captures/nats/pubsub.pcap", ROOT / "captures/rabbitmq_stream/session.pcap"]
READ_TARGET = 0.6
HELP_TARGET = 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", type=Path, nargs="*", default=SMALL)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--tshark", default="tshark")
    args = parser.parse_args()
    python = [sys.executable, "-m", "streamdump"]
    # As a user's install runs: compiled bytecode written once and read after (an environment that
    # forbids writing it would time the compiler), and the registry's cache filled by a first run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for capture in args.captures:
        commands = {
            "tshark -r": [args.tshark, "-r", str(capture)],
            "streamdump read": [*python, "read", str(capture)],
            "streamdump --help": [*python, "--help"],
            "python -c pass": [sys.executable, "-c", "pass"],
        }
        runs: dict[str, list[Run]] = {name: [] for name in commands}
        for argv in commands.values():
            run_child(argv, env=env)  # the warm-up: bytecode, the cache, the page cache
        for _ in range(args.repeat):
            for name, argv in commands.items():
                runs[name].append(run_child(argv, env=env))
        failed = [name for name, found in runs.items() if not all(r.ok for r in found)]
        if failed:
            sys.exit(f"startup_bench: {', '.join(failed)} failed: {runs[failed[0]][-1].last_stderr}")
        best = {name: min(r.seconds for r in found) for name, found in runs.items()}
        median = {name: statistics.median(r.seconds for r in found) for name, found in runs.items()}
        shown = capture.relative_to(ROOT) if capture.is_relative_to(ROOT) else capture
        print(f"\n{shown}, best of {args.repeat}")
        for name in commands:
            print(f"{name:<20} {best[name] * 1000:>7.0f} ms (median {median[name] * 1000:>5.0f} ms)")
        reference = best["tshark -r"]
        print(f"read / tshark:   {best['streamdump read'] / reference:.2f}x (target at most {READ_TARGET}x)")
        print(
            f"--help / tshark: {best['streamdump --help'] / reference:.2f}x (target at most {HELP_TARGET}x)"
        )


if __name__ == "__main__":
    main()
