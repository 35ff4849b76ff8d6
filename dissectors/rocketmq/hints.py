"""What a failed request's status means for it: the spec's `conversation.hints`, a rule of the
tracker (Lua twin: hints.lua).

RocketMQ's response codes are shared by every command, and the same code says different things
to a producer and a consumer: SYSTEM_BUSY to a send is a broker asking for back-off, TOPIC_NOT_EXIST
to a route query a topic never created. The hint for the command and code is added to the finding.
"""

from __future__ import annotations

from typing import Any

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame


class Hints(Rule):
    """Words for failed requests, by command and code."""

    key = "hints"

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> dict[str, dict[int, str]]:
        hints: dict[str, dict[int, str]] = {}
        for command_name, by_code in (raw or {}).items():
            check.command(command_name, "conversation.hints")
            if not isinstance(by_code, dict) or not all(
                isinstance(k, int) and isinstance(v, str) for k, v in by_code.items()
            ):
                raise check.fail(f"conversation.hints.{command_name}", "must map status codes to text")
            hints[command_name] = dict(by_code)
        return hints

    @classmethod
    def lua(cls, spec: dict[str, dict[int, str]], protocol: Protocol) -> dict[str, Any]:
        return {command: dict(codes) for command, codes in spec.items()}

    def explain(self, conn: ConnState, frame: Frame, request: Frame | None, code: int) -> str:
        hint = self.spec.get(frame.command or "", {}).get(code)
        return f": {hint}" if hint else ""
