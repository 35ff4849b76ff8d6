"""EventMesh hooks: what a frame's message length counts, and what a message package holds
(Lua twin: packages.lua).

`length_convention` reads no bytes: it compares the message length with the frame the
framing rule cut (framing.py) and says which EventMesh generation wrote it. A length
that fits neither is an error: a reader of either generation misplaces the body.

`message_package` reads a message's body. The Java SDK sends a CloudEvent in its JSON
format (subject: the topic; data, or data_base64, the content) or an EventMeshMessage
(topic, properties, headers, body); the consumer's acknowledgement echoes the package
as a JSON string, read inside it. Topic and event id are taken on every decode; the
content (JSON where it parses, text where it is text, else bytes) when a view needs it.
"""

from __future__ import annotations

import base64
import binascii
import struct
from typing import Any

from streamdump.dissectors.eventmesh.framing import MAGIC, UNCOUNTED

from streamdump.codecs import lenient_json
from streamdump.spec.hooks import Hook
from streamdump.spec.keyed import title
from streamdump.spec.layout import Ctx, json_nodes
from streamdump.wire.frame import Expert, Node

_LENGTH = struct.Struct(">i")
LENGTH_AT = len(MAGIC)
# What length_counts says for each generation.
CONVENTIONS = {"1.9": "1.9: 13 + header + body", "1.8": "1.8: 8 + header + body"}


class LengthConvention(Hook):
    name = "length_convention"

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        if len(mv) < LENGTH_AT + 4:
            return None, pos
        (length,) = _LENGTH.unpack_from(mv, LENGTH_AT)
        size = len(mv)
        value = next((CONVENTIONS[g] for extra, g in UNCOUNTED if length + extra == size), None)
        if value is not None or ctx.partial:  # a cut frame's end is not in the capture: nothing to compare
            if node is not None and value is not None:
                node.label = f"Length Counts: {value}"
            return value, pos
        if node is not None:
            node.label = "Length Counts: neither"
        ctx.expert.append(
            Expert(
                "error",
                f"message length {length} fits neither convention for a {size}-byte frame: {size - 13} "
                f"(8 + header + body, up to 1.8) or {size - 8} (13 + header + body, 1.9 and later)",
                LENGTH_AT,
            )
        )
        return "neither", pos

    def write(self, buf: bytearray, value: Any) -> None:
        """Reads no bytes, writes none: the encoder's caller sets message_length."""


class MessagePackage(Hook):
    name = "message_package"

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        package = unwrap(value)
        if not isinstance(package, dict):
            return
        topic = package.get("subject", package.get("topic"))
        if isinstance(topic, str):
            siblings["topic"] = topic
        event_id = package.get("id")
        if isinstance(event_id, str) and "specversion" in package:
            siblings["event_id"] = event_id
        content_type = package.get("datacontenttype")
        if content_type is None and isinstance(package.get("headers"), dict):
            content_type = package["headers"].get("datacontenttype")
        if isinstance(content_type, str):
            siblings["content_type"] = content_type

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        package = unwrap(value)
        if not isinstance(package, dict):
            return
        if node is not None:
            for name in ("topic", "event_id", "content_type"):
                if name in siblings:
                    node.children.append(Node(None, title(name), pos, 0, siblings[name]))
        if "data_base64" in package:
            try:
                text = package["data_base64"]
                if not isinstance(text, str):
                    raise ValueError("not text")
                raw = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                ctx.expert.append(Expert("warn", "package: data_base64 is not base64", pos))
                return
            name, content = content_of(raw)
        elif "data" in package and "specversion" in package:
            name, content = "content", package["data"]
        elif isinstance(package.get("body"), str):
            name, content = content_of(package["body"].encode("utf-8"))
        else:
            return
        siblings[name] = content
        if node is not None:
            shown = Node(None, title(name), pos, 0, None if isinstance(content, dict | list) else content)
            shown.children = json_nodes(content, pos, 0) if name == "content" else []
            node.children.append(shown)


def unwrap(value: Any) -> Any:
    """A package, also when an acknowledgement echoes it as a JSON string."""
    if isinstance(value, str) and value[:1] == "{":
        try:
            return lenient_json.loads(value)[0]
        except lenient_json.JsonError:
            return value
    return value


def content_of(raw: bytes) -> tuple[str, Any]:
    """The content as JSON where it parses, as text where it is text, else as bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "content_bytes", raw
    try:
        return "content", lenient_json.loads(text)[0]
    except lenient_json.JsonError:
        return "content_text", text
