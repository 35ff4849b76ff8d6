"""`streamdump spark`: captures too big for one process, decoded on Spark into Parquet tables."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads these
# signatures whenever it builds a command, and every string annotation costs it an eval.
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from streamdump.cli.base import (
    EXIT_INPUT,
    EXIT_USAGE,
    DecodeAsOpt,
    KeylogOpt,
    LimitOpt,
    PortOpt,
    ProtocolOpt,
    app,
    fail,
    prepare,
    say,
)


@app.command(name="spark")
def spark_command(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Capture files or folders (pcap, pcapng, compressed), local paths or any URI Spark "
            "and pyarrow read (hdfs://, s3://).",
            show_default=False,
        ),
    ],
    out: Annotated[
        str,
        typer.Option("--out", "-o", help="Folder for the Parquet tables and stats.json.", show_default=False),
    ],
    master: Annotated[
        str | None,
        typer.Option(
            "--master", help="Spark master URL (default local[*]; under spark-submit, spark-submit's own)."
        ),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            "--partitions", help="Partitions connections are decoded in (default: 4 per core).", min=1
        ),
    ] = None,
    split_mb: Annotated[
        int | None,
        typer.Option(
            "--split-mb", help="Size of the byte ranges capture files are read in (default: by cores).", min=1
        ),
    ] = None,
    driver_memory: Annotated[
        str, typer.Option("--driver-memory", help="Driver memory of a local run (Spark's notation).")
    ] = "2g",
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    port: PortOpt = None,
    decode_as: DecodeAsOpt = None,
    tls_keylog: KeylogOpt = None,
) -> None:
    """Decode captures too big for one process on Spark, into Parquet tables (frames, messages,
    exchanges, expert, gaps) and the stats of each capture."""
    from streamdump import spark as pipeline
    from streamdump.views.output import write_statistics
    from streamdump.views.safe import escape

    lacking = pipeline.missing()
    if lacking is not None:
        raise fail(lacking)
    if master is not None and not pipeline.MASTER.fullmatch(master):
        raise fail(
            f"--master {master}: Spark takes local, local[N], local[*], spark://HOST:PORT, yarn or k8s://URL",
            EXIT_USAGE,
        )
    setup = prepare(protocol, port, decode_as, limit, keylogs=tls_keylog)
    out_dir = Path(out)
    if (
        "://" not in out
        and out_dir.exists()
        and any(out_dir.iterdir())
        and not (out_dir / "stats.json").exists()
    ):
        raise fail(f"--out {out}: the folder holds other files; give an empty or new folder", EXIT_USAGE)
    from streamdump.spark.job import PipelineError, find_inputs, run, write_stats

    try:
        found = find_inputs(inputs)
    except PipelineError as exc:
        raise fail(str(exc)) from None

    show = sys.stderr.isatty()
    parts = partitions or 0
    session = pipeline.session(master, driver_memory, parts or 200, show)
    try:
        outcome = run(
            session,
            found,
            out,
            setup.options,
            partitions,
            split_mb << 20 if split_mb else None,
            lambda line: say(f"streamdump: {line}"),
        )
    except PipelineError as exc:
        raise fail(str(exc)) from None
    finally:
        session.stop()
    write_stats(outcome)
    for name, doc in outcome.stats.items():
        results = doc["protocols"].values() if "protocols" in doc else [doc]
        frames = sum(r["frames"] for r in results)
        connections = sum(len(r["connections"]) for r in results)
        findings = Counter(d["severity"] for r in results for d in r["expert"] for _ in range(d["count"]))
        told = ", ".join(f"{n} {s}" for s, n in sorted(findings.items())) or "no findings"
        summary = outcome.summaries.get(name)
        print(
            escape(
                f"{name}: {frames} frames, {connections} connections, {told}"
                + (f"; {summary}" if summary else "")
            )
        )
    if len(outcome.partials) == 1:  # one capture: its stats tables, as `streamdump stats` prints them
        write_statistics(next(iter(outcome.partials.values())), setup.decoders, sys.stdout)
    rows = ", ".join(f"{table} {count}" for table, count in outcome.rows.items())
    print(escape(f"wrote {out}: {rows} rows; stats.json"))
    if outcome.skipped_files:
        say(
            f"streamdump: {len(outcome.skipped_files)} files in the folders given are no captures "
            f"(first: {outcome.skipped_files[0]})"
        )
    for error in outcome.errors:
        say(f"streamdump: error: {error}")
    if outcome.errors:
        raise typer.Exit(EXIT_INPUT)
