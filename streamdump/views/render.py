"""Turns decoded frames into what users read: one line per frame, JSON objects and detail trees.

What each view shows comes from the registry: info labels for the one-line view,
enum names and display hints for values, field names for JSON keys.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from streamdump.codecs.values import plain_float
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import MessageRules, dissector_of
from streamdump.spec.layout import title
from streamdump.spec.registry import INT_TYPES, KEYED_TYPES, FieldSpec, Protocol, flat_fields
from streamdump.views.safe import json_bytes, json_text, quoted, safe_text
from streamdump.wire.frame import Frame, Node

if TYPE_CHECKING:  # rich loads with the first tree drawn
    from rich.tree import Tree

PREVIEW_BYTES = 24
_PACKET_DISPLAYS = ("packet", "request_packet", "response_packet")


class Branch(Struct):
    """One line of a frame's detail tree, as data: its text as decoded (escaped where it is
    shown), its style, the bytes it stands for (offset and length in the frame; None for what
    the tracker added) and, for a link, the packets of the frames it names."""

    text: str
    style: str = ""
    offset: int | None = None
    length: int = 0
    children: list[Branch] = field(default_factory=list)
    links: tuple[int, ...] = ()

    def add(self, child: Branch) -> Branch:
        self.children.append(child)
        return child


def _rich(branch: Branch, parent: Tree | None = None) -> Tree:
    """A branch and those below it as a rich Tree, every label escaped (rich never reads markup)."""
    from rich.tree import Tree

    label = safe_text(branch.text, style=branch.style)
    node = Tree(label) if parent is None else parent.add(label)
    for child in branch.children:
        _rich(child, node)
    return node


class Renderer:
    """Views of one protocol's frames."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.protocol: Protocol = decoder.protocol
        # Header fields the one-line view shows (a correlation id, a status), before the layout's.
        first: dict[str, FieldSpec] = {}  # a name in several switch cases: its first field
        for spec in flat_fields(self.protocol.header):
            first.setdefault(spec.name, spec)
        self.header_info = tuple(s for s in first.values() if s.info)
        # The Protocol column: the plugin's short name, padded to the widest of a read's protocols.
        self.short = self.protocol.short
        self.column = len(self.short)
        self.command_names = {c.key: c.name for c in self.protocol.commands.values()}
        # The fields of each (command key, response?)'s layout, looked up once: asked per line.
        self._info_specs: dict[tuple[Any, bool], tuple[FieldSpec, ...]] = {}
        # Of each tuple of specs, those that can add to the one line (by the tuple's identity,
        # the tuple kept beside): an INFO object's eighteen members are two.
        self._shown_of: dict[int, tuple[tuple[FieldSpec, ...], tuple[FieldSpec, ...]]] = {}
        # Links that name other frames by their packet (Request In, Response In, Opened In...).
        self.packet_links = frozenset(
            spec.name
            for spec in self.protocol.conversation.links
            if spec.display in _PACKET_DISPLAYS
            or (spec.of is not None and spec.of.display in _PACKET_DISPLAYS)
        )
        self._rules: MessageRules | None = None  # the package's message rules, with the first JSON line
        # A protocol whose header has no version: JSON says none was on the wire.
        self.versioned = self.protocol.versioned
        # Layouts (key, response?) whose frames orjson writes as json.dumps would: no float
        # can be in them, or only inside AMQP messages, whose JSON is checked as it is made.
        self.orjson_layouts: frozenset[tuple[Any, bool]] = frozenset(
            ()
            if _floats_possible(self.protocol.header, self.protocol)
            else (
                (layout.key, layout.kind == "response")
                for command in self.protocol.commands.values()
                for layout in command.layouts.values()
                if not _floats_possible(layout.fields, self.protocol)
            )
        )

    # ------------------------------------------------------------ one line

    def info(self, frame: Frame) -> str:
        parts: list[str] = []
        response = frame.kind == "response"
        try:
            specs = self._info_specs[frame.key, response]
        except KeyError:
            layout = self.protocol.layout(frame.key, response)
            specs = self._info_specs[frame.key, response] = layout.fields if layout else ()
        except TypeError:  # a key that is no dict's (a keyed header's list)
            layout = self.protocol.layout(frame.key, response)
            specs = layout.fields if layout else ()
        for spec in self.header_info:
            value = frame.fields.get(spec.name)
            # The key field of a request is its command (shown already); empty header text says nothing.
            if value is None or value == "" or (spec.name == self.protocol.frame.key and not response):
                continue
            parts.append(f"{spec.info}={self.short_value(spec, value, response)}")
        self._info_parts(specs, frame.fields, parts, response)
        worst = frame.worst_severity if frame.expert else None
        if worst in ("warn", "error"):
            first = next(e for e in frame.expert if e.severity == worst)
            parts.append(f"[{worst}: {first.message}]")
        return " ".join(parts)

    def _shown(self, specs: tuple[FieldSpec, ...]) -> tuple[FieldSpec, ...]:
        """The specs _info_parts can take anything from: those with an Info label, and those
        whose members or hook's fields have one."""
        got = self._shown_of.get(id(specs))
        if got is not None and got[0] is specs:
            return got[1]
        kept = tuple(spec for spec in specs if self._shows(spec))
        self._shown_of[id(specs)] = (specs, kept)
        return kept

    def _shows(self, spec: FieldSpec) -> bool:
        if spec.info is not None:
            return True
        hook = self.protocol.hooks.get(spec.hook) if spec.hook is not None else None
        return bool(
            (spec.fields and (spec.inline or spec.type in KEYED_TYPES) and self._shown(spec.fields))
            or (hook is not None and self._shown(hook.adds))
        )

    def _info_parts(
        self, specs: tuple[FieldSpec, ...], values: dict[str, Any], parts: list[str], response: bool
    ) -> None:
        for spec in self._shown(specs):
            if spec.inline and spec.fields:  # its members stand among the layout's own
                self._info_parts(spec.fields, values, parts, response)
                continue
            if spec.name not in values:
                continue
            if spec.hook is not None:  # what its hook adds beside it, where the spec labels it
                hook = self.protocol.hooks.get(spec.hook)
                self._info_parts(hook.adds if hook else (), values, parts, response)
                if spec.info is None:
                    continue
            value = values[spec.name]
            if spec.type in KEYED_TYPES and isinstance(value, dict) and spec.fields:
                self._info_parts(spec.fields, value, parts, response)
            elif spec.info is None:
                continue
            elif spec.type in ("array", "map"):
                count = len(value) if isinstance(value, list | dict) else "null" if value is None else value
                parts.append(f"{spec.info}={count}")
            else:
                parts.append(f"{spec.info}={self.short_value(spec, value, response)}")

    def enum_of(self, spec: FieldSpec, response: bool) -> dict[Any, str] | None:
        """The names of a field's values: its response names in responses, the commands' for `commands`."""
        name = spec.response_enum if response and spec.response_enum else spec.enum
        if name is None:
            return None
        if name == "commands":
            return self.command_names
        return self.protocol.enums[name]  # type: ignore[return-value]

    def short_value(self, spec: FieldSpec, value: Any, response: bool = False) -> str:
        if value is None:
            return "null"
        names = self.enum_of(spec, response)
        if names is not None:
            name = names.get(value)
            # Spelled as the tree and the expert texts spell it; quoted when it has spaces, as text is.
            return (quoted(name) if " " in name else name) if name else str(value)
        if spec.type == "string":
            return value if value and " " not in value else quoted(value)
        if spec.display == "hex":
            return f"0x{value:x}"
        return str(value)

    def line(self, frame: Frame, when: str) -> str:
        """The frame's line: packet, time (as the caller's clock writes it), endpoints, protocol,
        command, kind, the key as on the wire (unless it only says the command's name again)
        and the key fields. Text as decoded: the writer escapes it."""
        where = f"{frame.src!s:>21} → {frame.dst!s:<21} " if frame.src else ""
        name = frame.name
        wire = self.decoder.wire_text(frame)
        said = f"{name} {frame.kind}" if wire.lower() == name.lower() else f"{name} {frame.kind} {wire}"
        line = (
            f"{frame.number:>6} {when} {where}{self.short:<{self.column}} {said} {self.info(frame)}".rstrip()
        )
        if frame.tls is not None:  # decrypted: the layer it came through, as Wireshark's column says
            line += f" [{frame.tls.version or 'TLS'}]"
        return line

    # ------------------------------------------------------------ JSON

    def to_dict(self, frame: Frame, with_bytes: bool = False) -> dict[str, Any]:
        """The frame as JSON-ready data, records and message sections included; with_bytes: its
        bytes as hex and the packets they came from too (-x)."""
        self.decoder.expand(frame)
        return self._dict(frame, frame.fields, with_bytes)

    def _dict(self, frame: Frame, fields: Any, with_bytes: bool) -> dict[str, Any]:
        data = {
            "frame": frame.number,
            "ts": round(frame.ts, 6),
            "src": str(frame.src) if frame.src else None,
            "dst": str(frame.dst) if frame.dst else None,
            "protocol": frame.protocol,
            "key": frame.key,
            "kind": frame.kind,
            "command": frame.command,
            "version": frame.version if self.versioned else None,
            "size": frame.size,
            "connection": frame.conn or None,
            "fields": fields,
            "links": frame.links or {},
            "expert": [e.as_dict() for e in frame.expert],
        } | ({"incomplete": frame.incomplete} if frame.incomplete is not None else {})
        if frame.tls is not None:
            data["tls"] = frame.tls.as_dict()
        if with_bytes:
            data["bytes"] = bytes(frame.data).hex()
            data["packets"] = sorted(set(frame.packets))
        return data

    def json_line(self, frame: Frame, with_bytes: bool = False) -> str:
        line = self.json_text(frame, with_bytes)
        return line.decode() if isinstance(line, bytes) else line

    def json_text(self, frame: Frame, with_bytes: bool = False) -> bytes | str:
        """The frame's JSON line, without its newline: orjson's UTF-8 bytes where they are what
        json.dumps writes (the frames that carry messages), json.dumps's text otherwise."""
        orjson_layout = (frame.key, frame.kind == "response") in self.orjson_layouts
        # A frame whose package writes its expanded fields' JSON from its decode alone (hundreds
        # of messages) is not expanded: its records would be made only to be written.
        bare = None
        if orjson_layout and not frame.expanded:
            if self._rules is None:
                self._rules = dissector_of(self.protocol).messages(self.protocol)
            bare = self._rules.bare_fields_json(frame, self.decoder.limits.records)
        data = self.to_dict(frame, with_bytes) if bare is None else self._dict(frame, 0, with_bytes)
        if orjson_layout and _plain_float(data["ts"]) and _plain_links(data["links"]):
            import orjson  # with the first JSON line: text views never load it (nor the zoneinfo it loads)

            try:
                out = orjson.dumps(
                    data,
                    default=_orjson_default,
                    # Records with JSON forms of their own (an Osiris entry, an AMQP message) go to
                    # _orjson_default: orjson writes no Struct, and a dataclass passes through.
                    option=orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME,
                )
            except TypeError:  # what orjson refuses (ints past 64 bits, surrogates), a float in a message
                pass
            else:
                if bare is not None:  # the first "fields" outside a string (keys are never wire text)
                    out = out.replace(b'"fields":0,', b'"fields":' + bare + b",", 1)
                # Line and paragraph separators (readers that split lines on every Unicode line
                # break keep one per frame), bidi and C1 controls as JSON escapes: exact, and
                # nothing a terminal acts on.
                return json_bytes(out)
        if bare is not None:  # json.dumps writes it: expanded after all
            data = self.to_dict(frame, with_bytes)
        return json_text(json.dumps(data, default=_json_default, ensure_ascii=False, separators=(",", ":")))

    # ------------------------------------------------------------ tree

    def outline(self, frame: Frame, when: str) -> Branch:
        """The frame's field tree as data: each branch's text (as decoded: views escape it), its
        style, the bytes of the frame it stands for (offset, length), and for a link to another
        frame, that frame's packet. The text tree (`tree`) and the terminal UI both draw it."""
        where = f" {frame.src} → {frame.dst}," if frame.src else ""
        at = f", t={when.strip()}" if frame.src else ""
        root = Branch(f"Frame {frame.number}:{where} {len(frame.data)} bytes{at}", "bold", 0, len(frame.data))
        if frame.tls is not None:
            info = frame.tls
            layer = root.add(Branch(f"Transport Layer Security: {info.summary()}", "bold"))
            for label, value in (
                ("Version", info.version),
                ("Cipher Suite", info.suite),
                ("Server Name", info.sni),
                ("ALPN", info.alpn),
                ("Resumed", "yes" if info.resumed else None),
                ("Keys", info.keys),
                ("Client Random", info.client_random),
            ):
                if value is not None:
                    layer.add(Branch(f"{label}: {value}"))
        proto = root.add(
            Branch(f"{self.protocol.title}, {frame.name} {frame.kind}", "bold cyan", 0, len(frame.data))
        )
        response = frame.kind == "response"
        for node in self.decoder.tree(frame):
            self._add(proto, node, response)
        if frame.links:
            # Like Wireshark's generated fields: not bytes of this frame, so in brackets.
            for name, value in frame.links.items():
                branch = proto.add(Branch(f"[{title(name)}: {self._link_value(name, value)}]", "dim"))
                if name in self.packet_links:
                    branch.links = tuple(
                        v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)
                    )
        self.decoder.expand(frame)  # the expert notes of what lies below the headers too
        if frame.expert:
            experts = root.add(Branch("Expert Info", "bold"))
            for e in frame.expert:
                style = {"error": "bold red", "warn": "yellow"}.get(e.severity, "")
                where = f" @{e.offset}" if e.offset is not None else ""
                experts.add(
                    Branch(
                        f"[{e.severity}] {e.message}{where}",
                        style,
                        e.offset,
                        1 if e.offset is not None else 0,
                    )
                )
        return root

    def tree(self, frame: Frame, when: str) -> Tree:
        """The frame's field tree, every label escaped as it becomes text (rich never reads markup
        in it); when: its time, as the caller's clock writes it."""
        return _rich(self.outline(frame, when))

    @staticmethod
    def _link_value(name: str, value: Any) -> str:
        if isinstance(value, list):
            shown = ", ".join("?" if v is None else Renderer._link_value(name, v) for v in value[:8])
            return shown + (f", … ({len(value)} in all)" if len(value) > 8 else "")
        if isinstance(value, float):
            return f"{value * 1000:.3f} ms" if name.endswith("_time") else str(value)
        if isinstance(value, str):
            return quoted(value)
        return str(value)

    def _add(self, parent: Branch, node: Node, response: bool = False) -> None:
        text = f"{node.label}: {self.display(node, response)}" if self._has_value(node) else node.label
        branch = parent.add(Branch(text, "", node.offset, node.length))
        for child in node.children:
            self._add(branch, child, response)

    @staticmethod
    def _has_value(node: Node) -> bool:
        # Hook nodes carry their text in the label; containers of named members show them.
        if node.spec is None:
            return node.value is not None
        if (node.spec.type in KEYED_TYPES or node.spec.type == "switch") and isinstance(node.value, dict):
            return False
        return node.spec.type not in ("struct", "hook")

    def display(self, node: Node, response: bool = False) -> str:
        spec, value = node.spec, node.value
        if spec is None:
            if isinstance(value, bytes | memoryview):
                return _bytes_preview(value)
            return quoted(value) if isinstance(value, str) else str(value)
        if node.children and spec.type in ("array", "map"):
            return f"{len(node.children)} {'entries' if spec.type == 'map' else 'items'}"
        return self.long_value(spec, value, response)

    def long_value(self, spec: FieldSpec, value: Any, response: bool = False) -> str:
        if value is None:
            return "null"
        if isinstance(value, bytes | memoryview):
            return _bytes_preview(value)
        if isinstance(value, str):
            return quoted(value)
        if isinstance(value, list):
            return f"{len(value)} items"
        if isinstance(value, dict):
            return f"{len(value)} entries"
        if spec.type in INT_TYPES:
            names = self.enum_of(spec, response)
            if names is not None:
                name = names.get(value, "Unknown")
                return f"{name} ({value})" if spec.display in ("dec", "name") else f"{name} (0x{value:02x})"
            if spec.display == "hex":
                return f"0x{value:0{INT_TYPES[spec.type][1] * 2}x}"
            if spec.display == "time_ms":
                return f"{_ms_time(value)} ({value})"
        return str(value)


def _ms_time(ms: int) -> str:
    try:
        when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return "out of range"
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def _bytes_preview(value: bytes | memoryview) -> str:
    data = bytes(value[:PREVIEW_BYTES])
    more = "…" if len(value) > PREVIEW_BYTES else ""
    return f"{data.hex()}{more} ({len(value)} bytes)"


def _plain_float(value: Any) -> bool:
    """Whether orjson writes this value as json.dumps does: not a float, or one Python writes
    without an exponent (orjson writes 1e-05 as 0.00001, 1e+16 as 1e16 and NaN as null)."""
    return type(value) is not float or plain_float(value)


def _plain_links(links: dict[str, Any]) -> bool:
    for value in links.values():
        kind = type(value)
        if kind is float:
            if not _plain_float(value):
                return False
        elif kind is list or kind is tuple or kind is dict:
            # Long lists of latencies: their repr, in C, shows any float Python writes with an
            # exponent (1e-05, 1e+16) or not at all (nan, inf). Text that looks so sends the
            # frame to json.dumps too, which is never wrong.
            text = repr(value)
            if "e-" in text or "e+" in text or "nan" in text or "inf" in text:
                return False
    return True


# Spec types whose values may be floats: what hooks compute, and parsed JSON.
_FLOAT_TYPES = frozenset({"float", "json"})


def _floats_possible(specs: tuple[FieldSpec, ...], protocol: Protocol) -> bool:
    """Whether decoded values of these fields (what their hooks add included) may hold a float
    outside an AMQP message: whole messages (an amqp field with members) go to message JSON."""
    for spec in specs:
        if spec.type in _FLOAT_TYPES or (spec.type == "amqp" and not spec.fields):
            return True
        if spec.type == "amqp":
            continue
        hook = protocol.hooks.get(spec.hook) if spec.hook is not None else None
        inner = (spec.of, spec.key, spec.value, spec.default, *spec.cases.values())
        if (
            (spec.hook is not None and (hook is None or _floats_possible(hook.adds, protocol)))
            or _floats_possible(spec.fields, protocol)
            or _floats_possible(spec.bits, protocol)
            or _floats_possible(tuple(s for s in inner if s is not None), protocol)
        ):
            return True
    return False


def _orjson_default(value: Any) -> Any:
    # Objects with a JSON form of their own: a message per record, an entry... Those whose form
    # may hold floats give it for a writer that writes floats otherwise than json.dumps. Looked
    # up once per type: a frame holds hundreds of messages.
    form = _PLAIN_FORMS.get(type(value))
    if form is None:
        kind = type(value)
        form = getattr(kind, "as_plain_json", None) or getattr(kind, "as_json", None) or _hex_or_refuse
        _PLAIN_FORMS[kind] = form
    return form(value)


def _hex_or_refuse(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    raise TypeError(f"cannot serialise {type(value).__name__}")


_PLAIN_FORMS: dict[type, Callable[[Any], Any]] = {}


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    as_json = getattr(value, "as_json", None)
    if as_json is not None:
        return as_json()
    raise TypeError(f"cannot serialise {type(value).__name__}")
