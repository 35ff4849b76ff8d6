"""Start-up: what a person feels on a small capture, against tshark on the same file, in one run.

Most commands people type read a capture of a few dozen frames, where start-up is all the time
there is. Each round runs every command once, in turn, so all meet the same page cache and
machine load; the best of --repeat counts (the least disturbed run), the median is printed
beside it. Targets: reading a small capture in at most 0.6x tshark's time, `--help` in at most
0.5x tshark's read of the same capture. `python -c pass` is the floor no Python program passes.

What the interpreter's `site` runs is the machine's, not streamdump's: a `.pth` file in
site-packages that imports a module (a certificate bundle's, an editable install's finder) runs
at every start of every Python program. The targets are timed on the real commands; beside
them, the same commands run without any `.pth` file (`python -S`, site-packages on PYTHONPATH),
so what the machine adds can be read off. Bytecode is written and stdout buffered, as on a
user's machine, whatever this environment sets; the registry's cache is a folder of the
bench's own, filled by the warm-up (another checkout's runs cannot empty it).

    python bench/startup_bench.py [CAPTURE ...] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import site
import statistics
import sys
import tempfile
from pathlib import Path

from vs_tshark import Run, run_child

ROOT = Path(__file__).resolve().parent.parent
SMALL = [ROOT / "captures/nats/pubsub.pcap", ROOT / "captures/rabbitmq_stream/session.pcap"]
READ_TARGET = 0.6
HELP_TARGET = 0.5


def pth_imports() -> list[str]:
    """The .pth files of site-packages that run code at every start (lines starting `import`)."""
    found = []
    for folder in site.getsitepackages():
        for pth in sorted(Path(folder).glob("*.pth")):
            if any(line.startswith("import") for line in pth.read_text(errors="replace").splitlines()):
                found.append(pth.name)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", type=Path, nargs="*", default=SMALL)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--tshark", default="tshark")
    args = parser.parse_args()
    captures = [capture.resolve() for capture in args.captures]
    os.chdir(ROOT)  # `python -m streamdump` takes the current folder's package: this checkout's
    python = [sys.executable, "-m", "streamdump"]
    bare = [sys.executable, "-S", "-m", "streamdump"]
    cache = tempfile.mkdtemp(prefix="startup-bench-")
    # As a user's install runs: compiled bytecode written once and read after (an environment that
    # forbids writing it would time the compiler), stdout buffered, and the registry's cache
    # filled by a first run.
    drop = {"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}
    env = {k: v for k, v in os.environ.items() if k not in drop} | {"STREAMDUMP_CACHE": cache}
    # Without the .pth files: site-packages on the path, nothing of site run.
    path = os.pathsep.join([*site.getsitepackages(), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    bare_env = env | {"PYTHONPATH": path}
    print(f"site-packages' .pth files that import at every start: {', '.join(pth_imports()) or 'none'}")
    for capture in captures:
        commands = {
            "tshark -r": ([args.tshark, "-r", str(capture)], env),
            "streamdump read": ([*python, "read", str(capture)], env),
            "streamdump --help": ([*python, "--help"], env),
            "python -c pass": ([sys.executable, "-c", "pass"], env),
            "read, no .pth": ([*bare, "read", str(capture)], bare_env),
            "--help, no .pth": ([*bare, "--help"], bare_env),
            "-c pass, no .pth": ([sys.executable, "-S", "-c", "pass"], bare_env),
        }
        runs: dict[str, list[Run]] = {name: [] for name in commands}
        for argv, child_env in commands.values():
            run_child(argv, env=child_env)  # the warm-up: bytecode, the cache, the page cache
        for _ in range(args.repeat):
            for name, (argv, child_env) in commands.items():
                runs[name].append(run_child(argv, env=child_env))
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
        print(
            f"without .pth files: read {best['read, no .pth'] / reference:.2f}x, "
            f"--help {best['--help, no .pth'] / reference:.2f}x; the .pth files cost "
            f"{(best['python -c pass'] - best['-c pass, no .pth']) * 1000:.0f} ms of `python -c pass`"
        )
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
