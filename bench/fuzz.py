"""Coverage-guided fuzzing of every target in streamdump.fuzzing, with atheris (libFuzzer).

Each target runs in its own process, seeded from the committed captures, with its
inputs mutated by libFuzzer and, one time in five, by streamdump.fuzzing.damage (absurd
lengths, deep nesting, compression bombs, truncation). A finding is any exception, an
input that runs longer than --timeout seconds, one allocation over 1 GiB, or a process
over 3 GiB: libFuzzer stops and leaves the input in <out>/<target>/. Prints, per target,
the inputs run, executions per second, coverage (libFuzzer's cov and ft counters) and
the findings.

    pip install atheris
    python bench/fuzz.py --runs 1000000                 # every target, one after another
    python bench/fuzz.py --target rabbitmq_stream.decode --runs 100000
    python bench/fuzz.py --jobs 2 --runs 1000000        # two targets at a time

An input found here is reproduced with `python bench/fuzz.py --replay FILE --target NAME`
and kept as a regression test in tests/test_fuzz.py.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DEFAULT_OUT = Path("/tmp/streamdump-fuzz")
FINDINGS = ("crash", "timeout", "oom", "slow", "leak")
# Inputs longer than this are cut: long enough for a frame with hundreds of records, short
# enough that most of the time goes to variety rather than to decoding long inputs. A stream
# or a capture costs by the frame: at 1 KiB an input holds several, cut and lost, and a
# million inputs take about a quarter of an hour (longer ones are in tests/test_fuzz.py).
MAX_LEN = 16384
MAX_LEN_STREAM = 1024
STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)
COVERAGE = re.compile(r"#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+)")


def child(name: str, runs: int, out: Path, timeout: int, seconds: int = 0) -> None:
    """Fuzz one target in this process (libFuzzer exits it when done)."""
    import atheris

    # Coverage is what guides the search: a decode target's is the decoders' code; a stream's or
    # a capture's is what cuts bytes into frames (reassembly, framing, recovery) and reads
    # files, and leaving the decoders uninstrumented there keeps those targets fast.
    if name.endswith(".decode"):
        covered = ["streamdump"]
    else:
        covered = ["streamdump.wire", "streamdump.analysis", "streamdump.dissectors", "streamdump.fuzzing"]
    with atheris.instrument_imports(include=covered):
        from streamdump.fuzzing import damage, targets

    target = targets()[name]
    folder = out / name
    max_len = MAX_LEN if name.endswith(".decode") else MAX_LEN_STREAM
    seeds = folder / "corpus"
    seeds.mkdir(parents=True, exist_ok=True)
    for n, seed in enumerate(target.seeds()):
        (seeds / f"seed-{n:04d}").write_bytes(seed[:max_len])

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.2:
            return damage(data, rng)[:max_size]
        return atheris.Mutate(data, max_size)

    argv = [
        sys.argv[0],
        f"-runs={runs}",
        f"-timeout={timeout}",
        f"-max_total_time={seconds}",
        "-rss_limit_mb=3072",
        "-malloc_limit_mb=1024",
        f"-max_len={max_len}",
        f"-artifact_prefix={folder}/",
        "-print_final_stats=1",
        str(seeds),
    ]
    atheris.Setup(argv, target.run, custom_mutator=mutate)
    atheris.Fuzz()


def run_target(name: str, runs: int, out: Path, timeout: int, seconds: int = 0) -> dict[str, object]:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*-*"):
        if old.is_file() and old.name.split("-")[0] in FINDINGS:
            old.unlink()
    start = time.monotonic()
    argv = [sys.executable, __file__, "--child", name, "--runs", str(runs), "--out", str(out)]
    argv += ["--timeout", str(timeout), "--seconds", str(seconds)]
    with (folder / "log.txt").open("w") as out_file:  # libFuzzer's progress, as it goes
        proc = subprocess.run(argv, stdout=out_file, stderr=subprocess.STDOUT, check=False)
    took = time.monotonic() - start
    log = (folder / "log.txt").read_text(errors="replace")
    stats = {k: int(v) for k, v in STAT.findall(log)}
    covered = COVERAGE.findall(log)
    findings = sorted(
        p.name
        for p in folder.iterdir()
        if p.is_file() and p.name.split("-")[0] in ("crash", "timeout", "oom", "slow")
    )
    return {
        "target": name,
        "runs": stats.get("number_of_executed_units", 0),
        "exec_s": stats.get("average_exec_per_sec", 0),
        "cov": int(covered[-1][1]) if covered else 0,
        "ft": int(covered[-1][2]) if covered else 0,
        "peak_rss_mb": stats.get("peak_rss_mb", 0),
        "seconds": round(took),
        "exit": proc.returncode,
        "findings": findings,
    }


def replay(name: str, path: Path) -> int:
    from streamdump.fuzzing import targets

    targets()[name].run(path.read_bytes())
    print(f"{path}: {name} ran it without an exception")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", action="append", help="a target name (repeatable); default: every one")
    parser.add_argument("--runs", type=int, default=1_000_000, help="inputs per target")
    parser.add_argument("--jobs", type=int, default=1, help="targets fuzzed at once")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    parser.add_argument("--seconds", type=int, default=0, help="stop a target after this long (0: no limit)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--replay", type=Path, help="run one input file through --target")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.runs, args.out, args.timeout, args.seconds)
        return 0
    if args.replay:
        return replay(args.target[0], args.replay)
    from streamdump.fuzzing import targets

    names = args.target or list(targets())
    print(f"{'target':<24} {'inputs':>9} {'exec/s':>7} {'cov':>6} {'ft':>7} {'rss MB':>6} {'s':>5}  findings")
    failed = False
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(lambda n: run_target(n, args.runs, args.out, args.timeout, args.seconds), names):
            findings = ", ".join(row["findings"]) or ("none" if row["exit"] == 0 else f"exit {row['exit']}")
            failed |= bool(row["findings"]) or row["exit"] != 0
            print(
                f"{row['target']:<24} {row['runs']:>9} {row['exec_s']:>7} {row['cov']:>6} {row['ft']:>7} "
                f"{row['peak_rss_mb']:>6} {row['seconds']:>5}  {findings}",
                flush=True,
            )
    print(f"logs and findings in {args.out}/<target>/")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    sys.exit(main())
