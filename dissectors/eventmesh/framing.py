"""Where an EventMesh frame ends, when its length field means two things (Lua twin: framing.lua).

A frame is the magic `EventMesh`, the version `0000`, the message length, the header
length, the JSON header and the body. EventMesh up to 1.8 (and the Go SDK) counts
8 + header + body in the message length, so the frame is length + 13 bytes; from 1.9
(Codec.java) it counts 13 + header + body, so the frame is length + 8. Nothing in a frame
says which, so the bytes after each candidate end decide: the next frame's magic there
confirms it. When the bytes stop exactly at a candidate end (a request waiting for its
answer), that end is taken if its body looks whole. A length that fits neither still
ends where the next magic starts, and the length_convention hook flags it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from streamdump.codecs import lenient_json
from streamdump.spec.decoder import Decoder
from streamdump.spec.framing_rules import DecodedRule
from streamdump.wire.framing import BAD

MAGIC = b"EventMesh0000"
PREFIX = len(MAGIC) + 8  # magic, version, message length, header length
_LENGTHS = struct.Struct(">ii")
# What the message length leaves out of the frame: 1.9 and later, then up to 1.8.
UNCOUNTED = ((8, "1.9"), (13, "1.8"))
_CLOSERS = {ord("{"): ord("}"), ord("["): ord("]"), ord('"'): ord('"')}
# Bodies up to this size are parsed to tell a whole one from one 5 bytes short.
PARSE_LIMIT = 64 << 10


def looks_whole(body: bytes | bytearray | memoryview) -> bool:
    """Whether a body could end here: empty, not JSON-like, or JSON that parses (a cut one does
    not); past PARSE_LIMIT bytes, JSON that closes what it opens."""
    text = bytes(body).strip()
    if not text:
        return True
    closer = _CLOSERS.get(text[0])
    if closer is None:
        return True
    if len(text) > PARSE_LIMIT:
        return len(text) > 1 and text[-1] == closer
    try:
        lenient_json.loads(text.decode("utf-8"))
    except (lenient_json.JsonError, UnicodeDecodeError, RecursionError):
        return False
    return True


def candidate_ends(length: int, header_length: int, limit: int) -> list[int]:
    """Where the frame may end (from its start), by each convention its lengths allow."""
    return [length + extra for extra, _ in UNCOUNTED if PREFIX + header_length <= length + extra <= limit]


class EventMeshRule(DecodedRule):
    header_len = PREFIX

    def __init__(self, decoder: Decoder) -> None:
        super().__init__(decoder)
        self.limit = decoder.max_frame

    def total(self, buf: bytes | bytearray, start: int) -> int | None:
        avail = len(buf) - start
        if avail < len(MAGIC):
            return None if MAGIC.startswith(bytes(buf[start:])) else BAD
        if not buf.startswith(MAGIC, start):
            return BAD
        if avail < PREFIX:
            return None
        length, header_length = _LENGTHS.unpack_from(buf, start + len(MAGIC))
        if length < 0 or not 0 <= header_length <= self.limit - PREFIX:
            return BAD
        ends = candidate_ends(length, header_length, self.limit)
        if ends and avail < ends[0]:
            # Not before this: the framer waits for these bytes and asks again, without a scan per segment.
            return ends[0]
        for end in ends:
            if avail >= end + len(MAGIC) and buf.startswith(MAGIC, start + end):
                return end  # the next frame starts right there
        # The ends still possible: not reached, reached exactly, or followed by the start of a magic.
        alive = [
            end for end in ends if avail <= end or MAGIC.startswith(bytes(buf[start + end : start + avail]))
        ]
        if len(alive) == 1:
            return alive[0]  # the other end is ruled out: this is the frame's
        if alive:
            # The bytes stop at the 1.9 end or just after it, where a magic may begin; up to 1.8
            # the frame would go on 5 bytes: take the 1.9 end if the body ends there whole.
            return ends[0] if looks_whole(buf[start + PREFIX + header_length : start + ends[0]]) else None
        # Neither end is followed by a frame: the length fits neither convention when a frame
        # starts before them (or when they are impossible), else bytes that are no frame follow.
        lowest = start + PREFIX + (header_length if ends else 0)
        highest = start + ends[0] + len(MAGIC) - 1 if ends else len(buf)  # a magic starting before the ends
        found = buf.find(MAGIC, lowest, highest)
        while found >= 0:
            if len(buf) - found < PREFIX:
                return None  # a frame's start, or text inside this body? its lengths will say
            if self.plausible(bytes(buf[found : found + PREFIX])):
                return found - start
            found = buf.find(MAGIC, found + 1, highest)
        if ends:
            return ends[0]  # hunting passes over what follows
        return None if avail <= self.limit else BAD

    def total_at_end(self, buf: bytes | bytearray, start: int) -> int | None:
        """With no byte to follow, bytes that stop exactly at a possible end are the frame."""
        total = self.total(buf, start)
        if total is None and len(buf) - start >= PREFIX and buf.startswith(MAGIC, start):
            length, header_length = _LENGTHS.unpack_from(buf, start + len(MAGIC))
            if len(buf) - start in candidate_ends(length, header_length, self.limit):
                return len(buf) - start
        return total

    def impossible(self, buf: bytes | bytearray, start: int, seq: int) -> str:
        if len(buf) - start >= PREFIX and buf.startswith(MAGIC, start):
            length, header_length = _LENGTHS.unpack_from(buf, start + len(MAGIC))
            return (
                f"after a message length of {length} and a header length of {header_length} "
                f"at seq {seq}, which is impossible"
            )
        return f"after bytes at seq {seq} that are not EventMesh's magic"

    def candidates(self, buf: bytearray, start: int) -> list[int]:
        out = []
        at = buf.find(MAGIC, start)
        while at >= 0:
            out.append(at)
            at = buf.find(MAGIC, at + 1)
        # A magic the bytes cut short may still start a frame once more arrive.
        tail = max(start, len(buf) - len(MAGIC) + 1)
        out += [i for i in range(tail, len(buf)) if MAGIC.startswith(bytes(buf[i:]))]
        return out

    def plausible(self, data: bytes) -> bool:
        if len(data) < PREFIX or not data.startswith(MAGIC):
            return False
        length, header_length = _LENGTHS.unpack_from(data, len(MAGIC))
        return length >= 0 and 0 <= header_length <= self.limit - PREFIX


def build(
    decoder: Decoder, command: str, kind: str, fields: Mapping[str, Any], generation: str = "1.9"
) -> bytes:
    """One frame from the spec's encoder, its message length counted as `generation` counts it."""
    data = bytearray(decoder.encode(command, kind, {**fields, "message_length": 0}))
    extra = {g: e for e, g in UNCOUNTED}[generation]
    struct.pack_into(">i", data, len(MAGIC), len(data) - extra)
    return bytes(data)
