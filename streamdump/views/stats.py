"""`streamdump stats` drawn: the tables of what a capture adds up to (analysis/statistics.py).

Every value from the wire (a client's name, a stream, a server's error text) is escaped as it
becomes text (views/safe.py), and given to rich as Text, never as markup."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from streamdump.views.choices import TOP
from streamdump.views.safe import escape

# The connections table's columns, as tshark's conv,tcp: to the server (client's frames and
# bytes), to the client (the server's), both, the start from the capture's first packet.
CONNECTION_COLUMNS = (
    "#",
    "Client",
    "",
    "Server",
    "→ Frames",
    "→ Bytes",
    "← Frames",
    "← Bytes",
    "Frames",
    "Bytes",
    "Rel Start",
    "Duration",
    "End",
)

# ---------------------------------------------------------------------- text


def render(
    result: dict[str, Any],
    console: Console,
    subject: str,
    acked: str | None = None,
    top: int = TOP,
    origin: float | None = None,
) -> None:
    """The statistics as tables, in the order a user debugging a client reads them.

    subject: what messages are addressed to in this protocol (stream, topic); acked: the
    command whose items are confirmed one by one (None: no confirm latency to show). top: the
    connections listed, those that moved the most bytes (0: all); origin: the capture's first
    packet's time, which connections' starts count from (default: the first connection's).
    """
    _connections(console, result["connections"], top, origin)
    _table(
        console,
        "Service response time (ms)",
        ("Command", "Count", "Min", "Median", "p95", "p99", "Max"),
        [_latency_row(r) for r in result["response_times"]],
    )
    _table(
        console,
        "Response codes",
        ("Command", "Code", "Count"),
        [(r["command"], r["code"], r["count"]) for r in result["response_codes"]],
    )
    if acked:
        _table(
            console,
            f"{acked} to confirm latency (ms)",
            ("Confirmed by", "Count", "Min", "Median", "p95", "p99", "Max"),
            [_latency_row(r) for r in result["confirm_latency"] if r["count"]],
        )
    _table(
        console,
        f"Messages per {subject}",
        (subject.capitalize(), "Direction", "Frames", "Messages", "Bytes"),
        [(r[subject], r["direction"], r["frames"], r["messages"], r["bytes"]) for r in result[f"{subject}s"]],
    )
    by = result.get("messages_by") or []
    for name in dict.fromkeys(r["field"] for r in by):
        _table(
            console,
            f"Messages per {subject} and {name}",
            (subject.capitalize(), "Direction", name, "Messages", "Bytes"),
            [
                (r[subject], r["direction"], r["value"], r["messages"], r["bytes"])
                for r in by
                if r["field"] == name
            ],
        )
    timed = [r for r in result[f"{subject}s"] if "latency" in r]
    if timed:
        _table(
            console,
            f"Request latency per {subject} (ms)",
            (subject.capitalize(), "Direction", "Count", "Min", "Median", "p95", "p99", "Max"),
            [(r[subject], *_latency_row({**r["latency"], "command": r["direction"]})) for r in timed],
        )
    _table(
        console,
        "Expert summary",
        ("Severity", "Group", "Summary", "Count", "First packet"),
        [(r["severity"], r["group"], r["summary"], r["count"], r["first_packet"]) for r in result["expert"]],
    )
    if result["diagnoses"]:
        console.print("Diagnoses", style="bold")
        for d in result["diagnoses"]:
            console.print(
                # A server's words may hold brackets (a Java stack trace's list): text, not markup.
                Text(escape(f"  {d['severity']:<5} packet {d['packet']}: {d['message']}")),
                highlight=False,
                soft_wrap=True,
            )
        if result["diagnoses_not_listed"]:
            console.print(
                f"  … and {result['diagnoses_not_listed']} more, counted in the expert summary above",
                highlight=False,
            )


def _connections(console: Console, rows: Iterable[dict[str, Any]], top: int, origin: float | None) -> None:
    """Connections as `tshark -z conv,tcp` lists them, one line each: frames and bytes each way
    and in all, when each started and how long it lasted; the `top` that moved the most bytes,
    the others totalled on one line. Rows are read once (a million connections stream by)."""
    kept: list[tuple[int, int, dict[str, Any]]] = []  # a heap: (bytes, -number, row), least first
    rest = [0, 0, 0, 0, 0]  # connections, frames and bytes to the server, to the client
    count, first = 0, None
    for row in rows:
        count += 1
        start = row["start"]
        if start is not None and (first is None or start < first):
            first = start
        item = (row["client_bytes"] + row["server_bytes"], -row["connection"], row)
        if top <= 0 or len(kept) < top:
            heapq.heappush(kept, item)
            continue
        if item[:2] > kept[0][:2]:
            item = heapq.heapreplace(kept, item)
        _, _, out = item
        rest[0] += 1
        rest[1] += out["client_frames"]
        rest[2] += out["client_bytes"]
        rest[3] += out["server_frames"]
        rest[4] += out["server_bytes"]
    zero = origin if origin is not None else first or 0.0
    shown = sorted(kept, reverse=True)
    what = f"{count}" if not rest[0] else f"{count}; the {len(shown)} that moved the most bytes"
    table = Table(
        title=f"Connections ({what})", title_justify="left", title_style="bold", box=None, pad_edge=False
    )
    for n, column in enumerate(CONNECTION_COLUMNS):
        table.add_column(column, justify="left" if n in (1, 2, 3, 12) else "right")
    for _, _, row in shown:
        start = row["start"]
        table.add_row(
            *(
                Text(escape(str(v)))
                for v in (
                    row["connection"],
                    row["client"],
                    "<->",
                    row["server"] + _tls(row.get("tls")),
                    row["client_frames"],
                    row["client_bytes"],
                    row["server_frames"],
                    row["server_bytes"],
                    row["client_frames"] + row["server_frames"],
                    row["client_bytes"] + row["server_bytes"],
                    f"{start - zero:.6f}" if start is not None else "",
                    f"{row['duration_s']:.4f}",
                    (row["ended"] or {}).get("end", "") + _expert(row.get("expert")),
                )
            )
        )
    if rest[0]:
        others = f"{rest[0]} more connection{'s' * (rest[0] != 1)}"
        table.add_row(
            "", others, "", "", *map(str, (*rest[1:], rest[1] + rest[3], rest[2] + rest[4])), "", "", ""
        )
    if not count:
        table.add_row("(none)", *([""] * (len(CONNECTION_COLUMNS) - 1)))
    console.print(table)
    console.print()


def _tls(layer: str | None) -> str:
    """A decrypted connection's TLS version beside its server: ` (TLSv1.3)`."""
    return f" ({layer.split(',', 1)[0]})" if layer else ""


def _expert(counts: dict[str, int] | None) -> str:
    return (", " + ", ".join(f"{n} {s}" for s, n in counts.items())) if counts else ""


def _latency_row(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["command"], r["count"], r["min_ms"], r["median_ms"], r["p95_ms"], r["p99_ms"], r["max_ms"])


def _table(console: Console, title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    table = Table(title=title, title_justify="left", title_style="bold", box=None, pad_edge=False)
    for n, column in enumerate(columns):
        table.add_column(
            column, justify="left" if n == 0 or isinstance(rows[0][n] if rows else "", str) else "right"
        )
    for row in rows:
        table.add_row(*(Text(escape(str(v))) for v in row))  # escaped text: brackets are not markup
    if not rows:
        table.add_row("(none)", *([""] * (len(columns) - 1)))
    console.print(table)
    console.print()
