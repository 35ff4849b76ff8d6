"""What a protocol spec is once loaded: the registry's immutable objects and the vocabulary of
the spec syntax (types, attributes, the frame's own names).

Protocol, Command, Layout, FieldSpec and the conversation's generic parts are plain frozen
dataclasses (frozen records, spec/frozen.py: cheap to define at every start, compact in the
registry's cache); registry.py builds them from YAML and refuses a bad spec. Nothing here reads
a file or decodes bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import field
from typing import Any

from streamdump.spec.frozen import Record, frozen

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
HOOK_ATTRS = {"doc", "adds", "value", "names"}
# The conversation section's keys the tracker engine reads; any other key is a rule's of the
# protocol's package (analysis/rules.py), which parses it.
CONVERSATION_ATTRS = {
    "correlation",
    "status",
    "close",
    "close_hints",
    "ending",
    "setup",
    "peer_properties",
    "sessions",
    "links",
    "codes",
    "server",
    "identity",
    "advertises",
}
# The links the tracker engine sets for each feature a spec uses (a rule declares its own).
TRACKER_LINKS = {
    "correlation": ("request_in", "response_in", "response_time"),
    "sessions": ("opened_in",),
}
SESSION_ATTRS = {"id", "open", "close", "close_after", "keep", "used_by", "unknown"}
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


class SpecError(ValueError):
    """A spec file is malformed; the message names the file and the entry."""


@frozen
class FieldSpec(Record):
    """One field of a header, layout, struct or hook's output, as its spec declares it."""

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


@frozen
class HookSpec(Record):
    """A piece of decoding the grammar cannot say, and the fields it adds beside its field."""

    name: str
    doc: str | None
    adds: tuple[FieldSpec, ...]
    # What a text field beside the hook's names (a subject): (that field, its patterns), each
    # pattern (its text, the fixed values it gives added fields); `{field}` tokens take the
    # name's tokens into added fields (wire/wildcards.py). The first pattern that matches wins.
    names: tuple[str, tuple[tuple[str, tuple[tuple[str, str], ...]], ...]] | None = None


@frozen
class Layout(Record):
    """The fields of one command in one direction (kind), for every version."""

    command: str
    kind: str
    key: int | str  # the command key
    fields: tuple[FieldSpec, ...]
    # The key field's value for this kind when it is not the command key: protocols whose
    # responses have keys of their own (HELLO_REQUEST answered by HELLO_RESPONSE).
    wire: int | str | None = None


@frozen
class Command(Record):
    """One command: its key, who sends it, its versions and its layout in each direction."""

    name: str
    key: int | str
    sender: str
    versions: tuple[int, ...]
    doc: str | None
    layouts: Mapping[str, Layout]  # kind -> layout


@frozen
class Wiring(Record):
    """Where the protocol runs and how its PDUs are delimited on the byte stream."""

    transport: str
    ports: tuple[int, ...]
    max_size: int  # a sanity cap on one PDU, in bytes
    # Ports where the server speaks it inside TLS (decrypted with a key log; in Wireshark, tls.port).
    tls_ports: tuple[int, ...] = ()
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


@frozen
class FrameSpec(Record):
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


@frozen
class Ref(Record):
    """A field named as Command.field or Command.array.field (each element's field)."""

    command: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return ".".join((self.command, *self.path))


@frozen
class SessionSpec(Record):
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


@frozen
class CloseSpec(Record):
    """A command by which the server ends a client's connection or sends it elsewhere."""

    command: str
    code: str | None  # the field with its code (None: the command has none)
    reason: tuple[str, ...]  # fields saying why or where to, written joined by ':'
    says: str = "closed the connection"  # what the server did, as diagnoses put it
    enum: str | None = None  # the code's names
    # How a close without a code is noted: a note (a goodbye) or an error (a refusal).
    severity: str = "note"


@frozen
class AdvertiseSpec(Record):
    """An answer telling the client where to connect: host and port fields (paths through arrays),
    an "host:port" text (a path; a map's values), or a map's two entries (entries: the map)."""

    command: str
    host: tuple[str, ...] | None = None
    port: tuple[str, ...] | None = None
    address: tuple[str, ...] | None = None
    entries: str | None = None


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


@frozen
class EndingSpec(Record):
    """How a connection ends in order: the command a peer sends before it closes TCP, and what
    an end without it suggests, by the command the server had sent just before."""

    close: str
    hints: Mapping[str, str] = field(default_factory=dict)


@frozen
class Conversation(Record):
    """How frames of one connection relate: the spec's conversation section."""

    correlation: str | None = None
    status: str | None = None
    ok: frozenset[int] = frozenset()
    routine: frozenset[int] = frozenset()
    closes: tuple[CloseSpec, ...] = ()
    close_hints: Mapping[int, str] = field(default_factory=dict)
    # Which of the client's frames a closing code is about (CLOSE_ABOUT), where not its last.
    close_about: Mapping[int, str] = field(default_factory=dict)
    # How a connection ends in order: the command sent before TCP closes, and hints.
    ending: EndingSpec | None = None
    setup: frozenset[str] = frozenset()
    peer_properties: Ref | None = None
    sessions: Mapping[str, SessionSpec] = field(default_factory=dict)
    links: tuple[FieldSpec, ...] = ()
    # How status codes are written in diagnoses: "hex" (0x02) or "dec" (17).
    codes: str = "hex"
    # What the server is called in diagnoses (ports may name it otherwise: wiring.roles).
    server: str = "server"
    # The response field with the server's own words about a status (a remark).
    status_text: str | None = None
    # Who a peer is, from fields every frame carries: property (product, version) -> field.
    # property -> its header field, or the Command.field of each frame that introduces a peer.
    identity: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Answers telling the client where to connect next (a broker list, an advertised address).
    advertises: tuple[AdvertiseSpec, ...] = ()
    # The package's own rules this spec uses: the rule's key -> its section, as the rule parsed it.
    rules: Mapping[str, Any] = field(default_factory=dict)


@frozen
class Protocol(Record):
    """One protocol's spec, compiled: what the decoder, the tracker and the generators read."""

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
        return field_at(self.commands, self.header, ref, kind)

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


UNSIGNED = {name: "uint" + name.removeprefix("u").removeprefix("int") for name in INT_TYPES}
FIXED_WIDTHS = {"bool": 1, "ipv4": 4, "ipv6": 16}


def fixed_width(spec: FieldSpec) -> int | None:
    """Bytes a field always takes, or None when its bytes say (or conditions decide)."""
    if spec.when or spec.optional:
        return None
    if spec.type in INT_TYPES:
        return INT_TYPES[spec.type][1]
    if spec.type in FIXED_WIDTHS:
        return FIXED_WIDTHS[spec.type]
    if spec.type == "raw" and isinstance(spec.size, int):
        return spec.size
    if spec.type == "struct":
        widths = [fixed_width(member) for member in spec.fields]
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


def by_name(specs: tuple[FieldSpec, ...], name: Any) -> FieldSpec | None:
    return next((s for s in flat_fields(specs) if s.name == name), None)


def key_text(key: int | str) -> str:
    return f"0x{key:04x}" if isinstance(key, int) else repr(key)


def field_at(
    commands: Mapping[str, Command], header: tuple[FieldSpec, ...], ref: Ref, kind: str | None = None
) -> FieldSpec | None:
    """The field a Command.path names: in the command's layouts (of one kind, or the first that
    has it), else, for a single name, in the header every frame has."""
    command = commands.get(ref.command)
    if command is None:
        return None
    for layout in command.layouts.values():
        if kind is None or layout.kind == kind:
            spec = follow(layout.fields, list(ref.path))
            if spec is not None:
                return spec
    return by_name(header, ref.path[0]) if len(ref.path) == 1 else None


def follow(specs: tuple[FieldSpec, ...], path: list[str]) -> FieldSpec | None:
    """The field a dotted path names, stepping into structs and array elements."""
    spec = next((s for s in flat_fields(specs) if s.name == path[0]), None)
    while spec is not None and spec.of is not None:
        spec = spec.of
    if spec is None or len(path) == 1:
        return spec
    return follow(spec.fields, path[1:])
