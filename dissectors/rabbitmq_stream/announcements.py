"""What the broker announces about a stream: the spec's `conversation.announcement`, a rule of
the tracker (Lua twin: announcements.lua).

A MetadataUpdate with a code other than OK says a stream is gone or moved; it is noted, and
a later request or refused publish about that stream is told what the broker had said.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, named
from streamdump.spec.registry import Protocol, Ref
from streamdump.wire.frame import Frame


class AnnouncementSpec(Struct, frozen=True):
    code: Ref  # MetadataUpdate.code
    about: str  # the field naming what it is about (stream)


class Announcements(Rule):
    """The broker's announcements, and what they explain later."""

    key = "announcement"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> AnnouncementSpec:
        at = "conversation.announcement"
        if not isinstance(raw, dict) or set(raw) != {"command", "code", "about"}:
            raise check.fail(at, "must be {command, code, about}")
        ref = check.ref(f"{raw['command']}.{raw['code']}", at, int_only=True)
        check.ref(f"{raw['command']}.{raw['about']}", at)
        return AnnouncementSpec(ref, str(raw["about"]))

    @classmethod
    def lua(cls, spec: AnnouncementSpec, protocol: Protocol) -> dict[str, Any]:
        found = protocol.field_at(spec.code)
        return {
            "command": spec.code.command,
            "code": spec.code.path[0],
            "about": spec.about,
            "enum": (found.of or found).enum if found is not None else None,
        }

    def __init__(self, tracker: Any, spec: AnnouncementSpec) -> None:
        super().__init__(tracker, spec)
        self.commands = frozenset({spec.code.command})
        found = tracker.protocol.field_at(spec.code)
        self.names = dict(tracker.protocol.enums[found.enum]) if found is not None and found.enum else {}

    def feed(self, conn: ConnState, frame: Frame) -> None:
        code = frame.fields.get(self.spec.code.path[0])
        subject = frame.fields.get(self.spec.about)
        if not isinstance(code, int) or not isinstance(subject, str) or code in self.tracker.spec.ok:
            return
        what = named(self.names, code)
        announced: dict[str, tuple[int, str]] = self.state(conn, dict)
        announced[subject] = (frame.number, what)
        self.tracker.note(
            conn,
            frame,
            "note",
            "announcement",
            f"{frame.command}: {what}",
            f"the {self.tracker.server(conn)} announced {self.spec.about} {subject!r}: {what}",
        )

    def said(self, conn: ConnState, values: dict[str, Any] | None) -> str:
        """What the broker had announced about the subject these values name (a request's
        fields, a session's kept values), as words to add to a finding."""
        announced: dict[str, tuple[int, str]] | None = conn.rules.get(self.key)
        subject = values.get(self.spec.about) if values is not None else None
        said = announced.get(subject) if announced and isinstance(subject, str) else None
        if said is None:
            return ""
        return (
            f"; at packet {said[0]} the {self.tracker.server(conn)} had announced {self.spec.about} "
            f"{subject!r}: {said[1]}"
        )

    def explain(self, conn: ConnState, frame: Frame, request: Frame | None, code: int) -> str:
        return self.said(conn, request.fields if request is not None else None)
