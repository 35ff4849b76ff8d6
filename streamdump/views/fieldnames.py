"""The flat field names that filters, JSON output and the Wireshark plugin share.

A name means one type everywhere in a spec (the registry checks that), so a filter can
say `stream` without saying where: a Subscribe's field, a hook's record or the stream the
conversation tracker linked to a Deliver. This module derives the names and their types
from the registry, and gathers every value a frame has for a name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from streamdump.core.frame import Frame
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import INT_TYPES, FieldSpec, Protocol
from streamdump.views.filter import FieldType, compile_filter

# What every frame has, whatever its protocol: the JSON object's top-level keys.
FRAME_NAMES: dict[str, FieldType] = {
    "frame": FieldType("int"),
    "ts": FieldType("float"),
    "src": FieldType("str"),
    "dst": FieldType("str"),
    "connection": FieldType("int"),
    "protocol": FieldType("str"),
    "key": FieldType("int"),
    "kind": FieldType("str"),
    "command": FieldType("str"),
    "version": FieldType("int"),
    "size": FieldType("int"),
    "incomplete": FieldType("str"),
    "severity": FieldType("str"),
    "group": FieldType("str"),
    "expert": FieldType("str"),
}


def _kind(spec: FieldSpec) -> str:
    if spec.type in INT_TYPES:
        return "int"
    return {"string": "str", "bytes": "bytes", "raw": "bytes", "bool": "bool", "float": "float"}.get(
        spec.type, "any"
    )


def field_types(protocol: Protocol) -> dict[str, FieldType]:
    """Every name a filter may use for this protocol, with the type of its values."""
    types: dict[str, FieldType] = {}
    for spec in protocol.all_fields():
        element = spec.of if spec.of is not None else spec
        if spec.type == "map" and spec.key is not None and spec.value is not None:
            # A map's keys are data, so each entry is two fields, as Wireshark shows it.
            types.setdefault(spec.name, FieldType("any"))
            for part in (spec.key, spec.value):
                enum = protocol.enums[part.enum] if part.enum else None
                types.setdefault(f"{spec.name}.{part.name}", FieldType(_kind(part), enum))
            continue
        if spec.type == "struct" or element.type == "struct":
            types.setdefault(spec.name, FieldType("any"))
            continue
        enum = protocol.enums[element.enum] if element.enum else None
        types[spec.name] = FieldType(_kind(element), enum)
    return types | FRAME_NAMES


def hook_names(protocol: Protocol) -> frozenset[str]:
    """Names only an expanded frame has: what hooks add below the headers."""
    names: set[str] = set()

    def walk(specs: tuple[FieldSpec, ...]) -> None:
        for spec in specs:
            names.add(spec.name)
            walk(spec.fields)
            if spec.of is not None:
                walk(spec.of.fields)

    for hook in protocol.hooks.values():
        walk(hook.adds)
    return frozenset(names)


def map_names(protocol: Protocol) -> frozenset[str]:
    """Names whose values are maps: their keys are data, not field names."""
    return frozenset(spec.name for spec in protocol.all_fields() if spec.type == "map")


def frame_lookup(
    frame: Frame, maps: frozenset[str], wanted: frozenset[str] | None = None
) -> Callable[[str], list[Any]]:
    """The values a frame has for each name, gathered once on first use.

    wanted: the only names that will be asked for; fields are not walked when none of them
    is a field (a filter on the command alone costs no walk).
    """
    index: dict[str, list[Any]] | None = None

    def lookup(name: str) -> list[Any]:
        nonlocal index
        if index is None:
            index = {}
            walk = wanted is None or not wanted <= FRAME_NAMES.keys()
            for key, value in _frame_items(frame, maps, walk):
                if wanted is None or key in wanted:
                    index.setdefault(key, []).append(value)
        return index.get(name, [])

    return lookup


def _frame_items(frame: Frame, maps: frozenset[str], walk: bool = True) -> Iterator[tuple[str, Any]]:
    yield "frame", frame.number
    yield "ts", frame.ts
    if frame.src is not None:
        yield "src", str(frame.src)
    if frame.dst is not None:
        yield "dst", str(frame.dst)
    if frame.conn:
        yield "connection", frame.conn
    yield "protocol", frame.protocol
    yield "key", frame.key
    yield "kind", frame.kind
    if frame.command is not None:
        yield "command", frame.command
    yield "version", frame.version
    yield "size", frame.size
    if frame.incomplete is not None:
        yield "incomplete", frame.incomplete
    for note in frame.expert:  # any note, as Wireshark's expert fields match
        yield "severity", note.severity
        yield "group", note.group
        yield "expert", note.message
    if not walk:
        return
    yield from _items(frame.fields, maps)
    if frame.links:
        yield from _items(frame.links, maps)


def _items(values: dict[str, Any], maps: frozenset[str]) -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        yield from _item(key, value, maps)


def _item(key: str, value: Any, maps: frozenset[str]) -> Iterator[tuple[str, Any]]:
    as_json = getattr(value, "as_json", None)
    if as_json is not None:
        value = as_json()
    if isinstance(value, dict):
        yield key, value
        if key not in maps:
            yield from _items(value, maps)
            return
        for entry_key, entry_value in value.items():
            yield f"{key}.key", entry_key
            yield f"{key}.value", entry_value
    elif isinstance(value, list):
        for element in value:
            yield from _item(key, element, maps)
    else:
        yield key, value  # bytes stay views: the filter copies only what it compares


class FrameFilter:
    """A compiled --filter, applied to frames (expanding them first when it names hook fields)."""

    def __init__(self, decoder: Decoder, text: str) -> None:
        protocol = decoder.protocol
        self.decoder = decoder
        self.filter = compile_filter(text, field_types(protocol), protocol.name)
        self.expand = bool(self.filter.names & hook_names(protocol))
        self.maps = map_names(protocol)

    def __call__(self, frame: Frame) -> bool:
        if self.expand:
            self.decoder.expand(frame)
        return self.filter(frame_lookup(frame, self.maps, self.filter.names))
