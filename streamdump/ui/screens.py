"""The UI's other screens: a text view (follow, stats, help), the findings (a finding jumps to
its frame) and a one-line prompt (search, where to write). Each closes with Escape."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, Log, OptionList, Static
from textual.widgets.option_list import Option

from streamdump.views.safe import escape

SEVERITY_STYLE = {"error": "bold red", "warn": "yellow", "note": "cyan", "chat": ""}


class TextScreen(Screen[None]):
    """Lines of text (already escaped by the view that made them), scrolled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self.title_text, self.lines = title, lines

    def compose(self) -> ComposeResult:
        yield Static(Text(escape(self.title_text) + "   (Esc: back)", style="bold"), classes="screen-title")
        log = Log(highlight=False, id="text", auto_scroll=False)
        yield log

    def on_mount(self) -> None:
        log = self.query_one(Log)
        log.write_lines([escape(line) for line in self.lines])
        log.scroll_home(animate=False)
        log.focus()


class FindingsScreen(Screen[int | None]):
    """The conversation's findings and the notices about the capture; Enter jumps to the packet."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    def __init__(self, findings: list[tuple[str, int | None, str]]) -> None:
        super().__init__()
        self.findings = findings

    def compose(self) -> ComposeResult:
        title = f"Findings: {len(self.findings)}   (Enter: go to the packet, Esc: back)"
        yield Static(Text(title, style="bold"), classes="screen-title")
        options = [
            Option(
                Text.assemble(
                    (f"[{severity}] ", SEVERITY_STYLE.get(severity, "")),
                    f"packet {number}: " if number is not None else "",
                    escape(message),
                ),
                id=str(i),
            )
            for i, (severity, number, message) in enumerate(self.findings)
        ]
        if not options:
            options = [Option(Text("nothing found"), id="none", disabled=True)]
        yield OptionList(*options, id="findings")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is None or not event.option.id.isdigit():
            return
        self.dismiss(self.findings[int(event.option.id)][1])

    def action_back(self) -> None:
        self.dismiss(None)


class Prompt(ModalScreen[str | None]):
    """One line asked for (a search, a file name); Enter gives it, Escape gives None."""

    DEFAULT_CSS = """
    Prompt { align: center middle; }
    Prompt > Vertical { width: 72; height: auto; border: round $accent; background: $surface; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, value: str = "") -> None:
        super().__init__()
        self.question, self.value = question, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question))
            yield Input(self.value, id="answer")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
