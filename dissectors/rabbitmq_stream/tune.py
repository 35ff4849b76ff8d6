"""Tune: the frame size and heartbeat the peers negotiate, a rule of the tracker (Lua twin: tune.lua).

The broker proposes a frame_max and a heartbeat interval in a Tune; the client answers with
its own, and from then on that is the connection's: a frame over frame_max is an error (and
what the broker's "frame too large" close is about), and a side silent for longer than the
heartbeat interval allows is told, while the frames go by and at the end.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from streamdump.analysis.endings import HEARTBEAT_SLACK
from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, Seen, SideState, seen
from streamdump.spec.registry import Protocol, Ref
from streamdump.wire.frame import Frame


class TuneSpec(Struct, frozen=True):
    frame_max: Ref  # Tune.frame_max
    heartbeat: str  # its heartbeat field


class Negotiated(Struct):
    frame_max: int
    heartbeat: int
    answered_in: int  # the packet of the client's Tune


class Tune(Rule):
    """The negotiated frame size and heartbeat, and what breaks them."""

    key = "tune"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> TuneSpec:
        at = "conversation.tune"
        if not isinstance(raw, dict) or set(raw) != {"command", "frame_max", "heartbeat"}:
            raise check.fail(at, "must be {command, frame_max, heartbeat}")
        ref = check.ref(f"{raw['command']}.{raw['frame_max']}", at, int_only=True)
        check.ref(f"{raw['command']}.{raw['heartbeat']}", at)
        return TuneSpec(ref, str(raw["heartbeat"]))

    @classmethod
    def lua(cls, spec: TuneSpec, protocol: Protocol) -> dict[str, Any]:
        return {
            "command": spec.frame_max.command,
            "frame_max": spec.frame_max.path[0],
            "heartbeat": spec.heartbeat,
        }

    def __init__(self, tracker: Any, spec: TuneSpec) -> None:
        super().__init__(tracker, spec)
        self.commands = frozenset({spec.frame_max.command})
        self.size_len = tracker.protocol.wiring.uncounted  # what a frame's size leaves out

    def feed(self, conn: ConnState, frame: Frame) -> None:
        frame_max, heartbeat = (
            frame.fields.get(self.spec.frame_max.path[0]),
            frame.fields.get(self.spec.heartbeat),
        )
        if isinstance(frame_max, int) and isinstance(heartbeat, int) and frame.from_client is not False:
            conn.rules[self.key] = Negotiated(frame_max, heartbeat, frame.number)
            conn.facts["frame_max"], conn.facts["heartbeat_s"] = frame_max, heartbeat

    def before(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        negotiated: Negotiated | None = conn.rules.get(self.key)
        if negotiated is None:
            return
        if side.last is not None:
            self._silence(conn, negotiated, side.last, frame, until_end=False)
        if negotiated.frame_max <= 0:
            return
        limit = negotiated.frame_max
        length = frame.size + self.size_len if frame.size else len(frame.data)
        if length <= limit:
            return
        if frame.from_client is not False:
            conn.suspects["oversized"] = seen(frame, length)
        self.tracker.note(
            conn,
            frame,
            "error",
            "frame_max",
            "frame larger than the negotiated frame_max",
            f"{frame.name} frame of {length} bytes exceeds the frame_max of {limit} bytes "
            f"negotiated at packet {negotiated.answered_in}",
        )

    def _silence(
        self, conn: ConnState, negotiated: Negotiated, last: Seen, now: Frame | Seen, *, until_end: bool
    ) -> None:
        if negotiated.heartbeat <= 0 or last.number < negotiated.answered_in:
            return
        heartbeat = negotiated.heartbeat
        quiet = now.ts - last.ts
        if quiet <= heartbeat * HEARTBEAT_SLACK:
            return
        who = "the client" if last.from_client is not False else f"the {self.tracker.server(conn)}"
        until = (
            f"until the connection's last frame (packet {now.number})"
            if until_end
            else f"(packets {last.number} to {now.number})"
        )
        self.tracker.diagnose(
            conn,
            last,
            "warn",
            "heartbeat",
            "silence longer than the heartbeat interval",
            f"no frame from {who} for {quiet:.3f} s {until}, while the negotiated heartbeat is {heartbeat} s",
        )

    def finish(self, conn: ConnState) -> None:
        negotiated: Negotiated | None = conn.rules.get(self.key)
        if negotiated is None or conn.last is None:
            return
        for side in (conn.client_side, conn.server_side):
            if side.last is not None and side.last is not conn.last:
                self._silence(conn, negotiated, side.last, conn.last, until_end=True)
