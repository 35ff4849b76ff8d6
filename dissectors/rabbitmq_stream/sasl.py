"""Who authenticates: the user name of a PLAIN SaslAuthenticate, never its password, and an
authentication the broker refused (Lua twin: sasl.lua).

The `sasl_plain` hook masks a PLAIN password wherever the frame is shown: its data keeps
the authorization identity and the user, and each byte of the password becomes "*" (the
data keeps its length, as Wireshark's bytes item must; an empty password stays empty,
since that is worth seeing).
"""

from __future__ import annotations

from typing import Any

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, seen
from streamdump.spec.hooks import Hook
from streamdump.spec.layout import Ctx
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame, Node


def masked_plain(data: bytes | memoryview) -> bytes | None:
    """PLAIN data with its password masked, or None when it is not PLAIN's three parts."""
    parts = bytes(data).split(b"\0")
    if len(parts) != 3 or not parts[2]:
        return None
    return b"\0".join((parts[0], parts[1], b"*" * len(parts[2])))


class PlainSecret(Hook):
    name = "sasl_plain"

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        if siblings.get("mechanism") == "PLAIN":
            masked = masked_plain(value)
            if masked is not None:
                siblings["sasl_opaque_data"] = masked

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        if node is not None:
            node.value = siblings.get("sasl_opaque_data", value)


def plain_user(fields: dict[str, Any]) -> str | None:
    """The user name of a PLAIN authentication ("\\0user\\0password")."""
    if fields.get("mechanism") != "PLAIN":
        return None
    data = fields.get("sasl_opaque_data")
    if not isinstance(data, bytes | memoryview):
        return None
    parts = bytes(data).split(b"\0")
    return parts[1].decode("utf-8", "replace") if len(parts) == 3 else None


class Authentication(Rule):
    """The spec's `conversation.authenticate`: who authenticates, and a refusal told as such."""

    key = "authenticate"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> str:
        check.command(raw, "conversation.authenticate")
        return str(raw)

    @classmethod
    def lua(cls, spec: str, protocol: Protocol) -> dict[str, Any]:
        return {"command": spec}

    def __init__(self, tracker: Any, spec: str) -> None:
        super().__init__(tracker, spec)
        self.commands = frozenset({spec})

    def feed(self, conn: ConnState, frame: Frame) -> None:
        if frame.kind == "request":
            conn.facts["user"] = plain_user(frame.fields)

    def status(self, conn: ConnState, frame: Frame, request: Frame | None, code: int, what: str) -> bool:
        if frame.command != self.spec:
            return False
        conn.refused = conn.refused or seen(frame, 0)
        user = conn.facts.get("user")
        user = f", user {user!r}" if user else ""
        mechanism = request.fields.get("mechanism") if request is not None else None
        how = f" ({mechanism}{user}, packet {request.number})" if request is not None else ""
        server = self.tracker.server(conn)
        self.tracker.note(
            conn,
            frame,
            "error",
            "auth_failure",
            f"authentication failed: {what}",
            f"authentication failed: the {server} answered {frame.command}{how} with {what}",
        )
        return True
