"""TLS records cut out of one direction's byte stream, across segments.

A record is a 5-byte header (content type, version, length) and at most 2^14 + 2048 bytes
(RFC 5246 6.2.3; TLS 1.3 allows less): a longer one, or a header that is no record's, means
the bytes are not TLS (or not from a record boundary). The buffer holds at most one record.
"""

from __future__ import annotations

from collections.abc import Iterator

from msgspec import Struct

CHANGE_CIPHER_SPEC = 20
ALERT = 21
HANDSHAKE = 22
APPLICATION_DATA = 23
HEARTBEAT = 24
CONTENT_TYPES = frozenset({CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA, HEARTBEAT})
MAX_RECORD = (1 << 14) + 2048


def plausible_header(buf: bytes | bytearray | memoryview, at: int = 0) -> bool:
    """Whether a record header starts at `at` (content type, 3.x version, a possible length)."""
    if len(buf) - at < 5:
        return False
    length = (buf[at + 3] << 8) | buf[at + 4]
    return buf[at] in CONTENT_TYPES and buf[at + 1] == 3 and buf[at + 2] <= 4 and 0 < length <= MAX_RECORD


def is_client_hello(data: bytes | bytearray | memoryview) -> bool:
    """Whether bytes start with a TLS handshake record holding a ClientHello (enough of it to tell)."""
    return (
        len(data) >= 6
        and data[0] == HANDSHAKE
        and data[1] == 3
        and data[2] <= 4
        and data[5] == 1
        and 0 < ((data[3] << 8) | data[4]) <= MAX_RECORD
    )


class Record(Struct, frozen=True):
    pos: int  # stream position of its header
    header: bytes
    body: bytes

    @property
    def type(self) -> int:
        return self.header[0]

    @property
    def end(self) -> int:
        return self.pos + 5 + len(self.body)


class NotRecords(Exception):
    """Bytes that cannot be a record's header."""


class Records:
    """Whole records from bytes fed in stream order."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pos = 0  # stream position of buf[0]

    def feed(self, pos: int, data: bytes) -> Iterator[Record]:
        """Records completed by data (which starts at pos); NotRecords for a bad header."""
        if not self.buf:
            self.pos = pos
        self.buf += data
        buf = self.buf
        at = 0
        try:
            while len(buf) - at >= 5:
                length = (buf[at + 3] << 8) | buf[at + 4]
                if not plausible_header(buf, at):
                    head = bytes(buf[at : at + 5]).hex()
                    raise NotRecords(f"no TLS record header at stream byte {self.pos + at} ({head})")
                end = at + 5 + length
                if end > len(buf):
                    break
                yield Record(self.pos + at, bytes(buf[at : at + 5]), bytes(buf[at + 5 : end]))
                at = end
        finally:
            del buf[:at]
            self.pos += at

    def held(self) -> int:
        return len(self.buf)

    def pending(self) -> tuple[int, int] | None:
        """(position, whole length) of the record begun in the buffer, if its header is there."""
        if len(self.buf) < 5:
            return (self.pos, -1) if self.buf else None
        return self.pos, 5 + ((self.buf[3] << 8) | self.buf[4])

    def reset(self, pos: int) -> None:
        """Forget what is held; the next bytes start at pos (a record boundary, or not)."""
        self.buf.clear()
        self.pos = pos
