"""Liftbridge hooks: the envelope's header length and CRC-32C (Lua twin: envelope.lua).

The header length says where the protobuf message starts; it is honoured, not assumed: bytes
of a longer header are passed over, and a length shorter than the header read so far (8, or
12 with a CRC) is an error. When the flags say a CRC-32C follows, it is checked over the bytes
from the header length to the end, with the crc32c library (Castagnoli, as Liftbridge's Go
code computes it).
"""

from __future__ import annotations

from typing import Any

from streamdump.spec.hooks import Hook
from streamdump.spec.layout import Ctx, Short
from streamdump.wire.frame import Expert, Node


class Envelope(Hook):
    name = "envelope"

    def __init__(self, protocol: Any) -> None:
        super().__init__(protocol)
        self.crc_spec = next(s for s in protocol.all_fields() if s.name == "crc")

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        # The header's fields before this one are at fixed places: its length at byte 5, the
        # flags at 6, the CRC at 8 when flagged.
        length = mv[5] if len(mv) > 5 else pos
        header = pos + (4 if len(mv) > 6 and mv[6] & 1 else 0)
        if length < header:
            ctx.expert.append(
                Expert("error", f"header length {length} is shorter than the header ({header} bytes)", 5)
            )
        if length > end:
            raise Short(name, pos, length - pos, end - pos)
        flags = mv[6] if len(mv) > 6 else 0
        value: dict[str, Any] = {}
        if flags & 1:
            if end - pos < 4:
                raise Short("crc", pos, 4, end - pos)
            expected = int.from_bytes(mv[pos : pos + 4], "big")
            if node is not None:
                node.children.append(Node(self.crc_spec, "CRC", pos, 4, expected))
            pos += 4
            length = max(length, pos)
            import crc32c  # loaded by the first envelope with a CRC: its import costs a start 10%

            actual = crc32c.crc32c(mv[length:end])
            value = {"crc": expected, "crc_check": "valid" if expected == actual else "wrong"}
            if expected != actual:
                ctx.expert.append(
                    Expert(
                        "error",
                        f"CRC-32C mismatch: the envelope says 0x{expected:08x}, "
                        f"the message gives 0x{actual:08x}",
                        8,
                    )
                )
        if node is not None:
            node.label = "Envelope Rest"
            if "crc_check" in value:
                node.children.append(Node(None, "CRC Check", pos - 4, 4, value["crc_check"]))
        if length > pos:
            value["header_padding"] = mv[pos:length]
            if node is not None:
                node.children.append(Node(None, "Header Padding", pos, length - pos, mv[pos:length]))
        return value, max(length, pos)

    def write(self, buf: bytearray, value: Any) -> None:
        """Writes nothing: the encoder's caller sets header_length and the CRC."""
