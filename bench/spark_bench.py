"""The Spark pipeline against the single-process CLI on a capture of at least 1 GB.

    python bench/spark_bench.py [--source flood.pcap] [--copies 40] [--capture /tmp/fleet.pcap]

The capture is a real recording (bench/record_flood.py: rstream publishing and consuming
100,000 messages through the broker, MTU 1500) repeated --copies times, each copy a
connection of its own (its client port moved) and later in time than the one before, as a
fleet of clients one after another would make it. Without --source the recording is made
first (root and the broker needed).

Printed, in one run on this machine: the CLI's `read --messages` and `stats` (the work the
pipeline's messages table and stats do, one process), the pipeline under local[1] and
local[2], each one's MB/s, the ratios the issue sets targets for, the largest process's peak
memory, and what a cluster of 100 cores would take for 1 TB at the measured per-core rate.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = struct.Struct("<IIII")
ETHERNET, IPV4 = 1, 0x0800


def make_fleet(source: Path, copies: int, out: Path) -> int:
    """source repeated copies times, copy k's client port moved by k and its times after copy k-1's."""
    data = source.read_bytes()
    if data[:4] != b"\xd4\xc3\xb2\xa1" or struct.unpack_from("<I", data, 20)[0] != ETHERNET:
        sys.exit(f"{source}: expected a little-endian Ethernet pcap (as record_flood.py writes)")
    records: list[tuple[int, int, bytes]] = []
    at = 24
    while at < len(data):
        sec, usec, caplen, wire = RECORD.unpack_from(data, at)
        records.append((sec * 1_000_000 + usec, wire, data[at + 16 : at + 16 + caplen]))
        at += 16 + caplen
    first, last = records[0][0], records[-1][0]
    server = 5552
    with out.open("wb") as fh:
        fh.write(data[:24])
        for k in range(copies):
            shift = k * (last - first + 1_000_000)
            for micros, wire, packet in records:
                packet = bytearray(packet)
                if struct.unpack_from(">H", packet, 12)[0] == IPV4 and packet[23] == 6:
                    tcp = 14 + (packet[14] & 0x0F) * 4
                    sport, dport = struct.unpack_from(">HH", packet, tcp)
                    if sport != server:
                        struct.pack_into(">H", packet, tcp, (sport + k) % 65536)
                    if dport != server:
                        struct.pack_into(">H", packet, tcp + 2, (dport + k) % 65536)
                micros += shift
                fh.write(RECORD.pack(micros // 1_000_000, micros % 1_000_000, len(packet), wire))
                fh.write(packet)
    return out.stat().st_size


# Processes of a run whose peak memory is reported, by what their command line holds.
KINDS = {"the JVM (driver and executors)": "SparkSubmit", "a Python worker": "pyspark.daemon"}


def _peaks(peaks: dict[str, int], stop: threading.Event) -> None:
    """The largest VmHWM (peak RSS) seen per kind of process, polled from /proc until stopped."""
    while not stop.wait(0.5):
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                command = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                hwm = next(
                    int(line.split()[1])
                    for line in status.read_text().splitlines()
                    if line.startswith("VmHWM")
                )
            except (OSError, StopIteration, ValueError):
                continue
            for kind, marker in KINDS.items():
                if marker in command:
                    peaks[kind] = max(peaks.get(kind, 0), hwm)


def timed(argv: list[str], peaks: dict[str, int] | None = None) -> tuple[float, str]:
    stop = threading.Event()
    poller = threading.Thread(target=_peaks, args=(peaks if peaks is not None else {}, stop), daemon=True)
    poller.start()
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    took = time.perf_counter() - start
    stop.set()
    poller.join()
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a flood recording (default: record one, needs root)")
    parser.add_argument("--copies", type=int, default=40, help="connections in the capture")
    parser.add_argument("--capture", type=Path, default=Path("/tmp/streamdump_fleet.pcap"))
    args = parser.parse_args()
    source = args.source
    if source is None:
        source = Path(tempfile.gettempdir()) / "streamdump_flood_100k.pcap"
        if not source.exists():
            subprocess.run(
                [sys.executable, "bench/record_flood.py", "--messages", "100000", "--out", str(source)],
                check=True,
                cwd=ROOT,
            )
    size = make_fleet(source, args.copies, args.capture)
    mb = size / 1e6
    print(f"capture: {args.capture}, {mb:,.0f} MB, {args.copies} connections of {source.name}")
    streamdump = [sys.executable, "-m", "streamdump"]
    cli_messages, listed = timed([*streamdump, "read", "--messages", str(args.capture)])
    cli_stats, stats_text = timed([*streamdump, "stats", "-T", "json", str(args.capture)])
    messages = listed.count("\n")
    print(
        f"CLI read --messages: {cli_messages:7.1f} s  {mb / cli_messages:6.1f} MB/s  ({messages:,} messages)"
    )
    print(f"CLI stats:           {cli_stats:7.1f} s  {mb / cli_stats:6.1f} MB/s")
    runs: dict[int, float] = {}
    peaks: dict[str, int] = {}
    for cores in (1, 2):
        out = Path(tempfile.mkdtemp(prefix=f"streamdump_spark{cores}_"))
        shutil.rmtree(out)
        runs[cores], said = timed(
            [*streamdump, "spark", str(args.capture), "--out", str(out), "--master", f"local[{cores}]"], peaks
        )
        spark_stats = json.loads((out / "stats.json").read_text())[str(args.capture)]
        same = spark_stats == json.loads(stats_text)
        rows = said.strip().splitlines()[-1]
        print(
            f"spark local[{cores}]:      {runs[cores]:7.1f} s  {mb / runs[cores]:6.1f} MB/s  "
            f"(stats equal to the CLI's: {same}; {rows})"
        )
        shutil.rmtree(out)
    reference = cli_messages + cli_stats
    print(f"local[2] / local[1] speed:              {runs[1] / runs[2]:.2f}x  (target >= 1.7x)")
    print(
        f"local[1] cost / CLI read --messages + stats: {runs[1] / reference:.2f}x  (target < 1.5x; "
        f"the pipeline makes both in one pass)"
    )
    print(f"local[1] cost / CLI read --messages:        {runs[1] / cli_messages:.2f}x")
    print(
        "peak RSS (spark.driver.memory 2 GiB, the default): "
        + ", ".join(f"{kind} {hwm / 1024:,.0f} MiB" for kind, hwm in peaks.items())
    )
    per_core = mb / runs[1]
    efficiency = runs[1] / runs[2] / 2
    hours = 1e6 / (per_core * 100 * efficiency) / 3600
    print(
        f"1 TB on 100 cores: {per_core:.1f} MB/s per core x 100 cores x {efficiency:.2f} (the efficiency "
        f"local[2] showed) = {per_core * 100 * efficiency:,.0f} MB/s, about {hours:.1f} h"
    )


if __name__ == "__main__":
    main()
