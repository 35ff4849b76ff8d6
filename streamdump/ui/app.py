"""`streamdump ui`: a capture looked at, not scrolled through (Textual).

Three panes, as Wireshark and termshark have: the packet list (panes.PacketList), the selected
frame's detail tree and its bytes with the selected field's highlighted. The frames come from
an index a background thread fills as the one analysis session reads the source (index.py),
so the first screen of a large capture comes at once and the keys answer while the rest is
read. `/` opens the display filter bar (filterbar.py); the follow, stats and findings screens
show what `follow`, `stats` and the findings on stderr show, from the same views.
"""

from __future__ import annotations

import io
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input, Static

from streamdump.analysis.fieldnames import FrameFilter
from streamdump.analysis.filter import FilterError
from streamdump.ui.filterbar import FilterBar
from streamdump.ui.index import FrameIndex
from streamdump.ui.panes import DetailTree, HexPane, ListHeader, PacketList, Shown
from streamdump.ui.screens import FindingsScreen, Prompt, TextScreen
from streamdump.views.clock import TimeFormat
from streamdump.views.follow import write_dialogues
from streamdump.views.output import write_statistics
from streamdump.views.render import Branch
from streamdump.views.safe import escape
from streamdump.wire.capture import CaptureError
from streamdump.wire.writer import WriteError

# The follow screen decodes a connection's frames again: at most this many.
MAX_FOLLOWED = 20_000
# The findings screen lists at most this many.
MAX_FINDINGS = 10_000
# How long the indexing thread may hold the interpreter before the screen gets it (seconds).
SWITCH_INTERVAL = 0.001
# After a key or a click, indexing gives way to the screen this long (seconds).
GIVE_WAY = 0.3
# Indexing gives way to the screen until the first rows are drawn, at most this long (seconds).
FIRST_SCREEN = 2.0
# How often the list takes in new rows and the status line is redrawn (seconds).
TICK = 0.2

KEYS = (
    ("↑ ↓ PgUp PgDn Home End", "move in the packet list (End: follow new frames)"),
    ("Tab / Shift+Tab", "next / previous pane"),
    ("Enter / Space", "in the tree: open or close a branch; on a link, go to its frame"),
    ("g", "go to the frame a link names (the tree's link, else the frame's response or request)"),
    ("b", "back to the frame before the last jump"),
    (":", "go to a packet by its number"),
    ("/", "display filter (Tab completes a field name, Enter applies, Esc leaves)"),
    ("Ctrl+F", "search the rows' text; n / N: next / previous match"),
    ("m", "mark or unmark the frame; . / , next / previous mark"),
    ("f", "follow the frame's connection: its dialogue"),
    ("s", "statistics (stats)"),
    ("e", "findings: diagnoses and notices; Enter goes to the packet"),
    ("w", "write the shown frames' packets to a capture file (W: the marked ones)"),
    ("?", "this help"),
    ("q", "quit"),
)


class StreamdumpApp(App[None]):
    """The terminal UI over one FrameIndex."""

    TITLE = "streamdump"
    CSS = """
    #list-header { height: 1; background: $primary-darken-2; color: $text; text-style: bold; }
    #packets { height: 2fr; min-height: 5; overflow-x: hidden; }
    #detail { height: 2fr; border-top: solid $primary-darken-1; }
    #hex { height: 1fr; min-height: 3; border-top: solid $primary-darken-1; overflow-x: hidden; }
    #status { height: 1; background: $primary-darken-3; }
    .screen-title { height: 1; background: $primary-darken-2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark,f1", "help", "Help"),
        Binding("slash", "filter", "Filter"),
        Binding("ctrl+f", "search", "Search"),
        Binding("n", "search_next(1)", "Next match", show=False),
        Binding("N", "search_next(-1)", "Previous match", show=False),
        Binding("g", "go_link", "Go to link"),
        Binding("b", "back", "Back", show=False),
        Binding("colon", "go_packet", "Go to packet", show=False),
        Binding("m", "mark", "Mark"),
        Binding("full_stop", "next_mark(1)", "Next mark", show=False),
        Binding("comma", "next_mark(-1)", "Previous mark", show=False),
        Binding("f", "follow", "Follow"),
        Binding("s", "stats", "Stats"),
        Binding("e", "findings", "Findings"),
        Binding("w", "write(False)", "Write"),
        Binding("W", "write(True)", "Write marked", show=False),
    ]

    def __init__(
        self,
        index: FrameIndex,
        *,
        filter_text: str = "",
        time_format: TimeFormat = TimeFormat.r,
        live: bool = False,
    ) -> None:
        super().__init__()
        self.index = index
        self.filter_text = filter_text
        self.time_format = time_format
        self.live = live
        self.history: list[int] = []
        self.search_text = ""
        self.written: str | None = None  # the last capture file written
        self.scan: _Scan | None = None
        self.first_drawn: float | None = None  # when the first rows were drawn (perf_counter)

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield FilterBar(self.index.setup.decoders.values(), self.filter_text)
        yield ListHeader()
        self._packets = PacketList(self.index, self.time_format, follow_tail=self.live)
        yield self._packets
        yield DetailTree()
        yield HexPane()
        self._status = Static("", id="status")
        yield self._status
        yield Footer()

    @property
    def packets(self) -> PacketList:
        return self._packets

    def on_mount(self) -> None:
        # The index is filled by a thread of this process: the screen asks for the interpreter
        # often, and is given it within a millisecond rather than Python's usual 5.
        sys.setswitchinterval(SWITCH_INTERVAL)
        if not self.index.thread:
            self.index.give_way(FIRST_SCREEN)  # the first screen first: the rows trickle in till then
            self.index.start()
        if self.filter_text.strip():
            try:
                self._apply(self.query_one(FilterBar).check(self.filter_text), self.filter_text)
            except FilterError:  # the bar says what is wrong; every frame is shown meanwhile
                self._apply(None, "")
        self.packets.focus()
        self.set_interval(TICK, self.tick)
        # Until the first rows are drawn, look for them more often: the first screen comes sooner.
        self._early = self.set_interval(0.01, self._first_rows)
        self.tick()

    def _drawn(self) -> None:
        """The first rows are on the screen: indexing goes at full speed."""
        self.first_drawn = time.perf_counter()
        self.index.give_way(0)

    def _first_rows(self) -> None:
        if self.index.count or self.index.finished:
            self._early.stop()
            self.tick()

    def tick(self) -> None:
        packets, status = self.packets, self._status
        if not packets.is_mounted or not status.is_mounted:  # the app is closing
            return
        packets.grow()
        if self.first_drawn is None and (len(packets.shown) or self.index.finished):
            self.first_drawn = 0.0
            self.call_after_refresh(self._drawn)
        index = self.index
        shown = len(packets.shown)
        parts = [f"{index.count:,} frames"]
        progress = index.progress()
        if not index.finished:
            parts.append("capturing" if self.live else "reading" + (f" {progress:.0%}" if progress else ""))
        elif index.error:
            parts.append(f"error: {index.error}")
        if self.scan is not None:
            scanning = "" if self.scan.done else f" (filtering {self.scan.scanned:,}/{index.count:,})"
            parts.append(f"{shown:,} shown{scanning}")
        if packets.marks:
            parts.append(f"{len(packets.marks)} marked")
        parts.append("? help")
        status.update(Text(escape(" · ".join(parts))))

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key | events.MouseDown | events.MouseScrollDown | events.MouseScrollUp):
            self.index.give_way(GIVE_WAY)  # a person is waiting: indexing slows down a moment
        await super().on_event(event)

    # ------------------------------------------------------------------ the selected frame

    def on_packet_list_selected(self, event: PacketList.Selected) -> None:
        tree, hexpane = self.query_one(DetailTree), self.query_one(HexPane)
        if event.row is None:
            tree.show(None)
            hexpane.show(b"")
            return
        frame = self.index.frame(event.row, fresh=True)
        renderer = self.index.views[frame]
        clock_text = f"{frame.ts - self.index.first_ts():.6f}"
        tree.show(renderer.outline(frame, clock_text))
        hexpane.show(bytes(frame.data))

    def on_detail_tree_highlighted(self, event: DetailTree.Highlighted) -> None:
        branch = event.branch
        if branch is not None:
            self.query_one(HexPane).highlight(branch.offset, branch.length)

    def on_tree_node_selected(self, event: DetailTree.NodeSelected[Branch]) -> None:
        branch = event.node.data
        if branch is not None and branch.links:
            self.jump_to_packet(branch.links[0])

    # ------------------------------------------------------------------ jumps

    def jump_to_packet(self, number: int, remember: bool = True) -> bool:
        rows = self.index.rows_of_packet(number)
        if not rows:
            self.notify(f"no frame completes in packet {number}", severity="warning")
            return False
        packets = self.packets
        if remember and packets.selected is not None:
            self.history.append(packets.selected)
        if not packets.go_to_row(rows[0]):
            self.notify(f"packet {number} is hidden by the display filter", severity="warning")
            return False
        packets.focus()
        return True

    def action_go_link(self) -> None:
        tree = self.query_one(DetailTree)
        node = tree.cursor_node
        if tree.has_focus and node is not None and node.data is not None and node.data.links:
            self.jump_to_packet(node.data.links[0])
            return
        selected = self.packets.selected
        if selected is None:
            return
        links = self.index.frame(selected).links or {}
        renderer = self.index.views[self.index.frame(selected)]
        for name, value in links.items():
            if name in renderer.packet_links:
                first = value[0] if isinstance(value, list) and value else value
                if isinstance(first, int):
                    self.jump_to_packet(first)
                    return
        self.notify("this frame links to no other frame")

    def action_back(self) -> None:
        if self.history:
            self.packets.go_to_row(self.history.pop())

    def action_go_packet(self) -> None:
        def go(answer: str | None) -> None:
            if answer and answer.strip().isdigit():
                number = int(answer)
                at = self.index.row_at_or_after(number)
                if at is not None:
                    self.jump_to_packet(self.index.numbers[at])

        self.push_screen(Prompt("Go to packet number:"), go)

    # ------------------------------------------------------------------ filter

    def action_filter(self) -> None:
        self.query_one(FilterBar).input.focus()

    def on_filter_bar_applied(self, event: FilterBar.Applied) -> None:
        self._apply(event.selection, event.text)
        self.packets.focus()

    def on_filter_bar_left(self, event: FilterBar.Left) -> None:
        self.packets.focus()

    def _apply(self, selection: FrameFilter | None, text: str) -> None:
        if self.scan is not None:
            self.scan.cancel()
            self.scan = None
        self.filter_text = text
        if selection is None:
            self.packets.set_shown(Shown(self.index))
            return
        self.scan = _Scan(self.index, selection)
        self.packets.set_shown(Shown(self.index, self.scan.rows))
        self.scan.start()

    # ------------------------------------------------------------------ search

    def action_search(self) -> None:
        def search(answer: str | None) -> None:
            if answer:
                self.search_text = answer
                self.action_search_next(1)

        self.push_screen(
            Prompt("Search the rows (source, destination, command, info):", self.search_text), search
        )

    def action_search_next(self, step: int) -> None:
        if not self.search_text:
            return
        packets = self.packets
        wanted = self.search_text.lower()
        shown, count = packets.shown, len(packets.shown)
        deadline = time.monotonic() + 2.0
        position = packets.cursor
        for _ in range(count):
            position = (position + step) % count
            row = self.index.row(shown[position])
            text = f"{row.number} {row.src} {row.dst} {row.command} {row.info}".lower()
            if wanted in text:
                packets.follow_tail = False
                packets.go(position)
                return
            if time.monotonic() > deadline:
                packets.go(position)
                self.notify(f"not found yet; searched up to packet {row.number} (n goes on)")
                return
        self.notify(f"{self.search_text!r} not found", severity="warning")

    # ------------------------------------------------------------------ marks

    def action_mark(self) -> None:
        self.packets.toggle_mark()
        self.tick()

    def action_next_mark(self, step: int) -> None:
        if not self.packets.next_mark(step):
            self.notify("no marked frame (m marks one)")

    # ------------------------------------------------------------------ screens

    def action_help(self) -> None:
        lines = ["Keys", ""] + [f"  {key:<24} {what}" for key, what in KEYS]
        lines += ["", "The mouse selects rows and tree branches, and scrolls each pane."]
        self.push_screen(TextScreen("Help", lines))

    def action_follow(self) -> None:
        selected = self.packets.selected
        if selected is None:
            return
        conn = self.index.conns[selected]
        self.notify(f"following connection {conn}…", timeout=2)
        self.run_worker(lambda: self._follow(conn), thread=True, group="follow", exclusive=True)

    def _follow(self, conn: int) -> None:
        """The connection's dialogue, made in a thread (its frames are decoded again)."""
        index = self.index
        rows = [i for i in range(index.count) if index.conns[i] == conn]
        cut = len(rows) > MAX_FOLLOWED
        frames = [index.frame(i) for i in rows[:MAX_FOLLOWED]]
        with index.held():
            dialogues = write_dialogues(frames, index.views, index.session, conn)
        lines = [line for dialogue in dialogues for line in dialogue]
        if cut:
            lines.append(f"  … the first {MAX_FOLLOWED:,} of {len(rows):,} frames")
        self.call_from_thread(self.push_screen, TextScreen(f"Follow: connection {conn}", lines))

    def action_stats(self) -> None:
        out = io.StringIO()
        with self.index.held():
            partials = self.index.session.partials()
        write_statistics(partials, self.index.setup.decoders, out)
        note = (
            []
            if self.index.finished
            else ["", "(the capture is still being read: these are its first frames)"]
        )
        self.push_screen(TextScreen("Statistics", out.getvalue().splitlines() + note))

    def action_findings(self) -> None:
        with self.index.held():
            diagnoses = list(self.index.session.diagnoses)
            notices = list(self.index.notices)
        found = [(d.severity, d.number, d.message) for d in diagnoses]
        found += [(n.severity, n.number, n.message) for n in notices]
        found.sort(key=lambda f: f[1] or 0)
        if len(found) > MAX_FINDINGS:
            more = len(found) - MAX_FINDINGS
            found = found[:MAX_FINDINGS]
            found.append(("note", None, f"{more:,} more; `streamdump stats FILE` lists them all"))

        def go(number: int | None) -> None:
            if number is not None:
                self.jump_to_packet(number)

        self.push_screen(FindingsScreen(found), go)

    def action_write(self, marked: bool) -> None:
        packets = self.packets
        rows = sorted(packets.marks) if marked else [packets.shown[p] for p in range(len(packets.shown))]
        if not rows:
            self.notify("no frames to write" if not marked else "no marked frame (m marks one)")
            return
        what = "marked" if marked else "shown"

        def write(answer: str | None) -> None:
            if answer:
                self.run_worker(lambda: self._write(rows, answer, what), thread=True, group="write")

        self.push_screen(
            Prompt(f"Write the packets of the {len(rows)} {what} frames to:", f"{what}.pcapng"), write
        )

    def _write(self, rows: list[int], path: str, what: str) -> None:
        """Copy the packets out, in a thread (the capture is read again)."""
        try:
            count = self.index.write(rows, Path(path))
        except (OSError, WriteError, CaptureError) as exc:
            self.call_from_thread(self.notify, f"cannot write {path}: {exc}", severity="error")
            return
        self.written = path
        self.call_from_thread(self.notify, f"wrote {count} packets of {len(rows)} {what} frames to {path}")

    async def action_quit(self) -> None:
        if self.scan is not None:
            self.scan.cancel()
        self.exit()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()


class _Scan:
    """A display filter applied to the rows in a background thread: every row indexed so far,
    then each new one as the index grows, until it is cancelled or the index is complete."""

    def __init__(self, index: FrameIndex, selection: FrameFilter) -> None:
        self.index, self.selection = index, selection
        self.rows = array("L")
        self.scanned = 0
        self.done = False
        self.cancelled = False

    def start(self) -> None:
        threading.Thread(target=self._run, name="streamdump-ui-filter", daemon=True).start()

    def cancel(self) -> None:
        self.cancelled = True

    def _run(self) -> None:
        index = self.index
        while not self.cancelled:
            finished = index.finished  # read before the count: rows after it are all there
            count = index.count
            selection = self.selection
            for row in range(self.scanned, count):
                if self.cancelled:
                    return
                if selection(index.frame(row)):
                    self.rows.append(row)
                self.scanned = row + 1
            if finished and count == index.count:
                self.done = True
                return
            time.sleep(TICK / 2)
