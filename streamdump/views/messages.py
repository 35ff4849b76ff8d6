"""The `--messages` view: one line per message that crossed the wire.

Which frames hold messages, and where each message is in its frame, is the protocol
package's to say (its MessageRules); this view only lays the rows out: packet, time,
the stream or topic, where the message is, its size and what it says.
"""

from __future__ import annotations

from collections.abc import Iterator

from streamdump.core.frame import Frame
from streamdump.spec.dissector import MessageRow, MessageRules


class MessageLines:
    """Turns frames into message lines, each protocol's by its own rules."""

    def __init__(self, rules: dict[str, MessageRules]) -> None:
        self.rules = rules

    def carries(self, frame: Frame) -> bool:
        rules = self.rules.get(frame.protocol)
        return rules is not None and rules.carries(frame)

    def lines(self, frame: Frame, t0: float) -> Iterator[str]:
        rules = self.rules.get(frame.protocol)
        if rules is None or not rules.carries(frame):
            return
        head = f"{frame.number:>6} {frame.ts - t0:>11.6f}"
        tag = f"  [incomplete frame: {frame.incomplete}]" if frame.incomplete else ""
        for row in rules.rows(frame):
            yield line(head, row) + (tag if row.tag else "")


def line(head: str, row: MessageRow) -> str:
    text = f"{head} {row.subject} {row.where}"
    if row.size is None:
        return f"{text}  {row.text}"
    size = f"{row.size} B"
    return f"{text} {size:>8}" + (f"  {row.text}" if row.text else "")
