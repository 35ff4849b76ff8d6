"""`-T fields -e NAME ...`: the values of named fields, one row per frame (or per message), as
tshark prints them, with its -E options (header, separator, quote, aggregator, occurrence).

Names are the filters' (a frame's fields, its links, its top-level keys), with or without the
protocol's prefix, and a few of tshark's frame fields (frame.number, frame.time_epoch,
frame.time_relative, frame.time_delta_displayed). Values are written as the JSON output writes
them (text as it is, bytes as hex, numbers as numbers), escaped for the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from msgspec import Struct

from streamdump.analysis.fieldnames import Names, frame_lookup
from streamdump.analysis.grouping import row_values, value_text
from streamdump.spec.dissector import MessageRules
from streamdump.views.safe import escape
from streamdump.wire.frame import Frame

# tshark's names for what every frame has: the name a filter uses, or a time the clock gives.
FRAME_ALIASES = {
    "frame.number": "frame",
    "frame.time_epoch": "ts",
    "frame.time_relative": "@relative",
    "frame.time_delta_displayed": "@delta",
}
# -E's words for characters that are awkward on a command line.
_CHARACTERS = {"/t": "\t", "/s": " "}
_QUOTES = {"d": '"', "s": "'", "n": ""}


class FieldsError(ValueError):
    """An -E option that is not one of tshark's: str() says which and what it takes."""


class FieldsLayout(Struct, frozen=True):
    """What -T fields prints: columns (as named, the name looked up) and the -E options."""

    columns: tuple[tuple[str, str], ...]
    header: bool = False
    separator: str = "\t"
    quote: str = ""
    aggregator: str = ","
    occurrence: str = "a"  # f(irst), l(ast), a(ll) or the 1-based number of the value

    @classmethod
    def parse(cls, columns: Sequence[tuple[str, str]], options: Sequence[str]) -> FieldsLayout:
        """The layout -E's options give (header=y, separator=, ...), checked."""
        settings: dict[str, Any] = {}
        for option in options:
            key, equals, value = option.partition("=")
            if not equals:
                raise FieldsError(f"-E takes NAME=VALUE (header=y, separator=,), got {option!r}")
            if key == "header":
                if value not in ("y", "n"):
                    raise FieldsError(f"-E header takes y or n, got {value!r}")
                settings["header"] = value == "y"
            elif key in ("separator", "aggregator"):
                character = _CHARACTERS.get(value, value)
                if len(character) != 1:
                    raise FieldsError(f"-E {key} takes one character, /t or /s, got {value!r}")
                settings[key] = character
            elif key == "quote":
                if value not in _QUOTES:
                    raise FieldsError(f"-E quote takes d, s or n, got {value!r}")
                settings["quote"] = _QUOTES[value]
            elif key == "occurrence":
                if value not in ("f", "l", "a") and not (value.isdigit() and int(value) > 0):
                    raise FieldsError(f"-E occurrence takes f, l, a or a number from 1, got {value!r}")
                settings["occurrence"] = value
            else:
                raise FieldsError(
                    f"-E {key}: unknown; -E takes header, separator, quote, aggregator and occurrence"
                )
        return cls(tuple(columns), **settings)

    def heading(self) -> str:
        return self.separator.join(self._cell([name]) for name, _ in self.columns)

    def row(self, values: Callable[[str], Sequence[Any]]) -> str:
        return self.separator.join(
            self._cell([value_text(v) for v in values(name)]) for _, name in self.columns
        )

    def _cell(self, texts: list[str]) -> str:
        occurrence = self.occurrence
        if occurrence == "f":
            texts = texts[:1]
        elif occurrence == "l":
            texts = texts[-1:]
        elif occurrence != "a":
            n = int(occurrence)
            texts = texts[n - 1 : n]
        text = escape(self.aggregator.join(texts))
        return f"{self.quote}{text}{self.quote}" if self.quote else text


class FieldRows:
    """The rows of -T fields: one per frame, or with messages one per message they hold."""

    def __init__(
        self, layout: FieldsLayout, names: dict[str, Names], rules: dict[str, MessageRules] | None
    ) -> None:
        self.layout = layout
        self.names = names  # each protocol's maps and renamed keys, for the lookups
        self.rules = rules  # each protocol's messages, when rows are messages

    def rows(self, frame: Frame, relative: float, delta: float) -> Iterator[str]:
        names = self.names[frame.protocol]
        lookup = frame_lookup(frame, names)
        clocked = {"@relative": [round(relative, 9)], "@delta": [round(delta, 9)]}

        def of_frame(name: str) -> Sequence[Any]:
            return clocked.get(name) or lookup(name)

        if self.rules is None:
            yield self.layout.row(of_frame)
            return
        rules = self.rules.get(frame.protocol)
        if rules is None or not rules.carries(frame):
            return
        for row in rules.rows(frame):
            if row.size is None:
                continue  # what could not be shown, not a message
            yield self.layout.row(lambda name, row=row: row_values(row, name, names) or of_frame(name))
