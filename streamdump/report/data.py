"""What a report holds, whatever read the captures: per capture, the statistics `stats` prints
(as JSON) and the series over time (analysis/timeline.py), both plain data.

A read made here gives them from its analysis session; the Spark pipeline writes the same two
documents beside its tables (stats.json and timeline.json), so `report --from-spark` draws the
same report from them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from msgspec import Struct

from streamdump.analysis.session import Session
from streamdump.analysis.statistics import document
from streamdump.wire.findings import FINDINGS, expert_name


class ReportError(Exception):
    """What a report cannot be made from; str() is one line."""


class CaptureReport(Struct, frozen=True):
    """One capture: its name, `stats` JSON and series over time."""

    name: str
    stats: dict[str, Any]
    timeline: dict[str, Any]
    problem: str | None = None  # why the capture was not read to its end; the rest is what was

    def protocols(self) -> dict[str, dict[str, Any]]:
        """Each protocol's statistics: a stats document of several protocols names them; one of a
        single protocol is that protocol's, which the timeline names."""
        if "protocols" in self.stats:
            return dict(self.stats["protocols"])
        return {self.timeline.get("protocol") or "": self.stats}


def from_session(name: str, session: Session, problem: str | None = None) -> CaptureReport:
    """A capture a session read (with statistics and a timeline); `problem` says why it stopped
    before the capture's end, if it did."""
    assert session.timeline is not None, "a report needs a session made with timeline=True"
    partials = session.partials()
    shown = [n for n, p in partials.items() if p.connections] or list(partials)[:1]
    return CaptureReport(
        name,
        document(partials),
        session.timeline.result() | {"protocol": shown[0] if shown else "", "origin": session.first_ts},
        problem,
    )


def from_spark(folder: Path) -> list[CaptureReport]:
    """The captures a Spark run wrote its documents for."""
    try:
        stats = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{folder}: no stats.json a Spark run wrote ({exc})") from None
    try:
        timelines = json.loads((folder / "timeline.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(
            f"{folder}: no timeline.json ({exc}); a Spark run of this streamdump writes it"
        ) from None
    return [CaptureReport(name, doc, timelines.get(name) or {}) for name, doc in sorted(stats.items())]


def summary(captures: list[CaptureReport]) -> dict[str, Any]:
    """What the report opens with: captures, connections, protocols, frames, messages, time
    span and findings by severity."""
    protocols: set[str] = set()
    frames = connections = messages = 0
    severities: Counter[str] = Counter()
    first: float | None = None
    last: float | None = None
    for capture in captures:
        for name, result in capture.protocols().items():
            if result.get("connections"):
                protocols.add(name)
            frames += result.get("frames", 0)
            connections += len(result.get("connections", []))
            for table, rows in result.items():
                if table.endswith("s") and isinstance(rows, list) and rows and "messages" in rows[0]:
                    # Each time a message crossed the wire: published once and delivered twice
                    # is three (which way is which is each protocol's own word).
                    messages += sum(row.get("messages", 0) for row in rows)
            for row in result.get("expert", []):
                severities[row["severity"]] += row["count"]
            for conn in result.get("connections", []):
                start = conn.get("start")
                if isinstance(start, int | float):
                    end = start + (conn.get("duration_s") or 0)
                    first = start if first is None else min(first, start)
                    last = end if last is None else max(last, end)
    return {
        "captures": [c.name for c in captures],
        "connections": connections,
        "protocols": sorted(protocols),
        "frames": frames,
        "messages": messages,
        "start": first,
        "span_s": (last - first) if first is not None and last is not None else 0.0,
        "findings": {s: severities[s] for s in ("error", "warn", "note") if severities[s]},
    }


class FindingRow(Struct, frozen=True):
    """One finding as the report's table lists it, with the filters that show it."""

    capture: str
    protocol: str
    severity: str
    kind: str
    packet: int
    connection: int
    message: str
    read_filter: str
    wireshark_filter: str


def findings(captures: Iterable[CaptureReport]) -> Iterator[FindingRow]:
    """Every finding the statistics list, worst first, then by packet; each with the filter that
    shows its packet in `read` and the UI, and the one that shows it in Wireshark (its expert
    entry, where the plugin tells that kind on a frame)."""
    rows = []
    for capture in captures:
        for protocol, result in capture.protocols().items():
            for d in result.get("diagnoses", []):
                kind, severity = d["kind"], d["severity"]
                wireshark = f"frame.number == {d['packet']}"
                finding = FINDINGS.get(kind)
                if finding is not None and finding.on_frame and severity in finding.severities and protocol:
                    wireshark += f" && {protocol}.expert.{expert_name(kind, severity)}"
                rows.append(
                    FindingRow(
                        capture.name,
                        protocol,
                        severity,
                        kind,
                        d["packet"],
                        d["connection"],
                        d["message"],
                        f"frame == {d['packet']}",
                        wireshark,
                    )
                )
    order = {"error": 0, "warn": 1, "note": 2, "chat": 3}
    return iter(sorted(rows, key=lambda r: (order.get(r.severity, 9), r.capture, r.packet)))
