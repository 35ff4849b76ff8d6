"""The UI's three panes: the packet list (virtual: only the rows on screen are drawn, each decoded
again from the index), the detail tree of the selected frame and the hex pane with the selected
field's bytes highlighted.

Text from the wire reaches the screen escaped (views/safe.py) and as styled segments or rich
Text, never as markup.
"""

from __future__ import annotations

import bisect
from array import array
from typing import TYPE_CHECKING, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static, Tree
from textual.widgets.tree import TreeNode

from streamdump.views.clock import Clock, TimeFormat
from streamdump.views.dump import BYTES_PER_LINE
from streamdump.views.render import Branch
from streamdump.views.safe import escape, safe_text

if TYPE_CHECKING:
    from streamdump.ui.index import FrameIndex, Row

# Per protocol, in the order the read's protocols come: the colour of its rows' text.
PALETTE = ("#5fafff", "#87d787", "#d7afff", "#ffaf5f", "#5fd7d7", "#d7d787")
# A row's background by its worst finding (Wireshark colours bad frames too).
SEVERITY_BACKGROUND = {"error": "#5f0000", "warn": "#4e4e00"}
COLUMNS = (("No.", 7), ("Time", 12), ("Source", 22), ("Destination", 22), ("Protocol", 9), ("Command", 30))
MARK = "●"


class Shown:
    """The rows the list shows, in order: every row of the index, or those a filter kept."""

    def __init__(self, index: FrameIndex, rows: array | None = None) -> None:
        self.index = index
        self.rows = rows  # None: all of them

    def __len__(self) -> int:
        return self.index.count if self.rows is None else len(self.rows)

    def __getitem__(self, position: int) -> int:
        return position if self.rows is None else self.rows[position]

    def position_of(self, row: int) -> int | None:
        """Where a row is in the list (None: the filter hides it)."""
        if self.rows is None:
            return row if row < self.index.count else None
        at = bisect.bisect_left(self.rows, row)
        return at if at < len(self.rows) and self.rows[at] == row else None

    def nearest(self, row: int) -> int:
        if self.rows is None:
            return min(row, max(0, self.index.count - 1))
        return min(bisect.bisect_left(self.rows, row), max(0, len(self.rows) - 1))


def cell(text: str, width: int) -> str:
    text = escape(text)
    return text[: width - 1] + "…" if len(text) > width else text.ljust(width)


class ListHeader(Static):
    """The packet list's column titles."""

    def __init__(self) -> None:
        super().__init__(
            Text(" ".join(cell(name, width) for name, width in COLUMNS) + " Info"), id="list-header"
        )


class PacketList(ScrollView, can_focus=True):
    """Every shown frame, one row each, drawn on demand: a capture of millions of frames scrolls
    as one of ten. The cursor's row is the selected frame."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
    ]

    class Selected(Message):
        """The cursor moved to another frame."""

        def __init__(self, row: int | None) -> None:
            super().__init__()
            self.row = row

    def __init__(self, index: FrameIndex, time_format: TimeFormat, follow_tail: bool) -> None:
        super().__init__(id="packets")
        self.index = index
        self.shown = Shown(index)
        self.cursor = 0
        self.selected: int | None = None  # the row index selected (not its position)
        self.marks: set[int] = set()
        self.time_format = time_format
        self.live = follow_tail  # a live capture's list follows the newest frame
        self.follow_tail = follow_tail
        self.colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(index.protocol_names)}
        self.shorts = {name: r.short for name, r in index.views.renderers.items()}

    # ------------------------------------------------------------------ the rows

    def set_shown(self, shown: Shown) -> None:
        """Show other rows (a filter applied), keeping the selected frame where it can."""
        self.shown = shown
        keep = self.selected
        self.grow()
        if keep is not None and len(shown):
            at = shown.position_of(keep)
            self.go(at if at is not None else shown.nearest(keep))
        else:
            self.cursor = 0
            self._select()
        self.refresh()

    def grow(self) -> None:
        """Take in the rows indexed since the last look (called on a timer)."""
        count = len(self.shown)
        if self.virtual_size.height != count:
            self.virtual_size = Size(self.size.width, count)
            if self.follow_tail and count:
                self.go(count - 1)
            elif self.selected is None and count:
                self.go(0)
            self.refresh()

    def render_line(self, y: int) -> Strip:
        position = self.scroll_offset.y + y
        width = self.size.width
        if position >= len(self.shown):
            return Strip.blank(width)
        row = self.index.row(self.shown[position])
        segments = self._segments(row, position)
        return Strip(segments).adjust_cell_length(width, segments[0].style)

    def _segments(self, row: Row, position: int) -> list[Segment]:
        colour = self.colours.get(row.protocol, "white")
        background = SEVERITY_BACKGROUND.get(row.severity or "")
        style = Style(color=colour, bgcolor=background)
        if position == self.cursor:
            style = Style(color="black", bgcolor="#d0d0d0", bold=True)
        previous = None
        if self.time_format in (TimeFormat.d, TimeFormat.dd) and position > 0:
            previous = self.index.times[self.shown[position - 1]]
        clock = Clock(self.time_format, self.index.first_ts())
        clock.previous = previous
        number = f"{MARK if row.index in self.marks else ' '}{row.number}"
        cells = (
            number,
            clock.text(row.ts).strip(),
            row.src,
            row.dst,
            self.shorts.get(row.protocol, row.protocol),
            row.command,
        )
        text = " ".join(cell(value, width) for value, (_, width) in zip(cells, COLUMNS, strict=True))
        return [Segment(text + " " + escape(row.info), style)]

    # ------------------------------------------------------------------ moving

    def go(self, position: int) -> None:
        count = len(self.shown)
        if not count:
            return
        self.cursor = max(0, min(position, count - 1))
        height = max(1, self.size.height)
        top = self.scroll_offset.y
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)
        self._select()
        self.refresh()

    def go_to_row(self, row: int) -> bool:
        at = self.shown.position_of(row)
        if at is None:
            return False
        self.follow_tail = False
        self.go(at)
        return True

    def _select(self) -> None:
        row = self.shown[self.cursor] if self.cursor < len(self.shown) else None
        if row != self.selected:
            self.selected = row
            self.post_message(self.Selected(row))

    def action_move(self, step: int) -> None:
        # Up stops following new frames; down onto the last row follows them again (live).
        self.follow_tail = self.live and step > 0 and self.cursor + step >= len(self.shown) - 1
        self.go(self.cursor + step)

    def action_page(self, step: int) -> None:
        if step < 0:
            self.follow_tail = False
        self.go(self.cursor + step * max(1, self.size.height - 1))

    def action_first(self) -> None:
        self.follow_tail = False
        self.go(0)

    def action_last(self) -> None:
        self.follow_tail = self.live  # at the end, the list follows new frames again
        self.go(len(self.shown) - 1)

    def on_click(self, event: object) -> None:
        y = getattr(event, "y", 0)
        self.follow_tail = False
        self.go(self.scroll_offset.y + y)
        self.focus()

    def on_mouse_scroll_up(self, event: object) -> None:
        self.follow_tail = False  # the wheel scrolls (Widget's own handler); new frames no longer pull it

    def toggle_mark(self) -> None:
        if self.selected is None:
            return
        self.marks.symmetric_difference_update({self.selected})
        self.refresh()

    def next_mark(self, step: int) -> bool:
        marked = sorted(p for p in (self.shown.position_of(r) for r in self.marks) if p is not None)
        if not marked:
            return False
        after = [p for p in marked if (p > self.cursor if step > 0 else p < self.cursor)]
        self.follow_tail = False
        self.go((after[0] if step > 0 else after[-1]) if after else (marked[0] if step > 0 else marked[-1]))
        return True


class DetailTree(Tree[Branch]):
    """The selected frame's fields; a branch's children are made when it is first opened, so a
    frame of ten thousand messages opens at once."""

    class Highlighted(Message):
        def __init__(self, branch: Branch | None) -> None:
            super().__init__()
            self.branch = branch

    def __init__(self) -> None:
        super().__init__(Text("no frame selected"), id="detail")
        self.show_root = True

    def show(self, outline: Branch | None) -> None:
        self.clear()
        if outline is None:
            self.root.set_label(Text("no frame selected"))
            return
        self.root.set_label(safe_text(outline.text, style=outline.style))
        self.root.data = outline
        self._fill(self.root, outline)
        self.root.expand()
        for child in self.root.children:  # the protocol's fields, open as Wireshark opens them
            child.expand()

    def _fill(self, node: TreeNode[Branch], branch: Branch) -> None:
        for child in branch.children:
            label = safe_text(child.text, style=child.style)
            if child.children:
                made = node.add(label, data=child, allow_expand=True)
                if branch is node.data and node is self.root:
                    self._fill(made, child)
            else:
                node.add_leaf(label, data=child)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[Branch]) -> None:
        node = event.node
        if node.data is not None and node.data.children and not node.children:
            self._fill(node, node.data)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[Branch]) -> None:
        self.post_message(self.Highlighted(event.node.data))


class HexPane(ScrollView, can_focus=True):
    """The frame's bytes, as `-x` shows them, the selected field's bytes highlighted."""

    def __init__(self) -> None:
        super().__init__(id="hex")
        self.data = b""
        self.mark: tuple[int, int] | None = None

    def show(self, data: bytes) -> None:
        self.data = data
        self.mark = None
        self.virtual_size = Size(80, (len(data) + BYTES_PER_LINE - 1) // BYTES_PER_LINE)
        self.scroll_to(y=0, animate=False)
        self.refresh()

    def highlight(self, offset: int | None, length: int) -> None:
        self.mark = (offset, offset + max(length, 1)) if offset is not None and length > 0 else None
        if self.mark is not None:
            line = offset // BYTES_PER_LINE  # type: ignore[operator]
            top, height = self.scroll_offset.y, max(1, self.size.height)
            if not top <= line < top + height:
                self.scroll_to(y=max(0, line - 1), animate=False)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        line = self.scroll_offset.y + y
        start = line * BYTES_PER_LINE
        if start >= len(self.data):
            return Strip.blank(self.size.width)
        chunk = self.data[start : start + BYTES_PER_LINE]
        digits = 4 if len(self.data) <= 0x10000 else 8
        plain, lit = Style(), Style(color="black", bgcolor="#87d7ff", bold=True)
        segments = [Segment(f"{start:0{digits}x}  ", Style(dim=True))]
        ascii_parts = []
        for i, byte in enumerate(chunk):
            on = self.mark is not None and self.mark[0] <= start + i < self.mark[1]
            style = lit if on else plain
            segments.append(Segment(f"{byte:02x}", style))
            nxt_on = self.mark is not None and self.mark[0] <= start + i + 1 < self.mark[1]
            segments.append(Segment(" ", lit if on and nxt_on and i + 1 < len(chunk) else plain))
            ascii_parts.append(Segment(chr(byte) if 0x20 <= byte < 0x7F else ".", style))
        segments.append(Segment("   " * (BYTES_PER_LINE - len(chunk)) + "  ", plain))
        segments += ascii_parts
        return Strip(segments).adjust_cell_length(self.size.width)
