"""Request and reply through reply subjects: the spec's `conversation.replies`, a rule of the
tracker (Lua twin: replies.lua).

A frame naming where to answer (PUB's reply-to) is a request; the first frame the other side
sends to that subject is its answer, linked both ways with the time between. An answer whose
status says the request failed (no responders, a timed-out pull) is told, and a request whose
answer never came is told at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, SideState
from streamdump.analysis.tracker import MAX_IN_FLIGHT
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame, links_of


@dataclass(frozen=True, slots=True)
class RepliesSpec:
    """Requests naming where their answer goes (ask: that field), and answers sent there (answer:
    the field naming where a frame goes); status: an answer's status field, statuses: what its
    codes mean for the request."""

    ask: str
    answer: str
    status: str | None = None
    statuses: dict[int, str] = field(default_factory=dict)
    # Links an answer gets from its request's fields: link name -> the request's field.
    keep: dict[str, str] = field(default_factory=dict)


class Replies(Rule):
    """Requests and the replies sent where they asked."""

    key = "replies"
    links = ("request_in", "response_in", "response_time")

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> RepliesSpec:
        at = "conversation.replies"
        known = {"ask", "answer", "status", "statuses", "keep"}
        if not isinstance(raw, dict) or not {"ask", "answer"} <= set(raw) or set(raw) - known:
            raise check.fail(at, "must be {ask: FIELD, answer: FIELD, status, statuses: {code: text}, keep}")
        names = check.field_names()
        for key in ("ask", "answer", "status"):
            if raw.get(key) is not None and raw[key] not in names:
                raise check.fail(at, f"no layout has a field {raw[key]!r} (its hooks' included)")
        statuses = raw.get("statuses") or {}
        if not all(isinstance(k, int) and isinstance(v, str) for k, v in statuses.items()):
            raise check.fail(f"{at}.statuses", "must map status codes to text")
        keep = raw.get("keep") or {}
        if not isinstance(keep, dict) or not all(v in names for v in keep.values()):
            raise check.fail(f"{at}.keep", "must map link names to fields of the requests")
        return RepliesSpec(str(raw["ask"]), str(raw["answer"]), raw.get("status"), dict(statuses), dict(keep))

    @classmethod
    def lua(cls, spec: RepliesSpec, protocol: Protocol) -> dict[str, Any]:
        return {
            "ask": spec.ask,
            "answer": spec.answer,
            "status": spec.status,
            "statuses": dict(spec.statuses),
            "keep": [[link, name] for link, name in spec.keep.items()],
        }

    def before(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        """A frame sent where an earlier request of the other side asked to be answered is its
        answer; a frame naming where to answer is a request."""
        if frame.command is None:
            return
        spec = self.spec
        asked: dict[tuple[bool | None, str], Frame] = self.state(conn, dict)
        to = frame.fields.get(spec.answer)
        if isinstance(to, str):
            request = asked.pop((not frame.from_client, to), None)
            if request is not None:
                self.tracker.pair(request, frame)
                if spec.keep:
                    links = links_of(frame)
                    for link, name in spec.keep.items():
                        if request.fields.get(name) is not None:
                            links[link] = request.fields[name]
                status = frame.fields.get(spec.status) if spec.status else None
                meaning = spec.statuses.get(status) if isinstance(status, int) else None
                if meaning is not None:
                    self.tracker.note(
                        conn,
                        frame,
                        "warn",
                        "reply_status",
                        f"request answered with status {status}",
                        f"the {self.tracker.server(conn)} answered the {request.name} to "
                        f"{request.fields.get(spec.answer)} (packet {request.number}) with status "
                        f"{status}: {meaning}",
                    )
        ask = frame.fields.get(spec.ask)
        if isinstance(ask, str) and ask and len(asked) < MAX_IN_FLIGHT:
            asked[frame.from_client, ask] = frame

    def finish(self, conn: ConnState) -> None:
        asked: dict[tuple[bool | None, str], Frame] | None = conn.rules.get(self.key)
        for (asker, _), frame in sorted((asked or {}).items(), key=lambda item: item[1].number):
            if asker is not False:
                self._no_reply(conn, frame)
        if asked:
            asked.clear()

    def _no_reply(self, conn: ConnState, frame: Frame) -> None:
        spec = self.spec
        ended = self.tracker.ended_soon(conn, frame.ts)
        lost = "; the capture lost bytes of this connection, maybe the answer" if conn.lossy else ""
        to = frame.fields.get(spec.answer)
        self.tracker.diagnose(
            conn,
            frame,
            "note",
            "no_reply",
            f"{frame.name} asked for a reply that never came",
            f"{frame.name}{f' to {to}' if to else ''} (packet {frame.number}) asked for a reply on "
            f"{frame.fields.get(spec.ask)}; none came in the capture{ended or lost}",
        )
