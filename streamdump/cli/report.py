"""`streamdump report`: one HTML file a person would rather look at than read."""

# Annotations stay objects (no `from __future__ import annotations`): typer reads these
# signatures whenever it builds a command, and every string annotation costs it an eval.
from pathlib import Path
from typing import Annotated

import typer

from streamdump.cli.base import (
    EXIT_USAGE,
    DecodeAsOpt,
    FilterOpt,
    KeylogOpt,
    LimitOpt,
    PortOpt,
    ProtocolOpt,
    app,
    fail,
    prepare,
    say,
    tell_notices,
)


@app.command()
def report(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Capture files (pcap, pcapng); several make one report.", show_default=False),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The HTML file to write.", show_default=False)
    ] = Path("report.html"),
    png: Annotated[
        Path | None, typer.Option("--png", help="Also write each chart as a PNG image into this folder.")
    ] = None,
    from_spark: Annotated[
        Path | None,
        typer.Option("--from-spark", help="Draw the report from a `streamdump spark` run's output folder."),
    ] = None,
    port: PortOpt = None,
    filter_text: FilterOpt = None,
    protocol: ProtocolOpt = None,
    limit: LimitOpt = None,
    decode_as: DecodeAsOpt = None,
    tls_keylog: KeylogOpt = None,
) -> None:
    """One self-contained HTML report of captures: summary, throughput, latencies, consumers,
    connections and findings, with charts (offline, printable)."""
    from streamdump import report as reporting
    from streamdump.analysis.session import CaptureFile

    lacking = reporting.missing()
    if lacking is not None:
        raise fail(lacking)
    from streamdump.report.charts import png as png_bytes
    from streamdump.report.data import ReportError, from_session
    from streamdump.report.data import from_spark as spark_reports
    from streamdump.report.page import page

    if bool(files) == (from_spark is not None):
        raise fail("give captures, or --from-spark FOLDER, not both", EXIT_USAGE)
    failures = []
    if from_spark is not None:
        try:
            captures = spark_reports(from_spark)
        except ReportError as exc:
            raise fail(str(exc)) from None
    else:
        setup = prepare(protocol, port, decode_as, limit, filter_text, keylogs=tls_keylog)
        captures = []
        for path in files or []:
            session = setup.session(statistics=True, timeline=True)
            for _ in session.frames(CaptureFile(path)):
                pass
            tell_notices(session)
            failure = session.failure()
            if failure is not None:
                failures.append(failure)
                if session.stats.packets == 0:
                    continue  # nothing of it to show
            captures.append(from_session(str(path), session, failure))
    if not captures:
        raise fail(failures[0] if failures else "no capture to report on")
    text, charts = page(captures)
    try:
        out.write_text(text, encoding="utf-8")
        if png is not None:
            png.mkdir(parents=True, exist_ok=True)
            for chart in charts:
                (png / f"{chart.name}.png").write_bytes(png_bytes(chart))
    except OSError as exc:
        raise fail(f"cannot write the report: {exc.strerror or exc}") from None
    written = f"; the charts as PNG in {png}" if png else ""
    say(f"streamdump: wrote {out} ({len(text.encode()) // 1024} KiB, {len(charts)} charts){written}")
    for failure in failures[1:]:
        say(f"streamdump: error: {failure}")
    if failures:
        raise fail(failures[0])  # what was read is in the report; the status says a capture was not whole
