"""streamdump now against streamdump at an earlier revision, on the same capture, in one run.

Each side is installed (not edited in place) into its own temp folder with pip, from the
working tree and from `git archive REV`, and runs in a child process with that folder
first on PYTHONPATH and its output thrown away. Runs alternate between the two sides,
so both meet the same page cache and machine load; the best of --repeat runs counts.
Prints seconds, CPU seconds (user and system, the least of the runs), MB/s, messages/s and
peak RSS per side and mode, the ratio now / reference in seconds (below 1.0: now is faster),
the speedup in messages per second (reference seconds / now seconds) and in CPU time.
Messages are what `stats` counts from the frames' headers (records of Publish and Deliver
frames, ...), as --messages prints a line for each.

    python bench/against_revision.py CAPTURE... [--rev 10fcc7b] [--repeat 3]
                                     [--modes one-line,stats]   (also json, messages)

The README's JSON and --messages figures, against bb28704 (the code before that work):

    python bench/against_revision.py /tmp/streamdump-bench/flood1m-mtu1500.pcap \
        /tmp/streamdump-bench/flood1m-lo.pcap --rev bb28704 --modes json,messages,one-line --repeat 2

Modes as in vs_tshark.py. A mode the reference does not have fails on its side and is
reported so. No test asserts these figures: they are for reading.

--instructions counts the instructions each side executes under valgrind's callgrind instead
of timing it: the same count for the same inputs whatever else the machine is doing, so small
differences (a few percent) can be told on a busy machine. Each side runs each mode once on the
capture and once on a capture of no packets; what the read costs beyond start-up is compared.
Give it slices of the bench captures (`editcap -r big.pcap slice.pcap 1-5000`): callgrind runs
some fifty times slower than the program.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from vs_tshark import STREAMDUMP_ARGS, Run, run_child

REPO = Path(__file__).resolve().parent.parent


def install(source: Path, target: Path) -> None:
    """A plain (not editable) install of the project at source into target."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--target", str(target), str(source)],
        check=True,
    )  # fmt: skip


def exported(rev: str, into: Path) -> Path:
    """The tree of rev, as git archive writes it."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def side_env(site: Path) -> dict[str, str]:
    # PYTHONSAFEPATH: `python -c` and `-m` would put the working folder (the checkout) first.
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", PYTHONSAFEPATH="1")
    # The check that each side imports its own copy, not an editable install of the checkout.
    probe = [sys.executable, "-c", "import streamdump, sys; sys.stdout.write(streamdump.__file__)"]
    found = subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout
    if not found.startswith(str(site)):
        raise SystemExit(f"the {site.name} side imports streamdump from {found}, not from {site}")
    return env


def count_messages(capture: Path, env: dict[str, str]) -> int | None:
    """Messages the capture carries, by `stats` (headers only; this also warms the page cache)."""
    argv = [sys.executable, "-m", "streamdump", "stats", str(capture), "-T", "json"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    try:
        return sum(row["messages"] for row in json.loads(done.stdout)["streams"])
    except (ValueError, KeyError, TypeError):
        return None


def best(runs: list[Run]) -> Run:
    ok = [r for r in runs if r.ok]
    if not ok:
        return runs[-1]
    fastest = min(ok, key=lambda r: r.seconds)
    # The least CPU time of the runs too: on a shared machine it moves less than wall time.
    return Run(fastest.seconds, max(r.rss_mib for r in ok), 0, "", cpu=min(r.cpu for r in ok))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", type=Path, nargs="+")
    parser.add_argument("--rev", default="10fcc7b", help="the reference revision (default: %(default)s)")
    parser.add_argument(
        "--now", default=None, help="a revision to measure instead of the working tree (e.g. HEAD)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default="one-line,stats")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind instead of timing"
    )
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in STREAMDUMP_ARGS]
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown} (known: {', '.join(STREAMDUMP_ARGS)})")
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True)
    now_name = head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
    if args.now is not None:
        now_name = args.now
    with tempfile.TemporaryDirectory(prefix="sd-against-") as tmp:
        base = Path(tmp)
        install(REPO if args.now is None else exported(args.now, base / "src-now"), base / "now")
        install(exported(args.rev, base / "src-ref"), base / "ref")
        sides = {now_name: side_env(base / "now"), args.rev: side_env(base / "ref")}
        empty = base / "empty.pcap"
        empty.write_bytes(EMPTY_PCAP)
        for capture in args.captures:
            if args.instructions:
                count_capture(capture, empty, modes, sides, now_name, args.rev)
            else:
                run_capture(capture, modes, sides, now_name, args.rev, args.repeat)


def run_capture(
    capture: Path, modes: list[str], sides: dict[str, dict[str, str]], now_name: str, rev: str, repeat: int
) -> None:
    size_mb = capture.stat().st_size / 1e6
    messages = count_messages(capture, sides[now_name])
    counted = f"{messages} messages" if messages is not None else "messages not counted"
    print(f"\n{capture} ({size_mb:.1f} MB, {counted}), best of {repeat}, Python {sys.version.split()[0]}")
    heads = f"{'seconds':>8} {'CPU s':>7} {'MB/s':>7} {'messages/s':>11} {'peak RSS':>9}"
    print(f"{'mode':<10} {'side':<16} {heads}")
    for mode in modes:
        argv = [sys.executable, "-m", "streamdump"] + [
            str(capture) if a == "{capture}" else a for a in STREAMDUMP_ARGS[mode]
        ]
        runs: dict[str, list[Run]] = {name: [] for name in sides}
        for _ in range(repeat):
            for name, env in sides.items():
                runs[name].append(run_child(argv, env))
        results = {name: best(r) for name, r in runs.items()}
        for name, run in results.items():
            if not run.ok:
                print(f"{mode:<10} {name:<16} failed ({run.exit_code}): {run.last_stderr}")
                continue
            rate = f"{messages / run.seconds:>11,.0f}" if messages else f"{'-':>11}"
            print(
                f"{mode:<10} {name:<16} {run.seconds:>8.2f} {run.cpu:>7.2f} "
                f"{size_mb / run.seconds:>7.1f} {rate} {run.rss_mib:>6.0f} MiB"
            )
        now, ref = results[now_name], results[rev]
        if now.ok and ref.ok:
            print(
                f"{mode:<10} {'ratio':<16} {now.seconds / ref.seconds:>8.3f}  (now / {rev}); "
                f"messages/s x{ref.seconds / now.seconds:.2f}; CPU time x{ref.cpu / now.cpu:.2f}"
            )


# A pcap file's header alone (Ethernet, snaplen 262144): a read of nothing, start-up only.
EMPTY_PCAP = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """Instructions one run executes, as callgrind counts them (its output file thrown away)."""
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run([*valgrind, *argv], env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind counted nothing for {argv}: {done.stderr[-500:]}")
    return int(found.group(1))


def count_capture(
    capture: Path, empty: Path, modes: list[str], sides: dict[str, dict[str, str]], now_name: str, rev: str
) -> None:
    print(f"\n{capture}: instructions (billions) under callgrind, Python {sys.version.split()[0]}")
    print(f"{'mode':<10} {'side':<16} {'whole run':>10} {'start-up':>9} {'the read':>9}")
    for mode in modes:
        read: dict[str, int] = {}
        for name, env in sides.items():
            argv = [sys.executable, "-m", "streamdump"]
            whole = instructions(
                [*argv, *(str(capture) if a == "{capture}" else a for a in STREAMDUMP_ARGS[mode])], env
            )
            start = instructions(
                [*argv, *(str(empty) if a == "{capture}" else a for a in STREAMDUMP_ARGS[mode])], env
            )
            read[name] = whole - start
            print(f"{mode:<10} {name:<16} {whole / 1e9:>10.3f} {start / 1e9:>9.3f} {read[name] / 1e9:>9.3f}")
        print(f"{mode:<10} {'ratio':<16} {read[now_name] / read[rev]:>10.4f}  (the read, now / {rev})")


if __name__ == "__main__":
    main()
