"""The display filter bar: the `--filter` language typed in place, as termshark's.

It completes the field name being typed from the registry (the names `--filter` takes, bare and
with their protocol's prefix), says while the user types what is wrong with the filter (the
filter compiler's own one-line error), and applies it on Enter. An empty filter shows every frame.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.suggester import Suggester
from textual.widgets import Input, Static

from streamdump.analysis.fieldnames import FrameFilter, field_types
from streamdump.analysis.filter import FilterError
from streamdump.spec.decoder import Decoder
from streamdump.views.safe import escape

# The field name at the end of what is typed.
_LAST_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*$")
_KEYWORDS = frozenset({"and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "contains", "matches"})
SHOWN_CANDIDATES = 8


def filter_names(decoders: Iterable[Decoder]) -> list[str]:
    """Every name a filter takes for these protocols: bare, prefixed by the protocol, and the
    protocols' own names; sorted."""
    names: set[str] = set()
    for decoder in decoders:
        protocol = decoder.protocol.name
        names.add(protocol)
        for name in field_types(decoder.protocol):
            names.add(name)
            names.add(f"{protocol}.{name}")
    return sorted(names)


def candidates(names: list[str], text: str) -> tuple[str, list[str]]:
    """The word being typed at the end of text and the names that start with it."""
    found = _LAST_WORD.search(text)
    if found is None or found.group() in _KEYWORDS:
        return "", []
    word = found.group()
    at = bisect.bisect_left(names, word)
    out = []
    while at < len(names) and names[at].startswith(word):
        out.append(names[at])
        at += 1
    return word, out


class FieldNames(Suggester):
    """Completes the last word typed to the shortest field name that starts with it (then
    the next, with Tab again...)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.names = names

    async def get_suggestion(self, value: str) -> str | None:
        word, found = candidates(self.names, value)
        found = [n for n in found if n != word]
        if not found:
            return None
        best = min(found, key=lambda n: (n.count("."), len(n), n))
        return value[: len(value) - len(word)] + best


class FilterBar(Vertical):
    """The filter's input line and, under it, what is wrong with it or the names it may complete."""

    DEFAULT_CSS = """
    FilterBar { height: auto; }
    FilterBar > Input, FilterBar > Input:focus { border: none; height: 1; padding: 0 1; }
    FilterBar #filter-hint { height: 1; padding: 0 1; color: $text-muted; }
    FilterBar #filter-hint.error { color: $error; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "complete", "Complete", show=False, priority=True),
        Binding("escape", "leave", "Leave", show=False),
    ]

    class Applied(Message):
        """Enter on a filter that compiles: the selection (None: every frame) and its text."""

        def __init__(self, selection: FrameFilter | None, text: str) -> None:
            super().__init__()
            self.selection, self.text = selection, text

    class Left(Message):
        """The user left the bar without applying it."""

    def __init__(self, decoders: Iterable[Decoder], text: str = "") -> None:
        super().__init__(id="filterbar")
        self.decoders = list(decoders)
        self.names = filter_names(self.decoders)
        self.initial = text
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Input(
            self.initial,
            placeholder='display filter: press / (e.g. command == "Deliver" and stream == "orders")',
            suggester=FieldNames(self.names),
            id="filter",
        )
        yield Static("", id="filter-hint")

    @property
    def input(self) -> Input:
        return self.query_one("#filter", Input)

    def check(self, text: str) -> FrameFilter | None:
        """The filter compiled (None when empty); sets the hint line to its error, if any."""
        hint = self.query_one("#filter-hint", Static)
        self.error = None
        try:
            selection = FrameFilter(self.decoders, text) if text.strip() else None
        except FilterError as exc:
            self.error = str(exc)
            word, found = candidates(self.names, text)
            names = "  ".join(n for n in found[:SHOWN_CANDIDATES] if n != word)
            hint.update(Text(escape(self.error) + (f"   (tab completes: {names})" if names else "")))
            hint.add_class("error")
            raise
        hint.remove_class("error")
        word, found = candidates(self.names, text)
        shown = [n for n in found if n != word][:SHOWN_CANDIDATES]
        more = f" … ({len(found)} names)" if len(found) > SHOWN_CANDIDATES else ""
        hint.update(Text("tab completes: " + "  ".join(shown) + more if shown and word else ""))
        return selection

    def on_input_changed(self, event: Input.Changed) -> None:
        with contextlib.suppress(FilterError):
            self.check(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            selection = self.check(event.value)
        except FilterError:
            self.app.bell()
            return
        self.query_one("#filter-hint", Static).update("")
        self.post_message(self.Applied(selection, event.value))

    def action_complete(self) -> None:
        field = self.input
        field.cursor_position = len(field.value)
        field.action_cursor_right()  # at the end, this takes the suggester's completion

    def action_leave(self) -> None:
        self.query_one("#filter-hint", Static).update("")
        self.post_message(self.Left())
