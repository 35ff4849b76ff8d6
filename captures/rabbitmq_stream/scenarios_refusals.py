"""The refusal scenarios: the broker refusing or punishing a client, one connection each.

wrong_vhost, unknown_command, unsupported_version, deleted_stream, credit_exhausted,
heartbeat_timeout and frame_too_large. They use raw_client.RawClient, not rstream, so that
the client sends exactly the frames listed in captures/rabbitmq_stream/README.md and nothing else (no
Heartbeat, no automatic Tune values). Each scenario checks that the broker reacted as the
README says and raises otherwise; `verify_keys()` then reads the finished capture back and
checks the frame keys per direction. None of them writes files besides its capture.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from pathlib import Path
from string import ascii_lowercase

from broker import CREDIT_STREAM, DELETED_STREAM, FRAME_MAX, LARGE_STREAM
from pcap_checks import capture_frames, frame_key
from raw_client import (
    CODE_OK,
    KEY_CLOSE,
    KEY_CREATE,
    KEY_CREDIT,
    KEY_DECLARE_PUBLISHER,
    KEY_DELETE,
    KEY_DELETE_PUBLISHER,
    KEY_DELIVER,
    KEY_EXCHANGE_COMMAND_VERSIONS,
    KEY_HEARTBEAT,
    KEY_METADATA,
    KEY_METADATA_UPDATE,
    KEY_OPEN,
    KEY_PEER_PROPERTIES,
    KEY_PUBLISH,
    KEY_PUBLISH_CONFIRM,
    KEY_PUBLISH_ERROR,
    KEY_SASL_AUTHENTICATE,
    KEY_SASL_HANDSHAKE,
    KEY_SUBSCRIBE,
    KEY_TUNE,
    KEY_UNSUBSCRIBE,
    RESPONSE,
    BrokerClosed,
    Frame,
    RawClient,
    amqp_data,
    properties,
    publish_body,
    string,
)
from scenario_tools import Outputs, expect

log = logging.getLogger("record")

NO_SUCH_VHOST = "streamdump-no-such-vhost"
# unsupported_version asks for this stream's metadata; it never exists.
VERSION_STREAM = "streamdump-version"
CODE_STREAM_DOES_NOT_EXIST = 0x02
CODE_SUBSCRIPTION_DOES_NOT_EXIST = 0x04
CODE_STREAM_NOT_AVAILABLE = 0x06
CODE_VHOST_ACCESS_FAILURE = 0x0C
CODE_UNKNOWN_FRAME = 0x0D
CODE_PUBLISHER_DOES_NOT_EXIST = 0x12
OFFSET_FIRST = 1

# Long enough for the broker to send anything it was going to send in answer to the last
# frame; used to show that nothing (more) comes.
QUIET_S = 0.5
# credit_exhausted: how long the subscription sits with zero credit.
NO_CREDIT_S = 1.5
# heartbeat_timeout: the client's Tune answer, and how long the client waits for the broker.
HEARTBEAT_S = 1
HEARTBEAT_CAP_S = 12.0
# frame_too_large: the frame_max the client answers the broker's Tune with (heartbeat as the
# broker proposed), and the body of the one message; the Publish frame is 29 bytes more.
LARGE_FRAME_MAX = 65536
LARGE_BODY = 100_000

# The handshake every scenario starts with (frame keys, per direction), see raw_client.handshake().
HANDSHAKE_C2S = [KEY_PEER_PROPERTIES, KEY_SASL_HANDSHAKE, KEY_SASL_AUTHENTICATE, KEY_TUNE, KEY_OPEN]
HANDSHAKE_S2C = [k | RESPONSE for k in HANDSHAKE_C2S[:3]] + [KEY_TUNE, KEY_OPEN | RESPONSE]


def describe(frame: Frame) -> str:
    return f"0x{frame.key:04x} v{frame.version} {frame.body.hex()}"


async def expect_quiet(client: RawClient, seconds: float, what: str) -> None:
    """No frame may arrive from the broker for `seconds`."""
    frame = await client.recv_or_none(seconds)
    expect(frame is None, f"{what}: nothing for {seconds} s, got {frame and describe(frame)}")


async def expect_unknown_frame_close(client: RawClient, what: str) -> None:
    """The broker's Close (corr 1, code 0x0d `unknown frame`); answer it and wait for its FIN."""
    close = await client.recv()
    expect(close.key == KEY_CLOSE, f"{what}: broker sends Close, got {describe(close)}")
    expect(close.correlation_id == 1, f"{what}: the broker's Close has corr 1, got {close.correlation_id}")
    reason = close.close_reason()
    expect(reason == (CODE_UNKNOWN_FRAME, "unknown frame"), f"{what}: Close 0x0d unknown frame, got {reason}")
    log.info("%s: broker sent Close %s", what, reason)
    await client.answer_close(close)


def publish_error(frame: Frame) -> tuple[int, list[tuple[int, int]]]:
    """(publisher id, [(publishing id, code)]) of a PublishError."""
    publisher_id, count = struct.unpack_from(">Bi", frame.body)
    errors = [struct.unpack_from(">QH", frame.body, 5 + 10 * i) for i in range(count)]
    expect(len(frame.body) == 5 + 10 * count, "PublishError ends after its entries")
    return publisher_id, errors


def publish_confirm(frame: Frame) -> tuple[int, list[int]]:
    """(publisher id, publishing ids) of a PublishConfirm."""
    publisher_id, count = struct.unpack_from(">Bi", frame.body)
    return publisher_id, [struct.unpack_from(">Q", frame.body, 5 + 8 * i)[0] for i in range(count)]


async def publish_confirmed(client: RawClient, publisher_id: int, publishing_id: int, body: bytes) -> None:
    """One Publish with one message, then its PublishConfirm."""
    await client.send(KEY_PUBLISH, publish_body(publisher_id, [(publishing_id, amqp_data(body))]))
    confirm = await client.recv()
    expect(confirm.key == KEY_PUBLISH_CONFIRM, f"PublishConfirm for {publishing_id}, got {describe(confirm)}")
    got = publish_confirm(confirm)
    expect(got == (publisher_id, [publishing_id]), f"confirm of ({publisher_id}, [{publishing_id}]): {got}")


def declare_publisher(publisher_id: int, reference: str, stream: str) -> bytes:
    return struct.pack(">B", publisher_id) + string(reference) + string(stream)


async def scenario_wrong_vhost() -> None:
    """Right credentials, Open with a virtual host that does not exist."""
    client = RawClient("streamdump-wrong-vhost")
    await client.connect()
    try:
        opened = await client.handshake(vhost=NO_SUCH_VHOST)
        expect(opened.code == CODE_VHOST_ACCESS_FAILURE, f"Open answered 0x0c, got {opened.code:#04x}")
        # Only Key Version CorrelationId ResponseCode: no ConnectionProperties array at all.
        expect(len(opened.body) == 6, f"OpenResponse 0x0c is 10 bytes, body {opened.body.hex()}")
        # No Close frame: the broker ends the TCP connection right after the response.
        await client.expect_eof()
        log.info("Open %s refused (0x0c), broker closed the socket", NO_SUCH_VHOST)
    finally:
        await client.disconnect()


# What a newer client (protocol with Publish/Deliver v2, StreamStats) would announce.
NEWER_CLIENT_COMMANDS = ((0x0002, 1, 2), (0x0008, 1, 2), (0x001C, 1, 1))


async def scenario_unknown_command() -> None:
    """ExchangeCommandVersions (0x001b), which 3.10.8 does not know, after a normal Open."""
    client = RawClient("streamdump-unknown-command")
    await client.connect()
    try:
        await client.open()
        body = struct.pack(">i", len(NEWER_CLIENT_COMMANDS))
        body += b"".join(struct.pack(">HHH", *cmd) for cmd in NEWER_CLIENT_COMMANDS)
        await client.request(KEY_EXCHANGE_COMMAND_VERSIONS, body)
        await expect_unknown_frame_close(client, "ExchangeCommandVersions")
    finally:
        await client.disconnect()


async def scenario_unsupported_version() -> None:
    """A well-formed Metadata request with version 2 (3.10.8 speaks version 1 only)."""
    client = RawClient("streamdump-unsupported-version")
    await client.connect()
    try:
        await client.open()
        await client.request(KEY_METADATA, struct.pack(">i", 1) + string(VERSION_STREAM), version=2)
        # Not silence and not a response with an error code: the same Close as for an unknown key.
        await expect_unknown_frame_close(client, "Metadata v2")
    finally:
        await client.disconnect()


DELETED_REFERENCE = "streamdump-deleted-publisher"


async def scenario_deleted_stream() -> None:
    """Delete the stream under a declared publisher, then keep publishing and redeclare."""
    publisher_id = 1
    client = RawClient("streamdump-deleted-stream")
    await client.connect()
    try:
        await client.open()
        await client.call(KEY_CREATE, string(DELETED_STREAM) + properties({}))
        declare = declare_publisher(publisher_id, DELETED_REFERENCE, DELETED_STREAM)
        await client.call(KEY_DECLARE_PUBLISHER, declare)
        for pid in (1, 2, 3):
            await publish_confirmed(client, publisher_id, pid, f"before delete {pid}".encode())

        await client.call(KEY_DELETE, string(DELETED_STREAM))
        # Sent by the same handler right after DeleteResponse, because this connection had
        # a publisher on the stream.
        update = await client.recv()
        expect(update.key == KEY_METADATA_UPDATE, f"MetadataUpdate after Delete, got {describe(update)}")
        want_update = struct.pack(">H", CODE_STREAM_NOT_AVAILABLE) + string(DELETED_STREAM)
        expect(update.body == want_update, f"MetadataUpdate 0x06 {DELETED_STREAM}: {update.body.hex()}")
        await expect_quiet(client, QUIET_S, "after MetadataUpdate")

        # The broker dropped publisher 1 with the stream: both messages come back as errors.
        messages = [(pid, amqp_data(f"after delete {pid}".encode())) for pid in (4, 5)]
        await client.send(KEY_PUBLISH, publish_body(publisher_id, messages))
        error = await client.recv()
        expect(error.key == KEY_PUBLISH_ERROR, f"PublishError, got {describe(error)}")
        got = publish_error(error)
        want = (publisher_id, [(4, CODE_PUBLISHER_DOES_NOT_EXIST), (5, CODE_PUBLISHER_DOES_NOT_EXIST)])
        expect(got == want, f"PublishError {want}, got {got}")
        await expect_quiet(client, QUIET_S, "after PublishError")

        # The same DeclarePublisher as before, now for a stream that is gone.
        await client.call(KEY_DECLARE_PUBLISHER, declare, code=CODE_STREAM_DOES_NOT_EXIST)
        await client.close()
    finally:
        await client.disconnect()


CREDIT_MESSAGES = 10
INITIAL_CREDIT = 2
MORE_CREDIT = 3
CREDIT_SUBSCRIPTION = 1
UNKNOWN_SUBSCRIPTION = 9


def deliver_chunk_id(frame: Frame, subscription_id: int) -> int:
    """ChunkFirstOffset of a version-1 Deliver for `subscription_id` with one entry."""
    expect(frame.key == KEY_DELIVER, f"Deliver, got {describe(frame)}")
    sub, num_entries, chunk_id = struct.unpack_from(">B2xH20xQ", frame.body)
    expect(sub == subscription_id, f"Deliver for subscription {subscription_id}, got {sub}")
    expect(num_entries == 1, f"one entry per chunk, got {num_entries}")
    return chunk_id


async def scenario_credit_exhausted() -> None:
    """A subscription that runs out of credit, is topped up, and a Credit for no subscription."""
    publisher_id = 0
    sub_id = CREDIT_SUBSCRIPTION
    client = RawClient("streamdump-credit-exhausted")
    await client.connect()
    try:
        await client.open()
        await client.call(KEY_CREATE, string(CREDIT_STREAM) + properties({}))
        await client.call(KEY_DECLARE_PUBLISHER, declare_publisher(publisher_id, "", CREDIT_STREAM))
        # One confirm before the next Publish: each message is its own chunk, chunk id = offset.
        for pid in range(CREDIT_MESSAGES):
            await publish_confirmed(client, publisher_id, pid, f"credit {pid}".encode())

        subscribe = struct.pack(">B", sub_id) + string(CREDIT_STREAM)
        subscribe += struct.pack(">HH", OFFSET_FIRST, INITIAL_CREDIT) + properties({})
        await client.call(KEY_SUBSCRIBE, subscribe)
        chunks = [deliver_chunk_id(await client.recv(), sub_id) for _ in range(INITIAL_CREDIT)]
        expect(chunks == [0, 1], f"chunks 0, 1 on the initial credit, got {chunks}")
        await expect_quiet(client, NO_CREDIT_S, "zero credit")

        await client.send(KEY_CREDIT, struct.pack(">BH", sub_id, MORE_CREDIT))
        chunks = [deliver_chunk_id(await client.recv(), sub_id) for _ in range(MORE_CREDIT)]
        expect(chunks == [2, 3, 4], f"chunks 2, 3, 4 on the new credit, got {chunks}")
        await expect_quiet(client, QUIET_S, "credit used up again")

        await client.send(KEY_CREDIT, struct.pack(">BH", UNKNOWN_SUBSCRIPTION, 1))
        refused = await client.recv()
        # CreditResponse: Key Version ResponseCode SubscriptionId, no correlation id.
        want = struct.pack(">HB", CODE_SUBSCRIPTION_DOES_NOT_EXIST, UNKNOWN_SUBSCRIPTION)
        expect(
            refused.key == KEY_CREDIT | RESPONSE and refused.body == want,
            f"CreditResponse 0x04 for subscription {UNKNOWN_SUBSCRIPTION}, got {describe(refused)}",
        )
        await expect_quiet(client, QUIET_S, "after CreditResponse")

        await client.call(KEY_UNSUBSCRIBE, struct.pack(">B", sub_id))
        await client.call(KEY_DELETE_PUBLISHER, struct.pack(">B", publisher_id))
        await client.call(KEY_DELETE, string(CREDIT_STREAM))
        await client.close()
    finally:
        await client.disconnect()


async def scenario_heartbeat_timeout() -> None:
    """Tune answer with heartbeat 1 s, then the client sends nothing at all."""
    client = RawClient("streamdump-heartbeat-timeout")
    await client.connect()
    try:
        opened = await client.handshake(heartbeat=HEARTBEAT_S)
        expect(opened.code == CODE_OK, f"Open succeeds, got {opened.code:#04x}")
        start = time.monotonic()
        heartbeats: list[float] = []
        while True:
            left = HEARTBEAT_CAP_S - (time.monotonic() - start)
            try:
                frame = await client.recv(max(left, 0.0))
            except BrokerClosed:
                closed_after = time.monotonic() - start
                break
            except TimeoutError:
                # The README documents the broker closing first; end the capture cleanly, then fail.
                await client.close()
                raise RuntimeError(f"broker did not close within {HEARTBEAT_CAP_S} s") from None
            is_heartbeat = frame.key == KEY_HEARTBEAT and frame.body == b""
            expect(is_heartbeat, f"only Heartbeats, got {describe(frame)}")
            heartbeats.append(time.monotonic() - start)
        log.info(
            "heartbeats at %s s after OpenResponse, broker closed at %.3f s",
            [round(t, 3) for t in heartbeats],
            closed_after,
        )
        expect(heartbeats != [], "the broker sends Heartbeats")
        # rabbit_heartbeat: a missed receive is noticed after two periods of silence.
        expect(2.0 <= closed_after <= 5.0, f"broker closes 2..5 s after OpenResponse, at {closed_after}")
    finally:
        await client.disconnect()


def large_body(size: int) -> bytes:
    head = b"streamdump frame_too_large "
    letters = ascii_lowercase.encode()
    return head + (letters * (size // len(letters) + 1))[: size - len(head)]


async def scenario_frame_too_large() -> None:
    """One Publish frame larger than the frame_max the client asked for in its Tune answer.

    The client lowers frame_max from the broker's 1048576 to LARGE_FRAME_MAX, so a frame of
    about 100 KB is over it and the capture stays small.
    """
    publisher_id = 0
    client = RawClient("streamdump-frame-too-large")
    await client.connect()
    try:
        opened = await client.handshake(frame_max=LARGE_FRAME_MAX)
        expect(opened.code == CODE_OK, f"Open succeeds, got {opened.code:#04x}")
        tune = client.server_tune
        expect(tune is not None and tune[0] == FRAME_MAX, f"broker proposes frame_max {FRAME_MAX}: {tune}")
        await client.call(KEY_CREATE, string(LARGE_STREAM) + properties({}))
        await client.call(KEY_DECLARE_PUBLISHER, declare_publisher(publisher_id, "", LARGE_STREAM))
        body = publish_body(publisher_id, [(0, amqp_data(large_body(LARGE_BODY)))])
        log.info("Publish frame size %d, frame_max %d", 4 + len(body), LARGE_FRAME_MAX)
        expect(4 + len(body) > LARGE_FRAME_MAX, "the Publish frame is over frame_max")
        await client.send(KEY_PUBLISH, body)
        # 3.10.8 never checks incoming frames against frame_max: the message is stored.
        confirm = await client.recv()
        expect(confirm.key == KEY_PUBLISH_CONFIRM, f"PublishConfirm, got {describe(confirm)}")
        expect(publish_confirm(confirm) == (publisher_id, [0]), f"confirm of id 0: {describe(confirm)}")
        await expect_quiet(client, QUIET_S, "after the PublishConfirm")
        await client.call(KEY_DELETE_PUBLISHER, struct.pack(">B", publisher_id))
        await client.call(KEY_DELETE, string(LARGE_STREAM))
        await client.close()
    finally:
        await client.disconnect()


# Frame keys per direction (client→server, server→client) each capture must hold, in order.
EXPECTED_KEYS: dict[str, tuple[list[int], list[int]]] = {
    "wrong_vhost": (HANDSHAKE_C2S, HANDSHAKE_S2C),
    "unknown_command": (
        [*HANDSHAKE_C2S, KEY_EXCHANGE_COMMAND_VERSIONS, KEY_CLOSE | RESPONSE],
        [*HANDSHAKE_S2C, KEY_CLOSE],
    ),
    "unsupported_version": (
        [*HANDSHAKE_C2S, KEY_METADATA, KEY_CLOSE | RESPONSE],
        [*HANDSHAKE_S2C, KEY_CLOSE],
    ),
    "deleted_stream": (
        [
            *HANDSHAKE_C2S,
            KEY_CREATE,
            KEY_DECLARE_PUBLISHER,
            *([KEY_PUBLISH] * 3),
            KEY_DELETE,
            KEY_PUBLISH,
            KEY_DECLARE_PUBLISHER,
            KEY_CLOSE,
        ],
        [
            *HANDSHAKE_S2C,
            KEY_CREATE | RESPONSE,
            KEY_DECLARE_PUBLISHER | RESPONSE,
            *([KEY_PUBLISH_CONFIRM] * 3),
            KEY_DELETE | RESPONSE,
            KEY_METADATA_UPDATE,
            KEY_PUBLISH_ERROR,
            KEY_DECLARE_PUBLISHER | RESPONSE,
            KEY_CLOSE | RESPONSE,
        ],
    ),
    "credit_exhausted": (
        [
            *HANDSHAKE_C2S,
            KEY_CREATE,
            KEY_DECLARE_PUBLISHER,
            *([KEY_PUBLISH] * CREDIT_MESSAGES),
            KEY_SUBSCRIBE,
            KEY_CREDIT,
            KEY_CREDIT,
            KEY_UNSUBSCRIBE,
            KEY_DELETE_PUBLISHER,
            KEY_DELETE,
            KEY_CLOSE,
        ],
        [
            *HANDSHAKE_S2C,
            KEY_CREATE | RESPONSE,
            KEY_DECLARE_PUBLISHER | RESPONSE,
            *([KEY_PUBLISH_CONFIRM] * CREDIT_MESSAGES),
            KEY_SUBSCRIBE | RESPONSE,
            *([KEY_DELIVER] * (INITIAL_CREDIT + MORE_CREDIT)),
            KEY_CREDIT | RESPONSE,
            KEY_UNSUBSCRIBE | RESPONSE,
            KEY_DELETE_PUBLISHER | RESPONSE,
            KEY_DELETE | RESPONSE,
            KEY_CLOSE | RESPONSE,
        ],
    ),
    "frame_too_large": (
        [
            *HANDSHAKE_C2S,
            KEY_CREATE,
            KEY_DECLARE_PUBLISHER,
            KEY_PUBLISH,
            KEY_DELETE_PUBLISHER,
            KEY_DELETE,
            KEY_CLOSE,
        ],
        [
            *HANDSHAKE_S2C,
            KEY_CREATE | RESPONSE,
            KEY_DECLARE_PUBLISHER | RESPONSE,
            KEY_PUBLISH_CONFIRM,
            KEY_DELETE_PUBLISHER | RESPONSE,
            KEY_DELETE | RESPONSE,
            KEY_CLOSE | RESPONSE,
        ],
    ),
}


def verify_keys(name: str) -> Callable[[Path, Outputs], None]:
    """A RECORDINGS `verify`: the capture's frame keys per direction are EXPECTED_KEYS[name]."""

    def verify(pcap: Path, _outputs: Outputs) -> None:
        c2s, s2c = capture_frames(pcap)
        want_c2s, want_s2c = EXPECTED_KEYS[name]
        got = ([frame_key(f) for f in c2s], [frame_key(f) for f in s2c])
        expect(got == (want_c2s, want_s2c), f"{pcap}: frame keys {got}, expected {(want_c2s, want_s2c)}")

    return verify


def verify_heartbeat_timeout(pcap: Path, _outputs: Outputs) -> None:
    """The handshake, then only the broker's Heartbeats (at least one), no Close either way."""
    c2s, s2c = capture_frames(pcap)
    c2s_keys, s2c_keys = [frame_key(f) for f in c2s], [frame_key(f) for f in s2c]
    expect(c2s_keys == HANDSHAKE_C2S, f"{pcap}: client frames {c2s_keys}")
    expect(s2c_keys[: len(HANDSHAKE_S2C)] == HANDSHAKE_S2C, f"{pcap}: broker frames {s2c_keys}")
    tail = s2c_keys[len(HANDSHAKE_S2C) :]
    expect(tail != [] and set(tail) == {KEY_HEARTBEAT}, f"{pcap}: broker sends only Heartbeats: {tail}")
    (asked,) = struct.unpack_from(">I", c2s[3], 8)
    expect(asked == HEARTBEAT_S, f"{pcap}: the client's Tune asks heartbeat {HEARTBEAT_S}, not {asked}")
