"""Sessions: the ids a request opens that later frames of the connection use (a publisher id,
a subscription, a NATS sid), from the spec's `conversation.sessions`.

A use of an open id links to the frame that opened it (opened_in) and to the values the open
kept (its stream); an id a close ends is forgotten, at once or after as many uses as the close
says. Where the spec asks, a use of an id never opened (or already ended) is told, when the
capture holds the connection's setup, so the open would have been in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamdump.analysis.state import ConnState, Session
from streamdump.wire.frame import Frame, links_of

if TYPE_CHECKING:
    from streamdump.analysis.tracker import Tracker


class Sessions:
    """One protocol's sessions, followed on every connection of a read."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.specs = tracker.spec.sessions
        self.of: dict[str, list[tuple[str, str]]] = {}  # command -> [(session, role)]
        for session in self.specs.values():
            self.of.setdefault(session.open, []).append((session.name, "open"))
            if session.close:
                self.of.setdefault(session.close, []).append((session.name, "close"))
            for user in session.used_by:
                self.of.setdefault(user, []).append((session.name, "use"))
        self.commands = frozenset(self.of)

    def feed(self, conn: ConnState, frame: Frame) -> None:
        for name, role in self.of[frame.command or ""]:
            spec = self.specs[name]
            sid = frame.fields.get(spec.id)
            if not isinstance(sid, int | str) or isinstance(sid, bool):
                continue
            if role in ("open", "close") and frame.kind == "request" and isinstance(sid, int):
                for rule in self.tracker.rules:
                    rule.session_ended(conn, name, sid)
            if role == "open" and frame.kind != "response":
                values = {
                    k: frame.fields[f]
                    for k, f in zip(spec.keep_as, spec.keep, strict=True)
                    if f in frame.fields
                }
                conn.sessions[name, sid] = Session(name, sid, frame.number, values)
                conn.ended.pop((name, sid), None)
            elif role == "close" and frame.kind != "response":
                session = conn.sessions.get((name, sid))
                after = frame.fields.get(spec.close_after) if spec.close_after else None
                if session is not None and isinstance(after, int) and session.uses < after:
                    session.limit = after  # it ends after that many uses in all
                else:
                    conn.sessions.pop((name, sid), None)
                    conn.ended[name, sid] = frame.number
            elif role == "use":
                session = conn.sessions.get((name, sid))
                if session is not None:
                    links = links_of(frame)
                    links["opened_in"] = session.opened_in
                    links.update(session.values)
                    session.uses += 1
                    if session.limit is not None and session.uses >= session.limit:
                        conn.sessions.pop((name, sid), None)
                        conn.ended[name, sid] = frame.number
                elif spec.unknown and conn.setup_seen:
                    self._unknown(conn, frame, spec, sid)

    def _unknown(self, conn: ConnState, frame: Frame, spec: Any, sid: int | str) -> None:
        ended = conn.ended.get((spec.name, sid))
        if ended is not None:
            self.tracker.note(
                conn,
                frame,
                "note",
                "ended_session",
                f"{frame.name} for a {spec.name} already ended",
                f"{frame.name} for {spec.name} {spec.id} {sid} after packet {ended} ended it "
                f"(sent before the {self.tracker.server(conn)} read the {spec.close})",
            )
            return
        self.tracker.note(
            conn,
            frame,
            "warn",
            "unknown_session",
            f"{frame.name} for a {spec.name} never opened",
            f"{frame.name} for {spec.name} {spec.id} {sid}, which no {spec.open} in the capture opened",
        )
