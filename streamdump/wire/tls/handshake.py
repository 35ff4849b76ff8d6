"""Handshake messages (RFC 8446 4, RFC 5246 7.4) out of a direction's handshake records, and
the two hellos read: versions (supported_versions included), cipher suites, the server name,
ALPN, the session id, a PSK or ticket offered for resumption, and the extensions TLS 1.2's
record protection depends on (encrypt_then_mac). A hello split over records or segments is
read once whole; a message larger than any hello is passed over without being held."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from msgspec import Struct, field

CLIENT_HELLO = 1
SERVER_HELLO = 2
NEW_SESSION_TICKET = 4
FINISHED = 20
KEY_UPDATE = 24
# The messages whose bodies are read; any other is only counted past.
READ = frozenset({CLIENT_HELLO, SERVER_HELLO, NEW_SESSION_TICKET, FINISHED, KEY_UPDATE})
MAX_HELLO = 1 << 16

EXT_SERVER_NAME = 0
EXT_ALPN = 16
EXT_ENCRYPT_THEN_MAC = 22
EXT_EXTENDED_MASTER_SECRET = 23
EXT_SESSION_TICKET = 35
EXT_PRE_SHARED_KEY = 41
EXT_SUPPORTED_VERSIONS = 43

# A ServerHello with this random is a HelloRetryRequest (RFC 8446 4.1.3).
HELLO_RETRY = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


class BadHello(Exception):
    """A hello whose lengths do not add up."""


class Messages:
    """Handshake messages out of the bytes of consecutive handshake records."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.skip = 0  # bytes still to pass over of a message not read

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        if self.skip:
            n = min(self.skip, len(data))
            self.skip -= n
            data = data[n:]
        buf = self.buf
        buf += data
        while len(buf) >= 4:
            kind = buf[0]
            length = int.from_bytes(buf[1:4], "big")
            if kind not in READ or length > MAX_HELLO:
                passed = min(len(buf), 4 + length)
                self.skip = 4 + length - passed
                del buf[:passed]
                if self.skip:
                    return
                continue
            if len(buf) < 4 + length:
                return
            body = bytes(buf[4 : 4 + length])
            del buf[: 4 + length]
            yield kind, body


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise BadHello("hello cut short")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, n: int) -> bytes:
        return self.take(self.int(n))

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


def _extensions(r: _Reader) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    if not r.left:
        return out
    ext = _Reader(r.vector(2))
    while ext.left:
        kind = ext.int(2)
        out[kind] = ext.vector(2)
    return out


def _alpn(data: bytes) -> list[str]:
    r = _Reader(_Reader(data).vector(2))
    names = []
    while r.left:
        names.append(r.vector(1).decode("ascii", "replace"))
    return names


class ClientHello(Struct, frozen=True):
    random: bytes
    session_id: bytes
    suites: tuple[int, ...]
    versions: tuple[int, ...]  # supported_versions, else the legacy version
    sni: str | None = None
    alpn: tuple[str, ...] = ()
    psk: bool = False  # offers a pre-shared key (TLS 1.3 resumption)
    ticket: bytes = b""  # a TLS 1.2 session ticket offered


def client_hello(body: bytes) -> ClientHello:
    r = _Reader(body)
    legacy = r.int(2)
    random = r.take(32)
    session_id = r.vector(1)
    raw = r.vector(2)
    suites = struct.unpack(f"!{len(raw) // 2}H", raw[: len(raw) // 2 * 2])
    r.vector(1)  # compression methods
    ext = _extensions(r)
    versions: tuple[int, ...] = (legacy,)
    if EXT_SUPPORTED_VERSIONS in ext:
        v = _Reader(ext[EXT_SUPPORTED_VERSIONS]).vector(1)
        versions = struct.unpack(f"!{len(v) // 2}H", v[: len(v) // 2 * 2])
    sni = None
    if EXT_SERVER_NAME in ext:
        names = _Reader(_Reader(ext[EXT_SERVER_NAME]).vector(2))
        while names.left:
            kind, name = names.int(1), names.vector(2)
            if kind == 0:
                sni = name.decode("ascii", "replace")
                break
    alpn = tuple(_alpn(ext[EXT_ALPN])) if EXT_ALPN in ext else ()
    return ClientHello(
        random,
        session_id,
        suites,
        versions,
        sni,
        alpn,
        EXT_PRE_SHARED_KEY in ext,
        ext.get(EXT_SESSION_TICKET, b""),
    )


class ServerHello(Struct, frozen=True):
    random: bytes
    session_id: bytes
    suite: int
    version: int  # the negotiated one (supported_versions in TLS 1.3)
    alpn: str | None = None
    encrypt_then_mac: bool = False
    psk: bool = False  # the server accepted a pre-shared key (TLS 1.3 resumption)
    extensions: frozenset[int] = field(default_factory=frozenset)

    @property
    def retry(self) -> bool:
        return self.random == HELLO_RETRY


def server_hello(body: bytes) -> ServerHello:
    r = _Reader(body)
    version = r.int(2)
    random = r.take(32)
    session_id = r.vector(1)
    suite = r.int(2)
    r.int(1)  # compression method
    ext = _extensions(r)
    if EXT_SUPPORTED_VERSIONS in ext and len(ext[EXT_SUPPORTED_VERSIONS]) == 2:
        version = int.from_bytes(ext[EXT_SUPPORTED_VERSIONS], "big")
    alpn = None
    if EXT_ALPN in ext:
        names = _alpn(ext[EXT_ALPN])
        alpn = names[0] if names else None
    return ServerHello(
        random,
        session_id,
        suite,
        version,
        alpn,
        EXT_ENCRYPT_THEN_MAC in ext,
        EXT_PRE_SHARED_KEY in ext,
        frozenset(ext),
    )
