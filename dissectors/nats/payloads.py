"""NATS hooks: the headers of HPUB and HMSG, and what a payload holds (Lua twin: payloads.lua).

`header_block` reads the `NATS/1.0` line (a status code and its description when the server
sends one, as 503 when no one answers a request) and the `Name: value` lines, and says how
long the payload is: the line's total less the headers. `payload` shows a payload as JSON
(JetStream's API speaks it), text or bytes when a view asks, and reads a JetStream
acknowledgement subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
seq>.<time>.<pending>`, with a domain and account hash before the stream in newer servers)
on every decode, so stats and filters see the stream and sequences of delivered messages.
Also on every decode: what the subject names by the spec's `names` patterns (a JetStream API
call with its stream and consumer, a KV bucket and key, an object store bucket with its
chunks' id or its object's name, decoded, a service discovery request); an acknowledgement
by name; a KV entry's operation (its KV-Operation header) and revision; an object's
metadata; a JetStream answer wherever it lands (an API reply, a publish ack), with a warning
when it carries an error and a note when a publish ack says it was a duplicate; and a micro
service's error headers, with a warning where the answer is delivered.
"""

from __future__ import annotations

import base64
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
# What the server answers a JetStream publish with: a publish ack, or an error.
ANSWERS = (b'{"error":', b'{"stream":')
# An acknowledgement's word is at its start; its reason (+TERM) or delay (-NAK) may follow.
ACK_PEEK = 16
# An object's name in its metadata subject: base64 URL, padded or not.
NAME_TOKEN = re.compile(r"([A-Za-z0-9_-]*)(={0,2})")
# Object metadata larger than this is not read (real ones are a few hundred bytes).
MAX_META = 64 << 10
# What check() reads on every decode, in the order the tree shows it.
SHOWN = (
    "js_api",
    "js_stream",
    "js_consumer",
    "js_subject",
    "js_filter",
    "js_delivered",
    "js_stream_seq",
    "js_consumer_seq",
    "js_pending",
    "js_ack",
    "js_duplicate",
    "js_error_code",
    "js_err_code",
    "js_error",
    "kv_bucket",
    "kv_key",
    "kv_operation",
    "kv_revision",
    "obj_bucket",
    "obj_nuid",
    "obj_name",
    "obj_size",
    "obj_chunks",
    "obj_digest",
    "srv_verb",
    "srv_name",
    "srv_id",
)
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
        if not raw:
            return  # wire: a header block of size 0 is valid (nats.js 3.x: HPUB subject reply 0 size)
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
            service_error(headers, siblings, pos, ctx)

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
        for name in ("service_error", "service_error_code"):
            if name in siblings:
                node.children.append(Node(None, title(name), pos, len(value), siblings[name]))


class Payload(Hook):
    name = "payload"

    def __init__(self, protocol: Any) -> None:
        super().__init__(protocol)
        # The first token of every subject the spec's names read: others are not looked at.
        patterns = self.names_spec[1] if self.names_spec is not None else ()
        self.heads = frozenset(pattern.split(".", 1)[0] for pattern, _ in patterns)

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        subject = siblings.get("subject")
        headers = siblings.get("message_headers") or {}
        if isinstance(subject, str) and subject.partition(".")[0] in self.heads:
            named = self.names(subject)
            if "obj_name" in named:
                named["obj_name"] = object_name(named["obj_name"])
            siblings.update(named)
        elif "Nats-Subject" in headers and "sid" in siblings:
            # A direct get's answer, on an inbox: its headers name the message it is.
            origin = self.names(headers["Nats-Subject"])
            siblings.update({k: v for k, v in origin.items() if k.startswith(("kv_", "obj_"))})
            if "kv_key" in siblings:
                revision = headers.get("Nats-Sequence", "")
                if revision.isascii() and revision.isdigit():
                    siblings["kv_revision"] = int(revision)
        reply = siblings.get("reply_to")
        if isinstance(reply, str) and reply.startswith(ACK_PREFIX):
            ack_parts(reply, siblings)
        if "kv_key" in siblings:
            operation = headers.get("KV-Operation")
            siblings["kv_operation"] = operation.upper() if isinstance(operation, str) else "PUT"
            if "js_stream_seq" in siblings and "kv_revision" not in siblings:
                siblings["kv_revision"] = siblings["js_stream_seq"]  # a KV entry delivered by a consumer
        if isinstance(subject, str) and subject.startswith(ACK_PREFIX) and "sid" not in siblings:
            siblings["js_ack"] = ack_kind(bytes(value[:ACK_PEEK]))
        head = bytes(value[:API_PEEK])
        if API_TYPE in head or ("sid" in siblings and not reply and head.startswith(ANSWERS)):
            answer(bytes(value), siblings, pos, ctx)
        elif "obj_name" in siblings and head.startswith(b"{") and len(value) <= MAX_META:
            object_meta(bytes(value), siblings)
        found = [(name, siblings.pop(name)) for name in SHOWN if name in siblings]
        siblings.update(found)  # in the order the tree (and the plugin's) shows them

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


def service_error(headers: dict[str, str], siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
    """A micro service's error answer: Nats-Service-Error (its words) and -Code; told where it is
    delivered (a message of the server's), shown where it is sent too."""
    words = headers.get("Nats-Service-Error")
    code = headers.get("Nats-Service-Error-Code", "")
    if words is None and not code:
        return
    if words is not None:
        siblings["service_error"] = words
    number = int(code) if code.isascii() and code.isdigit() and len(code) < 10 else None
    if number is not None:
        siblings["service_error_code"] = number
    if "sid" in siblings:
        said = f": {words}" if words else ""
        ctx.expert.append(
            Expert(
                "warn",
                f"service error {code or '(no code)'}{said}",
                pos,
                group=FINDINGS["header_error"].group,
            )
        )


def answer(raw: bytes, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
    """A JetStream answer: an error (its code and the server's words, and a warning) wherever it
    lands, or a publish ack's stream and sequence (a duplicate noted)."""
    try:
        found = lenient_json.loads(raw.decode("utf-8"))[0]
    except (lenient_json.JsonError, UnicodeDecodeError):
        return
    if not isinstance(found, dict):
        return
    error = found.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, int) and not isinstance(code, bool):
        assert isinstance(error, dict)
        description = error.get("description")
        detail = error.get("err_code")
        siblings["js_error_code"] = code
        if isinstance(detail, int) and not isinstance(detail, bool):
            siblings["js_err_code"] = detail
        if isinstance(description, str):
            siblings["js_error"] = description
        which = f" ({detail})" if "js_err_code" in siblings else ""
        said = f": {description}" if isinstance(description, str) else ""
        ctx.expert.append(
            Expert("warn", f"JetStream error {code}{which}{said}", pos, group=FINDINGS["api_error"].group)
        )
        return
    stream, seq = found.get("stream"), found.get("seq")
    if "type" in found or not isinstance(stream, str) or not isinstance(seq, int) or isinstance(seq, bool):
        return
    siblings["js_stream"], siblings["js_stream_seq"] = stream, seq
    if found.get("duplicate") is True:
        siblings["js_duplicate"] = True
        ctx.expert.append(
            Expert(
                "note",
                f"duplicate publish: {stream} already had this Nats-Msg-Id (sequence {seq}); "
                "not stored again",
                pos,
                group=FINDINGS["duplicate"].group,
            )
        )


def ack_kind(head: bytes) -> str:
    """An acknowledgement's name: its first word (+ACK, -NAK, +WPI, +NXT, +TERM); an empty
    payload acknowledges too (+ACK)."""
    word = head.split(None, 1)[0] if head.strip() else b"+ACK"
    return word.decode("ascii", "replace")


def object_name(encoded: str) -> str:
    """An object's name from its metadata subject's token (base64 URL, padded or not); the token
    itself when it is not that."""
    found = NAME_TOKEN.fullmatch(encoded)
    if found is None or len(found[1]) % 4 == 1 or (found[2] and len(encoded) % 4):
        return encoded
    try:
        return base64.urlsafe_b64decode(found[1] + "=" * (-len(found[1]) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return encoded


def object_meta(raw: bytes, siblings: dict[str, Any]) -> None:
    """An object's metadata (published to $O.<bucket>.M.<name>): its chunks' id, size, chunk
    count and digest."""
    try:
        meta = lenient_json.loads(raw.decode("utf-8"))[0]
    except (lenient_json.JsonError, UnicodeDecodeError):
        return
    if not isinstance(meta, dict):
        return
    for name, key, kind in (
        ("obj_nuid", "nuid", str), ("obj_size", "size", int), ("obj_chunks", "chunks", int),
        ("obj_digest", "digest", str),
    ):  # fmt: skip
        found = meta.get(key)
        if isinstance(found, kind) and not isinstance(found, bool) and (kind is str or found >= 0):
            siblings[name] = found


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
