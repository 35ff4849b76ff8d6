"""The report's charts, drawn by matplotlib: inline SVG for the page, PNG for tickets.

matplotlib is a well-kept plotting library that draws without a browser or a network: the
SVG it writes holds its text as text (`svg.fonttype: none`, small and searchable) and needs no
script, so the report opens offline, prints as it shows, and a page of a dozen charts stays
well under a megabyte. Each chart is a Chart (its title, and a function that draws it on
axes); `svg()` and `png()` render one. Series come from analysis/timeline.py's result: one
value per time bucket, None where a bucket saw nothing.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib
from msgspec import Struct

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import EngFormatter

from streamdump.views.safe import escape

matplotlib.rcParams.update(
    {
        "svg.fonttype": "none",
        "svg.hashsalt": "streamdump",  # the same ids in every run: reports compare byte for byte
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.fontsize": 8,
        "figure.dpi": 100,
    }
)
# Lines one chart draws at the most; the rest are summed or left to the tables.
MAX_LINES = 8
# A legend label's length at the most (keys from the wire can be long).
MAX_LABEL = 60
SECONDS = "seconds since the capture's first packet"


class Chart(Struct, frozen=True):
    """One chart: its name (for files), title, and how it draws itself."""

    name: str
    title: str
    draw: Callable[[Axes], None]
    height: float = 2.6
    width: float = 9.0


def svg(chart: Chart) -> str:
    """The chart as an inline SVG element."""
    figure = _figure(chart)
    out = io.StringIO()
    figure.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(figure)
    text = out.getvalue()
    return text[text.index("<svg") :]  # the element alone: the page is HTML


def png(chart: Chart) -> bytes:
    figure = _figure(chart)
    out = io.BytesIO()
    figure.savefig(out, format="png", bbox_inches="tight", dpi=120, metadata={"Software": None})
    plt.close(figure)
    return out.getvalue()


def _figure(chart: Chart) -> Any:
    figure, axes = plt.subplots(figsize=(chart.width, chart.height))
    chart.draw(axes)
    axes.set_title(escape(chart.title).replace("$", r"\$"), loc="left", fontsize=10)
    return figure


def _span(axes: Axes, timeline: Mapping[str, Any]) -> None:
    """Every chart over time spans the whole capture, from its first packet, so charts line up,
    their times are `read`'s, and a lone point is not zoomed into a line of ticks."""
    buckets_end = _offset(timeline) + max(timeline["buckets"], 1) * timeline["width_s"]
    axes.set_xlim(0, max(buckets_end, timeline.get("until") or 0.0))
    axes.set_xlabel(SECONDS)


def _offset(timeline: Mapping[str, Any]) -> float:
    """Where the first bucket starts, in seconds from the capture's first packet."""
    start, origin = timeline.get("start"), timeline.get("origin")
    if start is None or origin is None:
        return 0.0
    return max(start - origin, 0.0)


def label(text: str) -> str:
    """A legend label: wire text escaped as every view escapes it, cut to a sane length, and
    never taken as mathtext."""
    text = escape(text)
    text = text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"
    return text.replace("$", r"\$")


def times(timeline: Mapping[str, Any]) -> list[float]:
    """Each bucket's start, in seconds from the capture's first packet (as `read` counts)."""
    width, offset = timeline["width_s"], _offset(timeline)
    return [offset + i * width for i in range(timeline["buckets"])]


def _top(series: Mapping[str, Sequence[Any]], weight: Callable[[Sequence[Any]], float]) -> list[str]:
    return sorted(series, key=lambda k: -weight(series[k]))[:MAX_LINES]


def _total(values: Sequence[Any]) -> float:
    return sum(v for v in values if v is not None)


def rate_chart(
    name: str, title: str, timeline: Mapping[str, Any], series: Mapping[str, Mapping[str, Any]], what: str
) -> Chart:
    """Per second, of a count series (messages or bytes), one line per key."""
    xs = times(timeline)
    width = timeline["width_s"]

    def draw(axes: Axes) -> None:
        for key in _top({k: v[what] for k, v in series.items()}, _total):
            values = [0 if v is None else v / width for v in series[key][what]]
            axes.plot(xs, values, label=label(key), linewidth=1.2)
        _span(axes, timeline)
        axes.set_ylabel(f"{what} per second")
        axes.yaxis.set_major_formatter(EngFormatter(sep=""))  # 50k, 2M: not an offset like 1e7
        if series:
            axes.legend(loc="upper right")

    return Chart(name, title, draw)


def latency_chart(
    name: str, title: str, timeline: Mapping[str, Any], series: Mapping[str, Any], key: str
) -> Chart:
    """p50, p95 and p99 over time of one latency key, in milliseconds."""
    xs = times(timeline)

    def draw(axes: Axes) -> None:
        for p, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
            points = [(x, y) for x, y in zip(xs, series[p], strict=True) if y is not None]
            if points:
                axes.plot(
                    *zip(*points, strict=True), style, marker=".", markersize=3, label=p[:3], linewidth=1
                )
        _span(axes, timeline)
        axes.set_ylabel("ms")
        axes.legend(loc="upper right")

    return Chart(name, title, draw, height=2.0, width=4.6)


def histogram_chart(name: str, title: str, histograms: Mapping[str, Sequence[Sequence[float]]]) -> Chart:
    """How many items took how long, per key: bars on a logarithmic time axis, in at most
    HISTOGRAM_BARS bars from the fastest to the slowest."""
    keys = _top(histograms, lambda h: sum(n for _, n in h))
    values = [ms for key in keys for ms, _ in histograms[key] if ms > 0]

    def draw(axes: Axes) -> None:
        if not values:
            return
        low, high = min(values), max(values)
        edges = _log_edges(low, high)
        for n, key in enumerate(keys):
            counts = [0] * (len(edges) - 1)
            for ms, count in histograms[key]:
                counts[_bar(edges, ms)] += int(count)
            widths = [b - a for a, b in itertools.pairwise(edges)]
            axes.bar(edges[:-1], counts, width=widths, align="edge", alpha=0.6 if len(keys) > 1 else 0.9,
                     label=label(key), color=f"C{n}")  # fmt: skip
        axes.set_xscale("log")
        axes.set_xlabel("ms")
        axes.set_ylabel("items")
        axes.legend(loc="upper right")

    return Chart(name, title, draw)


# Bars a latency histogram is drawn in at the most.
HISTOGRAM_BARS = 40


def _log_edges(low: float, high: float) -> list[float]:
    if high <= low * 1.0001:
        return [low / 1.05, high * 1.05]
    step = (math.log10(high) - math.log10(low)) / HISTOGRAM_BARS
    return [10 ** (math.log10(low) + i * step) for i in range(HISTOGRAM_BARS)] + [high * 1.0001]


def _bar(edges: Sequence[float], ms: float) -> int:
    for i in range(len(edges) - 1):
        if ms < edges[i + 1]:
            return i
    return len(edges) - 2


def gauge_chart(
    name: str, title: str, timeline: Mapping[str, Any], series: Mapping[str, Sequence[Any]], ylabel: str
) -> Chart:
    """A value as last seen in each bucket, held until it changes, one line per key."""
    xs = times(timeline)

    def draw(axes: Axes) -> None:
        for key in list(series)[:MAX_LINES]:
            held, last = [], None
            for value in series[key]:
                last = value if value is not None else last
                held.append(math.nan if last is None else last)
            axes.step(xs, held, where="post", label=label(key), linewidth=1.2)
        _span(axes, timeline)
        axes.set_ylabel(ylabel)
        if series:
            axes.legend(loc="upper right")

    return Chart(name, title, draw)


# How connections ended, by the colour their bar gets.
ENDINGS = {"closed": "#4c78a8", "reset": "#e45756", "refused": "#b279a2", "open": "#9d9d9d"}


def connections_chart(name: str, title: str, rows: Sequence[Mapping[str, Any]], start: float) -> Chart:
    """When each connection opened and closed, coloured by how it ended, its findings beside it."""
    shown = list(rows)[:60]

    def draw(axes: Axes) -> None:
        for y, row in enumerate(shown):
            begin = (row["start"] or start) - start
            axes.barh(y, max(row["duration_s"], 1e-6), left=begin, color=ENDINGS[row["how"]], height=0.6)
            told = ", ".join(f"{n} {s}" for s, n in row["findings"].items())
            axes.text(
                begin + row["duration_s"],
                y,
                f"  {row['how']}" + (f"; {told}" if told else ""),
                va="center",
                fontsize=7,
            )
        axes.set_yticks(range(len(shown)), [label(r["name"]) for r in shown], fontsize=7)
        axes.invert_yaxis()
        axes.set_xlabel(SECONDS)

    return Chart(name, title, draw, height=max(1.6, 0.28 * len(shown) + 0.8))
