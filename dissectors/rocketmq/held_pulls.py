"""Requests the broker may hold before it answers: the spec's `conversation.patience`, a rule of
the tracker (end-only: no Lua twin).

A consumer's PULL_MESSAGE says how long the broker may suspend it waiting for messages (a long
poll); one the capture ends before that time is up is not late, and is told as a note.
"""

from __future__ import annotations

from typing import Any

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.wire.frame import Frame


class HeldPulls(Rule):
    """Long polls: how long each may be held."""

    key = "patience"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> dict[str, str]:
        patience: dict[str, str] = {}
        for command_name, field_name in (raw or {}).items():
            check.ref(f"{command_name}.{field_name}", "conversation.patience", int_only=True)
            patience[command_name] = str(field_name)
        return patience

    def holds(self, request: Frame) -> float | None:
        name = self.spec.get(request.command or "")
        value = request.fields.get(name) if name else None
        return value / 1000 if isinstance(value, int) and value > 0 else None
