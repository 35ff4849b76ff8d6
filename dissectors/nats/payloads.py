"""NATS hooks: the headers of HPUB and HMSG, and what a payload holds (Lua twin: payloads.lua).

`header_block` reads the `NATS/1.0` line (a status code and its description when the server
sends one, as 503 when no one answers a request) and the `Name: value` lines, and says how
long the payload is: the line's total less the headers. `payload` shows a payload as JSON
(JetStream's API speaks it), text or bytes when a view asks, and reads a JetStream
acknowledgement subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
seq>.<time>.<pending>`, with a domain and account hash before the stream in newer servers)
on every decode, so stats and filters see the stream and sequences of delivered messages; a
JetStream API answer that carries an error gets its code and words, and a warning.
"""

from __future__ import annotations

import re
from typing import Any

from streamdump.codecs import lenient_json
from streamdump.spec.hooks import Hook
from streamdump.spec.keyed import title
from streamdump.spec.layout import Ctx, json_nodes
from streamdump.wire.findings import FINDINGS
from streamdump.wire.frame import Expert, Node

VERSION_LINE = "NATS/1.0"
# What separates words on these lines (ASCII only, as the server reads them).
BLANKS = " \t"
# Text with none of these (but CR, LF and tab) is shown as text.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
ACK_PREFIX = "$JS.ACK."
# A JetStream API answer names its type first: `{"type":"io.nats.jetstream.api.v1.…_response",`.
API_TYPE = b'"io.nats.jetstream.api.'
API_PEEK = 64
# What check() reads on every decode, in the order the tree shows it.
SHOWN = (
    "js_stream", "js_consumer", "js_delivered", "js_stream_seq", "js_consumer_seq", "js_pending",
    "js_error_code", "js_error",
)  # fmt: skip
# The numbers after stream and consumer in an acknowledgement subject, in order.
ACK_NUMBERS = ("js_delivered", "js_stream_seq", "js_consumer_seq", "js_timestamp", "js_pending")


class HeaderBlock(Hook):
    name = "header_block"

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        total, size = siblings.get("total_size"), siblings.get("header_size")
        if isinstance(total, int) and isinstance(size, int):
            if size > total:
                ctx.expert.append(
                    Expert("error", f"header size {size} is larger than the total size {total}", pos)
                )
            else:
                siblings["payload_size"] = total - size
        raw = bytes(value)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            ctx.expert.append(Expert("warn", "headers are not valid UTF-8", pos))
            text = raw.decode("utf-8", "replace")
        lines = text.split("\r\n")
        first = lines[0]
        if not first.startswith(VERSION_LINE):
            ctx.expert.append(
                Expert("warn", f"headers do not start with {VERSION_LINE}: {first[:40]!r}", pos)
            )
        else:
            rest = first[len(VERSION_LINE) :].strip(BLANKS)
            code, _, description = rest.partition(" ")
            if len(code) == 3 and code.isascii() and code.isdigit():  # statuses are three digits
                siblings["status"] = int(code)
                if description.strip(BLANKS):
                    siblings["status_text"] = description.strip(BLANKS)
        if raw and not raw.endswith(b"\r\n\r\n"):
            ctx.expert.append(Expert("warn", "headers do not end with an empty line (CRLF CRLF)", pos))
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, colon, val = line.partition(":")
            if not colon:
                ctx.expert.append(Expert("warn", f"header line without a colon: {line[:40]!r}", pos))
                continue
            name, val = name.strip(BLANKS), val.strip(BLANKS)
            headers[name] = f"{headers[name]}, {val}" if name in headers else val
        if headers:
            siblings["message_headers"] = headers

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        if node is None:
            return
        for name in ("status", "status_text"):
            if name in siblings:
                node.children.append(Node(None, title(name), pos, len(value), siblings[name]))
        headers = siblings.get("message_headers")
        if headers:
            holder = Node(None, title("message_headers"), pos, len(value), f"{len(headers)} headers")
            holder.children = [Node(None, name, pos, len(value), val) for name, val in headers.items()]
            node.children.append(holder)


class Payload(Hook):
    name = "payload"

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        reply = siblings.get("reply_to")
        if isinstance(reply, str) and reply.startswith(ACK_PREFIX):
            ack_parts(reply, siblings)
        if API_TYPE in bytes(value[:API_PEEK]):  # a JetStream API answer: read whole only then
            data = bytes(value)
            if b'"error"' in data:
                api_error(data, siblings, pos, ctx)

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        raw = bytes(value)
        if node is not None:  # what check() read, shown below the payload
            for name in SHOWN:
                if name in siblings:
                    node.children.append(Node(None, title(name), pos, len(raw), siblings[name]))
        if not raw:
            return
        name, content = content_of(raw)
        if name is None:
            return
        siblings[name] = content
        if node is not None:
            shown = Node(
                None, title(name), pos, len(raw), None if isinstance(content, dict | list) else content
            )
            if name == "data_json":
                shown.children = json_nodes(content, pos, len(raw))
            node.children.append(shown)


def api_error(raw: bytes, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
    """A JetStream API answer that says it failed: its code and the server's words."""
    try:
        answer = lenient_json.loads(raw.decode("utf-8"))[0]
    except (lenient_json.JsonError, UnicodeDecodeError):
        return
    error = answer.get("error") if isinstance(answer, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return
    assert isinstance(error, dict)
    description = error.get("description")
    siblings["js_error_code"] = code
    if isinstance(description, str):
        siblings["js_error"] = description
    detail = error.get("err_code")
    which = f" ({detail})" if isinstance(detail, int) else ""
    said = f": {description}" if isinstance(description, str) else ""
    text = f"JetStream API error {code}{which}{said}"
    ctx.expert.append(Expert("warn", text, pos, group=FINDINGS["api_error"].group))


def ack_parts(reply: str, siblings: dict[str, Any]) -> None:
    """A JetStream acknowledgement subject's stream, consumer and numbers."""
    tokens = reply[len(ACK_PREFIX) :].split(".")
    # Servers from 2.9 may write a domain and an account hash first (9 tokens, or 10+ with a random
    # suffix); older ones the stream first (7 tokens).
    if len(tokens) >= 9:
        tokens = tokens[2:]
    if len(tokens) < 7 or not all(t.isascii() and t.isdigit() for t in tokens[2:7]):
        return
    siblings["js_stream"], siblings["js_consumer"] = tokens[0], tokens[1]
    for name, token in zip(ACK_NUMBERS, tokens[2:7], strict=True):
        if name != "js_timestamp":
            siblings[name] = int(token)


def content_of(raw: bytes) -> tuple[str | None, Any]:
    """A payload as JSON where it is a JSON object or array, as text where it is text."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, None
    if text.lstrip(BLANKS + "\r\n")[:1] in ("{", "["):
        try:
            return "data_json", lenient_json.loads(text)[0]
        except lenient_json.JsonError:
            pass
    if CONTROL.search(text) is None:
        return "data_text", text
    return None, None
