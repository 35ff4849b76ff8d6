"""Values from keyed objects: JSON objects, key/value text, and a header's map of entries.

Where a protocol puts named values in a keyed object rather than at byte offsets, the
spec declares the keys as the members of a struct (`entry:` names a key that differs
from the member's name). This module turns such an object into the struct's fields,
each converted to its declared type the way the protocol's servers read it ("4" is 4,
"true" is True, an enum's name is its value), and back for encoding. Keys no member
names go to the struct's `rest` map; a value that does not convert is kept as it came,
with a note. Nothing here reads bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamdump.spec.registry import INT_TYPES, KEYED_TYPES, FieldSpec
from streamdump.wire.frame import Node

# What a secret (a password, a token) shows instead of itself; an empty one stays empty.
MASKED = "********"

# A struct's specs; its members as (key, name, spec, the type of a value taken as it comes);
# their keys; and its rest map's spec (Keyed.fields).
_Plan = tuple[
    tuple[FieldSpec, ...],
    tuple[tuple[str, str, FieldSpec, type | None], ...],
    frozenset[Any],
    FieldSpec | None,
]
_ABSENT = object()


def _as_it_comes(spec: FieldSpec) -> type | None:
    """The type of a raw value that Keyed.value would hand back unchanged: an integer for an
    integer field (not a bool: type() tells them apart), a bool for a bool, a string for a string
    that is no secret."""
    if spec.type in INT_TYPES:
        return int
    if spec.type == "bool":
        return bool
    if spec.type == "string" and not spec.secret:
        return str
    return None


_ACRONYMS = {"id": "ID", "ids": "IDs", "crc": "CRC", "sasl": "SASL"}


def title(name: str) -> str:
    """Display name from a snake_case field name: correlation_id -> Correlation ID."""
    return " ".join(_ACRONYMS.get(w, w.capitalize()) for w in name.split("_"))


def key_of(spec: FieldSpec) -> str:
    return spec.entry if spec.entry is not None else spec.name


def label(spec: FieldSpec) -> str:
    """A member's tree label; the wire key in brackets when it reads otherwise (`Copy (command)`),
    unless that key is a letter that only saves bytes (RocketMQ's SEND_MESSAGE_V2 `k`): the
    field reference says those."""
    shown = title(spec.name)
    entry = spec.entry
    if (
        entry is not None
        and len(entry) > 1
        and entry.replace("_", "").lower() != spec.name.replace("_", "").lower()
    ):
        return f"{shown} ({entry})"
    return shown


class Keyed:
    """Converts keyed objects to and from one protocol's declared members."""

    def __init__(self, enums: Mapping[str, Mapping[int, str]]) -> None:
        self.enums = enums
        self.by_name = {
            name: {label: value for value, label in values.items()} for name, values in enums.items()
        }
        # Per struct (by its specs' identity, kept beside): its members as (key, spec) and its
        # rest map's spec, found once; an INFO or CONNECT frame's object is read member by member.
        self._plans: dict[int, _Plan] = {}

    # ------------------------------------------------------------------ decoding

    def fields(
        self, specs: tuple[FieldSpec, ...], obj: Mapping[Any, Any], notes: list[str]
    ) -> dict[str, Any]:
        """The declared members found in obj, converted; the rest in the rest map (if any)."""
        plan = self._plans.get(id(specs))
        if plan is None or plan[0] is not specs:
            members = tuple(
                (key_of(spec), spec.name, spec, _as_it_comes(spec)) for spec in specs if not spec.rest
            )
            rest = next((spec for spec in reversed(specs) if spec.rest), None)
            plan = self._plans[id(specs)] = (specs, members, frozenset(m[0] for m in members), rest)
        _, members, keys, rest_spec = plan
        out: dict[str, Any] = {}
        taken = 0
        get, value = obj.get, self.value
        for key, name, spec, plain in members:
            raw = get(key, _ABSENT)
            if raw is _ABSENT:
                continue
            taken += 1
            # A value already of its field's type is the value: an INFO or CONNECT object is
            # mostly such members, and each would otherwise go through value's tests.
            out[name] = raw if type(raw) is plain else value(spec, raw, notes)
        # Counted keys say whether any is left over, unless two members share a key.
        over = taken < len(obj) or len(keys) < len(members)
        left = {k: v for k, v in obj.items() if k not in keys} if over else None
        if left:
            if rest_spec is not None:
                out[rest_spec.name] = self.value(rest_spec, left, notes)
            else:
                notes.append(f"keys no field names: {', '.join(map(str, left))}")
        return out

    def value(self, spec: FieldSpec, raw: Any, notes: list[str]) -> Any:
        """One value as its declared type; kept as it came (with a note) when it is not one."""
        kind = spec.type
        if raw is None:
            return None
        if type(raw) is str and kind == "string":  # the commonest: a string that is one
            return MASKED if spec.secret and raw != "" else raw
        if kind in INT_TYPES:
            return self._int(spec, raw, notes)
        if kind == "string":
            if spec.secret and raw != "":
                return MASKED  # whatever it was, a credential is not shown
            if isinstance(raw, bool):
                return "true" if raw else "false"  # as Java's String.valueOf writes it
            return raw if isinstance(raw, str) else str(raw) if isinstance(raw, int | float) else raw
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = raw.lower() if isinstance(raw, str) else None
            if text == "true":
                return True
            if text in ("false", "0", ""):
                return False  # what the sender meant, and what Java's Boolean.parseBoolean reads
            # Decoded as the server reads it; the note keeps what the sender wrote.
            notes.append(f"{spec.name}: {raw!r} is not true or false (Java reads it as false)")
            return False
        if kind == "array" and spec.of is not None:
            if not isinstance(raw, list):
                notes.append(f"{spec.name}: expected a list, got {type(raw).__name__}")
                return raw
            return [self.value(spec.of, item, notes) for item in raw]
        if kind == "map" and spec.key is not None and spec.value is not None:
            if not isinstance(raw, Mapping):
                notes.append(f"{spec.name}: expected an object, got {type(raw).__name__}")
                return raw
            return {self.value(spec.key, k, notes): self.value(spec.value, v, notes) for k, v in raw.items()}
        if kind in ("struct", "json") and spec.fields:
            if not isinstance(raw, Mapping):
                notes.append(f"{spec.name}: expected an object, got {type(raw).__name__}")
                return raw
            return self.fields(spec.fields, raw, notes)
        if kind == "pairs" and spec.fields:
            if not isinstance(raw, str):
                return raw
            obj, duplicates = split_pairs(raw, spec.separators)
            if duplicates:
                notes.append(f"{spec.name}: keys given twice (the last counts): {', '.join(duplicates)}")
            return self.fields(spec.fields, obj, notes)
        return raw

    def _int(self, spec: FieldSpec, raw: Any, notes: list[str]) -> Any:
        if isinstance(raw, bool):
            notes.append(f"{spec.name}: {raw!r} is not a number")
            return raw
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            text = raw.strip()
            for enum in (spec.enum, spec.response_enum):
                named = self.by_name.get(enum) if enum else None
                if named is not None and text in named:
                    return named[text]
            try:
                return int(text)
            except ValueError:
                pass
            if spec.display == "name" and spec.enum:
                notes.append(f"{spec.name}: {raw!r} is not a name the spec knows")
                return raw
        notes.append(f"{spec.name}: {raw!r} is not a number")
        return raw

    # ------------------------------------------------------------------ encoding

    def obj(self, specs: tuple[FieldSpec, ...], values: Mapping[str, Any], *, text: bool) -> dict[Any, Any]:
        """The keyed object of the values. text: every value as text (a header's entries map)."""
        out: dict[Any, Any] = {}
        for spec in specs:
            value = values.get(spec.name)
            if value is None:
                continue  # absent, as servers write a null member
            if spec.rest and isinstance(value, Mapping):
                out.update(value)
                continue
            out[key_of(spec)] = self.wire(spec, value, text=text)
        return out

    def wire(self, spec: FieldSpec, value: Any, *, text: bool) -> Any:
        """One value as the keyed object carries it."""
        if value is None:
            return None
        kind = spec.type
        if kind in INT_TYPES and isinstance(value, int) and not isinstance(value, bool):
            if spec.display == "name" and spec.enum and value in self.enums.get(spec.enum, {}):
                return self.enums[spec.enum][value]
            return str(value) if text else value
        if kind == "bool" and isinstance(value, bool):
            return ("true" if value else "false") if text else value
        if kind == "array" and spec.of is not None and isinstance(value, list):
            return [self.wire(spec.of, item, text=False) for item in value]
        if kind == "map" and spec.key is not None and spec.value is not None and isinstance(value, Mapping):
            return {
                str(self.wire(spec.key, k, text=True)): self.wire(spec.value, v, text=text)
                for k, v in value.items()
            }
        if kind in ("struct", "json") and spec.fields and isinstance(value, Mapping):
            return self.obj(spec.fields, value, text=False)
        if kind == "pairs" and spec.fields and isinstance(value, Mapping):
            return join_pairs(self.obj(spec.fields, value, text=True), spec.separators)
        return value


def split_pairs(text: str, separators: tuple[str, str]) -> tuple[dict[str, str], list[str]]:
    """key/value text ("TAGS\\x01a\\x02KEYS\\x01b\\x02") as a dict, and the keys given twice."""
    between, within = separators
    out: dict[str, str] = {}
    twice: list[str] = []
    for piece in text.split(between):
        if not piece:
            continue
        key, _, value = piece.partition(within)
        if key in out:
            twice.append(key)
        out[key] = value
    return out, twice


def join_pairs(obj: Mapping[Any, Any], separators: tuple[str, str]) -> str:
    between, within = separators
    return "".join(f"{k}{within}{'' if v is None else v}{between}" for k, v in obj.items())


def value_nodes(spec: FieldSpec, value: Any, offset: int, length: int, name: str | None = None) -> Node:
    """The detail-tree node of a value decoded from a keyed object (it spans the object's bytes)."""
    node = Node(spec, name if name is not None else label(spec), offset, length, value)
    if isinstance(value, dict) and spec.fields and spec.type in KEYED_TYPES:
        node.children = member_nodes(spec.fields, value, offset, length)
    elif isinstance(value, list) and spec.of is not None:
        element = spec.of
        for index, item in enumerate(value):
            item_label = f"{title(element.struct)} [{index}]" if element.struct else f"[{index}]"
            node.children.append(value_nodes(element, item, offset, length, item_label))
    elif isinstance(value, dict) and spec.type == "map" and spec.value is not None:
        for key, item in value.items():
            node.children.append(value_nodes(spec.value, item, offset, length, str(key)))
    return node


def member_nodes(
    specs: tuple[FieldSpec, ...], values: Mapping[str, Any], offset: int, length: int
) -> list[Node]:
    return [value_nodes(spec, values[spec.name], offset, length) for spec in specs if spec.name in values]
