"""`streamdump stats` drawn: the tables of what a capture adds up to (analysis/statistics.py).

Every value from the wire (a client's name, a stream, a server's error text) is escaped as it
becomes text (views/safe.py), and given to rich as Text, never as markup."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from streamdump.analysis.statistics import PEER_KEYS
from streamdump.views.safe import escape, quoted

# ---------------------------------------------------------------------- text


def render(result: dict[str, Any], console: Console, subject: str, acked: str | None = None) -> None:
    """The statistics as tables, in the order a user debugging a client reads them.

    subject: what messages are addressed to in this protocol (stream, topic); acked: the
    command whose items are confirmed one by one (None: no confirm latency to show).
    """
    for conn in result["connections"]:
        console.print(Text(escape(_connection_text(conn), keep="\n")), highlight=False)
    console.print()
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


def _latency_row(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["command"], r["count"], r["min_ms"], r["median_ms"], r["p95_ms"], r["p99_ms"], r["max_ms"])


def _connection_text(conn: dict[str, Any]) -> str:
    def peer(props: dict[str, Any] | None) -> str:
        if not props:
            return "(properties not in the capture)"
        return " ".join(str(props[k]) for k in PEER_KEYS if k in props and k != "connection_name")

    lines = [
        f"Connection {conn['connection']}: {conn['client']} → {conn['server']}, {conn['duration_s']:.3f} s",
        f"  client: {peer(conn['client_properties'])}"
        + (
            f", name {quoted(str(conn['client_properties']['connection_name']))}"
            if conn["client_properties"] and "connection_name" in conn["client_properties"]
            else ""
        )
        + (f", user {quoted(str(conn['user']))}" if conn["user"] else ""),
        f"  server: {peer(conn['server_properties'])}",
        f"  frames: {conn['client_frames']} from the client ({conn['client_bytes']} bytes), "
        f"{conn['server_frames']} from the server ({conn['server_bytes']} bytes)",
    ]
    if conn.get("tls"):
        lines.append(f"  decrypted from TLS: {conn['tls']}")
    if conn["frame_max"] is not None:
        lines.append(f"  tuned: frame_max {conn['frame_max']}, heartbeat {conn['heartbeat_s']} s")
    if conn["closed_by_server"] is not None:
        lines.append(f"  closed by the server at packet {conn['closed_by_server']}")
    if conn["ended"] is not None:
        lines.append(f"  ended: {conn['ended']['how']}")
    if conn["expert"]:
        lines.append("  expert: " + ", ".join(f"{n} {s}" for s, n in conn["expert"].items()))
    return "\n".join(lines)


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
