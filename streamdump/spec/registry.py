"""The decoder registry: loads and validates the protocol specs in dissectors/.

A spec is data (YAML). This module turns it into immutable objects (Protocol,
Command, Layout, FieldSpec) and rejects a bad spec with an error that names the
file and the entry. Nothing here decodes bytes; see layout.py for that.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

INT_TYPES: dict[str, tuple[str, int, bool]] = {
    # name: (struct code, width, signed)
    "int8": ("b", 1, True),
    "int16": ("h", 2, True),
    "int32": ("i", 4, True),
    "int64": ("q", 8, True),
    "uint8": ("B", 1, False),
    "uint16": ("H", 2, False),
    "uint32": ("I", 4, False),
    "uint64": ("Q", 8, False),
}
COMPOUND_TYPES = {"string", "bytes", "raw", "array", "map", "hook"}
# Types that only describe what hooks add to a decoded frame; no wire layout uses them.
HOOK_OUTPUT_TYPES = {"bool", "amqp", "float"}
KINDS = ("request", "response", "command")
# Names every frame has outside its layout's fields (JSON keys, filter names, plugin fields).
FRAME_NAMES = frozenset(
    {
        "frame", "ts", "src", "dst", "connection", "protocol", "kind", "command",
        "incomplete", "severity", "group", "expert", "links", "payload", "trailing",
    }
)  # fmt: skip
# packet: a packet number (the Wireshark plugin makes it a link; request_/response_ say which way).
DISPLAYS = {"hex", "time_ms", "packet", "request_packet", "response_packet"}
FIELD_ATTRS = {
    "type",
    "enum",
    "doc",
    "info",
    "display",
    "since",
    "when",
    "optional",
    "of",
    "key",
    "value",
    "size",
    "increasing",
    "hook",
}
COMMAND_ATTRS = {"key", "from", "versions", "doc", *KINDS}
HOOK_ATTRS = {"doc", "adds", "value"}
CONVERSATION_ATTRS = {
    "correlation",
    "status",
    "tune",
    "close",
    "close_hints",
    "authenticate",
    "setup",
    "announcement",
    "peer_properties",
    "versions",
    "sessions",
    "acks",
    "credit",
    "links",
}
SESSION_ATTRS = {"id", "open", "close", "keep", "used_by"}
ACK_ATTRS = {"session", "noun", "send", "confirm", "fail", "fail_code"}
CREDIT_ATTRS = {"session", "grant", "spend", "refusal"}
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


class SpecError(ValueError):
    """A spec file is malformed; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    type: str  # an INT_TYPES name, a COMPOUND_TYPES name, or "struct"
    enum: str | None = None
    doc: str | None = None
    info: str | None = None
    display: str | None = None
    since: int = 1
    when: tuple[str, tuple[int, ...]] | None = None
    optional: bool = False
    size: int | str | None = None  # raw: fixed size or sibling field name
    of: FieldSpec | None = None  # array element
    key: FieldSpec | None = None  # map key
    value: FieldSpec | None = None  # map value
    struct: str | None = None  # struct name when type == "struct"
    fields: tuple[FieldSpec, ...] = ()  # struct members
    # Grows from one array element to the next (e.g. publishing ids); lets elements found
    # after a gap be told from bytes that only look like elements.
    increasing: bool = False
    # The named hook (streamdump/hooks/) that reads (type hook) or interprets (raw) this field.
    hook: str | None = None


@dataclass(frozen=True, slots=True)
class HookSpec:
    """A piece of decoding the grammar cannot say, and the fields it adds beside its field."""

    name: str
    doc: str | None
    adds: tuple[FieldSpec, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """The fields of one command in one direction (kind), for every version."""

    command: str
    kind: str
    key: int  # wire key, response bit included
    fields: tuple[FieldSpec, ...]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    key: int
    sender: str
    versions: tuple[int, ...]
    doc: str | None
    layouts: Mapping[str, Layout]  # kind -> layout


@dataclass(frozen=True, slots=True)
class Wiring:
    transport: str
    ports: tuple[int, ...]
    size_type: str
    max_size: int


@dataclass(frozen=True, slots=True)
class Ref:
    """A field named as Command.field or Command.array.field (each element's field)."""

    command: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return ".".join((self.command, *self.path))


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """An id a request opens (e.g. a publisher id) that later frames refer to."""

    name: str
    id: str
    open: str
    close: str | None
    keep: tuple[str, ...]
    used_by: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AckSpec:
    """Items of one frame acknowledged one by one by later frames of the other side."""

    name: str
    session: str
    send: Ref
    confirm: Ref
    fail: Ref | None
    fail_code: Ref | None
    noun: str = "item"  # what one item is, for diagnoses ("3 messages never confirmed")


@dataclass(frozen=True, slots=True)
class CreditSpec:
    session: str
    grant: tuple[Ref, ...]
    spend: str
    refusal: str | None


@dataclass(frozen=True, slots=True)
class Conversation:
    """How frames of one connection relate: the spec's conversation section."""

    correlation: str | None = None
    status: str | None = None
    ok: frozenset[int] = frozenset()
    routine: frozenset[int] = frozenset()
    tune: Ref | None = None  # Tune.frame_max; heartbeat in tune_heartbeat
    tune_heartbeat: str | None = None
    close: Ref | None = None  # Close.closing_code; reason in close_reason
    close_reason: str | None = None
    close_hints: Mapping[int, str] = field(default_factory=dict)
    authenticate: str | None = None
    setup: frozenset[str] = frozenset()
    announcement: Ref | None = None  # MetadataUpdate.code; its subject in announcement_about
    announcement_about: str | None = None
    peer_properties: Ref | None = None
    versions: Ref | None = None
    sessions: Mapping[str, SessionSpec] = field(default_factory=dict)
    acks: Mapping[str, AckSpec] = field(default_factory=dict)
    credit: CreditSpec | None = None
    links: tuple[FieldSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    title: str
    source: str
    package: str | None  # the Python package with the protocol's code (hooks, framing, messages)
    wiring: Wiring
    header: tuple[FieldSpec, ...]
    response_bit: int
    enums: Mapping[str, Mapping[int, str]]
    structs: Mapping[str, tuple[FieldSpec, ...]]
    commands: Mapping[str, Command]
    by_key: Mapping[int, Command] = field(repr=False)
    hooks: Mapping[str, HookSpec] = field(default_factory=dict)
    conversation: Conversation = field(default_factory=Conversation)

    def layout_for(self, wire_key: int) -> Layout | None:
        """The layout a wire key selects, or None when the registry has none."""
        command = self.by_key.get(wire_key & ~self.response_bit)
        if command is None:
            return None
        if wire_key & self.response_bit:
            return command.layouts.get("response")
        return command.layouts.get("request") or command.layouts.get("command")

    def field_at(self, ref: Ref, kind: str | None = None) -> FieldSpec | None:
        """The field a Command.path names (in the given layout kind, else the first that has it)."""
        command = self.commands.get(ref.command)
        if command is None:
            return None
        for layout in command.layouts.values():
            if kind is None or layout.kind == kind:
                spec = _follow(layout.fields, list(ref.path))
                if spec is not None:
                    return spec
        return None

    def all_fields(self) -> Iterator[FieldSpec]:
        """Every field of every layout and struct, depth first (for name checks and generators)."""
        seen_structs: set[str] = set()

        def walk(specs: tuple[FieldSpec, ...]) -> Iterator[FieldSpec]:
            for spec in specs:
                yield spec
                for child in (spec.of, spec.key, spec.value):
                    if child is not None:
                        yield from walk((child,))
                if spec.struct and spec.struct not in seen_structs:
                    seen_structs.add(spec.struct)
                    yield from walk(spec.fields)

        for command in self.commands.values():
            for layout in command.layouts.values():
                yield from walk(layout.fields)
        for hook in self.hooks.values():
            yield from walk(hook.adds)
        yield from walk(self.conversation.links)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise SpecError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


class _Builder:
    """Builds one Protocol from parsed YAML, tracking where in the file it is for errors."""

    def __init__(self, source: str, doc: Mapping[str, Any], package: str | None = None) -> None:
        self.source = source
        self.package = package
        self.doc = doc
        self.enums: dict[str, dict[int, str]] = {}
        self.raw_structs: Mapping[str, Any] = {}
        self.structs: dict[str, tuple[FieldSpec, ...]] = {}
        self.building: set[str] = set()
        self.field_types: dict[str, tuple[str, str]] = {}  # name -> (type signature, where)
        self.raw_hook_structs: Mapping[str, Any] = {}
        self.hook_structs: dict[str, tuple[FieldSpec, ...]] = {}
        self.raw_hooks: Mapping[str, Any] = {}
        self.in_hook_output = False

    def fail(self, where: str, message: str) -> SpecError:
        return SpecError(f"{self.source}: {where}: {message}")

    def build(self) -> Protocol:
        doc = self.doc
        for required in ("protocol", "title", "wiring", "header", "commands"):
            if required not in doc:
                raise self.fail("top level", f"missing '{required}'")
        name = doc["protocol"]
        if not isinstance(name, str) or not SNAKE.match(name):
            raise self.fail("protocol", f"name {name!r} must be snake_case")
        self.enums = self._enums(doc.get("enums") or {})
        self.raw_structs = doc.get("structs") or {}
        if not isinstance(self.raw_structs, Mapping):
            raise self.fail("structs", "must be a mapping of struct name to field list")
        raw_hooks = doc.get("hooks") or {}
        if not isinstance(raw_hooks, Mapping):
            raise self.fail("hooks", "must be a mapping of hook name to definition")
        self.raw_hooks = raw_hooks
        self.raw_hook_structs = doc.get("hook_structs") or {}
        if not isinstance(self.raw_hook_structs, Mapping):
            raise self.fail("hook_structs", "must be a mapping of struct name to field list")
        clash = set(self.raw_hook_structs) & set(self.raw_structs)
        if clash:
            raise self.fail("hook_structs", f"{sorted(clash)} also defined under structs")
        for struct_name in self.raw_structs:
            self._struct(struct_name, f"structs.{struct_name}")
        hooks = self._hooks(raw_hooks)
        header = self._fields(doc["header"], "header", allow_conditions=False)
        commands = self._commands(doc["commands"])
        by_key: dict[int, Command] = {}
        for command in commands.values():
            if command.key in by_key:
                raise self.fail(
                    f"commands.{command.name}",
                    f"key 0x{command.key:04x} already used by {by_key[command.key].name}",
                )
            by_key[command.key] = command
        conversation = self._conversation(doc.get("conversation") or {}, commands)
        return Protocol(
            name=name,
            title=str(doc["title"]),
            source=self.source,
            package=self.package,
            wiring=self._wiring(doc["wiring"], commands),
            header=header,
            response_bit=int(doc.get("response_bit", 0x8000)),
            enums=self.enums,
            structs=self.structs,
            commands=commands,
            by_key=by_key,
            hooks=hooks,
            conversation=conversation,
        )

    def _hooks(self, raw: Mapping[str, Any]) -> dict[str, HookSpec]:
        hooks: dict[str, HookSpec] = {}
        self.in_hook_output = True
        try:
            for name, body in raw.items():
                where = f"hooks.{name}"
                if not isinstance(name, str) or not SNAKE.match(name):
                    raise self.fail(where, "hook names must be snake_case")
                if not isinstance(body, Mapping):
                    raise self.fail(where, "must be a mapping with 'doc' and 'adds'")
                unknown = set(body) - HOOK_ATTRS
                if unknown:
                    raise self.fail(where, f"unknown attribute(s) {sorted(unknown)}")
                adds = self._fields(body.get("adds") or [], f"{where}.adds", allow_conditions=False)
                hooks[name] = HookSpec(name=name, doc=body.get("doc"), adds=adds)
            for struct_name in self.raw_hook_structs:
                self._struct(struct_name, f"hook_structs.{struct_name}")
        finally:
            self.in_hook_output = False
        return hooks

    # ------------------------------------------------------------------ conversation

    def _conversation(self, raw: Any, commands: Mapping[str, Command]) -> Conversation:
        where = "conversation"
        if not isinstance(raw, Mapping):
            raise self.fail(where, "must be a mapping")
        unknown = set(raw) - CONVERSATION_ATTRS
        if unknown:
            raise self.fail(where, f"unknown attribute(s) {sorted(unknown)}")
        if not raw:
            return Conversation()
        kw: dict[str, Any] = {}
        correlation = raw.get("correlation")
        if correlation is not None:
            if not any(f.name == correlation for f in self._layout_fields(commands)):
                raise self.fail(f"{where}.correlation", f"no layout has a field {correlation!r}")
            kw["correlation"] = correlation
        status = raw.get("status")
        if status is not None:
            if not isinstance(status, Mapping) or "field" not in status:
                raise self.fail(f"{where}.status", "must be {field: name, ok: [codes], routine: [codes]}")
            fields = self._layout_fields(commands)
            if not any(f.name == status["field"] and f.type in INT_TYPES for f in fields):
                raise self.fail(f"{where}.status", f"no layout has an integer field {status['field']!r}")
            codes = {}
            for name in ("ok", "routine"):
                values = status.get(name) or []
                if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
                    raise self.fail(f"{where}.status.{name}", "must be a list of integers")
                codes[name] = frozenset(values)
            kw |= {"status": status["field"], **codes}
        for name, second in (("tune", "heartbeat"), ("close", "reason"), ("announcement", "about")):
            body = raw.get(name)
            if body is None:
                continue
            first = {"tune": "frame_max", "close": "code", "announcement": "code"}[name]
            if not isinstance(body, Mapping) or set(body) != {"command", first, second}:
                raise self.fail(f"{where}.{name}", f"must be {{command, {first}, {second}}}")
            ref = self._ref(f"{body['command']}.{body[first]}", f"{where}.{name}", commands, int_only=True)
            self._ref(f"{body['command']}.{body[second]}", f"{where}.{name}", commands)
            kw[name] = ref
            kw[f"{name}_{second}"] = body[second]
        authenticate = raw.get("authenticate")
        if authenticate is not None:
            self._command(authenticate, f"{where}.authenticate", commands)
            kw["authenticate"] = authenticate
        hints = raw.get("close_hints") or {}
        if not isinstance(hints, Mapping) or not all(
            isinstance(k, int) and isinstance(v, str) for k, v in hints.items()
        ):
            raise self.fail(f"{where}.close_hints", "must map closing codes to text")
        kw["close_hints"] = dict(hints)
        setup = raw.get("setup") or []
        for name in setup:
            self._command(name, f"{where}.setup", commands)
        kw["setup"] = frozenset(setup)
        for name in ("peer_properties", "versions"):
            if raw.get(name) is not None:
                kw[name] = self._ref(raw[name], f"{where}.{name}", commands)
        sessions: dict[str, SessionSpec] = {}
        for name, body in (raw.get("sessions") or {}).items():
            at = f"{where}.sessions.{name}"
            if not isinstance(body, Mapping) or not {"id", "open", "used_by"} <= set(body):
                raise self.fail(at, "needs id, open and used_by")
            if set(body) - SESSION_ATTRS:
                raise self.fail(at, f"unknown attribute(s) {sorted(set(body) - SESSION_ATTRS)}")
            users = tuple(body["used_by"])
            for command in (body["open"], *([body["close"]] if body.get("close") else []), *users):
                self._ref(f"{command}.{body['id']}", at, commands, int_only=True)
            keep = tuple(body.get("keep") or ())
            for kept in keep:
                self._ref(f"{body['open']}.{kept}", at, commands)
            sessions[name] = SessionSpec(name, body["id"], body["open"], body.get("close"), keep, users)
        kw["sessions"] = sessions
        acks: dict[str, AckSpec] = {}
        for name, body in (raw.get("acks") or {}).items():
            at = f"{where}.acks.{name}"
            if not isinstance(body, Mapping) or not {"session", "send", "confirm"} <= set(body):
                raise self.fail(at, "needs session, send and confirm")
            if set(body) - ACK_ATTRS:
                raise self.fail(at, f"unknown attribute(s) {sorted(set(body) - ACK_ATTRS)}")
            if body["session"] not in sessions:
                raise self.fail(at, f"unknown session {body['session']!r}")
            refs = {
                key: self._ref(body[key], f"{at}.{key}", commands, int_only=True) if body.get(key) else None
                for key in ("send", "confirm", "fail", "fail_code")
            }
            acks[name] = AckSpec(
                name,
                body["session"],
                **refs,
                noun=str(body.get("noun", "item")),  # type: ignore[arg-type]
            )
        kw["acks"] = acks
        credit = raw.get("credit")
        if credit is not None:
            at = f"{where}.credit"
            if not isinstance(credit, Mapping) or not {"session", "grant", "spend"} <= set(credit):
                raise self.fail(at, "needs session, grant and spend")
            if set(credit) - CREDIT_ATTRS:
                raise self.fail(at, f"unknown attribute(s) {sorted(set(credit) - CREDIT_ATTRS)}")
            if credit["session"] not in sessions:
                raise self.fail(at, f"unknown session {credit['session']!r}")
            grants = tuple(self._ref(g, f"{at}.grant", commands, int_only=True) for g in credit["grant"])
            self._command(credit["spend"], f"{at}.spend", commands)
            if credit.get("refusal") is not None:
                self._command(credit["refusal"], f"{at}.refusal", commands)
            kw["credit"] = CreditSpec(credit["session"], grants, credit["spend"], credit.get("refusal"))
        saved, self.in_hook_output = self.in_hook_output, True
        try:
            kw["links"] = self._fields(raw.get("links") or [], f"{where}.links", allow_conditions=False)
        finally:
            self.in_hook_output = saved
        return Conversation(**kw)

    @staticmethod
    def _layout_fields(commands: Mapping[str, Command]) -> Iterator[FieldSpec]:
        for command in commands.values():
            for layout in command.layouts.values():
                yield from layout.fields

    def _command(self, name: Any, where: str, commands: Mapping[str, Command]) -> Command:
        command = commands.get(name) if isinstance(name, str) else None
        if command is None:
            raise self.fail(where, f"unknown command {name!r}")
        return command

    def _ref(self, text: Any, where: str, commands: Mapping[str, Command], *, int_only: bool = False) -> Ref:
        """Check that Command.path names a field of one of the command's layouts."""
        parts = str(text).split(".")
        command = self._command(parts[0], where, commands)
        if len(parts) < 2:
            raise self.fail(where, f"{text!r} must be Command.field")
        for layout in command.layouts.values():
            spec = _follow(layout.fields, parts[1:])
            if spec is not None:
                if int_only and spec.type not in INT_TYPES:
                    raise self.fail(where, f"{text!r} is {spec.type}, not an integer field")
                return Ref(command.name, tuple(parts[1:]))
        raise self.fail(where, f"{text!r}: {command.name} has no such field")

    def _wiring(self, raw: Any, commands: Mapping[str, Command]) -> Wiring:
        if not isinstance(raw, Mapping):
            raise self.fail("wiring", "must be a mapping")
        framing = raw.get("framing") or {}
        size_type = framing.get("size", "uint32")
        if size_type not in INT_TYPES:
            raise self.fail("wiring.framing.size", f"unknown type {size_type!r}")
        ports = raw.get("ports") or []
        if not all(isinstance(p, int) and 0 < p < 65536 for p in ports):
            raise self.fail("wiring.ports", f"ports must be TCP port numbers, got {ports!r}")
        if "frame_max" in framing:
            raise self.fail(
                "wiring.framing.frame_max", "the negotiated frame size belongs under conversation.tune"
            )
        return Wiring(
            transport=str(raw.get("transport", "tcp")),
            ports=tuple(ports),
            size_type=size_type,
            max_size=int(framing.get("max_size", 64 << 20)),
        )

    def _enums(self, raw: Any) -> dict[str, dict[int, str]]:
        if not isinstance(raw, Mapping):
            raise self.fail("enums", "must be a mapping")
        enums: dict[str, dict[int, str]] = {}
        for enum_name, values in raw.items():
            if not isinstance(values, Mapping) or not values:
                raise self.fail(f"enums.{enum_name}", "must map integers to names")
            for value, label in values.items():
                if not isinstance(value, int) or isinstance(value, bool):
                    raise self.fail(f"enums.{enum_name}", f"value {value!r} is not an integer")
                if not isinstance(label, str):
                    raise self.fail(f"enums.{enum_name}.{value}", f"label {label!r} is not a string")
            enums[enum_name] = dict(values)
        return enums

    def _struct(self, name: str, where: str) -> tuple[FieldSpec, ...]:
        # What hooks add is described apart from the wire grammar: a wire layout cannot use it.
        cache = self.hook_structs if self.in_hook_output and name in self.raw_hook_structs else self.structs
        if name in cache:
            return cache[name]
        if name in self.building:
            raise self.fail(where, f"struct {name!r} contains itself")
        if name in self.raw_hook_structs and self.in_hook_output:
            body, path = self.raw_hook_structs[name], f"hook_structs.{name}"
        elif name in self.raw_structs:
            body, path = self.raw_structs[name], f"structs.{name}"
        else:
            raise self.fail(where, f"unknown type {name!r}")
        self.building.add(name)
        fields = self._fields(body, path, allow_conditions=True)
        self.building.discard(name)
        cache[name] = fields
        return fields

    def _commands(self, raw: Any) -> dict[str, Command]:
        if not isinstance(raw, Mapping):
            raise self.fail("commands", "must be a mapping of command name to definition")
        commands: dict[str, Command] = {}
        for name, body in raw.items():
            where = f"commands.{name}"
            if not isinstance(body, Mapping):
                raise self.fail(where, "must be a mapping")
            unknown = set(body) - COMMAND_ATTRS
            if unknown:
                raise self.fail(where, f"unknown attribute(s) {sorted(unknown)}")
            key = body.get("key")
            if not isinstance(key, int) or not 0 < key < 0x8000:
                raise self.fail(where, f"key {key!r} must be an integer in 0x0001..0x7fff")
            versions = tuple(body.get("versions") or [1])
            if not all(isinstance(v, int) and v >= 1 for v in versions) or list(versions) != sorted(
                set(versions)
            ):
                raise self.fail(where, f"versions {versions!r} must be increasing positive integers")
            if "request" in body and "command" in body:
                raise self.fail(where, "a command has either a request or a one-way command layout")
            layouts: dict[str, Layout] = {}
            for kind in KINDS:
                if kind not in body:
                    continue
                fields = self._fields(body[kind] or [], f"{where}.{kind}", allow_conditions=True)
                for spec in fields:
                    if spec.since not in versions and spec.since != 1:
                        raise self.fail(f"{where}.{kind}.{spec.name}", f"since {spec.since} is not a version")
                wire_key = key | 0x8000 if kind == "response" else key
                layouts[kind] = Layout(command=name, kind=kind, key=wire_key, fields=fields)
            if not layouts:
                raise self.fail(where, "defines no request, response or command layout")
            commands[name] = Command(
                name=name,
                key=key,
                sender=str(body.get("from", "client")),
                versions=versions,
                doc=body.get("doc"),
                layouts=layouts,
            )
        return commands

    def _fields(self, raw: Any, where: str, *, allow_conditions: bool) -> tuple[FieldSpec, ...]:
        if not isinstance(raw, list):
            raise self.fail(where, "must be a list of fields")
        fields: list[FieldSpec] = []
        names: set[str] = set()
        for item in raw:
            if not isinstance(item, Mapping) or len(item) != 1:
                raise self.fail(where, f"field {item!r} must be a one-entry mapping 'name: type'")
            ((name, body),) = item.items()
            if name in names:
                raise self.fail(f"{where}.{name}", "duplicate field name")
            spec = self._field(str(name), body, f"{where}.{name}", siblings=fields)
            if not allow_conditions and (spec.when or spec.optional):
                raise self.fail(f"{where}.{name}", "conditions are not allowed here")
            names.add(spec.name)
            fields.append(spec)
        return tuple(fields)

    def _field(
        self, name: str, body: Any, where: str, siblings: list[FieldSpec], *, element: bool = False
    ) -> FieldSpec:
        if not SNAKE.match(name):
            raise self.fail(where, f"field name {name!r} must be snake_case")
        attrs: Mapping[str, Any] = {"type": body} if isinstance(body, str) else body
        if not isinstance(attrs, Mapping) or "type" not in attrs:
            raise self.fail(where, "needs a type")
        unknown = set(attrs) - FIELD_ATTRS
        if unknown:
            raise self.fail(where, f"unknown attribute(s) {sorted(unknown)}")
        type_name = attrs["type"]
        kw: dict[str, Any] = {}
        sibling_by_name = {s.name: s for s in siblings}
        if type_name in INT_TYPES:
            pass
        elif type_name == "array":
            if "of" not in attrs:
                raise self.fail(where, "an array needs 'of'")
            kw["of"] = self._field(name, attrs["of"], f"{where}.of", siblings=[], element=True)
        elif type_name == "map":
            if "key" not in attrs or "value" not in attrs:
                raise self.fail(where, "a map needs 'key' and 'value'")
            kw["key"] = self._field("key", attrs["key"], f"{where}.key", siblings=[], element=True)
            kw["value"] = self._field("value", attrs["value"], f"{where}.value", siblings=[], element=True)
        elif type_name == "raw":
            size = attrs.get("size")
            if isinstance(size, str):
                ref = sibling_by_name.get(size)
                if ref is None or ref.type not in INT_TYPES:
                    raise self.fail(where, f"size refers to {size!r}, which is not an earlier integer field")
            elif not isinstance(size, int) or size < 0:
                raise self.fail(where, "raw needs 'size': a byte count or an earlier integer field")
            kw["size"] = size
        elif type_name in ("string", "bytes"):
            pass
        elif type_name in HOOK_OUTPUT_TYPES:
            if not self.in_hook_output:
                raise self.fail(where, f"type {type_name!r} only describes what a hook adds")
        elif type_name == "hook":
            if "hook" not in attrs:
                raise self.fail(where, "a hook field needs 'hook: name'")
            hook_body = self.raw_hooks.get(attrs["hook"])
            value_struct = hook_body.get("value") if isinstance(hook_body, Mapping) else None
            if value_struct is not None and not isinstance(value_struct, str):
                raise self.fail(f"hooks.{attrs['hook']}.value", "must name a struct under hook_structs")
            if value_struct is not None:
                # The shape of the value the hook reads, so its names are the registry's too.
                saved, self.in_hook_output = self.in_hook_output, True
                try:
                    kw["fields"] = self._struct(value_struct, f"hooks.{attrs['hook']}.value")
                finally:
                    self.in_hook_output = saved
                kw["struct"] = value_struct
        elif isinstance(type_name, str):
            kw["fields"] = self._struct(type_name, where)
            kw["struct"] = type_name
            type_name = "struct"
        else:
            raise self.fail(where, f"unknown type {type_name!r}")
        if "size" in attrs and attrs["type"] != "raw":
            raise self.fail(where, "'size' applies to raw fields only")
        enum = attrs.get("enum")
        if enum is not None:
            if enum not in self.enums:
                raise self.fail(where, f"unknown enum {enum!r}")
            if type_name not in INT_TYPES:
                raise self.fail(where, "an enum needs an integer field")
        display = attrs.get("display")
        if display is not None and display not in DISPLAYS:
            raise self.fail(where, f"unknown display {display!r} (known: {sorted(DISPLAYS)})")
        when = attrs.get("when")
        if when is not None:
            if not isinstance(when, Mapping) or len(when) != 1:
                raise self.fail(where, "'when' must be {sibling_field: [values]}")
            ((ref_name, values),) = when.items()
            ref = sibling_by_name.get(ref_name)
            if ref is None or ref.type not in INT_TYPES:
                raise self.fail(
                    where, f"'when' refers to {ref_name!r}, which is not an earlier integer field"
                )
            if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
                raise self.fail(where, "'when' values must be a list of integers")
            when = (ref_name, tuple(values))
        hook = attrs.get("hook")
        if hook is not None and element:
            raise self.fail(where, "hooks apply to named fields, not to array elements or map entries")
        if hook is not None:
            if type_name not in ("raw", "hook"):
                raise self.fail(where, "'hook' applies to raw and hook fields only")
            if hook not in self.raw_hooks:
                raise self.fail(where, f"unknown hook {hook!r} (declare it under hooks:)")
        increasing = attrs.get("increasing", False)
        if increasing is not False and (increasing is not True or type_name not in INT_TYPES):
            raise self.fail(where, "'increasing: true' applies to integer fields only")
        since = attrs.get("since", 1)
        if not isinstance(since, int) or since < 1:
            raise self.fail(where, f"since {since!r} must be a positive integer")
        spec = FieldSpec(
            name=name,
            type=type_name,
            enum=enum,
            doc=attrs.get("doc"),
            info=attrs.get("info"),
            display=display,
            since=since,
            when=when,
            optional=bool(attrs.get("optional", False)),
            increasing=increasing,
            hook=hook,
            **kw,
        )
        if not element:
            self._check_consistent_name(spec, where)
        return spec

    def _check_consistent_name(self, spec: FieldSpec, where: str) -> None:
        if spec.name in FRAME_NAMES:
            raise self.fail(where, f"field name {spec.name!r} is taken by the frame itself (JSON, filters)")
        # Filters and the Wireshark plugin use one flat name per field
        # ("rabbitmq_stream.offset"), so a name must mean one type everywhere.
        signature = spec.type if spec.type != "struct" else f"struct {spec.struct}"
        if spec.of is not None:
            signature += f" of {spec.of.type if spec.of.type != 'struct' else spec.of.struct}"
        if spec.key is not None and spec.value is not None:
            signature += f" {spec.key.type}->{spec.value.type}"
        known = self.field_types.get(spec.name)
        if known is None:
            self.field_types[spec.name] = (signature, where)
        elif known[0] != signature:
            raise self.fail(where, f"field {spec.name!r} is {signature} here but {known[0]} at {known[1]}")


def _follow(specs: tuple[FieldSpec, ...], path: list[str]) -> FieldSpec | None:
    """The field a dotted path names, stepping into structs and array elements."""
    spec = next((s for s in specs if s.name == path[0]), None)
    while spec is not None and spec.of is not None:
        spec = spec.of
    if spec is None or len(path) == 1:
        return spec
    return _follow(spec.fields, path[1:])


def load_spec(
    path: Path | str, text: str | None = None, *, package: str | None = None, source: str | None = None
) -> Protocol:
    """Load and validate one spec file (text may be given to load from memory).

    package: the Python package holding the protocol's code (hooks, framing, messages), if any.
    """
    path = Path(path)
    source = source or path.name
    try:
        raw = yaml.load(text if text is not None else path.read_text(encoding="utf-8"), _UniqueKeyLoader)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}".replace("\n", " ")) from None
    except OSError as exc:
        raise SpecError(f"{source}: cannot read: {exc.strerror}") from None
    if not isinstance(raw, Mapping):
        raise SpecError(f"{source}: top level must be a mapping")
    return _Builder(source, raw, package).build()


SPEC_FILE = "spec.yaml"
# Protocol folders ship inside streamdump as this package; each is a subpackage.
PACKAGE = "streamdump.dissectors"


def spec_dir() -> Path:
    """Where the protocol folders are: inside the installed package, or dissectors/ in a source tree."""
    packaged = resources.files("streamdump") / "dissectors"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent.parent / "dissectors"


@dataclass(frozen=True, slots=True)
class Registry:
    protocols: Mapping[str, Protocol]

    def get(self, name: str) -> Protocol:
        try:
            return self.protocols[name]
        except KeyError:
            known = ", ".join(sorted(self.protocols)) or "none"
            raise SpecError(f"unknown protocol {name!r} (known: {known})") from None


def load_registry(directory: Path | None = None, package: str | None = PACKAGE) -> Registry:
    """Every protocol folder's spec: DIR/<protocol>/spec.yaml, the folder named as the protocol.

    package: the Python package the folders are subpackages of (their hooks, framing and
    messages); None for folders of specs alone.
    """
    directory = directory or spec_dir()
    protocols: dict[str, Protocol] = {}
    for path in sorted(directory.glob(f"*/{SPEC_FILE}")):
        folder = path.parent.name
        source = f"{folder}/{SPEC_FILE}"
        module = f"{package}.{folder}" if package and (path.parent / "__init__.py").is_file() else None
        proto = load_spec(path, package=module, source=source)
        if proto.name != folder:
            raise SpecError(f"{source}: protocol {proto.name!r} must live in a folder of that name")
        protocols[proto.name] = proto
    if not protocols:
        raise SpecError(f"no protocol specs found in {directory} (expected <protocol>/{SPEC_FILE})")
    return Registry(protocols)


@cache
def default_registry() -> Registry:
    """The registry shipped with streamdump, loaded once per process."""
    return load_registry()
