"""The report as one HTML file: a summary, the charts inline, and the tables behind them.

Self-contained: styles inline, charts as inline SVG, no script, no font and no link to fetch,
so it opens from disk with no network and prints as it shows (each section keeps together
where it can). Every string from the wire is escaped twice: as the terminal views show it
(views/safe.py, so a control character is seen, not acted on) and for HTML.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from streamdump import __version__
from streamdump.report import charts
from streamdump.report.data import CaptureReport, FindingRow, findings, summary
from streamdump.views.safe import escape

# Findings the table lists whole; the rest are counted under it.
MAX_FINDINGS = 500
# Rows of the throughput table: a capture of many subjects keeps the busiest.
MAX_THROUGHPUT_ROWS = 100
# Latency charts over time: the commands, subjects and senders with the most samples.
MAX_LATENCY_CHARTS = 6

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 70em;
       color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.8em; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.4em; }
.meta { color: #666; font-size: 0.9em; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8em; margin: 1em 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.6em 1em; min-width: 8em; }
.card b { display: block; font-size: 1.4em; }
.error { color: #b00020; } .warn { color: #b36b00; } .note { color: #34598c; }
table { border-collapse: collapse; width: 100%; font-size: 0.85em; margin: 0.5em 0 1em; }
th, td { border-bottom: 1px solid #e5e5e5; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.9em; background: #f3f3f3; padding: 0 0.2em; border-radius: 3px; }
figure { margin: 0.5em 0 1em; } figure svg { width: 100%; height: auto; }
.pairs { display: grid; grid-template-columns: 1fr 1fr; gap: 0 1.5em; }
.none { color: #777; font-style: italic; }
section { break-inside: avoid-page; }
@media print {
  body { margin: 0; max-width: none; } h2 { break-after: avoid; } figure { break-inside: avoid; }
}
"""


def h(value: Any) -> str:
    """Any value for the page: escaped as the terminal views escape it, then for HTML."""
    return html.escape(escape(str(value)), quote=True)


def page(captures: Sequence[CaptureReport]) -> tuple[str, list[charts.Chart]]:
    """The whole page, and the charts on it (for --png)."""
    drawn: list[charts.Chart] = []
    told = summary(captures)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>streamdump report: {h(', '.join(told['captures']))}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>streamdump report</h1>",
        f'<p class="meta">{h(", ".join(told["captures"]))} · streamdump {h(__version__)}</p>',
        _summary(told),
    ]
    for capture in captures:
        if len(captures) > 1:
            parts.append(f"<h2>{h(capture.name)}</h2>")
        parts += _capture(capture, drawn, level=3 if len(captures) > 1 else 2)
    parts.append(_findings(captures, multiple=len(captures) > 1))
    parts.append("</body></html>\n")
    return "\n".join(parts), drawn


def _summary(told: Mapping[str, Any]) -> str:
    start = told["start"]
    when = (
        dt.datetime.fromtimestamp(start, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if start
        else "(no frames)"
    )
    findings = told["findings"]
    cards = [
        ("captures", len(told["captures"])),
        ("connections", told["connections"]),
        ("protocols", ", ".join(told["protocols"]) or "none"),
        ("frames", f"{told['frames']:,}"),
        ("messages carried", f"{told['messages']:,}"),
        ("time span", f"{told['span_s']:.3f} s"),
    ]
    body = "".join(f'<div class="card">{h(name)}<b>{h(value)}</b></div>' for name, value in cards)
    severities = "".join(
        f'<div class="card {s}">{h(name)}<b>{findings.get(s, 0):,}</b></div>'
        for s, name in (("error", "errors"), ("warn", "warnings"), ("note", "notes"))
    )
    cards_html = f'<div class="cards">{body}{severities}</div>'
    return f'<section><h2>Summary</h2><p class="meta">from {h(when)}</p>{cards_html}</section>'


def _figure(chart: charts.Chart, drawn: list[charts.Chart]) -> str:
    drawn.append(chart)
    return f"<figure>{charts.svg(chart)}</figure>"


def _pairs(figures: Iterable[charts.Chart], drawn: list[charts.Chart]) -> str:
    """Small charts two abreast."""
    return '<div class="pairs">' + "".join(_figure(chart, drawn) for chart in figures) + "</div>"


def _none(what: str) -> str:
    return f'<p class="none">{h(what)}</p>'


def _capture(capture: CaptureReport, drawn: list[charts.Chart], level: int) -> list[str]:
    rows = list(_connections(capture))
    origin = capture.timeline.get("origin")
    starts = [r["start"] for r in rows if r["start"] is not None]
    if origin is None:  # no packet's time known: the first connection's first packet
        origin = min(starts, default=None)
    ends = [r["start"] + r["duration_s"] - origin for r in rows if r["start"] is not None] if starts else []
    timeline = capture.timeline | {"origin": origin, "until": max(ends, default=0.0)}
    out: list[str] = []
    if capture.problem:
        stopped = f"Not read to its end: {h(capture.problem)}. The report shows what was decoded before."
        out.append(f'<p class="error">{stopped}</p>')
    tag = f"h{level}"
    prefix = f"{capture.name}-" if level == 3 else ""
    slug = "".join(c if c.isalnum() else "-" for c in prefix)
    counts = (timeline.get("counts") or {}).get("messages") or {}
    latencies = timeline.get("latencies") or {}
    gauges = timeline.get("gauges") or {}
    histograms = timeline.get("histograms") or {}

    out.append(f"<section><{tag}>Throughput</{tag}>")
    if counts:
        out.append(
            _figure(
                charts.rate_chart(f"{slug}messages", "Messages per second", timeline, counts, "messages"),
                drawn,
            )
        )
        out.append(
            _figure(charts.rate_chart(f"{slug}bytes", "Bytes per second", timeline, counts, "bytes"), drawn)
        )
        out.append(_throughput_table(counts, timeline["width_s"]))
    else:
        out.append(_none("No messages in this capture."))
    out.append("</section>")

    out.append(f"<section><{tag}>Publish latency</{tag}>")
    confirms = latencies.get("confirms") or {}
    if confirms:
        out.append(
            _figure(
                charts.histogram_chart(
                    f"{slug}confirm-histogram", "Publish to confirm latency", histograms.get("confirms") or {}
                ),
                drawn,
            )
        )
        out.append(
            _pairs(
                (
                    charts.latency_chart(
                        f"{slug}confirms-{n}", f"Over time: {key}", timeline, confirms[key], key
                    )
                    for n, key in enumerate(_busiest(confirms))
                ),
                drawn,
            )
        )
    else:
        out.append(_none("No confirmed publishes in this capture."))
    out.append("</section>")

    out.append(f"<section><{tag}>Request latency</{tag}>")
    requests = latencies.get("requests") or {}
    by_subject = latencies.get("requests by subject") or {}
    if requests or by_subject:
        figures = [
            charts.latency_chart(f"{slug}requests-{n}", f"{key}: response time", timeline, requests[key], key)
            for n, key in enumerate(_busiest(requests))
        ] + [
            charts.latency_chart(f"{slug}subjects-{n}", f"{key}: reply time", timeline, by_subject[key], key)
            for n, key in enumerate(_busiest(by_subject))
        ]
        out.append(_pairs(figures, drawn))
        out.append(_latency_table(capture))
    else:
        out.append(_none("No request answered in this capture."))
    out.append("</section>")

    out.append(f"<section><{tag}>Consumers</{tag}>")
    credit = gauges.get("credit left") or {}
    delivered = gauges.get("offset delivered") or {}
    stored = gauges.get("offset stored") or {}
    if credit:
        out.append(
            _figure(
                charts.gauge_chart(
                    f"{slug}credit", "Credit left per subscription", timeline, credit, "credit"
                ),
                drawn,
            )
        )
    if delivered or stored:
        offsets = {f"{k} (delivered)": v for k, v in delivered.items()} | {
            f"{k} (stored)": v for k, v in stored.items()
        }
        out.append(
            _figure(
                charts.gauge_chart(
                    f"{slug}offsets", "Offsets delivered and stored", timeline, offsets, "offset"
                ),
                drawn,
            )
        )
        lag = _lag(delivered, stored)
        if lag:
            out.append(
                _figure(
                    charts.gauge_chart(
                        f"{slug}lag",
                        "Consumer lag: offset delivered minus offset stored",
                        timeline,
                        lag,
                        "offsets",
                    ),
                    drawn,
                )
            )
    if not (credit or delivered or stored):
        out.append(_none("No consumer positions in this capture."))
    out.append("</section>")

    out.append(f"<section><{tag}>Connections</{tag}>")
    if rows:
        start = origin if origin is not None else 0.0
        out.append(
            _figure(charts.connections_chart(f"{slug}connections", "Connection timeline", rows, start), drawn)
        )
        out.append(_connection_table(rows, start))
    else:
        out.append(_none("No connection in this capture."))
    out.append("</section>")
    return out


def _busiest(series: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(series, key=lambda k: -sum(c or 0 for c in series[k]["count"]))[:MAX_LATENCY_CHARTS]


def _lag(delivered: Mapping[str, Sequence[Any]], stored: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Per stream, the last offset delivered minus the last stored, bucket by bucket (held)."""
    out = {}
    for key in delivered.keys() & stored.keys():
        held_d = held_s = None
        values: list[Any] = []
        for d, s in zip(delivered[key], stored[key], strict=True):
            held_d = d if d is not None else held_d
            held_s = s if s is not None else held_s
            values.append(None if held_d is None or held_s is None else held_d - held_s)
        out[key] = values
    return out


def _connections(capture: CaptureReport) -> Iterable[dict[str, Any]]:
    for protocol, result in capture.protocols().items():
        for conn in result.get("connections", []):
            ended = conn.get("ended") or {}
            yield {
                "name": f"{protocol} {conn['connection']}: {conn.get('client')} → {conn.get('server')}",
                "start": conn.get("start"),
                "duration_s": conn.get("duration_s") or 0.0,
                "how": ended.get("end") if ended.get("end") in charts.ENDINGS else "open",
                "ended": ended.get("how") or "open when the capture ended",
                "findings": {s: n for s, n in (conn.get("expert") or {}).items() if n},
                "client": conn.get("client_properties") or {},
            }


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table of cells already made safe (h()); numbers right-aligned."""
    top = "".join(f"<th>{h(name)}</th>" for name in head)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if _number(c) else f"<td>{c}</td>" for c in row)
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{top}</tr>{body}</table>"


def _number(cell: str) -> bool:
    return cell.replace(".", "", 1).replace(",", "").isdigit()


def _connection_table(rows: Sequence[Mapping[str, Any]], start: float) -> str:
    def client(r: Mapping[str, Any]) -> str:
        return " ".join(
            str(v) for k, v in r["client"].items() if k in ("product", "version", "connection_name")
        )

    def told(r: Mapping[str, Any]) -> str:
        return " ".join(f'<span class="{h(s)}">{n} {h(s)}</span>' for s, n in r["findings"].items())

    return _table(
        ("connection", "opened (s)", "lasted (s)", "how it ended", "client", "findings"),
        (
            (
                h(r["name"]),
                f"{(r['start'] or start) - start:.3f}",
                f"{r['duration_s']:.3f}",
                h(r["ended"]),
                h(client(r)),
                told(r),
            )
            for r in rows
        ),
    )


def _throughput_table(counts: Mapping[str, Mapping[str, Sequence[Any]]], width: float) -> str:
    """Every stream, topic or subject (the charts draw the busiest): totals and its busiest
    bucket's rate."""

    def total(key: str, what: str) -> int:
        return int(sum(v or 0 for v in counts[key][what]))

    keys = sorted(counts, key=lambda k: (-total(k, "messages"), k))
    rows = [
        (
            h(key),
            f"{total(key, 'messages'):,}",
            f"{total(key, 'bytes'):,}",
            f"{max((v or 0 for v in counts[key]['messages']), default=0) / width:,.0f}",
            f"{max((v or 0 for v in counts[key]['bytes']), default=0) / width:,.0f}",
        )
        for key in keys[:MAX_THROUGHPUT_ROWS]
    ]
    more = len(keys) - len(rows)
    step = f"{width * 1000:,.0f} ms" if width < 1 else f"{width:,.0f} s"
    tail = f"Peaks are rates over the charts' time step, {step}."
    tail += f" {more:,} more with fewer messages." if more else ""
    head = ("stream, topic or subject", "messages", "bytes", "peak messages/s", "peak bytes/s")
    return f'{_table(head, rows)}<p class="meta">{tail}</p>'


def _latency_table(capture: CaptureReport) -> str:
    rows = [
        (h(r["command"]), *(h(r[k]) for k in ("count", "median_ms", "p95_ms", "p99_ms", "max_ms")))
        for result in capture.protocols().values()
        for r in result.get("response_times", [])
        if r.get("count")
    ]
    if not rows:
        return ""
    table = _table(("command", "count", "median ms", "p95 ms", "p99 ms", "max ms"), rows)
    return f"<h3>Over the whole capture</h3>{table}"


def _findings(captures: Sequence[CaptureReport], multiple: bool) -> str:
    rows = list(findings(captures))
    if not rows:
        clean = "No findings: every request was answered and every connection ended in order."
        return f"<section><h2>Findings</h2>{_none(clean)}</section>"
    shown = rows[:MAX_FINDINGS]
    head = ("capture",) * multiple + (
        "severity", "packet", "connection", "kind", "what", "streamdump / UI filter", "Wireshark filter",
    )  # fmt: skip
    more = len(rows) - len(shown)
    tail = f'<p class="meta">{more:,} more: <code>streamdump stats</code> lists them all.</p>' if more else ""
    table = _table(head, (_finding_row(r, multiple) for r in shown))
    return f"<section><h2>Findings</h2>{table}{tail}</section>"


def _finding_row(r: FindingRow, multiple: bool) -> tuple[str, ...]:
    return (h(r.capture),) * multiple + (
        f'<span class="{h(r.severity)}">{h(r.severity)}</span>',
        str(r.packet),
        str(r.connection),
        h(r.kind),
        h(r.message),
        f"<code>-Y {h(repr(r.read_filter))}</code>",
        f"<code>{h(r.wireshark_filter)}</code>",
    )
