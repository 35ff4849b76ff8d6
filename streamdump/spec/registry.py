"""The decoder registry: loads and validates the protocol specs in dissectors/.

A spec is data (YAML). This module turns it into immutable objects (spec/model.py: Protocol,
Command, Layout, FieldSpec) and rejects a bad spec with an error that names the file and the
entry; the syntax of fields (field_syntax.py) and of the conversation section
(conversation_syntax.py) are read by their own modules. Nothing here decodes bytes; see
layout.py for that.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from streamdump.spec.conversation_syntax import ConversationSyntax
from streamdump.spec.field_syntax import FieldSyntax
from streamdump.spec.frozen import Record, frozen
from streamdump.spec.model import (  # noqa: F401  (the registry's names, read from here too)
    BYTE_ORDERS,
    COMMAND_ATTRS,
    FRAME_ATTRS,
    FRAME_NAMES,
    FRAMING_ATTRS,
    HOOK_ATTRS,
    INT_TYPES,
    KEYED_TYPES,
    KINDS,
    SHORT_MAX,
    SNAKE,
    TOP_ATTRS,
    AdvertiseSpec,
    CloseSpec,
    Command,
    Conversation,
    EndingSpec,
    FieldSpec,
    FrameSpec,
    HookSpec,
    Layout,
    Protocol,
    Ref,
    SessionSpec,
    SpecError,
    Wiring,
    by_name,
    fixed_width,
    flat_fields,
    follow,
    key_text,
)


class _Builder(FieldSyntax, ConversationSyntax):
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
                    f"key {key_text(command.key)} already used by {by_key[command.key].name}",
                )
            by_key[command.key] = command
        answers: dict[int | str, int | str] = {}
        for command in commands.values():
            for layout in command.layouts.values():
                if layout.wire is None:
                    continue
                if layout.wire in by_key or layout.wire in answers:
                    raise self.fail(
                        f"commands.{command.name}.key", f"key {key_text(layout.wire)} is already used"
                    )
                answers[layout.wire] = command.key
        key_spec = by_name(header, frame.key)
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
        key = by_name(header, raw["key"])
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
            spec = by_name(header, body["field"])
            if spec is None or spec.type not in INT_TYPES or not isinstance(body["mask"], int):
                raise self.fail(f"{where}.{name}", f"{body['field']!r} is not an integer field of the header")
            marks[name] = (str(body["field"]), int(body["mask"]))
        response_key = raw.get("response_key", "field")
        if response_key not in ("field", "request"):
            raise self.fail(f"{where}.response_key", "must be 'field' or 'request'")
        entries = raw.get("entries")
        if entries is not None:
            spec = by_name(header, entries)
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
                names = self._hook_names(body.get("names"), adds, f"{where}.names")
                hooks[name] = HookSpec(name=name, doc=body.get("doc"), adds=adds, names=names)
            for struct_name in self.raw_hook_structs:
                self._struct(struct_name, f"hook_structs.{struct_name}")
        return hooks

    def _hook_names(
        self, raw: Any, adds: tuple[FieldSpec, ...], where: str
    ) -> tuple[str, tuple[tuple[str, tuple[tuple[str, str], ...]], ...]] | None:
        """A hook's names: {by: a text field, patterns: [{pattern: TEXT, FIELD: VALUE...}]}, every
        `{field}` token and fixed value naming a text field the hook adds."""
        if raw is None:
            return None
        shape = "must be {by: FIELD, patterns: [{pattern: 'a.{field}.>', ADDED_FIELD: VALUE}]}"
        if (
            not isinstance(raw, Mapping)
            or set(raw) != {"by", "patterns"}
            or not isinstance(raw["patterns"], list)
        ):
            raise self.fail(where, shape)
        text = {spec.name for spec in flat_fields(adds) if spec.type == "string"}
        patterns = []
        for index, entry in enumerate(raw["patterns"]):
            at = f"{where}.patterns[{index}]"
            if (
                not isinstance(entry, Mapping)
                or not isinstance(entry.get("pattern"), str)
                or not entry["pattern"]
            ):
                raise self.fail(at, shape)
            pattern = entry["pattern"]
            tokens = pattern.split(".")
            for position, token in enumerate(tokens):
                if token.startswith("{"):
                    field_name = token[1:-2] if token.endswith(">}") else token[1:-1]
                    if token.endswith(">}") and position != len(tokens) - 1:
                        raise self.fail(at, f"{token} takes the rest of the name: it must come last")
                    if not token.endswith("}") or field_name not in text:
                        raise self.fail(at, f"{token}: the hook adds no text field {field_name!r}")
            fixed = tuple((str(k), v) for k, v in entry.items() if k != "pattern")
            for key, value in fixed:
                if key not in text or not isinstance(value, str):
                    raise self.fail(at, f"{key}: must be a text field the hook adds, given a text value")
            patterns.append((pattern, fixed))
        return str(raw["by"]), tuple(patterns)

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
        specs = [follow(layout.fields, parts[1:]) for layout in command.layouts.values()]
        if len(parts) == 2:  # a header field every frame has
            specs.append(by_name(self.header, parts[1]))
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
        tls_ports = raw.get("tls_ports") or []
        if not isinstance(tls_ports, list) or not all(
            isinstance(p, int) and 0 < p < 65536 for p in tls_ports
        ):
            raise self.fail("wiring.tls_ports", f"tls_ports must be TCP port numbers, got {tls_ports!r}")
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
                width = fixed_width(spec)
                if width is None:
                    raise self.fail("wiring.framing.length", f"{spec.name!r} before it has no fixed width")
                offset += width
            else:
                raise self.fail("wiring.framing.length", f"{length!r} is not a header field")
            spec = by_name(header, length)
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
            tls_ports=tuple(tls_ports),
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
                raise self.fail(where, f"key {key_text(key)} has the response bit 0x{marker[1]:x} set")
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
        spec = by_name(self.header, self.frame.key) if self.frame is not None else None
        if isinstance(key, str) and spec is not None and spec.type in INT_TYPES and spec.enum in self.enums:
            names = {label: value for value, label in self.enums[spec.enum].items()}
            if key not in names:
                raise self.fail(where, f"{key!r} is not a name of the enum {spec.enum}")
            return names[key]
        return key


def load_spec(
    path: Path | str, text: str | None = None, *, package: str | None = None, source: str | None = None
) -> Protocol:
    """Load and validate one spec file (text may be given to load from memory).

    package: the Python package holding the protocol's code (hooks, framing, messages), if any.
    """
    from streamdump.spec.spec_yaml import parse

    path = Path(path)
    source = source or path.name
    try:
        content = text if text is not None else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{source}: cannot read: {exc.strerror}") from None
    raw = parse(content, source)
    if not isinstance(raw, Mapping):
        raise SpecError(f"{source}: top level must be a mapping")
    return _Builder(source, raw, package).build()


SPEC_FILE = "spec.yaml"
# Protocol folders ship inside streamdump as this package; each is a subpackage.
PACKAGE = "streamdump.dissectors"


def spec_dir() -> Path:
    """Where the protocol folders are: inside the installed package, or dissectors/ in a source tree."""
    package = Path(__file__).resolve().parent.parent  # the streamdump folder (read as files, not from a zip)
    packaged = package / "dissectors"
    return packaged if packaged.is_dir() else package.parent / "dissectors"


@frozen
class Registry(Record):
    """Every protocol of the registry, by name."""

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
    """The registry shipped with streamdump, loaded once per process: from the cache when the
    specs and the code that compiles them are as they were (spec/cache.py), else from the specs."""
    from streamdump.spec import cache

    directory = spec_dir()
    try:
        key = registry_key(directory)
    except OSError:  # a spec or source that cannot be read: the specs say why, as they always did
        return load_registry(directory)
    # A copy for each installed streamdump or checkout: two on one machine keep theirs side by side.
    kind = f"registry-{cache.place(directory)}"
    return cache.kept(kind, key, lambda: load_registry(directory), Registry)


def registry_key(directory: Path) -> str:
    """What the compiled registry is kept under: the specs' content, the code's sizes and times."""
    from streamdump import __version__
    from streamdump.spec import cache

    specs = sorted(directory.glob(f"*/{SPEC_FILE}"))
    code = cache.python_stamps(Path(__file__).resolve().parent.parent, directory)
    return cache.digest(specs, code, __version__)
