"""The `message_body` hook: a RocketMQ message body's CRC, and the body inflated (Lua twin: bodies.lua).

A stored message (in PULL_MESSAGE answers) carries the CRC-32 of its body, masked to 31
bits as the broker computes it; it is checked on every decode. Bodies a producer
compressed say so in their sys_flag (0x1), with the codec in bits 8-10 (0 and 3 zlib,
1 lz4 frame, 2 zstd); they are inflated only when a view shows them, within the frame's
expansion budget.
"""

from __future__ import annotations

import zlib
from typing import Any

from streamdump.codecs.compression import DecompressionError, OverLimit, inflate
from streamdump.spec.budget import Budget
from streamdump.spec.hooks import Hook
from streamdump.spec.layout import Ctx
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Expert, Node

COMPRESSED = 0x1


def body_crc(body: bytes | memoryview) -> int:
    """The body CRC as brokers store it: CRC-32 (zlib's) masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


class MessageBody(Hook):
    name = "message_body"

    def __init__(self, protocol: Protocol) -> None:
        super().__init__(protocol)
        self.codecs = protocol.enums["compression"]  # sys_flag bits 8-10 -> zlib, lz4, zstd

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        crc = siblings.get("body_crc")
        # Batch messages a client sends carry no CRC (0); the broker computes it when storing.
        if not isinstance(crc, int) or not siblings.get("magic_code"):
            return
        actual = body_crc(value)
        siblings["body_crc_valid"] = crc == actual
        if crc != actual:
            ctx.expert.append(
                Expert(
                    "error",
                    f"message body CRC mismatch: header says 0x{crc:08x}, body gives 0x{actual:08x}",
                    pos,
                )
            )

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        sys_flag = siblings.get("sys_flag")
        if not isinstance(sys_flag, int) or not sys_flag & COMPRESSED:
            return
        code = (sys_flag >> 8) & 0x7
        siblings["compression"] = code
        codec = self.codecs.get(code)
        if codec is None:
            ctx.expert.append(
                Expert("warn", f"message body: unknown compression type {code} in sys_flag", pos)
            )
            return
        budget = Budget.of(ctx)
        try:
            data = inflate(codec, value, budget.bytes_left)
        except OverLimit:
            budget.refuse(ctx, "message body", f"{codec} body not inflated", pos)
            return
        except DecompressionError as exc:
            ctx.expert.append(Expert("warn", f"message body: {exc}", pos))
            return
        budget.bytes_left -= len(data)
        siblings["uncompressed_body"] = data
        if node is not None:
            node.children.append(Node(None, f"Uncompressed Body ({codec})", pos, len(value), data))
