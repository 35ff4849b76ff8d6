"""A raw RabbitMQ Streams client: frames built with struct, nothing sent that the scenario did not ask for.

rstream's low-level client cannot send a frame the protocol does not know (an unknown key,
a version the broker does not speak, a frame over frame_max), always answers the broker's
Tune with its own values and starts a heartbeat task. The refusal scenarios
(scenarios_refusals.py) need every byte under their control, so they use this instead:
one asyncio connection, frames read back by their u32 size, and no frame at all (not even
a Heartbeat) unless the scenario sends it.

Frames are `[u32 size][u16 key][u16 version][body]`, big-endian; responses are
`key | 0x8000`. `Frame.body` is everything after the version. Independent of streamdump.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from dataclasses import dataclass

from broker import HOST, PASSWORD, PORT, USERNAME, VHOST

log = logging.getLogger("record")

RESPONSE = 0x8000

KEY_DECLARE_PUBLISHER = 0x0001
KEY_PUBLISH = 0x0002
KEY_PUBLISH_CONFIRM = 0x0003
KEY_PUBLISH_ERROR = 0x0004
KEY_DELETE_PUBLISHER = 0x0006
KEY_SUBSCRIBE = 0x0007
KEY_DELIVER = 0x0008
KEY_CREDIT = 0x0009
KEY_UNSUBSCRIBE = 0x000C
KEY_CREATE = 0x000D
KEY_DELETE = 0x000E
KEY_METADATA = 0x000F
KEY_METADATA_UPDATE = 0x0010
KEY_PEER_PROPERTIES = 0x0011
KEY_SASL_HANDSHAKE = 0x0012
KEY_SASL_AUTHENTICATE = 0x0013
KEY_TUNE = 0x0014
KEY_OPEN = 0x0015
KEY_CLOSE = 0x0016
KEY_HEARTBEAT = 0x0017
KEY_EXCHANGE_COMMAND_VERSIONS = 0x001B

CODE_OK = 0x01

# Every frame this client waits for arrives within milliseconds on lo; this only bounds a
# broker that does not answer at all.
RESPONSE_WAIT_S = 5.0


def string(value: str) -> bytes:
    """Protocol `string`: i16 length, then UTF-8."""
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def blob(value: bytes) -> bytes:
    """Protocol `bytes`: i32 length, then the bytes."""
    return struct.pack(">i", len(value)) + value


def properties(pairs: dict[str, str]) -> bytes:
    """An array of (string key, string value), as in PeerProperties, Create and Subscribe."""
    return struct.pack(">i", len(pairs)) + b"".join(string(k) + string(v) for k, v in pairs.items())


def amqp_data(body: bytes) -> bytes:
    """An AMQP 1.0 bare message holding only a `data` section with `body`."""
    if len(body) < 256:
        return b"\x00\x53\x75\xa0" + bytes([len(body)]) + body
    return b"\x00\x53\x75\xb0" + struct.pack(">I", len(body)) + body


def publish_body(publisher_id: int, messages: list[tuple[int, bytes]]) -> bytes:
    """Body of a version-1 Publish: publisher id, then (publishing id, message) pairs."""
    out = struct.pack(">Bi", publisher_id, len(messages))
    return out + b"".join(struct.pack(">Q", pid) + blob(msg) for pid, msg in messages)


@dataclass(frozen=True)
class Frame:
    """One frame as read from the socket: key, version and the body after them."""

    key: int
    version: int
    body: bytes

    @property
    def size(self) -> int:
        """The frame's u32 size field: key + version + body."""
        return 4 + len(self.body)

    @property
    def correlation_id(self) -> int:
        return struct.unpack_from(">I", self.body)[0]

    @property
    def code(self) -> int:
        """ResponseCode of a `Key Version CorrelationId ResponseCode ...` response."""
        return struct.unpack_from(">H", self.body, 4)[0]

    def close_reason(self) -> tuple[int, str]:
        """(ClosingCode, ClosingReason) of a Close frame."""
        code, length = struct.unpack_from(">Hh", self.body, 4)
        return code, self.body[8 : 8 + length].decode()

    def __repr__(self) -> str:
        return f"Frame(key=0x{self.key:04x}, version={self.version}, body={self.body[:32].hex()}...)"


class BrokerClosed(Exception):
    """The broker ended the TCP connection (EOF or reset)."""


class RawClient:
    """One TCP connection to the broker. Every frame in either direction is sent or read explicitly."""

    def __init__(self, connection_name: str, port: int = PORT) -> None:
        self.connection_name = connection_name
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = 0
        # The broker's Tune proposal (frame_max, heartbeat), set by handshake().
        self.server_tune: tuple[int, int] | None = None

    async def connect(self) -> None:
        # The default 64 KiB limit is for readline(); readexactly() ignores it.
        self._reader, self._writer = await asyncio.open_connection(HOST, self.port)

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    async def send(self, key: int, body: bytes, version: int = 1) -> None:
        """Send one frame: size, key, version, body."""
        assert self._writer is not None
        self._writer.write(struct.pack(">IHH", 4 + len(body), key, version) + body)
        await self._writer.drain()

    async def request(self, key: int, fields: bytes, version: int = 1) -> int:
        """Send a request with the next correlation id before `fields`; returns that id."""
        corr = self.next_corr()
        await self.send(key, struct.pack(">I", corr) + fields, version)
        return corr

    async def recv(self, timeout: float = RESPONSE_WAIT_S) -> Frame:
        """The next frame from the broker. TimeoutError if none comes, BrokerClosed on EOF."""
        assert self._reader is not None
        try:
            header = await asyncio.wait_for(self._reader.readexactly(4), timeout)
            (size,) = struct.unpack(">I", header)
            data = await asyncio.wait_for(self._reader.readexactly(size), RESPONSE_WAIT_S)
        except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
            raise BrokerClosed(str(exc)) from exc
        key, version = struct.unpack_from(">HH", data)
        frame = Frame(key, version, data[4:])
        log.debug("received %r", frame)
        return frame

    async def recv_or_none(self, timeout: float) -> Frame | None:
        """The next frame, or None when nothing comes within `timeout` s."""
        try:
            return await self.recv(timeout)
        except TimeoutError:
            return None

    async def response(self, key: int, corr: int, code: int | None = CODE_OK) -> Frame:
        """The next frame, which must be the response to request `key` with `corr` (and `code`)."""
        frame = await self.recv()
        want = key | RESPONSE
        if frame.key != want or frame.correlation_id != corr:
            raise RuntimeError(f"expected response 0x{want:04x} corr {corr}, got {frame!r}")
        if code is not None and frame.code != code:
            raise RuntimeError(f"response 0x{want:04x} corr {corr}: code 0x{frame.code:02x}, expected {code}")
        return frame

    async def call(self, key: int, fields: bytes, code: int | None = CODE_OK, version: int = 1) -> Frame:
        """request() then response()."""
        corr = await self.request(key, fields, version)
        return await self.response(key, corr, code)

    async def handshake(
        self,
        vhost: str = VHOST,
        heartbeat: int | None = None,
        frame_max: int | None = None,
    ) -> Frame:
        """PeerProperties, SaslHandshake, SaslAuthenticate PLAIN, Tune answer, Open; the OpenResponse.

        The Tune answer repeats the broker's proposal unless `heartbeat` / `frame_max` say
        otherwise. The OpenResponse code is not checked: that is the caller's business.
        """
        await self.call(KEY_PEER_PROPERTIES, properties(self.peer_properties()))
        mechanisms = await self.call(KEY_SASL_HANDSHAKE, b"")
        if b"PLAIN" not in mechanisms.body:
            raise RuntimeError(f"broker offers no PLAIN mechanism: {mechanisms!r}")
        await self.call(KEY_SASL_AUTHENTICATE, string("PLAIN") + blob(f"\0{USERNAME}\0{PASSWORD}".encode()))
        tune = await self.recv()
        if tune.key != KEY_TUNE:
            raise RuntimeError(f"expected the broker's Tune, got {tune!r}")
        self.server_tune = struct.unpack(">II", tune.body)
        server_frame_max, server_heartbeat = self.server_tune
        await self.send(
            KEY_TUNE,
            struct.pack(
                ">II",
                server_frame_max if frame_max is None else frame_max,
                server_heartbeat if heartbeat is None else heartbeat,
            ),
        )
        corr = await self.request(KEY_OPEN, string(vhost))
        return await self.response(KEY_OPEN, corr, code=None)

    def peer_properties(self) -> dict[str, str]:
        return {"connection_name": self.connection_name, "product": "streamdump raw client"}

    async def open(self) -> None:
        """handshake() with the broker's Tune values and vhost `/`, which must succeed."""
        opened = await self.handshake()
        if opened.code != CODE_OK:
            raise RuntimeError(f"Open failed with code 0x{opened.code:02x}")

    async def close(self) -> None:
        """Close (code 1, `OK`) / CloseResponse 0x01, then wait for the broker's FIN."""
        corr = await self.request(KEY_CLOSE, struct.pack(">H", 1) + string("OK"))
        await self.response(KEY_CLOSE, corr)
        await self.expect_eof()

    async def answer_close(self, close: Frame) -> None:
        """CloseResponse 0x01 to a Close the broker sent, then wait for its FIN."""
        await self.send(KEY_CLOSE | RESPONSE, struct.pack(">IH", close.correlation_id, CODE_OK))
        await self.expect_eof()

    async def expect_eof(self, timeout: float = RESPONSE_WAIT_S) -> None:
        """The broker must end the connection within `timeout` s, sending no further frame."""
        try:
            frame = await self.recv(timeout)
        except BrokerClosed:
            return
        raise RuntimeError(f"expected the broker to close the connection, got {frame!r}")

    async def disconnect(self) -> None:
        """Close our side of the socket (FIN); never sends a frame."""
        if self._writer is None:
            return
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()
        self._writer = self._reader = None
