"""What a protocol package adds to its spec, and how the core finds it.

A protocol lives in one folder under dissectors/ (the package streamdump.dissectors.<name>):
its spec (data) and the code the spec cannot say, declared in the package's `DISSECTOR`:
hooks with their Lua twins, a framing rule when the spec's length word does not say how
long a PDU is, what counts as a message for `--messages` and `stats`, and the conversation
rules only this protocol has. The core imports a package only through `dissector_of`, by the name the registry
recorded for the spec's folder, so no core module names a protocol.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from streamdump.codecs.values import preview
from streamdump.spec.frozen import Record, frozen
from streamdump.spec.registry import Protocol, SpecError

if TYPE_CHECKING:
    from streamdump.spec.hooks import Hook
    from streamdump.wire.frame import Frame


# Not frozen: nothing changes rows, and a row is made per message (a frozen dataclass, as it
# once was, set each field through object.__setattr__, more than the rest of the line cost).
class MessageRow(Struct):
    """One line of `--messages`: where a message is in its frame, its size and what it says.

    subject: the stream or topic it is addressed to ("?" when the capture does not show it).
    size: None for rows that only say what could not be shown. tag: the row belongs to an
    incomplete frame and says so. at: where the message is, as values (publishing id, offset),
    named as the package's MessageRules.positions declare; tables have a column for each.
    record: the mapping that holds the message's decoded values (a record, a message or the
    frame's fields), in which flat names are looked up (stats --by, --column, tables).
    """

    subject: str
    where: str
    size: int | None = None
    text: str = ""
    tag: bool = False
    at: tuple[tuple[str, Any], ...] = ()
    record: Mapping[str, Any] | None = None


def addressed(value: Any) -> str:
    """What a message is addressed to, as MessageRow and Volume name it: "?" when not text."""
    return value if isinstance(value, str) and value else "?"


# How much of a body, and how many of a message's other properties, one line shows.
PREVIEW_CHARS = 40
MAX_EXTRA_PROPERTIES = 3


def message_text(
    body: Any, named: Iterable[tuple[str, Any]], extra: Mapping[Any, Any], extra_noun: str = "properties"
) -> str:
    """What a message says on one line: its body's start, its key properties, then the first
    few others (application or user properties) and how many more there are."""
    parts = [preview(body, PREVIEW_CHARS) if body is not None else "(no body)"]
    parts += [f"{name}={preview(value)}" for name, value in named if value is not None]
    parts += [f"{key}={preview(extra[key])}" for key in list(extra)[:MAX_EXTRA_PROPERTIES]]
    if len(extra) > MAX_EXTRA_PROPERTIES:
        parts.append(f"(+{len(extra) - MAX_EXTRA_PROPERTIES} {extra_noun})")
    return "  ".join(parts)


class Volume(Struct, frozen=True):
    """What a frame moves, from its headers alone: for `stats`' table of messages per subject."""

    subject: str
    direction: str
    messages: int
    bytes: int
    # A reply's request latency, in seconds (stats show it per subject).
    latency: float | None = None


class MessageRules:
    """What counts as a message in a protocol's frames; by default, nothing does."""

    # What a message is addressed to, as the stats table and its JSON name it.
    subject = "subject"
    # The values MessageRow.at may give, with their types (int or string): the columns
    # of the messages table that say where each message is.
    positions: tuple[tuple[str, str], ...] = ()

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol

    def carries(self, frame: Frame) -> bool:
        """Whether the frame holds messages (a view expands it before asking for rows)."""
        return False

    def rows(self, frame: Frame) -> Iterator[MessageRow]:
        return iter(())

    def plain_rows(self, frame: Frame) -> tuple[str, list[tuple[str, int, str]]] | None:
        """What rows gives for a frame whose rows are all whole messages (none tagged, none
        only a note), as (subject, [(where, size, text), ...]): lines need no more, and a
        frame holds hundreds. None: ask rows (the default, for a package without the shortcut)."""
        return None

    def bare_rows(self, frame: Frame, records: int) -> tuple[str, list[tuple[str, int, str]]] | None:
        """plain_rows for a frame not expanded, read from what its decode gave alone, when that
        is sure to be what expanding it and asking plain_rows would give: a view that shows
        only rows need not build its records. records: how many its expansion may decode (the
        frame's budget). None: expand it and ask plain_rows (the default)."""
        return None

    def bare_fields_json(self, frame: Frame, records: int) -> bytes | None:
        """The compact JSON (as json.dumps writes it, UTF-8) of the fields expanding a frame not
        expanded would give, read from what its decode gave alone, when that is sure to be the
        same and adds no expert note: a JSON writer need not build records only to write them.
        records: how many its expansion may decode. None: expand it (the default)."""
        return None

    def volume(self, frame: Frame) -> Volume | None:
        return None

    def gauges(self, frame: Frame) -> Iterable[tuple[str, str, float]]:
        """Values a frame shows of its consumers, to draw over time: (what, whose, value), such
        as the credit a subscription has left or the offset it was delivered up to."""
        return ()

    def codes(self, frame: Frame) -> Iterator[tuple[str, str]]:
        """The response codes a frame carries beyond its status field (a status in a message's
        headers, an error in its body), as (what, code) for the stats' response codes table."""
        return iter(())


@frozen
class Dissector(Record):
    """The code of one protocol package, as the core asks for it."""

    hooks: tuple[type[Hook], ...] = ()
    # Lua files making the hooks' twins, in load order: names in the package folder, or
    # "package:file" for files of another package (a shared codec).
    lua: tuple[str, ...] = ()
    # Lua files of the package run as the plugin loads, before its first packet makes the twins
    # above: what Wireshark takes at load time only (the package's own preferences).
    lua_prefs: tuple[str, ...] = ()
    # Builds the framing rule from the protocol's decoder; None: the spec's length word.
    framing: Callable[[Any], Any] | None = None
    messages: type[MessageRules] = MessageRules
    # The package's own conversation rules (analysis/rules.py's Rule classes), in the order the
    # tracker calls them; each parses its section of the spec's `conversation:`.
    rules: tuple[Any, ...] = ()


def dissector_of(protocol: Protocol) -> Dissector:
    """The protocol package's DISSECTOR; a spec without a package has only what the core does."""
    if protocol.package is None:
        return _NONE
    return dissector_named(protocol.package, protocol.source)


def dissector_named(package: str, source: str) -> Dissector:
    """The DISSECTOR of a protocol package, by its name (source: the spec, for errors)."""
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise SpecError(f"{source}: cannot import {package}: {exc}") from None
    found = getattr(module, "DISSECTOR", None)
    if not isinstance(found, Dissector):
        raise SpecError(f"{source}: {package} defines no DISSECTOR")
    return found


_NONE = Dissector()
