"""Command versions: what each peer says it speaks, a rule of the tracker (Lua twin: versions.lua).

ExchangeCommandVersions lists, per command key, the lowest and highest version a peer
supports; a frame the other side sends in a version outside that range is told. The server's
list is what a connection's summary shows.
"""

from __future__ import annotations

from typing import Any

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState
from streamdump.spec.registry import Protocol, Ref
from streamdump.wire.frame import Frame

# The members of each listed element.
KEY, LOW, HIGH = "command_key", "min_version", "max_version"


class Versions(Rule):
    """The versions each peer announced, and frames outside them."""

    key = "versions"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> Ref:
        return check.ref(raw, "conversation.versions")

    @classmethod
    def lua(cls, spec: Ref, protocol: Protocol) -> dict[str, Any]:
        return {"command": spec.command, "path": list(spec.path)}

    def feed(self, conn: ConnState, frame: Frame) -> None:
        announced: dict[bool, dict[int, tuple[int, int]]] = self.state(conn, dict)
        if frame.command == self.spec.command:
            items = frame.fields.get(self.spec.path[0])
            if isinstance(items, list):
                known = {
                    item[KEY]: (item[LOW], item[HIGH])
                    for item in items
                    if isinstance(item, dict) and {KEY, LOW, HIGH} <= set(item)
                }
                announced[frame.from_client is not False] = known
                if frame.from_client is False:
                    conn.facts["versions"] = {
                        f"0x{key:04x}": list(span) for key, span in sorted(known.items())
                    }
        theirs = announced.get(not frame.from_client)  # the other side's (a side unknown: the client's)
        if theirs and frame.key in theirs:
            low, high = theirs[frame.key]
            if not low <= frame.version <= high:
                self.tracker.note(
                    conn,
                    frame,
                    "warn",
                    "version",
                    f"{frame.command} in a version the peer does not support",
                    f"{frame.command} version {frame.version} is outside the versions the peer "
                    f"announced ({low}..{high})",
                )
