"""Keepalives answered in order: the spec's `conversation.pings`, a rule of the tracker (Lua
twin: pings.lua).

Each PING is answered by the other side's next PONG, in order; the pair is linked like a
request and its response. A PING never answered is told at the end: a warning when the
connection went on for a while after it, a note when the capture or the connection simply ended.
"""

from __future__ import annotations

from typing import Any

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, SideState
from streamdump.analysis.tracker import MAX_IN_FLIGHT
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame

# Seconds of traffic after an unanswered keepalive that make its silence a warning.
PING_PATIENCE = 5.0


class Pings(Rule):
    """PINGs and the PONGs that answer them."""

    key = "pings"
    links = ("request_in", "response_in", "response_time")

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> tuple[str, str]:
        at = "conversation.pings"
        if not isinstance(raw, dict) or set(raw) != {"ask", "answer"}:
            raise check.fail(at, "must be {ask: COMMAND, answer: COMMAND}")
        for key in ("ask", "answer"):
            check.command(raw[key], at)
        return (str(raw["ask"]), str(raw["answer"]))

    @classmethod
    def lua(cls, spec: tuple[str, str], protocol: Protocol) -> dict[str, Any]:
        return {"ask": spec[0], "answer": spec[1]}

    def __init__(self, tracker: Any, spec: tuple[str, str]) -> None:
        super().__init__(tracker, spec)
        self.before_on = frozenset(spec)  # a PING and its PONG: no other frame is looked at

    def before(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        ask, answer = self.spec
        if frame.command != ask and frame.command != answer:
            return
        pings: dict[bool | None, list[Frame]] = self.state(conn, dict)
        if frame.command == ask:
            waiting = pings.setdefault(frame.from_client, [])
            if len(waiting) < MAX_IN_FLIGHT:
                waiting.append(frame)
            return
        waiting = pings.get(not frame.from_client)
        if waiting:
            self.tracker.pair(waiting.pop(0), frame)

    def awaits_later(self, frame: Frame) -> bool:
        return frame.command == self.spec[0]  # its PONG, with two passes

    def later(self, frame: Frame) -> dict[str, Any] | None:
        if frame.links and "response_in" in frame.links:
            return {"response_in": frame.links["response_in"]}
        return None

    def finish(self, conn: ConnState) -> None:
        pings: dict[bool | None, list[Frame]] | None = conn.rules.get(self.key)
        for waiting in (pings or {}).values():
            for ping in waiting:
                self._unanswered(conn, ping)
        if pings:
            pings.clear()

    def _unanswered(self, conn: ConnState, ping: Frame) -> None:
        ask, answer = self.spec
        who = "client" if ping.from_client is not False else self.tracker.server(conn)
        ended_at = self.tracker.ended(conn)
        if ended_at is not None and ended_at[0] >= ping.number:
            number, ts, how = ended_at
            after = f": {how} at packet {number}, {ts - ping.ts:.3f} s later"
        else:
            after = self.tracker.ended_soon(conn, ping.ts) or ""
        late = conn.last is not None and conn.last.ts - ping.ts > PING_PATIENCE and not after
        went_on = f" in the {conn.last.ts - ping.ts:.3f} s the capture went on" if late and conn.last else ""
        self.tracker.diagnose(
            conn,
            ping,
            "warn" if late and not conn.lossy else "note",
            "unanswered_ping",
            f"{ask} never answered",
            f"the {who}'s {ask} (packet {ping.number}) got no {answer}{after}{went_on}",
        )
