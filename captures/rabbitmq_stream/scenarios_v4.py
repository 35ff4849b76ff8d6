"""The RabbitMQ 4.0 scenarios: what the 3.10 broker of the other recordings cannot say.

They run against the 4.0 broker that `rabbitmq4` starts in a Debian 13 chroot (stream port
5562, beside the 3.10 broker on 5552):

- v2_frames: raw_client.py announces Publish and Deliver version 2 (ExchangeCommandVersions),
  publishes version-2 frames with a filter value per message, subscribes with a filter, gets
  version-2 Deliver frames (with the committed chunk id), asks for StreamStats, and ends with
  Unsubscribe, DeletePublisher, Delete and Close. rstream has no call for StreamStats and does
  not ask for Deliver version 2, hence the raw client.
- filtering_v4 and super_stream_v4: real rstream applications (v4_client.py) using filtering
  (Publish v2) and a super stream of three partitions with a single active consumer (the
  broker's ConsumerUpdate requests).

record.py rewrites the server port of these captures from 5562 to 5552, the protocol's own,
so they read like every other capture here; nothing above TCP changes.
"""

from __future__ import annotations

import asyncio
import struct
import sys
from pathlib import Path

from broker import V4_PORT, V4_STREAM
from raw_client import (
    KEY_CREATE,
    KEY_CREDIT,
    KEY_DECLARE_PUBLISHER,
    KEY_DELETE,
    KEY_DELETE_PUBLISHER,
    KEY_DELIVER,
    KEY_EXCHANGE_COMMAND_VERSIONS,
    KEY_PUBLISH,
    KEY_PUBLISH_CONFIRM,
    KEY_SUBSCRIBE,
    KEY_UNSUBSCRIBE,
    RawClient,
    amqp_data,
    blob,
    properties,
    string,
)
from scenario_tools import expect

KEY_STREAM_STATS = 0x001C
V4_CLIENT = Path(__file__).resolve().parent / "v4_client.py"
OFFSET_FIRST = 1
COLORS = ["red", "blue", "red", "green", "red"]
CLIENT_WAIT_S = 60.0


def command_versions(pairs: list[tuple[int, int, int]]) -> bytes:
    return struct.pack(">i", len(pairs)) + b"".join(struct.pack(">HHH", *p) for p in pairs)


def publish_v2(publisher_id: int, messages: list[tuple[int, str, bytes]]) -> bytes:
    """A version-2 Publish body: publisher id, then (publishing id, filter value, message)."""
    out = struct.pack(">Bi", publisher_id, len(messages))
    return out + b"".join(struct.pack(">Q", pid) + string(value) + blob(msg) for pid, value, msg in messages)


async def scenario_v2_frames() -> None:
    client = RawClient("streamdump-v2-frames", port=V4_PORT)
    await client.connect()
    try:
        await _v2_frames(client)
    finally:
        await client.disconnect()


async def _v2_frames(client: RawClient) -> None:
    await client.open()
    versions = command_versions([(KEY_PUBLISH, 1, 2), (KEY_DELIVER, 1, 2), (KEY_STREAM_STATS, 1, 1)])
    # The broker lists what it accepts (Publish 1..2, StreamStats); it sends Deliver version 2
    # once the client has said it reads it.
    answer = await client.call(KEY_EXCHANGE_COMMAND_VERSIONS, versions)
    expect(struct.pack(">HHH", KEY_PUBLISH, 1, 2) in answer.body, "the broker takes Publish version 2")
    await client.call(KEY_CREATE, string(V4_STREAM) + properties({}))
    await client.call(KEY_DECLARE_PUBLISHER, struct.pack(">B", 1) + string("") + string(V4_STREAM))
    for pid, color in enumerate(COLORS, start=1):
        body = publish_v2(1, [(pid, color, amqp_data(f"order {pid} {color}".encode()))])
        await client.send(KEY_PUBLISH, body, version=2)
        confirm = await client.recv()
        expect(confirm.key == KEY_PUBLISH_CONFIRM, f"a confirm for {pid}, got {confirm!r}")
    subscribe = struct.pack(">B", 7) + string(V4_STREAM) + struct.pack(">HH", OFFSET_FIRST, 10)
    subscribe += properties({"filter.0": "red", "match-unfiltered": "false"})
    await client.call(KEY_SUBSCRIBE, subscribe)
    delivered = []
    while len(delivered) < 3:
        frame = await client.recv()
        if frame.key == KEY_DELIVER:
            expect(frame.version == 2, f"Deliver version 2, got {frame.version}")
            delivered.append(frame)
    await client.send(KEY_CREDIT, struct.pack(">BH", 7, 1))
    stats = await client.call(KEY_STREAM_STATS, string(V4_STREAM))
    expect(b"committed_chunk_id" in stats.body, f"StreamStats names the committed chunk id: {stats!r}")
    await client.call(KEY_UNSUBSCRIBE, struct.pack(">B", 7))
    await client.call(KEY_DELETE_PUBLISHER, struct.pack(">B", 1))
    await client.call(KEY_DELETE, string(V4_STREAM))
    await client.close()


async def _v4_client(scenario: str) -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, str(V4_CLIENT), scenario, str(V4_PORT))
    code = await asyncio.wait_for(proc.wait(), CLIENT_WAIT_S)
    expect(code == 0, f"v4_client.py {scenario} exits 0, got {code}")


async def scenario_filtering_v4() -> None:
    await _v4_client("filtering")


async def scenario_super_stream_v4() -> None:
    await _v4_client("super_stream")
