"""The `--messages` view: one line per message that crossed the wire.

Which frames hold messages, and where each message is in its frame, is the protocol
package's to say (its MessageRules); this view only lays the rows out: packet, time,
the stream or topic, where the message is, its size and what it says.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from streamdump.analysis.fieldnames import Names, names_of
from streamdump.analysis.grouping import row_values, value_text
from streamdump.spec.dissector import MessageRow, MessageRules
from streamdump.wire.frame import Frame

if TYPE_CHECKING:
    from streamdump.spec.decoder import Decoder


class MessageLines:
    """Turns frames into message lines, each protocol's by its own rules.

    columns: flat names (--column) whose values each line shows after the size, as
    name=value (several values joined by ",", "-" when the message has none).
    """

    def __init__(self, rules: dict[str, MessageRules], columns: tuple[str, ...] = ()) -> None:
        self.rules = rules
        self.columns = columns
        self.names = {name: names_of(r.protocol) for name, r in rules.items()} if columns else {}

    def carries(self, frame: Frame) -> bool:
        rules = self.rules.get(frame.protocol)
        return rules is not None and rules.carries(frame)

    def lines(self, frame: Frame, when: str, decoder: Decoder | None = None) -> list[str]:
        """A frame's message lines, all at once (a frame holds hundreds); when: the frame's time
        as the caller's clock writes it. Text as decoded: the writer escapes it.

        decoder: the frame's, to expand it when its rows need more than its decode gave
        (without it, the caller has expanded it)."""
        rules = self.rules.get(frame.protocol)
        if rules is None or not rules.carries(frame):
            return []
        head = f"{frame.number:>6} {when}"
        tag = f"  [incomplete frame: {frame.incomplete}]" if frame.incomplete else ""
        names = self.names.get(frame.protocol)
        plain = None
        if decoder is not None:
            if names is None and not tag and not frame.expanded:
                plain = rules.bare_rows(frame, decoder.limits.records)
            if plain is None:
                decoder.expand(frame)
        if names is None and not tag:
            plain = plain or rules.plain_rows(frame)
            if plain is not None:
                # line's commonest lines (f"{size:>8}" of f"{size} B": padded to six, then " B"),
                # their common start made once
                start = f"{head} {plain[0]} "
                return [
                    f"{start}{where} {size:>6} B  {text}" if text else f"{start}{where} {size:>6} B"
                    for where, size, text in plain[1]
                ]
            return _plain_lines(head, rules.rows(frame))
        out = []
        for row in rules.rows(frame):
            cells = self._cells(row, names) if names is not None and row.size is not None else ""
            out.append(line(head, row, cells) + (tag if row.tag else ""))
        return out

    def _cells(self, row: MessageRow, names: Names) -> str:
        cells = []
        for name in self.columns:
            values = [value_text(v) for v in row_values(row, name, names) if v is not None]
            cells.append(f"{name}={','.join(values) or '-'}")
        return "  ".join(cells)


def _plain_lines(head: str, rows: Iterable[MessageRow]) -> list[str]:
    """The lines of a complete frame's rows without columns: line's, the commonest in one step
    (as line's f"{size:>8}" of f"{row.size} B": the number padded to six, then " B")."""
    return [
        f"{head} {row.subject} {row.where} {row.size:>6} B  {row.text}"
        if row.size is not None and row.text
        else line(head, row)
        for row in rows
    ]


def line(head: str, row: MessageRow, cells: str = "") -> str:
    if row.size is None:
        return f"{head} {row.subject} {row.where}  {row.text}"
    size = f"{row.size} B"
    if not cells and row.text:  # the commonest line, in one step
        return f"{head} {row.subject} {row.where} {size:>8}  {row.text}"
    text = f"{head} {row.subject} {row.where} {size:>8}"
    return text + (f"  {cells}" if cells else "") + (f"  {row.text}" if row.text else "")
