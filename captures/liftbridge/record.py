#!/usr/bin/env python3
"""Record Liftbridge captures: envelopes built by streamdump's encoder, through a real NATS server.

    sudo python3 record.py              # every scenario
    sudo python3 record.py session      # some of them

No Liftbridge server installs here, so this script plays both ends over the machine's real
NATS server (127.0.0.1:4222) with the real nats-py client: a "client" connection publishes
Liftbridge Messages (with and without a CRC-32C) to a stream's subject and subscribes to its
ack inbox; a "server" connection subscribes to the stream's subject, reads each envelope with
streamdump's decoder and publishes an Ack envelope to the message's ack inbox, as a Liftbridge
partition leader does; two "servers" also exchange a PartitionNotification and an internal
request. Envelopes and protobuf messages are built from dissectors/liftbridge/spec.yaml by
streamdump's encoder (protobuf bytes through Google's library). tcpdump records the loopback
traffic on port 4222.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import crc32c
import nats

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = "nats://127.0.0.1:4222"
LB = Decoder(default_registry().get("liftbridge"))
MAGIC = bytes.fromhex("b90e43b4")


def envelope(command: str, *, crc: bool = False, **fields: Any) -> bytes:
    """An envelope (header length 8, or 12 with a CRC-32C over the message) holding fields."""
    body = LB.encode(command, "command", {"envelope_version": 0, "header_length": 8, "flags": 0, **fields})
    message = body[8:]
    if not crc:
        return body
    return body[:4] + bytes([0, 12, 1, body[7]]) + struct.pack(">I", crc32c.crc32c(message)) + message


async def leader(messages: list[bytes], done: asyncio.Event, acks: int) -> Callable[[], Awaitable[None]]:
    """A stand-in partition leader: acks each Publish on the stream's subject to its ack inbox."""
    nc = await nats.connect(SERVER, name="liftbridge-standin")
    seen = 0

    async def on_publish(msg: Any) -> None:
        nonlocal seen
        frame = LB.decode(msg.data)
        fields = frame.fields
        if frame.command != "Publish" or not fields.get("ack_inbox"):
            return
        ack = envelope(
            "Ack",
            stream=fields.get("stream", ""),
            partition_subject=msg.subject,
            msg_subject=msg.subject,
            offset=41 + seen,
            ack_inbox=fields["ack_inbox"],
            correlation_id=fields.get("correlation_id", ""),
            ack_policy=fields.get("ack_policy", 0),
            reception_timestamp=1_763_900_000_000_000_000 + seen,
            commit_timestamp=1_763_900_000_000_500_000 + seen,
        )
        seen += 1
        await nc.publish(fields["ack_inbox"], ack)
        if seen >= acks:
            done.set()

    await nc.subscribe("orders", cb=on_publish)
    await nc.flush()

    async def close() -> None:
        await nc.drain()

    return close


async def session() -> None:
    """A client publishes four messages (one without a CRC, one with ack policy NONE), each
    acked by the stand-in leader, and two servers exchange a PartitionNotification and a
    ServerInfoRequest (decoded without a schema)."""
    done = asyncio.Event()
    close_leader = await leader([], done, acks=3)
    client = await nats.connect(SERVER, name="liftbridge-client")
    acked: list[bytes] = []

    async def on_ack(msg: Any) -> None:
        acked.append(msg.data)

    await client.subscribe("_INBOX.lbc.acks", cb=on_ack)
    await client.flush()
    ts = 1_763_900_000_000_000_000
    await client.publish("orders", envelope(
        "Publish", crc=True, stream="orders", subject="orders", message_key=b"order-7",
        value=b'{"id": 7, "sku": "A-7", "qty": 2}', timestamp=ts, headers={"trace-id": b"abc123"},
        ack_inbox="_INBOX.lbc.acks", correlation_id="c-1", ack_policy=1,
    ))  # fmt: skip
    await client.publish("orders", envelope(
        "Publish", stream="orders", subject="orders", value=b"plain text value", timestamp=ts + 1,
        ack_inbox="_INBOX.lbc.acks", correlation_id="c-2", ack_policy=0,
    ))  # fmt: skip
    await client.publish("orders", envelope(
        "Publish", crc=True, stream="orders", subject="orders", message_key=b"\x00\x01",
        value=bytes(range(0, 64, 3)), partition=2, timestamp=ts + 2,
        ack_inbox="_INBOX.lbc.acks", correlation_id="c-3", ack_policy=2,
    ))  # fmt: skip
    await client.publish("orders", envelope(
        "Publish", crc=True, stream="orders", subject="orders", value=b"last",
        ack_inbox="_INBOX.lbc.acks", correlation_id="c-4", ack_policy=1,
    ))  # fmt: skip
    await client.flush()
    await asyncio.wait_for(done.wait(), 5)
    peer = await nats.connect(SERVER, name="liftbridge-server-b")
    await peer.publish("liftbridge-default.notify.server-a", envelope(
        "PartitionNotification", stream="orders", partition=2,
    ))  # fmt: skip
    internal = bytes.fromhex("0a087365727665722d6210011a04") + b"ping"
    await peer.publish("liftbridge-default.raft.server-a", MAGIC + bytes([0, 8, 0, 10]) + internal)
    await peer.flush()
    await asyncio.sleep(0.2)
    await peer.drain()
    await client.drain()
    await close_leader()


async def trouble() -> None:
    """Envelopes damaged on purpose: a wrong CRC, a header length shorter than the header,
    a longer header (honoured), a truncated protobuf, an unknown message type, the old
    "LIFT" cookie (not an envelope: an ordinary payload) and a CRC flag with no room for it."""
    client = await nats.connect(SERVER, name="liftbridge-trouble")
    good = envelope("Publish", crc=True, stream="orders", value=b"hello", correlation_id="t-1")
    bad_crc = good[:8] + bytes([good[8] ^ 0xFF]) + good[9:]
    short_header = good[:5] + bytes([6]) + good[6:]
    body = LB.encode("Publish", "command", {"envelope_version": 0, "header_length": 8, "flags": 0,
                                            "stream": "orders", "value": b"padded"})[8:]  # fmt: skip
    long_header = MAGIC + bytes([0, 11, 0, 0]) + b"\x00\x00\x00" + body
    truncated = envelope("Publish", stream="orders", value=b"cut off here", correlation_id="t-2")[:-9]
    unknown_type = MAGIC + bytes([0, 8, 0, 42]) + bytes.fromhex("0a03616263")
    old_cookie = b"LIFT" + bytes([0, 8, 0, 0]) + body
    no_room = MAGIC + bytes([0, 12, 1, 0]) + b"\x00\x00"
    for payload in (bad_crc, short_header, long_header, truncated, unknown_type, old_cookie, no_room):
        await client.publish("orders", payload)
    await client.flush()
    await asyncio.sleep(0.1)
    await client.drain()


SCENARIOS: dict[str, Callable[[], Awaitable[None]]] = {"session": session, "trouble": trouble}


def record(name: str, outdir: str = HERE) -> str:
    out = os.path.join(outdir, f"{name}.pcap")
    with tempfile.TemporaryFile() as log:
        dump = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-U", "--immediate-mode", "-w", out, "tcp port 4222"], stderr=log
        )
        for _ in range(100):
            log.seek(0)
            if b"listening" in log.read():
                break
            time.sleep(0.05)
        try:
            asyncio.run(SCENARIOS[name]())
        finally:
            time.sleep(0.3)
            dump.send_signal(signal.SIGINT)
            dump.wait(10)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help=f"scenarios (default: all): {', '.join(SCENARIOS)}")
    parser.add_argument("--outdir", default=HERE, help="where the pcaps go (default: beside this script)")
    parser.add_argument("--quiet", action="store_true", help="do not decode what was recorded")
    args = parser.parse_args()
    unknown = set(args.names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    for name in args.names or SCENARIOS:
        path = record(name, args.outdir)
        print(f"{path}: {os.path.getsize(path)} bytes")
        if not args.quiet:
            subprocess.run([sys.executable, "-m", "streamdump", "read", path], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
