"""Who authenticates: the user name of a PLAIN SaslAuthenticate, never its password (Lua twin: sasl.lua).

The `sasl_plain` hook masks a PLAIN password wherever the frame is shown: its data keeps
the authorization identity and the user, and each byte of the password becomes "*" (the
data keeps its length, as Wireshark's bytes item must; an empty password stays empty,
since that is worth seeing).
"""

from __future__ import annotations

from typing import Any

from streamdump.spec.hooks import Hook
from streamdump.spec.layout import Ctx
from streamdump.wire.frame import Node


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
