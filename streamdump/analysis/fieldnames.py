"""The flat field names that filters, JSON output and the Wireshark plugin share.

A name means one type everywhere in a spec (the registry checks that), so a filter can
say `stream` without saying where: a Subscribe's field, a hook's record or the stream the
conversation tracker linked to a Deliver. This module derives the names and their types
from the registry, and gathers every value a frame has for a name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from streamdump.analysis.filter import FieldType, Filter, FilterError, compile_filter, nothing
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.spec.registry import INT_TYPES, FieldSpec, Protocol
from streamdump.wire.frame import Frame

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
    kinds = {"string": "str", "bytes": "bytes", "raw": "bytes", "bool": "bool", "float": "float"}
    return kinds.get(spec.type, "str" if spec.type in ("ipv4", "ipv6") else "any")


def _names(protocol: Protocol, spec: FieldSpec) -> dict[int, str] | None:
    """The value names a filter may use for a field: its enum's, and its responses' too."""
    names: dict[int, str] = {}
    for enum in (spec.enum, spec.response_enum):
        if enum == "commands":
            names |= {c.key: c.name for c in protocol.commands.values() if isinstance(c.key, int)}
        elif enum is not None:
            names |= protocol.enums[enum]
    return names or None


def field_types(protocol: Protocol) -> dict[str, FieldType]:
    """Every name a filter may use for this protocol, with the type of its values."""
    types: dict[str, FieldType] = {}
    for spec in protocol.all_fields():
        element = spec.of if spec.of is not None else spec
        if spec.type == "map" and spec.key is not None and spec.value is not None:
            # A map's keys are data, so each entry is two fields, as Wireshark shows it.
            types.setdefault(spec.name, FieldType("any"))
            for part in (spec.key, spec.value):
                types.setdefault(f"{spec.name}.{part.name}", FieldType(_kind(part), _names(protocol, part)))
            continue
        if spec.type == "struct" or element.type == "struct" or element.fields:
            types.setdefault(spec.name, FieldType("any"))
            continue
        types[spec.name] = FieldType(_kind(element), _names(protocol, element))
    return types | FRAME_NAMES


def hook_names(protocol: Protocol) -> frozenset[str]:
    """Names only an expanded frame has: what hooks add below the headers."""
    return frozenset(name for hook in protocol.hooks.values() for name in _flat_names(hook.adds))


def messages_declared(protocol: Protocol) -> list[FieldSpec]:
    """The AMQP message fields whose sections the spec declares (type amqp with `of:`), once each."""
    return list(
        {spec.name: spec for spec in protocol.all_fields() if spec.type == "amqp" and spec.fields}.values()
    )


def message_names(protocol: Protocol) -> frozenset[str]:
    """The names inside AMQP messages (and of the messages themselves), as filters use them."""
    return frozenset(name for spec in messages_declared(protocol) for name in _flat_names((spec,)))


def _flat_names(specs: tuple[FieldSpec, ...]) -> Iterator[str]:
    """Every flat name fields give filters: theirs, a map's entries, their members' and elements'."""
    for spec in specs:
        yield spec.name
        if spec.type == "map":
            yield f"{spec.name}.key"
            yield f"{spec.name}.value"
        yield from _flat_names(spec.fields)
        if spec.of is not None:
            yield from _flat_names(spec.of.fields)


def _every(frame: Frame) -> bool:
    return True


def map_names(protocol: Protocol) -> frozenset[str]:
    """Names whose values are maps: their keys are data, not field names."""
    return frozenset(spec.name for spec in protocol.all_fields() if spec.type == "map")


def entry_names(protocol: Protocol) -> dict[str, dict[str, str]]:
    """Inside AMQP messages, the keys that are not the registry's names: holder -> {key: name}.

    The AMQP codec keys sections and their fields as the AMQP spec names them; where the
    registry gives one another name (a name the frame already uses for something else),
    filters must find the value under the registry's name.
    """
    out: dict[str, dict[str, str]] = {}

    def walk(holder: str, specs: tuple[FieldSpec, ...]) -> None:
        for spec in specs:
            if spec.entry is not None and spec.entry != spec.name:
                out.setdefault(holder, {})[spec.entry] = spec.name
            if spec.fields:
                walk(spec.name, spec.fields)

    for spec in messages_declared(protocol):
        walk(spec.name, spec.fields)
    return out


class Names(NamedTuple):
    """How a frame's values map to flat names: maps (whose keys are data) and renamed keys."""

    maps: frozenset[str]
    renames: dict[str, dict[str, str]]


def names_of(protocol: Protocol) -> Names:
    return Names(map_names(protocol), entry_names(protocol))


def frame_lookup(
    frame: Frame, names: Names, wanted: frozenset[str] | None = None
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
            for key, value in _frame_items(frame, names, walk):
                if wanted is None or key in wanted:
                    index.setdefault(key, []).append(value)
        return index.get(name, [])

    return lookup


def _frame_items(frame: Frame, names: Names, walk: bool = True) -> Iterator[tuple[str, Any]]:
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
    yield from _items(frame.fields, names)
    if frame.links:
        yield from _items(frame.links, names)


def value_items(key: str, value: Any, names: Names) -> Iterator[tuple[str, Any]]:
    """Every (flat name, value) a value holds, itself under key: what a filter can name in it."""
    return _item(key, value, names)


def _items(
    values: dict[str, Any], names: Names, renamed: dict[str, str] | None = None
) -> Iterator[tuple[str, Any]]:
    for key, value in values.items():
        if renamed is not None:
            key = renamed.get(key, key)
        yield from _item(key, value, names)


def _item(key: str, value: Any, names: Names) -> Iterator[tuple[str, Any]]:
    sections = getattr(value, "section_values", None)
    if sections is not None:  # a message of sections (AMQP's): its sections by name, values as decoded
        value = sections()
    else:
        as_json = getattr(value, "as_json", None)
        if as_json is not None:
            value = as_json()
    if isinstance(value, dict):
        yield key, value
        if key not in names.maps:
            yield from _items(value, names, names.renames.get(key))
            return
        for entry_key, entry_value in value.items():
            yield f"{key}.key", entry_key
            yield f"{key}.value", entry_value
    elif isinstance(value, list):
        for element in value:
            yield from _item(key, element, names)
    else:
        yield key, value  # bytes stay views: the filter copies only what it compares


class FrameFilter:
    """A compiled --filter, applied to frames of one or several protocols.

    The filter is compiled once per protocol with that protocol's names; a name only other
    protocols have finds nothing in its frames, so `rocketmq.code == 105` keeps RocketMQ
    frames only. It is refused when no protocol can take it. Frames are expanded first
    when the filter names what hooks add.
    """

    def __init__(self, decoders: Decoder | Iterable[Decoder], text: str) -> None:
        decoders = [decoders] if isinstance(decoders, Decoder) else list(decoders)
        names = {d.protocol.name: field_types(d.protocol) for d in decoders}
        self.by_protocol: dict[str, tuple[Decoder, Filter, Callable[[Frame], bool] | None, Names]] = {}
        failures: list[FilterError] = []
        for decoder in decoders:
            protocol = decoder.protocol
            foreign = {other: frozenset(types) for other, types in names.items() if other != protocol.name}
            try:
                compiled = compile_filter(text, names[protocol.name], protocol.name, foreign)
            except FilterError as exc:
                failures.append(exc)
                compiled = nothing(text)
            expanded = compiled.names & hook_names(protocol)
            expand: Callable[[Frame], bool] | None = None
            if expanded and expanded <= message_names(protocol):
                # Only messages' insides are named: frames that carry none need no records decoded.
                expand = dissector_of(protocol).messages(protocol).carries
            elif expanded:
                expand = _every
            self.by_protocol[protocol.name] = (decoder, compiled, expand, names_of(protocol))
        if failures and not any(f.native for _, f, _, _ in self.by_protocol.values()):
            # The protocol whose names come closest says what went wrong (it has a "did you mean").
            raise next((f for f in failures if f.suggestions), failures[0])

    def __call__(self, frame: Frame) -> bool:
        entry = self.by_protocol.get(frame.protocol)
        if entry is None:
            return False
        decoder, compiled, expand, names = entry
        if expand is not None and expand(frame):
            decoder.expand(frame)
        return compiled(frame_lookup(frame, names, compiled.names))
