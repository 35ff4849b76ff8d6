"""The decoder registry: loads and validates the protocol specs in dissectors/.

A spec is data (YAML). This module turns it into immutable objects (Protocol,
Command, Layout, FieldSpec) and rejects a bad spec with an error that names the
file and the entry. Nothing here decodes bytes; see layout.py for that.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
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
# Length-prefixed text and bytes; the prefix's integer type is the field's `prefix`.
# What a length-prefixed field's prefix is when the spec does not say.
# Types whose value is a dict of a struct's members (views walk them as the struct's fields).
KEYED_TYPES = frozenset({"struct", "json", "pairs", "words", "protobuf"})
# Member types a protobuf struct may use (with arrays, maps and nested structs of them).
PROTOBUF_SCALARS = frozenset({"string", "bytes", "bool", "int32", "int64", "uint32", "uint64"})
DEFAULT_PREFIX = {"string": "int16", "bytes": "int32", "pairs": "int16", "array": "int32", "map": "int32"}
# Types that only describe what hooks add to a decoded frame; no wire layout uses them.
HOOK_OUTPUT_TYPES = {"amqp", "float"}
BYTE_ORDERS = {"big": ">", "little": "<"}
KINDS = ("request", "response", "command")
# Names every frame has outside its layout's fields (JSON keys, filter names, plugin fields).
FRAME_NAMES = frozenset(
    {
        "frame", "ts", "src", "dst", "connection", "protocol", "kind", "command",
        "incomplete", "severity", "group", "expert", "links", "payload", "trailing",
    }
)  # fmt: skip
# packet: a packet number (the Wireshark plugin makes it a link; request_/response_ say which way);
# name: text encodings (JSON, entries) write the enum name, not the number.
DISPLAYS = {"hex", "dec", "name", "time_ms", "packet", "request_packet", "response_packet"}
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
    "prefix",
    "entry",
    "bits",
    "mask",
    "const",
    "by",
    "cases",
    "default",
    "inline",
    "rest",
    "response_enum",
    "length_of",
    "separators",
    "secret",
    "tag",
}
TOP_ATTRS = {
    "protocol", "title", "short", "reference", "byte_order", "wiring", "header", "frame",
    "enums", "structs", "hooks", "hook_structs", "conversation", "commands",
}  # fmt: skip
# Wireshark's Protocol column is about as wide as its own title, "Protocol": a longer name is cut.
SHORT_MAX = 10
FRAME_ATTRS = {"key", "response", "oneway", "response_key", "entries", "layout_versions", "key_case"}
FRAMING_ATTRS = {"length", "counts", "max_size", "rule"}
COMMAND_ATTRS = {"key", "from", "versions", "doc", *KINDS}
HOOK_ATTRS = {"doc", "adds", "value"}
CONVERSATION_ATTRS = {
    "correlation",
    "status",
    "tune",
    "close",
    "close_hints",
    "ending",
    "heartbeat",
    "authenticate",
    "setup",
    "announcement",
    "peer_properties",
    "versions",
    "sessions",
    "acks",
    "credit",
    "links",
    "codes",
    "hints",
    "server",
    "patience",
    "identity",
    "replies",
    "pings",
    "limits",
    "advertises",
}
# The links the conversation tracker sets for each conversation feature a spec uses.
TRACKER_LINKS = {
    "correlation": ("request_in", "response_in", "response_time"),
    "sessions": ("opened_in",),
    "acks": ("publish_in", "confirm_time"),
    "credit": ("credit_left",),
    "replies": ("request_in", "response_in", "response_time"),
    "pings": ("request_in", "response_in", "response_time"),
}
SESSION_ATTRS = {"id", "open", "close", "close_after", "keep", "used_by", "unknown"}
ACK_ATTRS = {"session", "noun", "send", "confirm", "fail", "fail_code", "ordered"}
CREDIT_ATTRS = {"session", "grant", "spend", "refusal"}
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


class SpecError(ValueError):
    """A spec file is malformed; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    type: str  # an INT_TYPES name, another type of the spec syntax (string, map, switch...), or "struct"
    enum: str | None = None
    doc: str | None = None
    info: str | None = None
    display: str | None = None
    since: int = 1
    # Present only when an earlier sibling (or header field) has one of the values; with a
    # mask, when (sibling & mask) has one of them.
    when: tuple[str, tuple[int, ...], int | None] | None = None
    optional: bool = False
    # raw, json, switch, string, words: a fixed size, a sibling field's name, "rest", or, in text
    # protocols, "line" (to the line end, which is read too) or "word" (to a space, tab or line end;
    # the spaces and tabs after it are read too).
    size: int | str | None = None
    of: FieldSpec | None = None  # array element
    key: FieldSpec | None = None  # map key
    value: FieldSpec | None = None  # map value
    struct: str | None = None  # struct name when type == "struct"
    fields: tuple[FieldSpec, ...] = ()  # struct members
    # Grows from one array element to the next (e.g. publishing ids); lets elements found
    # after a gap be told from bytes that only look like elements.
    increasing: bool = False
    # The named hook (in the protocol package) that reads (type hook) or interprets this field.
    hook: str | None = None
    # Length-prefixed types: the integer type of the prefix ("none" for arrays and maps that
    # run to the end of what holds them), and whether it counts items or bytes.
    prefix: str | None = None
    prefix_counts: str = "items"
    # The key this field has in the keyed object holding it (JSON object, key/value text,
    # or the frame's entries map), when it differs from the name or is the only way to it.
    entry: str | None = None
    # Integer fields packing several values: one FieldSpec per part, each with a mask.
    bits: tuple[FieldSpec, ...] = ()
    mask: int | None = None
    # The value every frame must carry here (a magic number or text).
    const: int | bytes | None = None
    # switch: the sibling field whose value picks the case (`by:` in specs); the cases; the case for others.
    on: str | None = None
    cases: Mapping[int, FieldSpec] = field(default_factory=dict)
    default: FieldSpec | None = None
    # A struct (or switch, or JSON object) whose members belong to the enclosing fields.
    inline: bool = False
    # A map in a keyed struct that collects the entries no member names.
    rest: bool = False
    # Names of this field's values in responses, where they differ from requests' (a status).
    response_enum: str | None = None
    # Holds the byte length of the struct it starts, itself included.
    length_of: bool = False
    # pairs: what separates pairs, and a key from its value.
    separators: tuple[str, str] = ("", "")
    # A credential (a password, a token): every view and the plugin show it masked.
    secret: bool = False
    # A member of a struct a protobuf field decodes: its field number.
    tag: int | None = None


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
    key: int | str  # the command key
    fields: tuple[FieldSpec, ...]
    # The key field's value for this kind when it is not the command key: protocols whose
    # responses have keys of their own (HELLO_REQUEST answered by HELLO_RESPONSE).
    wire: int | str | None = None


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    key: int | str
    sender: str
    versions: tuple[int, ...]
    doc: str | None
    layouts: Mapping[str, Layout]  # kind -> layout


@dataclass(frozen=True, slots=True)
class Wiring:
    """Where the protocol runs and how its PDUs are delimited on the byte stream."""

    transport: str
    ports: tuple[int, ...]
    max_size: int  # a sanity cap on one PDU, in bytes
    # The header field holding the PDU's length, its offset and integer type, and what it
    # counts: "after" (the bytes after the field) or "whole" (the whole PDU). None: the
    # protocol package's framing rule says (text protocols).
    length: str | None = None
    length_offset: int = 0
    length_type: str = "uint32"
    counts: str = "after"
    # Constant bytes every PDU starts with (its magic), so a PDU is found on any port.
    magic: bytes | None = None
    magic_offset: int = 0
    # Names of the server by port (e.g. a name server and a broker), for diagnoses.
    roles: Mapping[int, str] = field(default_factory=dict)
    # A protocol carried inside another's frames, not on TCP itself: (carrier protocol, the
    # carrier's field whose bytes may be one of its frames, found by its magic).
    carried_by: tuple[str, str] | None = None
    # Where in the carrier it may be: (the carrier's text field, its wildcard patterns); None: anywhere.
    carried_where: tuple[str, tuple[str, ...]] | None = None

    @property
    def uncounted(self) -> int:
        """Bytes of a PDU its length does not count: to the length field's end, if it counts what follows."""
        if self.length is None or self.counts != "after":
            return 0
        return self.length_offset + INT_TYPES[self.length_type][1]


@dataclass(frozen=True, slots=True)
class FrameSpec:
    """How a frame's header says which command it is, and in which direction."""

    key: str  # the header field holding the command key
    # (field, mask): the bits that mark a response, and a one-way request.
    response: tuple[str, int] | None = None
    oneway: tuple[str, int] | None = None
    # "field": the key field says a response's command; "request": a response's key field
    # holds its status, and its command is its request's (found by the correlation field).
    response_key: str = "field"
    # A header map whose entries command layouts name (fields with `entry:`).
    entries: str | None = None
    # Whether the header's version selects the layout version (else it is informational).
    layout_versions: bool = True
    # "any": a text key names its command in any case (text protocols whose servers fold it).
    key_case: str = "exact"


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
    # The link name each kept field is given (the field's own name, unless keep maps names).
    keep_as: tuple[str, ...] = ()
    # The close command's field saying after how many uses in all the session ends (a text
    # protocol's "unsubscribe after N messages"); without it, the close ends the session at once.
    close_after: str | None = None
    # Whether a use of an id never opened, or already closed, is noted (when the capture holds
    # the connection's setup, so the open would be in it).
    unknown: bool = False


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
    # The sender numbers its items one by one, rising: ids that go back or skip are noted.
    ordered: bool = False


@dataclass(frozen=True, slots=True)
class CloseSpec:
    """A command by which the server ends a client's connection or sends it elsewhere."""

    command: str
    code: str | None  # the field with its code (None: the command has none)
    reason: tuple[str, ...]  # fields saying why or where to, written joined by ':'
    says: str = "closed the connection"  # what the server did, as diagnoses put it
    enum: str | None = None  # the code's names
    # How a close without a code is noted: a note (a goodbye) or an error (a refusal).
    severity: str = "note"


@dataclass(frozen=True, slots=True)
class AdvertiseSpec:
    """An answer telling the client where to connect: host and port fields (paths through arrays),
    an "host:port" text (a path; a map's values), or a map's two entries (entries: the map)."""

    command: str
    host: tuple[str, ...] | None = None
    port: tuple[str, ...] | None = None
    address: tuple[str, ...] | None = None
    entries: str | None = None


@dataclass(frozen=True, slots=True)
class RepliesSpec:
    """Requests naming where their answer goes (ask: that field), and answers sent there (answer:
    the field naming where a frame goes); status: an answer's status field, statuses: what its
    codes mean for the request."""

    ask: str
    answer: str
    status: str | None = None
    statuses: Mapping[int, str] = field(default_factory=dict)
    # Links an answer gets from its request's fields: link name -> the request's field.
    keep: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeartbeatSpec:
    """The request a peer sends to show it is alive, and how often clients send it."""

    command: str
    every: float  # seconds, when the capture does not show the rhythm itself
    hint: str | None = None  # what happens when they stop


@dataclass(frozen=True, slots=True)
class CreditSpec:
    session: str
    grant: tuple[Ref, ...]
    spend: str
    refusal: str | None


# What a closing code may be about: the client's latest frame of a command or version not in
# the registry, or its latest frame over the negotiated frame_max.
CLOSE_ABOUT = ("unknown", "oversized")


def _about_hint(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and set(value) == {"hint", "about"}
        and isinstance(value["hint"], str)
        and value["about"] in CLOSE_ABOUT
    )


@dataclass(frozen=True, slots=True)
class EndingSpec:
    """How a connection ends in order: the command a peer sends before it closes TCP, and what
    an end without it suggests, by the command the server had sent just before."""

    close: str
    hints: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Conversation:
    """How frames of one connection relate: the spec's conversation section."""

    correlation: str | None = None
    status: str | None = None
    ok: frozenset[int] = frozenset()
    routine: frozenset[int] = frozenset()
    tune: Ref | None = None  # Tune.frame_max; heartbeat in tune_heartbeat
    tune_heartbeat: str | None = None
    closes: tuple[CloseSpec, ...] = ()
    heartbeat: HeartbeatSpec | None = None
    close_hints: Mapping[int, str] = field(default_factory=dict)
    # Which of the client's frames a closing code is about (CLOSE_ABOUT), where not its last.
    close_about: Mapping[int, str] = field(default_factory=dict)
    # How a connection ends in order: the command sent before TCP closes, and hints.
    ending: EndingSpec | None = None
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
    # How status codes are written in diagnoses: "hex" (0x02) or "dec" (17).
    codes: str = "hex"
    # What a failed request's status means for it, by command and code.
    hints: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    # What the server is called in diagnoses (ports may name it otherwise: wiring.roles).
    server: str = "server"
    # The response field with the server's own words about a status (a remark).
    status_text: str | None = None
    # Requests the server may hold before answering (long polls): command -> the request's
    # field saying for how long, in milliseconds.
    patience: Mapping[str, str] = field(default_factory=dict)
    # Who a peer is, from fields every frame carries: property (product, version) -> field.
    identity: Mapping[str, str] = field(default_factory=dict)
    # Requests that name where to answer (a reply subject), paired with the answers sent there.
    replies: RepliesSpec | None = None
    # (ask, answer): a keepalive a peer sends, answered in order by the other (PING, PONG).
    pings: tuple[str, str] | None = None
    # Values a peer announces that bound a field of the other's later frames (max_payload).
    limits: tuple[tuple[Ref, tuple[str, ...]], ...] = ()
    # Answers telling the client where to connect next (a broker list, an advertised address).
    advertises: tuple[AdvertiseSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    title: str
    source: str
    package: str | None  # the Python package with the protocol's code (hooks, framing, messages)
    wiring: Wiring
    header: tuple[FieldSpec, ...]
    frame: FrameSpec
    enums: Mapping[str, Mapping[int, str]]
    structs: Mapping[str, tuple[FieldSpec, ...]]
    commands: Mapping[str, Command]
    by_key: Mapping[int | str, Command] = field(repr=False)
    hooks: Mapping[str, HookSpec] = field(default_factory=dict)
    # Keys of responses that have keys of their own -> their command's key.
    answers: Mapping[int | str, int | str] = field(default_factory=dict)
    conversation: Conversation = field(default_factory=Conversation)
    order: str = ">"  # struct byte order: ">" big endian, "<" little
    # A name short enough for Wireshark's Protocol column (the title when none is given).
    short: str = ""

    def layout(self, key: int | str | None, response: bool) -> Layout | None:
        """The layout of a command key in one direction, or None when the registry has none."""
        command = self.by_key.get(key) if key is not None else None  # type: ignore[arg-type]
        if command is None:
            return None
        if response:
            return command.layouts.get("response")
        return command.layouts.get("request") or command.layouts.get("command")

    def key_formatter(self) -> Callable[[Any], str]:
        """How the command key is written: hex to its field's width when the field displays hex,
        by name when it displays its enum's names."""
        spec = self.header_field(self.frame.key)
        if spec is not None and spec.display == "name" and spec.enum in self.enums:
            names = self.enums[spec.enum]
            return lambda key: "?" if key is None else str(names.get(key, key) if type(key) is int else key)
        if spec is None or spec.display != "hex" or spec.type not in INT_TYPES:
            return lambda key: "?" if key is None else str(key)
        width = INT_TYPES[spec.type][1] * 2
        return lambda key: "?" if key is None else f"0x{key:0{width}x}" if isinstance(key, int) else str(key)

    @property
    def versioned(self) -> bool:
        """Whether the header carries a version (else every layout has one version: the first)."""
        return self.header_field("version") is not None

    def header_field(self, name: str) -> FieldSpec | None:
        """A header field by name, looking into inline structs and switch cases."""
        return next((s for s in flat_fields(self.header) if s.name == name), None)

    def field_at(self, ref: Ref, kind: str | None = None) -> FieldSpec | None:
        """The field a Command.path names (in the given layout kind, else the first that has it)."""
        return _field_at(self.commands, self.header, ref, kind)

    def all_fields(self) -> Iterator[FieldSpec]:
        """Every field of every layout and struct, depth first (for name checks and generators)."""
        seen_structs: set[str] = set()

        def walk(specs: tuple[FieldSpec, ...]) -> Iterator[FieldSpec]:
            for spec in specs:
                yield spec
                for child in (spec.of, spec.key, spec.value, spec.default, *spec.cases.values()):
                    if child is not None:
                        yield from walk((child,))
                yield from walk(spec.bits)
                if spec.struct and spec.struct not in seen_structs:
                    seen_structs.add(spec.struct)
                    yield from walk(spec.fields)

        yield from walk(self.header)
        for command in self.commands.values():
            for layout in command.layouts.values():
                yield from walk(layout.fields)
        for hook in self.hooks.values():
            yield from walk(hook.adds)
        yield from walk(self.conversation.links)


# libyaml's parser when PyYAML was built with it: the specs load at every start.
_SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):
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
        # What each hook adds, by name (set once hooks are read; structs come before them).
        self.hook_adds: dict[str, dict[str, FieldSpec]] = {}
        self.raw_hooks: Mapping[str, Any] = {}
        self.in_hook_output = False
        self.order = ">"
        self.frame: FrameSpec | None = None
        self.header: tuple[FieldSpec, ...] = ()

    @contextmanager
    def _hook_output(self) -> Iterator[None]:
        """Fields built meanwhile describe what code adds (hooks, links), so hook-only types apply."""
        saved, self.in_hook_output = self.in_hook_output, True
        try:
            yield
        finally:
            self.in_hook_output = saved

    def _only(self, body: Mapping[str, Any], allowed: set[str] | frozenset[str], where: str) -> None:
        """Refuse attributes the syntax does not have at this place."""
        unknown = set(body) - allowed
        if unknown:
            raise self.fail(where, f"unknown attribute(s) {sorted(unknown)}")

    def _short(self, doc: Mapping[str, Any]) -> str:
        short = doc.get("short", doc["title"])
        if not isinstance(short, str) or not short.strip() or len(short) > SHORT_MAX:
            raise self.fail("short", f"must be a name of 1 to {SHORT_MAX} characters for the Protocol column")
        return short

    def fail(self, where: str, message: str) -> SpecError:
        return SpecError(f"{self.source}: {where}: {message}")

    def build(self) -> Protocol:
        doc = self.doc
        for required in ("protocol", "title", "wiring", "header", "commands"):
            if required not in doc:
                raise self.fail("top level", f"missing '{required}'")
        unknown = set(doc) - TOP_ATTRS
        if unknown:
            raise self.fail("top level", f"unknown section(s) {sorted(unknown)}")
        name = doc["protocol"]
        if not isinstance(name, str) or not SNAKE.match(name):
            raise self.fail("protocol", f"name {name!r} must be snake_case")
        order = doc.get("byte_order", "big")
        if order not in BYTE_ORDERS:
            raise self.fail("byte_order", f"must be one of {sorted(BYTE_ORDERS)}, not {order!r}")
        self.order = BYTE_ORDERS[order]
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
        self.hook_adds = {name: {a.name: a for a in flat_fields(h.adds)} for name, h in hooks.items()}
        header = self._fields(doc["header"], "header", allow_conditions=False)
        self.header = header
        frame = self._frame(doc.get("frame"), header)
        self.frame = frame
        commands = self._commands(doc["commands"])
        by_key: dict[int | str, Command] = {}
        for command in commands.values():
            if command.key in by_key:
                raise self.fail(
                    f"commands.{command.name}",
                    f"key {_key_text(command.key)} already used by {by_key[command.key].name}",
                )
            by_key[command.key] = command
        answers: dict[int | str, int | str] = {}
        for command in commands.values():
            for layout in command.layouts.values():
                if layout.wire is None:
                    continue
                if layout.wire in by_key or layout.wire in answers:
                    raise self.fail(
                        f"commands.{command.name}.key", f"key {_key_text(layout.wire)} is already used"
                    )
                answers[layout.wire] = command.key
        key_spec = _by_name(header, frame.key)
        assert key_spec is not None
        wanted = str if key_spec.type == "string" else int
        for command in commands.values():
            for key in (command.key, *(layout.wire for layout in command.layouts.values() if layout.wire)):
                if not isinstance(key, wanted):
                    raise self.fail(
                        f"commands.{command.name}",
                        f"key {key!r} must be {wanted.__name__}, as {frame.key} is",
                    )
        conversation = self._conversation(doc.get("conversation") or {}, commands)
        if frame.response_key == "request" and conversation.correlation is None:
            raise self.fail(
                "frame.response_key", "'request' needs conversation.correlation to find the request"
            )
        return Protocol(
            name=name,
            title=str(doc["title"]),
            short=self._short(doc),
            source=self.source,
            package=self.package,
            wiring=self._wiring(doc["wiring"], header),
            header=header,
            frame=frame,
            enums=self.enums,
            structs=self.structs,
            commands=commands,
            by_key=by_key,
            answers=answers,
            hooks=hooks,
            conversation=conversation,
            order=self.order,
        )

    def _frame(self, raw: Any, header: tuple[FieldSpec, ...]) -> FrameSpec:
        """The frame section; without one, a header field named `key` is the key."""
        where = "frame"
        raw = raw if raw is not None else {"key": "key"}
        if not isinstance(raw, Mapping) or "key" not in raw:
            raise self.fail(where, "must be a mapping naming at least the key field")
        self._only(raw, FRAME_ATTRS, where)
        key = _by_name(header, raw["key"])
        if key is None or (key.type not in INT_TYPES and key.type != "string"):
            raise self.fail(f"{where}.key", f"{raw['key']!r} is not an integer or string field of the header")
        marks: dict[str, tuple[str, int] | None] = {}
        for name in ("response", "oneway"):
            body = raw.get(name)
            if body is None:
                marks[name] = None
                continue
            if not isinstance(body, Mapping) or set(body) != {"field", "mask"}:
                raise self.fail(f"{where}.{name}", "must be {field: name, mask: bits}")
            spec = _by_name(header, body["field"])
            if spec is None or spec.type not in INT_TYPES or not isinstance(body["mask"], int):
                raise self.fail(f"{where}.{name}", f"{body['field']!r} is not an integer field of the header")
            marks[name] = (str(body["field"]), int(body["mask"]))
        response_key = raw.get("response_key", "field")
        if response_key not in ("field", "request"):
            raise self.fail(f"{where}.response_key", "must be 'field' or 'request'")
        entries = raw.get("entries")
        if entries is not None:
            spec = _by_name(header, entries)
            if spec is None or spec.type != "map":
                raise self.fail(f"{where}.entries", f"{entries!r} is not a map field of the header")
        return FrameSpec(
            key=str(raw["key"]),
            response=marks["response"],
            oneway=marks["oneway"],
            response_key=response_key,
            entries=entries,
            layout_versions=bool(raw.get("layout_versions", True)),
            key_case=self._key_case(raw.get("key_case", "exact"), where),
        )

    def _key_case(self, value: Any, where: str) -> str:
        if value not in ("exact", "any"):
            raise self.fail(where, "key_case is exact or any")
        return str(value)

    def _hooks(self, raw: Mapping[str, Any]) -> dict[str, HookSpec]:
        hooks: dict[str, HookSpec] = {}
        with self._hook_output():
            for name, body in raw.items():
                where = f"hooks.{name}"
                if not isinstance(name, str) or not SNAKE.match(name):
                    raise self.fail(where, "hook names must be snake_case")
                if not isinstance(body, Mapping):
                    raise self.fail(where, "must be a mapping with 'doc' and 'adds'")
                self._only(body, HOOK_ATTRS, where)
                adds = self._fields(body.get("adds") or [], f"{where}.adds", allow_conditions=False)
                hooks[name] = HookSpec(name=name, doc=body.get("doc"), adds=adds)
            for struct_name in self.raw_hook_structs:
                self._struct(struct_name, f"hook_structs.{struct_name}")
        return hooks

    # ------------------------------------------------------------------ conversation

    def _conversation(self, raw: Any, commands: Mapping[str, Command]) -> Conversation:
        where = "conversation"
        if not isinstance(raw, Mapping):
            raise self.fail(where, "must be a mapping")
        self._only(raw, CONVERSATION_ATTRS, where)
        if not raw:
            return Conversation()
        kw: dict[str, Any] = {}
        correlation = raw.get("correlation")
        if correlation is not None:
            if not any(f.name == correlation for f in self._layout_fields(commands)):
                raise self.fail(f"{where}.correlation", f"no layout or header has a field {correlation!r}")
            kw["correlation"] = correlation
        status = raw.get("status")
        if status is not None:
            if (
                not isinstance(status, Mapping)
                or "field" not in status
                or set(status) - {"field", "ok", "routine", "text"}
            ):
                raise self.fail(
                    f"{where}.status", "must be {field: name, ok: [codes], routine: [codes], text: name}"
                )
            fields = list(self._layout_fields(commands))
            if not any(f.name == status["field"] and f.type in INT_TYPES for f in fields):
                raise self.fail(f"{where}.status", f"no layout has an integer field {status['field']!r}")
            if status.get("text") is not None:
                if not any(f.name == status["text"] and f.type == "string" for f in fields):
                    raise self.fail(
                        f"{where}.status.text", f"no layout has a string field {status['text']!r}"
                    )
                kw["status_text"] = status["text"]
            codes = {}
            for name in ("ok", "routine"):
                values = status.get(name) or []
                if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
                    raise self.fail(f"{where}.status.{name}", "must be a list of integers")
                codes[name] = frozenset(values)
            kw |= {"status": status["field"], **codes}
        for name, second in (("tune", "heartbeat"), ("announcement", "about")):
            body = raw.get(name)
            if body is None:
                continue
            first = {"tune": "frame_max", "announcement": "code"}[name]
            if not isinstance(body, Mapping) or set(body) != {"command", first, second}:
                raise self.fail(f"{where}.{name}", f"must be {{command, {first}, {second}}}")
            ref = self._ref(f"{body['command']}.{body[first]}", f"{where}.{name}", commands, int_only=True)
            self._ref(f"{body['command']}.{body[second]}", f"{where}.{name}", commands)
            kw[name] = ref
            kw[f"{name}_{second}"] = body[second]
        kw["closes"] = self._closes(raw.get("close"), commands)
        beat = raw.get("heartbeat")
        if beat is not None:
            at = f"{where}.heartbeat"
            if (
                not isinstance(beat, Mapping)
                or set(beat) - {"command", "every", "hint"}
                or "command" not in beat
            ):
                raise self.fail(at, "must be {command, every: seconds, hint}")
            self._command(beat["command"], at, commands)
            every = beat.get("every", 30)
            if isinstance(every, bool) or not isinstance(every, int | float) or every <= 0:
                raise self.fail(at, "every must be a positive number of seconds")
            kw["heartbeat"] = HeartbeatSpec(beat["command"], float(every), beat.get("hint"))
        authenticate = raw.get("authenticate")
        if authenticate is not None:
            self._command(authenticate, f"{where}.authenticate", commands)
            kw["authenticate"] = authenticate
        codes = raw.get("codes", "hex")
        if codes not in ("hex", "dec"):
            raise self.fail(f"{where}.codes", "must be hex or dec")
        kw["codes"] = codes
        if raw.get("server") is not None:
            kw["server"] = str(raw["server"])
        response_hints: dict[str, dict[int, str]] = {}
        for command_name, by_code in (raw.get("hints") or {}).items():
            self._command(command_name, f"{where}.hints", commands)
            if not isinstance(by_code, Mapping) or not all(
                isinstance(k, int) and isinstance(v, str) for k, v in by_code.items()
            ):
                raise self.fail(f"{where}.hints.{command_name}", "must map status codes to text")
            response_hints[command_name] = dict(by_code)
        kw["hints"] = response_hints
        patience: dict[str, str] = {}
        for command_name, field_name in (raw.get("patience") or {}).items():
            self._ref(f"{command_name}.{field_name}", f"{where}.patience", commands, int_only=True)
            patience[command_name] = str(field_name)
        kw["patience"] = patience
        identity = raw.get("identity") or {}
        if not isinstance(identity, Mapping) or not all(isinstance(v, str) for v in identity.values()):
            raise self.fail(f"{where}.identity", "must map property names to header fields or Command.field")
        for name in identity.values():
            if "." in name:  # a field of the request that introduces the peer (EventMesh's Hello)
                self._ref(name, f"{where}.identity", commands)
            elif name != "version" and _by_name(self.header, name) is None:
                raise self.fail(f"{where}.identity", f"{name!r} is not a header field")
        kw["identity"] = dict(identity)
        hints = raw.get("close_hints") or {}
        if not isinstance(hints, Mapping) or not all(
            isinstance(k, int) and (isinstance(v, str) or _about_hint(v)) for k, v in hints.items()
        ):
            raise self.fail(
                f"{where}.close_hints",
                "must map closing codes to text, or to {hint: text, about: " + " or ".join(CLOSE_ABOUT) + "}",
            )
        kw["close_hints"] = {k: v if isinstance(v, str) else v["hint"] for k, v in hints.items()}
        kw["close_about"] = {k: v["about"] for k, v in hints.items() if not isinstance(v, str)}
        ending = raw.get("ending")
        if ending is not None:
            hints_after = ending.get("hints") or {} if isinstance(ending, Mapping) else None
            if (
                not isinstance(ending, Mapping)
                or set(ending) - {"close", "hints"}
                or not isinstance(ending.get("close"), str)
                or not isinstance(hints_after, Mapping)
                or not all(isinstance(v, str) for v in hints_after.values())
            ):
                raise self.fail(f"{where}.ending", "must be {close: Command, hints: {Command: text}}")
            for name in (ending["close"], *hints_after):
                self._command(name, f"{where}.ending", commands)
            kw["ending"] = EndingSpec(ending["close"], dict(hints_after))
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
            self._only(body, SESSION_ATTRS, at)
            users = tuple(body["used_by"])
            for command in (body["open"], *([body["close"]] if body.get("close") else []), *users):
                self._ref(f"{command}.{body['id']}", at, commands)
            raw_keep = body.get("keep") or ()
            # keep: fields of the open request, or {link name: field} to give them other names.
            pairs = list(raw_keep.items()) if isinstance(raw_keep, Mapping) else [(k, k) for k in raw_keep]
            for _, kept in pairs:
                self._ref(f"{body['open']}.{kept}", at, commands)
            close_after = body.get("close_after")
            if close_after is not None:
                if not body.get("close"):
                    raise self.fail(at, "close_after names a field of the close command: give close")
                self._ref(f"{body['close']}.{close_after}", at, commands, int_only=True)
            sessions[name] = SessionSpec(
                name,
                body["id"],
                body["open"],
                body.get("close"),
                tuple(str(f) for _, f in pairs),
                users,
                tuple(str(k) for k, _ in pairs),
                close_after,
                bool(body.get("unknown", False)),
            )
        kw["sessions"] = sessions
        acks: dict[str, AckSpec] = {}
        for name, body in (raw.get("acks") or {}).items():
            at = f"{where}.acks.{name}"
            if not isinstance(body, Mapping) or not {"session", "send", "confirm"} <= set(body):
                raise self.fail(at, "needs session, send and confirm")
            self._only(body, ACK_ATTRS, at)
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
                ordered=bool(body.get("ordered", False)),  # type: ignore[arg-type]
            )
        kw["acks"] = acks
        credit = raw.get("credit")
        if credit is not None:
            at = f"{where}.credit"
            if not isinstance(credit, Mapping) or not {"session", "grant", "spend"} <= set(credit):
                raise self.fail(at, "needs session, grant and spend")
            self._only(credit, CREDIT_ATTRS, at)
            if credit["session"] not in sessions:
                raise self.fail(at, f"unknown session {credit['session']!r}")
            grants = tuple(self._ref(g, f"{at}.grant", commands, int_only=True) for g in credit["grant"])
            self._command(credit["spend"], f"{at}.spend", commands)
            if credit.get("refusal") is not None:
                self._command(credit["refusal"], f"{at}.refusal", commands)
            kw["credit"] = CreditSpec(credit["session"], grants, credit["spend"], credit.get("refusal"))
        replies = raw.get("replies")
        if replies is not None:
            at = f"{where}.replies"
            known = {"ask", "answer", "status", "statuses", "keep"}
            if (
                not isinstance(replies, Mapping)
                or not {"ask", "answer"} <= set(replies)
                or set(replies) - known
            ):
                raise self.fail(
                    at, "must be {ask: FIELD, answer: FIELD, status, statuses: {code: text}, keep}"
                )
            names = self._field_names(commands)
            for key in ("ask", "answer", "status"):
                if replies.get(key) is not None and replies[key] not in names:
                    raise self.fail(at, f"no layout has a field {replies[key]!r} (its hooks' included)")
            statuses = replies.get("statuses") or {}
            if not all(isinstance(k, int) and isinstance(v, str) for k, v in statuses.items()):
                raise self.fail(f"{at}.statuses", "must map status codes to text")
            keep = replies.get("keep") or {}
            if not isinstance(keep, Mapping) or not all(v in names for v in keep.values()):
                raise self.fail(f"{at}.keep", "must map link names to fields of the requests")
            kw["replies"] = RepliesSpec(
                str(replies["ask"]), str(replies["answer"]), replies.get("status"), dict(statuses), dict(keep)
            )
        pings = raw.get("pings")
        if pings is not None:
            at = f"{where}.pings"
            if not isinstance(pings, Mapping) or set(pings) != {"ask", "answer"}:
                raise self.fail(at, "must be {ask: COMMAND, answer: COMMAND}")
            for key in ("ask", "answer"):
                self._command(pings[key], at, commands)
            kw["pings"] = (str(pings["ask"]), str(pings["answer"]))
        limits = []
        for body in raw.get("limits") or []:
            at = f"{where}.limits"
            if not isinstance(body, Mapping) or set(body) != {"announce", "bounds"}:
                raise self.fail(at, "each must be {announce: Command.field, bounds: FIELD or [FIELDS]}")
            ref = self._ref(body["announce"], at, commands, int_only=True)
            # A list: the first of the fields a frame has is the one bounded (HPUB's total, else PUB's size).
            bounds = body["bounds"] if isinstance(body["bounds"], list) else [body["bounds"]]
            names = self._field_names(commands)
            for name in bounds:
                if name not in names:
                    raise self.fail(at, f"no layout has a field {name!r}")
            limits.append((ref, tuple(str(b) for b in bounds)))
        kw["limits"] = tuple(limits)
        advertises = []
        for body in raw.get("advertises") or []:
            at = f"{where}.advertises"
            keys = set(body) if isinstance(body, Mapping) else set()
            if "command" not in keys or not (keys - {"command"}) <= {"host", "port", "address", "entries"}:
                raise self.fail(
                    at,
                    "each must be {command, host, port}, {command, address} "
                    "or {command, entries, host, port}",
                )
            command = str(body["command"])
            if "entries" in body:
                self._ref(f"{command}.{body['entries']}", at, commands)
                spec = AdvertiseSpec(
                    command, (str(body["host"]),), (str(body["port"]),), entries=str(body["entries"])
                )
            elif "address" in body:
                spec = AdvertiseSpec(
                    command, address=self._ref(f"{command}.{body['address']}", at, commands).path
                )
            else:
                host = self._ref(f"{command}.{body['host']}", at, commands).path
                port = self._ref(f"{command}.{body['port']}", at, commands, int_only=True).path
                spec = AdvertiseSpec(command, host, port)
            advertises.append(spec)
        kw["advertises"] = tuple(advertises)
        with self._hook_output():
            kw["links"] = self._fields(raw.get("links") or [], f"{where}.links", allow_conditions=False)
        # The tracker links frames by these names; the spec gives them types and docs.
        declared = {spec.name for spec in kw["links"]}
        for feature, names in TRACKER_LINKS.items():
            missing = [n for n in names if n not in declared]
            if kw.get(feature) and missing:
                raise self.fail(
                    f"{where}.links", f"{feature} links frames by {', '.join(missing)}: declare them"
                )
        return Conversation(**kw)

    def _field_names(self, commands: Mapping[str, Command]) -> set[str]:
        """Every name a frame of these commands may have a value for (what hooks add included)."""
        return {f.name for c in commands.values() for f in self._all_layout_fields(c)}

    def _all_layout_fields(self, command: Command) -> Iterator[FieldSpec]:
        """A command's fields, its inline members' and what its fields' hooks add."""
        for layout in command.layouts.values():
            for spec in flat_fields(layout.fields):
                yield spec
                if spec.hook is not None:
                    yield from self.hook_adds.get(spec.hook, {}).values()

    def _layout_fields(self, commands: Mapping[str, Command]) -> Iterator[FieldSpec]:
        """The fields every frame's layout has, the header's included."""
        yield from flat_fields(self.header)
        for command in commands.values():
            for layout in command.layouts.values():
                yield from layout.fields

    def _command(self, name: Any, where: str, commands: Mapping[str, Command]) -> Command:
        command = commands.get(name) if isinstance(name, str) else None
        if command is None:
            raise self.fail(where, f"unknown command {name!r}")
        return command

    def _closes(self, raw: Any, commands: Mapping[str, Command]) -> tuple[CloseSpec, ...]:
        """conversation.close: one {command, code, reason, says} or a list of them."""
        where = "conversation.close"
        if raw is None:
            return ()
        out = []
        for body in raw if isinstance(raw, list) else [raw]:
            if (
                not isinstance(body, Mapping)
                or "command" not in body
                or set(body) - {"command", "code", "reason", "says", "severity"}
                or body.get("severity", "note") not in ("note", "warn", "error")
            ):
                raise self.fail(where, "must be {command, code, reason, says, severity} or a list of them")
            code = body.get("code")
            enum = None
            if code is not None:
                ref = self._ref(f"{body['command']}.{code}", where, commands, int_only=True)
                spec = _field_at(commands, self.header, ref)
                enum = spec.enum if spec is not None else None
            reason = body.get("reason") or []
            reason = [reason] if isinstance(reason, str) else reason
            for name in reason:
                self._ref(f"{body['command']}.{name}", where, commands)
            out.append(
                CloseSpec(
                    str(body["command"]),
                    code,
                    tuple(reason),
                    str(body.get("says", "closed the connection")),
                    enum,
                    str(body.get("severity", "note")),
                )
            )
        return tuple(out)

    def _ref(self, text: Any, where: str, commands: Mapping[str, Command], *, int_only: bool = False) -> Ref:
        """Check that Command.path names a field of one of the command's layouts."""
        parts = str(text).split(".")
        command = self._command(parts[0], where, commands)
        if len(parts) < 2:
            raise self.fail(where, f"{text!r} must be Command.field")
        specs = [_follow(layout.fields, parts[1:]) for layout in command.layouts.values()]
        if len(parts) == 2:  # a header field every frame has
            specs.append(_by_name(self.header, parts[1]))
        for spec in specs:
            if spec is not None:
                if int_only and spec.type not in INT_TYPES:
                    raise self.fail(where, f"{text!r} is {spec.type}, not an integer field")
                return Ref(command.name, tuple(parts[1:]))
        raise self.fail(where, f"{text!r}: {command.name} has no such field")

    def _wiring(self, raw: Any, header: tuple[FieldSpec, ...]) -> Wiring:
        if not isinstance(raw, Mapping):
            raise self.fail("wiring", "must be a mapping")
        framing = raw.get("framing") or {}
        if not isinstance(framing, Mapping):
            raise self.fail("wiring.framing", "must be a mapping")
        if "frame_max" in framing:
            raise self.fail(
                "wiring.framing.frame_max", "the negotiated frame size belongs under conversation.tune"
            )
        self._only(framing, FRAMING_ATTRS, "wiring.framing")
        ports = raw.get("ports") or []
        roles: dict[int, str] = {}
        if isinstance(ports, Mapping):  # port: what the server on it is (a name server, a broker)
            roles = {p: str(r) for p, r in ports.items() if r}
            ports = list(ports)
        if not all(isinstance(p, int) and 0 < p < 65536 for p in ports):
            raise self.fail("wiring.ports", f"ports must be TCP port numbers, got {ports!r}")
        kw: dict[str, Any] = {}
        length = framing.get("length")
        carried = raw.get("carried_by")
        if carried is not None:
            if not isinstance(carried, Mapping) or not {"protocol", "field"} <= set(carried) <= {
                "protocol",
                "field",
                "where",
            }:
                raise self.fail(
                    "wiring.carried_by",
                    "must be {protocol: CARRIER, field: ITS_FIELD, where: {FIELD: [patterns]}}",
                )
            where = carried.get("where")
            if where is not None:
                if (
                    not isinstance(where, Mapping)
                    or len(where) != 1
                    or not all(isinstance(p, str) and p for ps in where.values() for p in ps)
                ):
                    raise self.fail("wiring.carried_by.where", "must be {carrier's text field: [patterns]}")
                ((by, patterns),) = where.items()
                kw["carried_where"] = (str(by), tuple(patterns))
            if ports or length is not None or framing.get("rule") is not None:
                raise self.fail(
                    "wiring.carried_by", "a carried protocol has no ports or framing: its carrier frames it"
                )
            if header[0].const is None if header else True:
                raise self.fail(
                    "wiring.carried_by", "a carried protocol's header starts with its magic (a 'const')"
                )
            kw["carried_by"] = (str(carried["protocol"]), str(carried["field"]))
        elif length is None and framing.get("rule") != "package":
            raise self.fail("wiring.framing", "needs 'length' (a header field) or 'rule: package'")
        if length is None:
            kw["counts"] = "whole"  # what the package's rule cuts is the whole PDU
        if length is not None:
            offset = 0
            for spec in header:
                if spec.name == length:
                    break
                width = _fixed_width(spec)
                if width is None:
                    raise self.fail("wiring.framing.length", f"{spec.name!r} before it has no fixed width")
                offset += width
            else:
                raise self.fail("wiring.framing.length", f"{length!r} is not a header field")
            spec = _by_name(header, length)
            assert spec is not None
            if spec.type not in INT_TYPES:
                raise self.fail("wiring.framing.length", f"{length!r} is not an integer field")
            counts = framing.get("counts", "after")
            if counts not in ("after", "whole"):
                raise self.fail("wiring.framing.counts", "must be 'after' or 'whole'")
            kw |= {"length": length, "length_offset": offset, "length_type": spec.type, "counts": counts}
        first = header[0] if header else None
        if first is not None and first.const is not None:
            magic = first.const
            if isinstance(magic, int):
                magic = struct.pack(self.order + INT_TYPES[first.type][0], magic)
            kw["magic"] = magic
        return Wiring(
            transport=str(raw.get("transport", "tcp")),
            ports=tuple(ports),
            max_size=int(framing.get("max_size", 64 << 20)),
            roles=roles,
            **kw,
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
            self._only(body, COMMAND_ATTRS, where)
            key = body.get("key")
            wire: dict[str, int | str] = {}
            if isinstance(key, Mapping):
                # A response with a key of its own: {request: K, response: K2}.
                if set(key) - {"request", "command", "response"} or not ({"request", "command"} & set(key)):
                    raise self.fail(
                        f"{where}.key", "must be a key, or {request or command: key, response: key}"
                    )
                wire = {kind: self._key_value(k, f"{where}.key.{kind}") for kind, k in key.items()}
                key = wire.pop("request", None) if "request" in wire else wire.pop("command")
                if set(wire) - {"response"}:
                    raise self.fail(f"{where}.key", "names both a request and a one-way command key")
            else:
                key = self._key_value(key, f"{where}.key")
            marker = self.frame.response if self.frame is not None else None
            if isinstance(key, bool) or not isinstance(key, int | str) or (isinstance(key, int) and key < 0):
                raise self.fail(where, f"key {key!r} must be a non-negative integer or a string")
            if (
                isinstance(key, int)
                and marker is not None
                and marker[0] == self.frame.key
                and key & marker[1]
            ):
                raise self.fail(where, f"key {_key_text(key)} has the response bit 0x{marker[1]:x} set")
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
                for spec in fields:
                    if spec.entry is not None and self.frame is not None and self.frame.entries is None:
                        raise self.fail(
                            f"{where}.{kind}.{spec.name}", "'entry' needs frame.entries (a header map)"
                        )
                layouts[kind] = Layout(command=name, kind=kind, key=key, fields=fields, wire=wire.get(kind))
            if not layouts:
                raise self.fail(where, "defines no request, response or command layout")
            if "response" in wire and "response" not in layouts:
                raise self.fail(f"{where}.key", "names a response key but the command has no response")
            commands[name] = Command(
                name=name,
                key=key,
                sender=str(body.get("from", "client")),
                versions=versions,
                doc=body.get("doc"),
                layouts=layouts,
            )
        return commands

    def _key_value(self, key: Any, where: str) -> Any:
        """A command key as written: a number, text, or a name of the key field's enum."""
        spec = _by_name(self.header, self.frame.key) if self.frame is not None else None
        if isinstance(key, str) and spec is not None and spec.type in INT_TYPES and spec.enum in self.enums:
            by_name = {label: value for value, label in self.enums[spec.enum].items()}
            if key not in by_name:
                raise self.fail(where, f"{key!r} is not a name of the enum {spec.enum}")
            return by_name[key]
        return key

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
        self._only(attrs, FIELD_ATTRS, where)
        type_name = attrs["type"]
        kw: dict[str, Any] = {}
        sibling_by_name = {s.name: s for s in flat_fields(tuple(siblings))}
        if type_name in INT_TYPES:
            if "bits" in attrs:
                kw["bits"] = self._bits(attrs["bits"], type_name, where)
        elif type_name == "array":
            if "of" not in attrs:
                raise self.fail(where, "an array needs 'of'")
            kw["of"] = self._field(name, attrs["of"], f"{where}.of", siblings=[], element=True)
        elif type_name == "map":
            if "key" not in attrs or "value" not in attrs:
                raise self.fail(where, "a map needs 'key' and 'value'")
            kw["key"] = self._field("key", attrs["key"], f"{where}.key", siblings=[], element=True)
            kw["value"] = self._field("value", attrs["value"], f"{where}.value", siblings=[], element=True)
        elif type_name in ("raw", "json", "switch", "words", "protobuf"):
            if type_name in ("raw", "words", "protobuf") and "size" not in attrs:
                raise self.fail(where, "raw needs 'size': a byte count, an earlier integer field, or rest")
            if "size" in attrs:
                kw["size"] = self._size(attrs["size"], sibling_by_name, where)
            if type_name in ("json", "words", "protobuf") and attrs.get("of") is not None:
                kw["struct"] = str(attrs["of"])
                kw["fields"] = self._struct(kw["struct"], where)
            if type_name == "words":
                self._words(kw.get("fields", ()), where)
            if type_name == "protobuf":
                if "struct" not in kw:
                    raise self.fail(where, "protobuf needs 'of': the struct naming the message's fields")
                self._protobuf(kw["struct"], kw["fields"], where, set())
            if type_name == "switch":
                kw |= self._switch(name, attrs, sibling_by_name, where)
        elif type_name in ("string", "bytes", "bool", "ipv4", "ipv6"):
            if type_name == "string" and "size" in attrs:
                if "prefix" in attrs:
                    raise self.fail(where, "a string has a 'size' or a 'prefix', not both")
                kw["size"] = self._size(attrs["size"], sibling_by_name, where)
        elif type_name == "pairs":
            separators = attrs.get("separators")
            if (
                not isinstance(separators, list)
                or len(separators) != 2
                or not all(isinstance(s, str) and s for s in separators)
            ):
                raise self.fail(where, "pairs needs 'separators': [between pairs, between key and value]")
            if "of" not in attrs:
                raise self.fail(where, "pairs needs 'of': the struct naming its keys")
            kw |= {"separators": tuple(separators), "struct": str(attrs["of"])}
            kw["fields"] = self._struct(kw["struct"], where)
        elif type_name in HOOK_OUTPUT_TYPES:
            if not self.in_hook_output:
                raise self.fail(where, f"type {type_name!r} only describes what a hook adds")
            if type_name == "amqp" and attrs.get("of") is not None:
                # An AMQP message whose sections the spec names, so views can reach inside it.
                kw["struct"] = str(attrs["of"])
                kw["fields"] = self._struct(kw["struct"], where)
        elif type_name == "hook":
            if "hook" not in attrs:
                raise self.fail(where, "a hook field needs 'hook: name'")
            hook_body = self.raw_hooks.get(attrs["hook"])
            value_struct = hook_body.get("value") if isinstance(hook_body, Mapping) else None
            if value_struct is not None and not isinstance(value_struct, str):
                raise self.fail(f"hooks.{attrs['hook']}.value", "must name a struct under hook_structs")
            if value_struct is not None:
                # The shape of the value the hook reads, so its names are the registry's too.
                with self._hook_output():
                    kw["fields"] = self._struct(value_struct, f"hooks.{attrs['hook']}.value")
                kw["struct"] = value_struct
        elif isinstance(type_name, str):
            kw["fields"] = self._struct(type_name, where)
            kw["struct"] = type_name
            type_name = "struct"
        else:
            raise self.fail(where, f"unknown type {type_name!r}")
        if "size" in attrs and attrs["type"] not in ("raw", "json", "switch", "string", "words", "protobuf"):
            raise self.fail(
                where, "'size' applies to raw, json, switch, string, words and protobuf fields only"
            )
        if "of" in attrs and type_name not in ("array", "json", "pairs", "words", "protobuf", "amqp"):
            raise self.fail(where, "'of' applies to array, json, pairs, words, protobuf and amqp fields only")
        tag = attrs.get("tag")
        if tag is not None and (not isinstance(tag, int) or isinstance(tag, bool) or not 1 <= tag < 1 << 29):
            raise self.fail(where, "'tag' is a protobuf field number (1 to 2^29 - 1)")
        if "size" not in kw:
            kw |= self._prefix(attrs, type_name, where)
        enum = attrs.get("enum")
        for attr in ("enum", "response_enum"):
            named = attrs.get(attr)
            if named is None:
                continue
            if named not in self.enums and not (attr == "enum" and named == "commands"):
                raise self.fail(where, f"unknown enum {named!r}")
            if type_name not in INT_TYPES:
                raise self.fail(where, "an enum needs an integer field")
        display = attrs.get("display")
        if display is not None and display not in DISPLAYS:
            raise self.fail(where, f"unknown display {display!r} (known: {sorted(DISPLAYS)})")
        when = attrs.get("when")
        if when is not None:
            when = self._when(when, sibling_by_name, where)
        hook = attrs.get("hook")
        if hook is not None and element:
            raise self.fail(where, "hooks apply to named fields, not to array elements or map entries")
        if hook is not None:
            if type_name not in ("raw", "hook", "bytes", "string", "json"):
                raise self.fail(where, "'hook' applies to raw, bytes, string, json and hook fields only")
            if hook not in self.raw_hooks:
                raise self.fail(where, f"unknown hook {hook!r} (declare it under hooks:)")
        increasing = attrs.get("increasing", False)
        if increasing is not False and (increasing is not True or type_name not in INT_TYPES):
            raise self.fail(where, "'increasing: true' applies to integer fields only")
        since = attrs.get("since", 1)
        if not isinstance(since, int) or since < 1:
            raise self.fail(where, f"since {since!r} must be a positive integer")
        const = attrs.get("const")
        if const is not None:
            const = self._const(const, type_name, attrs, where)
        entry = attrs.get("entry")
        if entry is not None and not isinstance(entry, str):
            raise self.fail(where, "'entry' must be the key's text")
        inline = bool(attrs.get("inline", False))
        if inline and not (
            type_name in ("struct", "switch", "words")
            or (type_name in ("json", "protobuf", "hook") and "struct" in kw)
        ):
            raise self.fail(
                where, "'inline' applies to structs, switches, words, and json, protobuf and hooks with 'of'"
            )
        rest = bool(attrs.get("rest", False))
        if rest and type_name != "map":
            raise self.fail(where, "'rest' applies to maps only")
        length_of = bool(attrs.get("length_of", False))
        if length_of and type_name not in INT_TYPES:
            raise self.fail(where, "'length_of' applies to integer fields only")
        secret = attrs.get("secret", False)
        if secret is not False and (secret is not True or type_name != "string"):
            raise self.fail(where, "'secret: true' applies to string fields only")
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
            entry=entry,
            const=const,
            inline=inline,
            rest=rest,
            response_enum=attrs.get("response_enum"),
            length_of=length_of,
            secret=secret,
            tag=tag,
            mask=attrs.get("mask"),
            **kw,
        )
        if not element:
            self._check_consistent_name(spec, where)
        return spec

    def _protobuf(self, name: str, fields: tuple[FieldSpec, ...], where: str, seen: set[str]) -> None:
        """A struct a protobuf field decodes: every member numbered (but one map gathering the
        rest), of a type protobuf has; nested messages are such structs too."""
        if name in seen:
            return
        seen.add(name)
        for spec in fields:
            at = f"{where} (struct {name}, member {spec.name})"
            if spec.rest:
                continue
            if spec.tag is None:
                raise self.fail(at, "a protobuf member needs 'tag': its field number")
            element = spec.of if spec.type == "array" and spec.of is not None else spec
            if spec.type == "map":
                parts = (spec.key, spec.value)
                if not all(p is not None and p.type in PROTOBUF_SCALARS for p in parts):
                    raise self.fail(at, "a protobuf map's key and value are scalars")
            elif element.type == "struct":
                assert element.struct is not None
                self._protobuf(element.struct, element.fields, where, seen)
            elif element.type not in PROTOBUF_SCALARS:
                raise self.fail(at, f"protobuf has no type {element.type!r}")

    def _words(self, fields: tuple[FieldSpec, ...], where: str) -> None:
        if not fields:
            raise self.fail(where, "words needs 'of': the struct naming the words in order")
        for spec in fields:
            if spec.type != "string" and spec.type not in INT_TYPES:
                raise self.fail(where, f"word {spec.name}: a word is a string or an integer, not {spec.type}")
            if spec.size is not None or spec.when:
                raise self.fail(where, f"word {spec.name}: a word has no 'size' or 'when' (its place says)")

    def _size(self, size: Any, siblings: Mapping[str, FieldSpec], where: str) -> int | str:
        if size in ("rest", "line", "word"):
            return size
        if isinstance(size, str):
            ref = siblings.get(size)
            if ref is None:
                # What a hook of an earlier field adds (a size it computes) may size a later field.
                ref = next(
                    (
                        adds[size]
                        for s in siblings.values()
                        if s.hook is not None and size in (adds := self.hook_adds.get(s.hook, {}))
                    ),
                    None,
                )
            if ref is None or ref.type not in INT_TYPES:
                raise self.fail(
                    where,
                    f"size refers to {size!r}, which is not an earlier integer field (or one its hook adds)",
                )
            return size
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise self.fail(
                where, "'size' must be a byte count, an earlier integer field, rest, line or word"
            )
        return size

    def _prefix(self, attrs: Mapping[str, Any], type_name: str, where: str) -> dict[str, Any]:
        """The length or count prefix of string, bytes, pairs, array and map fields."""
        prefix = attrs.get("prefix")
        if prefix is None:
            return {"prefix": DEFAULT_PREFIX[type_name]} if type_name in DEFAULT_PREFIX else {}
        if type_name not in DEFAULT_PREFIX:
            raise self.fail(where, "'prefix' applies to string, bytes, pairs, array and map fields only")
        counts = "items"
        if isinstance(prefix, Mapping):
            if set(prefix) != {"type", "counts"} or prefix["counts"] not in ("items", "bytes"):
                raise self.fail(
                    where, "'prefix' must be an integer type, none, or {type, counts: items|bytes}"
                )
            prefix, counts = prefix["type"], prefix["counts"]
        if prefix == "none":
            if type_name not in ("array", "map"):
                raise self.fail(where, "only arrays and maps may have no prefix (they run to the end)")
        elif prefix not in INT_TYPES:
            raise self.fail(where, f"prefix {prefix!r} is not an integer type")
        if counts == "bytes" and type_name not in ("array", "map"):
            raise self.fail(where, "a prefix counting bytes applies to arrays and maps")
        return {"prefix": prefix, "prefix_counts": counts}

    def _bits(self, raw: Any, word_type: str, where: str) -> tuple[FieldSpec, ...]:
        """The parts of a packed integer: name -> {mask, enum, display, doc}."""
        if not isinstance(raw, Mapping) or not raw:
            raise self.fail(f"{where}.bits", "must map part names to {mask: bits, ...}")
        width = INT_TYPES[word_type][1] * 8
        parts: list[FieldSpec] = []
        for part, body in raw.items():
            at = f"{where}.bits.{part}"
            body = {"mask": body} if isinstance(body, int) else body
            if not isinstance(body, Mapping) or not isinstance(body.get("mask"), int):
                raise self.fail(at, "needs 'mask'")
            mask = body["mask"]
            if not 0 < mask < 1 << width:
                raise self.fail(at, f"mask 0x{mask:x} does not fit a {word_type}")
            self._only(body, {"mask", "enum", "display", "doc", "info"}, at)
            spec = self._field(str(part), {"type": _UNSIGNED[word_type], **body}, at, siblings=[])
            parts.append(spec)
        return tuple(parts)

    def _switch(
        self, name: str, attrs: Mapping[str, Any], siblings: Mapping[str, FieldSpec], where: str
    ) -> dict[str, Any]:
        on = attrs.get("by")  # not "on": YAML 1.1 reads that key as true
        ref = siblings.get(on) if isinstance(on, str) else None
        if ref is None or ref.type not in INT_TYPES:
            raise self.fail(where, f"'by' refers to {on!r}, which is not an earlier integer field")
        cases = attrs.get("cases")
        if not isinstance(cases, Mapping) or not cases or not all(isinstance(k, int) for k in cases):
            raise self.fail(where, "'cases' must map selector values to types")
        built = {
            int(k): self._field(name, body, f"{where}.cases.{k}", siblings=[], element=True)
            for k, body in cases.items()
        }
        default = attrs.get("default")
        out: dict[str, Any] = {"on": on, "cases": built}
        if default is not None:
            out["default"] = self._field(name, default, f"{where}.default", siblings=[], element=True)
        if attrs.get("inline"):
            for k, case in (*built.items(), ("default", out.get("default"))):
                if case is not None and not case.fields:
                    raise self.fail(f"{where}.cases.{k}", "an inline switch's cases must be structs")
        return out

    def _when(
        self, when: Any, siblings: Mapping[str, FieldSpec], where: str
    ) -> tuple[str, tuple[int, ...], int | None]:
        if not isinstance(when, Mapping) or len(when) != 1:
            raise self.fail(where, "'when' must be {sibling_field: [values]} or {sibling_field: {mask, is}}")
        ((ref_name, values),) = when.items()
        ref = siblings.get(ref_name)
        if ref is None or ref.type not in INT_TYPES:
            raise self.fail(where, f"'when' refers to {ref_name!r}, which is not an earlier integer field")
        mask = None
        if isinstance(values, Mapping):
            if set(values) != {"mask", "is"} or not isinstance(values["mask"], int):
                raise self.fail(where, "'when' with a mask must be {mask: bits, is: [values]}")
            mask, values = values["mask"], values["is"]
        if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
            raise self.fail(where, "'when' values must be a list of integers")
        return (str(ref_name), tuple(values), mask)

    def _const(self, const: Any, type_name: str, attrs: Mapping[str, Any], where: str) -> int | bytes:
        if type_name in INT_TYPES:
            if not isinstance(const, int) or isinstance(const, bool):
                raise self.fail(where, "the 'const' of an integer field must be an integer")
            return const
        if type_name == "raw" and isinstance(attrs.get("size"), int):
            value = const.encode("latin-1") if isinstance(const, str) else None
            if value is None or len(value) != attrs["size"]:
                raise self.fail(where, f"'const' must be text of exactly {attrs['size']} bytes")
            return value
        raise self.fail(where, "'const' applies to integer fields and raw fields of a fixed size")

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


_UNSIGNED = {name: "uint" + name.removeprefix("u").removeprefix("int") for name in INT_TYPES}
_FIXED_WIDTHS = {"bool": 1, "ipv4": 4, "ipv6": 16}


def _fixed_width(spec: FieldSpec) -> int | None:
    """Bytes a field always takes, or None when its bytes say (or conditions decide)."""
    if spec.when or spec.optional:
        return None
    if spec.type in INT_TYPES:
        return INT_TYPES[spec.type][1]
    if spec.type in _FIXED_WIDTHS:
        return _FIXED_WIDTHS[spec.type]
    if spec.type == "raw" and isinstance(spec.size, int):
        return spec.size
    if spec.type == "struct":
        widths = [_fixed_width(member) for member in spec.fields]
        return None if None in widths else sum(widths)  # type: ignore[arg-type]
    return None


def flat_fields(specs: tuple[FieldSpec, ...]) -> Iterator[FieldSpec]:
    """Fields and what stands beside them under the same name scope: inline members, bit parts."""
    for spec in specs:
        yield spec
        yield from spec.bits
        if spec.inline:
            if spec.type == "switch":
                for case in (*spec.cases.values(), spec.default):
                    if case is not None:
                        yield from flat_fields(case.fields)
            else:
                yield from flat_fields(spec.fields)


def _by_name(specs: tuple[FieldSpec, ...], name: Any) -> FieldSpec | None:
    return next((s for s in flat_fields(specs) if s.name == name), None)


def _key_text(key: int | str) -> str:
    return f"0x{key:04x}" if isinstance(key, int) else repr(key)


def _field_at(
    commands: Mapping[str, Command], header: tuple[FieldSpec, ...], ref: Ref, kind: str | None = None
) -> FieldSpec | None:
    """The field a Command.path names: in the command's layouts (of one kind, or the first that
    has it), else, for a single name, in the header every frame has."""
    command = commands.get(ref.command)
    if command is None:
        return None
    for layout in command.layouts.values():
        if kind is None or layout.kind == kind:
            spec = _follow(layout.fields, list(ref.path))
            if spec is not None:
                return spec
    return _by_name(header, ref.path[0]) if len(ref.path) == 1 else None


def _follow(specs: tuple[FieldSpec, ...], path: list[str]) -> FieldSpec | None:
    """The field a dotted path names, stepping into structs and array elements."""
    spec = next((s for s in flat_fields(specs) if s.name == path[0]), None)
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
    for proto in protocols.values():
        _check_carrier(proto, protocols)
    return Registry(protocols)


def _check_carrier(proto: Protocol, protocols: Mapping[str, Protocol]) -> None:
    """A carried protocol names a carrier of the registry and a bytes field of it."""
    if proto.wiring.carried_by is None:
        return
    name, field_name = proto.wiring.carried_by
    carrier = protocols.get(name)
    if carrier is None:
        raise SpecError(f"{proto.source}: wiring.carried_by: no protocol {name!r} in the registry")
    spec = next((s for s in carrier.all_fields() if s.name == field_name), None)
    if spec is None or spec.type not in ("raw", "bytes"):
        raise SpecError(f"{proto.source}: wiring.carried_by: {name} has no raw or bytes field {field_name!r}")
    if proto.wiring.carried_where is not None:
        by = proto.wiring.carried_where[0]
        if not any(s.name == by and s.type == "string" for s in carrier.all_fields()):
            raise SpecError(f"{proto.source}: wiring.carried_by.where: {name} has no text field {by!r}")


@cache
def default_registry() -> Registry:
    """The registry shipped with streamdump, loaded once per process."""
    return load_registry()
