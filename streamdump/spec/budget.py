"""What expanding one frame may still produce: the decode context's budget of decompressed bytes
and records, so that a small hostile frame of many compressed parts cannot exhaust memory."""

from __future__ import annotations

from typing import Any

from streamdump.wire.frame import Expert
from streamdump.wire.limits import DEFAULT_LIMITS, Limits

# How the budget's note says which limits stopped it (the plugin's note says the same).
LIMITS_HINT = "(the expanded and records limits: streamdump --limit raises them)"


class Budget:
    """What expanding one frame may still produce: decompressed bytes and records (the expanded
    and records limits, by default far above what any broker's frame limit allows).

    Each part is bounded by its own length, but a frame may hold many; the budget bounds
    their sum. A hook takes the frame's budget from its decode context (Budget.of).
    """

    __slots__ = ("bytes_left", "limits", "records_left", "spent")

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.bytes_left = self.limits.expanded
        self.records_left = self.limits.records
        self.spent = False  # the frame has been told once

    @staticmethod
    def of(ctx: Any) -> Budget:
        if ctx.budget is None:
            ctx.budget = Budget(ctx.limits)
        return ctx.budget  # type: ignore[no-any-return]

    def refuse(self, ctx: Any, where: str, what: str, pos: int) -> None:
        if not self.spent:
            self.spent = True
            ctx.expert.append(
                Expert(
                    "error",
                    f"{where}: {what}; expanding this frame stops at {self.limits.expanded >> 20} MiB "
                    f"decompressed and {self.limits.records} records {LIMITS_HINT}",
                    pos,
                )
            )
