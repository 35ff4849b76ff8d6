"""Request and reply through reply subjects: the spec's `conversation.replies`, a rule of the
tracker (Lua twin: replies.lua).

A frame naming where to answer (PUB's reply-to) is a request; the first frame the other side
sends to that subject is its answer, linked both ways with the time between. An answer whose
status says the request failed (no responders, a timed-out pull) is told, and a request whose
answer never came is told at the end.

Some requests are answered many times (`many`: JetStream's pulls, CONSUMER.MSG.NEXT): by the
messages delivered to a subscription of their reply subject, each with its own subject, and
by statuses sent to the reply subject itself. The first message is the answer (its time the
pull's latency); every later one, each heartbeat (100) and the status that ends the pull
(408 Request Timeout, 409) links back to it. A pull that ended by a status without a message
is told with that status. With two passes, a request's answer is linked back to it.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, SideState
from streamdump.analysis.tracker import MAX_IN_FLIGHT
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame, links_of
from streamdump.wire.wildcards import matches

# Where a connection keeps its requests answered many times, beside the rule's own state.
_MANY = "replies.many"


class ManySpec(Struct, frozen=True):
    """Requests answered many times: those whose field has one of the values (when), answered by
    deliveries whose link (via) names a subscription to their reply subject, and by statuses to
    it: heartbeats that keep them open, ends that close them."""

    when: tuple[str, tuple[str, ...]]
    via: str
    heartbeats: dict[int, str] = field(default_factory=dict)
    ends: tuple[int, ...] = ()


class Open(Struct):
    """A request answered many times, while its answers come."""

    frame: Frame
    answered: bool = False


class RepliesSpec(Struct, frozen=True):
    """Requests naming where their answer goes (ask: that field), and answers sent there (answer:
    the field naming where a frame goes); status: an answer's status field, statuses: what its
    codes mean for the request."""

    ask: str
    answer: str
    status: str | None = None
    statuses: dict[int, str] = field(default_factory=dict)
    # Links an answer gets from its request's fields: link name -> the request's field.
    keep: dict[str, str] = field(default_factory=dict)
    many: ManySpec | None = None
    # Answers that leave their request open for another (field, values): JetStream's +WPI, "still
    # working on it", before the +ACK that ends the message's delivery.
    again: tuple[str, tuple[str, ...]] | None = None


class Replies(Rule):
    """Requests and the replies sent where they asked."""

    key = "replies"
    links = ("request_in", "response_in", "response_time")

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> RepliesSpec:
        at = "conversation.replies"
        known = {"ask", "answer", "status", "statuses", "keep", "many", "again"}
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
        many = cls._many(raw.get("many"), check, names, f"{at}.many")
        again = raw.get("again")
        if again is not None:
            if not isinstance(again, dict) or len(again) != 1:
                raise check.fail(f"{at}.again", "must be {FIELD: [values]}")
            ((name, values),) = again.items()
            if (
                name not in names
                or not isinstance(values, list)
                or not all(isinstance(v, str) for v in values)
            ):
                raise check.fail(f"{at}.again", f"{name!r}: must name a field, given text values")
            again = (str(name), tuple(values))
        return RepliesSpec(
            str(raw["ask"]), str(raw["answer"]), raw.get("status"), dict(statuses), dict(keep), many, again
        )

    @staticmethod
    def _many(raw: Any, check: SpecCheck, names: set[str], at: str) -> ManySpec | None:
        if raw is None:
            return None
        shape = "must be {when: {FIELD: [values]}, via: LINK, heartbeats: {code: text}, ends: [codes]}"
        known = {"when", "via", "heartbeats", "ends"}
        if not isinstance(raw, dict) or not {"when", "via"} <= set(raw) <= known:
            raise check.fail(at, shape)
        when = raw["when"]
        if not isinstance(when, dict) or len(when) != 1:
            raise check.fail(f"{at}.when", shape)
        ((name, values),) = when.items()
        values = [values] if isinstance(values, str) else values
        if name not in names or not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise check.fail(f"{at}.when", f"{name!r}: must name a field, given text values")
        heartbeats = raw.get("heartbeats") or {}
        ends = raw.get("ends") or []
        if not all(isinstance(k, int) and isinstance(v, str) for k, v in heartbeats.items()):
            raise check.fail(f"{at}.heartbeats", "must map status codes to text")
        if not isinstance(ends, list) or not all(isinstance(code, int) for code in ends):
            raise check.fail(f"{at}.ends", "must list status codes")
        return ManySpec((str(name), tuple(values)), str(raw["via"]), dict(heartbeats), tuple(ends))

    @classmethod
    def lua(cls, spec: RepliesSpec, protocol: Protocol) -> dict[str, Any]:
        return {
            "ask": spec.ask,
            "answer": spec.answer,
            "status": spec.status,
            "statuses": dict(spec.statuses),
            "keep": [[link, name] for link, name in spec.keep.items()],
            "again": None if spec.again is None else {"field": spec.again[0], "values": list(spec.again[1])},
            "many": None
            if spec.many is None
            else {
                "field": spec.many.when[0],
                "values": list(spec.many.when[1]),
                "via": spec.many.via,
                "heartbeats": dict(spec.many.heartbeats),
                "ends": list(spec.many.ends),
            },
        }

    def before(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        """A frame sent where an earlier request of the other side asked to be answered is its
        answer; a frame naming where to answer is a request."""
        if frame.command is None:
            return
        spec = self.spec
        to = frame.fields.get(spec.answer)
        ask = frame.fields.get(spec.ask)
        if not isinstance(to, str) and not (isinstance(ask, str) and ask):
            return  # a frame that neither answers nor asks (a PING, a CONNECT)
        asked: dict[tuple[bool | None, str], Frame] = self.state(conn, dict)
        if isinstance(to, str):
            many = self._open(conn).get((not frame.from_client, to))
            request = asked.pop((not frame.from_client, to), None) if many is None else None
            if many is not None:
                self._status_of_many(conn, many, frame, to)
            elif request is not None:
                self.tracker.pair(request, frame)
                self._keep(request, frame)
                if spec.again is not None and frame.fields.get(spec.again[0]) in spec.again[1]:
                    asked[not frame.from_client, to] = request  # open for the answer that ends it
                status = frame.fields.get(spec.status) if spec.status else None
                meaning = spec.statuses.get(status) if isinstance(status, int) else None
                if meaning is not None:
                    self._failed(conn, request, frame, status, meaning)
        if isinstance(ask, str) and ask and len(asked) < MAX_IN_FLIGHT:
            if self._is_many(frame):
                opened = self._open(conn)
                if len(opened) >= MAX_IN_FLIGHT:  # the oldest goes: pulls a full batch ended stay open
                    del opened[next(iter(opened))]
                opened[frame.from_client, ask] = Open(frame)
                asked.pop((frame.from_client, ask), None)
            else:
                asked[frame.from_client, ask] = frame

    def feed(self, conn: ConnState, frame: Frame) -> None:
        """A message delivered to a subscription of an open request's reply subject answers it."""
        many = self.spec.many
        if many is None or frame.from_client is not False or frame.links is None:
            return
        via = frame.links.get(many.via)
        opened = conn.rules.get(_MANY)
        if not isinstance(via, str) or not opened or "request_in" in frame.links:
            return
        found = opened.get((True, via))
        if found is None and ("*" in via or ">" in via):
            candidates = [o for (asker, to), o in opened.items() if asker and matches(via, to)]
            found = max(candidates, key=lambda o: o.frame.number) if candidates else None
        if found is None:
            return
        if found.answered:
            frame.links["request_in"] = found.frame.number
        else:
            self.tracker.pair(found.frame, frame)
            found.answered = True

    def _open(self, conn: ConnState) -> dict[tuple[bool | None, str], Open]:
        """The connection's requests answered many times, while open."""
        found = conn.rules.get(_MANY)
        if found is None:
            found = conn.rules[_MANY] = {}
        return found  # type: ignore[no-any-return]

    def _is_many(self, frame: Frame) -> bool:
        many = self.spec.many
        return many is not None and frame.fields.get(many.when[0]) in many.when[1]

    def _status_of_many(self, conn: ConnState, many: Open, frame: Frame, to: str) -> None:
        """A status sent to an open request's reply subject: a heartbeat, or its end."""
        spec = self.spec
        assert spec.many is not None
        status = frame.fields.get(spec.status) if spec.status else None
        heartbeat = status in spec.many.heartbeats
        first = not many.answered and not heartbeat
        if first:
            self.tracker.pair(many.frame, frame)
            many.answered = True
        else:
            links_of(frame)["request_in"] = many.frame.number
        self._keep(many.frame, frame)
        if isinstance(status, int) and not heartbeat:  # a status that ends it (408, 409, 503...)
            self._open(conn).pop((not frame.from_client, to), None)
            meaning = spec.statuses.get(status)
            if first and meaning is not None:
                self._failed(conn, many.frame, frame, status, meaning)  # it ended without a message

    def _keep(self, request: Frame, frame: Frame) -> None:
        if self.spec.keep:
            links = links_of(frame)
            for link, name in self.spec.keep.items():
                if request.fields.get(name) is not None:
                    links[link] = request.fields[name]

    def _failed(self, conn: ConnState, request: Frame, frame: Frame, status: int, meaning: str) -> None:
        self.tracker.note(
            conn,
            frame,
            "warn",
            "reply_status",
            f"request answered with status {status}",
            f"the {self.tracker.server(conn)} answered the {request.name} to "
            f"{request.fields.get(self.spec.answer)} (packet {request.number}) with status "
            f"{status}: {meaning}",
        )

    def awaits_later(self, frame: Frame) -> bool:
        ask = frame.fields.get(self.spec.ask)
        return isinstance(ask, str) and bool(ask)

    def later(self, frame: Frame) -> dict[str, Any] | None:
        if frame.links and "response_in" in frame.links:
            return {"response_in": frame.links["response_in"]}
        return None

    def finish(self, conn: ConnState) -> None:
        asked: dict[tuple[bool | None, str], Frame] | None = conn.rules.get(self.key)
        for (asker, _), frame in sorted(asked.items(), key=lambda item: item[1].number) if asked else ():
            if asker is not False:
                self._no_reply(conn, frame)
        if asked:
            asked.clear()
        opened: dict[tuple[bool | None, str], Open] | None = conn.rules.pop(_MANY, None)
        if not opened:
            return
        for (asker, _), many in sorted(opened.items(), key=lambda item: item[1].frame.number):
            if asker is not False and not many.answered:
                self._no_reply(conn, many.frame)

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
