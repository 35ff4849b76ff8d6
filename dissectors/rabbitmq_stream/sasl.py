"""Who authenticates: the user name of a PLAIN SaslAuthenticate, never its password (Lua twin: sasl.lua)."""

from __future__ import annotations

from typing import Any


def plain_user(fields: dict[str, Any]) -> str | None:
    """The user name of a PLAIN authentication ("\\0user\\0password")."""
    if fields.get("mechanism") != "PLAIN":
        return None
    data = fields.get("sasl_opaque_data")
    if not isinstance(data, bytes | memoryview):
        return None
    parts = bytes(data).split(b"\0")
    return parts[1].decode("utf-8", "replace") if len(parts) == 3 else None
