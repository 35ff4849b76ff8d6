"""Heartbeats that stop: the spec's `conversation.heartbeat`, a rule of the tracker (end-only: no
Lua twin).

An EventMesh client sends a heartbeat request on a rhythm of its own (30 s by default), and the
server drops a session that stops without a word. A side whose heartbeats stopped while the
connection went on, quiet for longer than its own rhythm allows, is told at the end.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field

from streamdump.analysis.endings import HEARTBEAT_SLACK
from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState
from streamdump.wire.frame import Frame

# Gaps between heartbeats kept per side to find their rhythm (the median of these).
MAX_BEAT_GAPS = 1000


class HeartbeatSpec(Struct, frozen=True):
    """The request a peer sends to show it is alive, and how often clients send it."""

    command: str
    every: float  # seconds, when the capture does not show the rhythm itself
    hint: str | None = None  # what happens when they stop


class Beats(Struct):
    """One side's heartbeat requests: how many, the last, and the gaps between them."""

    count: int
    last: int  # packet
    last_ts: float
    gaps: list[float] = field(default_factory=list)


class Heartbeats(Rule):
    """Each side's heartbeat requests and their rhythm."""

    key = "heartbeat"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> HeartbeatSpec:
        at = "conversation.heartbeat"
        if not isinstance(raw, dict) or set(raw) - {"command", "every", "hint"} or "command" not in raw:
            raise check.fail(at, "must be {command, every: seconds, hint}")
        check.command(raw["command"], at)
        every = raw.get("every", 30)
        if isinstance(every, bool) or not isinstance(every, int | float) or every <= 0:
            raise check.fail(at, "every must be a positive number of seconds")
        return HeartbeatSpec(raw["command"], float(every), raw.get("hint"))

    def __init__(self, tracker: Any, spec: HeartbeatSpec) -> None:
        super().__init__(tracker, spec)
        self.commands = frozenset({spec.command})

    def feed(self, conn: ConnState, frame: Frame) -> None:
        if frame.kind != "request":
            return
        beats: dict[bool, Beats] = self.state(conn, dict)
        from_client = frame.from_client is not False
        side = beats.get(from_client)
        if side is None:
            beats[from_client] = Beats(1, frame.number, frame.ts)
            return
        if len(side.gaps) < MAX_BEAT_GAPS:
            side.gaps.append(frame.ts - side.last_ts)
        side.count += 1
        side.last, side.last_ts = frame.number, frame.ts

    def finish(self, conn: ConnState) -> None:
        beats: dict[bool, Beats] | None = conn.rules.get(self.key)
        if not beats or conn.last is None:
            return
        for from_client, side in beats.items():
            self._stopped(conn, from_client, side)

    def _stopped(self, conn: ConnState, from_client: bool, beats: Beats) -> None:
        """Heartbeats that stopped while the connection went on: quiet for longer than their rhythm allows."""
        spec = self.spec
        assert conn.last is not None
        gaps = sorted(beats.gaps)
        rhythm = gaps[len(gaps) // 2] if gaps else spec.every
        ended = self.tracker.ended(conn)
        end_number, end_ts = (ended[0], ended[1]) if ended is not None else (conn.last.number, conn.last.ts)
        quiet = end_ts - beats.last_ts
        if quiet <= rhythm * HEARTBEAT_SLACK or end_number <= beats.last:
            return
        who = "the client" if from_client else f"the {self.tracker.server(conn)}"
        pace = f"about one every {rhythm:.3f} s" if gaps else f"{spec.every:g} s apart is the usual pace"
        until = (
            f"the connection ended (packet {end_number})"
            if ended is not None
            else (f"the connection's last frame (packet {end_number})")
        )
        hint = f"; {spec.hint}" if spec.hint else ""
        self.tracker.diagnose_at(
            conn,
            beats.last,
            "note" if conn.lossy else "warn",
            "heartbeat_stopped",
            f"{spec.command} requests stopped",
            f"{who} stopped sending {spec.command} requests: {beats.count} sent ({pace}), the last at packet "
            f"{beats.last}, then none for {quiet:.3f} s until {until}{hint}",
        )
