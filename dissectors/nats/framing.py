"""Where a NATS frame ends (Lua twin: framing.lua).

A frame is one control line, ended by CRLF (servers take a bare LF too), and for the
operations whose line counts the bytes that follow (PUB, HPUB, MSG, HMSG: the line's last
word) that many bytes and a CRLF. A line that counts nothing readable is a frame alone, and
the decoder says what is wrong with it; a line that is not the protocol is one too, so
decoding goes on at the next line.
"""

from __future__ import annotations

import re

from streamdump.spec.decoder import Decoder
from streamdump.spec.framing_rules import DecodedRule
from streamdump.wire.framing import BAD

# Operations whose line's last word counts the bytes after the line (then a CRLF).
COUNTED = frozenset({b"PUB", b"HPUB", b"MSG", b"HMSG"})
# A line longer than this without its end is not the protocol (the server's own limit on a
# client's line is 4 KiB; a server's INFO with many cluster URLs is longer).
MAX_LINE = 64 << 10
_LAST_WORD = re.compile(rb"([0-9]+)[ \t]*\r?$")


def line_total(buf: bytes | bytearray, start: int, nl: int, limit: int) -> int:
    """The frame's length for the line [start, nl]: the line, plus what its last word counts."""
    line = bytes(buf[start:nl])
    op = line.split(None, 1)[0].upper() if line.strip() else b""
    size = nl + 1 - start
    if op not in COUNTED:
        return size
    found = _LAST_WORD.search(line)
    if found is None:
        return size
    counted = int(found.group(1))
    return size + counted + 2 if counted <= limit else size


class NatsRule(DecodedRule):
    # The shortest operation line ("+OK\r\n", "PING\n"): a candidate is judged as soon as it
    # shows that much, so a PING right after garbage is not held back for more bytes.
    header_len = 5

    def __init__(self, decoder: Decoder) -> None:
        super().__init__(decoder)
        self.limit = decoder.max_frame
        names = [str(key).encode() for key in decoder.protocol.by_key if isinstance(key, str)]
        ops = sorted(re.escape(name) for name in names)
        self.op = re.compile(rb"(?i)(?:%s)(?:[ \t\r\n]|$)" % b"|".join(ops))
        self.names = tuple(name.upper() for name in names)

    def total(self, buf: bytes | bytearray, start: int) -> int | None:
        nl = buf.find(b"\n", start)
        if nl < 0:
            return BAD if len(buf) - start > MAX_LINE else None
        return line_total(buf, start, nl, self.limit)

    def impossible(self, buf: bytes | bytearray, start: int, seq: int) -> str:
        return f"no line end within {MAX_LINE} bytes from seq {seq}"

    def candidates(self, buf: bytearray, start: int) -> list[int]:
        return _line_starts(buf, start)

    def plausible(self, data: bytes) -> bool:
        """Whether data starts an operation line: its name whole, or the start of a longer name
        (the first header_len bytes of a CONNECT)."""
        if self.op.match(data) is not None:
            return True
        upper = data.upper()
        return len(data) == self.header_len and any(name.startswith(upper) for name in self.names)


def _line_starts(buf: bytearray, start: int) -> list[int]:
    """Where lines start from start on (the first byte, then each byte after a LF)."""
    out = [start]
    at = buf.find(b"\n", start)
    while 0 <= at < len(buf) - 1:
        out.append(at + 1)
        at = buf.find(b"\n", at + 1)
    return out
