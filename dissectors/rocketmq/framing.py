"""Where a RocketMQ frame may start: its length word, then a header word whose high byte is
the serialize type (0 JSON, 1 binary) and whose low bytes are the header's length.

Frames are under 16 MiB and headers under 64 KiB, so a start shows a zero byte, three
length bytes, the serialize type, a zero, two header-length bytes, and then `{` for a JSON
header; hunting after a loss looks for exactly that before it tries a decode.
"""

from __future__ import annotations

import re
import struct

from streamdump.spec.decoder import Decoder
from streamdump.spec.framing_rules import LengthRule

_WORDS = struct.Struct(">iI")
_START = re.compile(rb"(?=\x00[\x00-\xff]{3}(?:\x00\x00[\x00-\xff]{2}\{|\x01\x00[\x00-\xff]{2}[\x00-\xff]))")
# The binary header's fixed part: code, language, version, opaque, flag, remark and map lengths.
MIN_BINARY_HEADER = 21


class RemotingRule(LengthRule):
    def __init__(self, decoder: Decoder) -> None:
        super().__init__(decoder)
        self.header_len = 9  # the length and header words, and the header's first byte

    def candidates(self, buf: bytearray, start: int) -> list[int]:
        return [m.start() for m in _START.finditer(buf, start)]

    def plausible(self, data: bytes) -> bool:
        if len(data) < self.header_len:
            return False
        size, word = _WORDS.unpack_from(data, 0)
        serialize, header_length = word >> 24, word & 0xFFFFFF
        if not 4 <= size <= self.limit - 4 or header_length > size - 4:
            return False
        if serialize == 0:
            return data[8:9] == b"{"
        return serialize == 1 and header_length >= MIN_BINARY_HEADER
