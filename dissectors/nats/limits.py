"""Values one side announces that bound the other's frames: the spec's `conversation.limits`,
a rule of the tracker (Lua twin: limits.lua).

The server's INFO announces max_payload; a client frame whose payload is larger (HPUB's total
size, else PUB's payload size) is an error the server answers by closing the connection.
"""

from __future__ import annotations

from typing import Any

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, SideState
from streamdump.spec.registry import Protocol, Ref
from streamdump.wire.frame import Frame


class Limits(Rule):
    """Announced bounds, and the client's frames over them."""

    key = "limits"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> tuple[tuple[Ref, tuple[str, ...]], ...]:
        at = "conversation.limits"
        limits = []
        for body in raw or []:
            if not isinstance(body, dict) or set(body) != {"announce", "bounds"}:
                raise check.fail(at, "each must be {announce: Command.field, bounds: FIELD or [FIELDS]}")
            ref = check.ref(body["announce"], at, int_only=True)
            # A list: the first of the fields a frame has is the one bounded (HPUB's total, else PUB's size).
            bounds = body["bounds"] if isinstance(body["bounds"], list) else [body["bounds"]]
            names = check.field_names()
            for name in bounds:
                if name not in names:
                    raise check.fail(at, f"no layout has a field {name!r}")
            limits.append((ref, tuple(str(b) for b in bounds)))
        return tuple(limits)

    @classmethod
    def lua(cls, spec: tuple[tuple[Ref, tuple[str, ...]], ...], protocol: Protocol) -> list[dict[str, Any]]:
        return [
            {"command": ref.command, "announced": ref.path[0], "bounds": list(bounds)} for ref, bounds in spec
        ]

    def __init__(self, tracker: Any, spec: tuple[tuple[Ref, tuple[str, ...]], ...]) -> None:
        super().__init__(tracker, spec)
        # Announcements that bound the other side's fields: command -> [(announced field, bounded fields)].
        self.announcers: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for ref, bounds in spec:
            self.announcers.setdefault(ref.command, []).append((ref.path[0], bounds))
        self.bounded = tuple(dict.fromkeys(bounds for _, bounds in spec))

    def before(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        limits: dict[tuple[str, ...], tuple[int, int, str]] | None = conn.rules.get(self.key)
        if limits:
            self._check(conn, frame, limits)
        if frame.command in self.announcers and frame.from_client is False:
            for announced, bounds in self.announcers[frame.command]:
                value = frame.fields.get(announced)
                if isinstance(value, int) and not isinstance(value, bool):
                    self.state(conn, dict)[bounds] = (value, frame.number, announced)

    def _check(
        self, conn: ConnState, frame: Frame, limits: dict[tuple[str, ...], tuple[int, int, str]]
    ) -> None:
        if frame.from_client is False:
            return  # the limits bound what the client sends
        fields = frame.fields
        for choices in self.bounded:
            found = limits.get(choices)
            if found is None:
                continue
            for bounds in choices:
                if bounds in fields:
                    break
            else:
                continue  # a frame without any of the bounded fields
            value = fields[bounds]
            if not isinstance(value, int):
                continue
            limit, number, announced = found
            if value > limit:
                server = self.tracker.server(conn)
                words = bounds.replace("_", " ")  # the field as words: "payload size"
                self.tracker.note(
                    conn,
                    frame,
                    "error",
                    "over_limit",
                    f"{words} over the {announced} the {server} announced",
                    f"{frame.name} {words} {value} exceeds the {announced} of {limit} the "
                    f"{server} announced at packet {number}",
                )
