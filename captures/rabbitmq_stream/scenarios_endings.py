"""The ending scenarios: connections that end without the protocol's Close.

client_crash runs crashing_client.py, a real rstream application (Producer and Consumer)
that dies in its message handler on the first delivery; its connections end with the
kernel's FIN or, where the broker's deliveries were still unread, a reset. Its first message
carries an application property the application set to None, which rstream writes as AMQP
null. reset_mid_frame is a raw client that opens a connection, declares a publisher, sends
the first half of a Publish frame and resets the connection (SO_LINGER 0), as a client killed
in the middle of a write does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import sys
from pathlib import Path

from broker import CRASH_STREAM, PORT, RESET_STREAM
from raw_client import (
    KEY_CREATE,
    KEY_DECLARE_PUBLISHER,
    KEY_PUBLISH,
    RawClient,
    amqp_data,
    publish_body,
    string,
)
from scenario_tools import Outputs, expect

log = logging.getLogger("record")

CRASHING_CLIENT = Path(__file__).resolve().parent / "crashing_client.py"
CRASH_EXIT = 3  # crashing_client.EXIT_CODE
CRASH_WAIT_S = 30.0
# How much of the Publish frame the reset_mid_frame client sends before the reset.
SENT_OF_PUBLISH = 0.5


async def scenario_client_crash() -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, str(CRASHING_CLIENT), CRASH_STREAM)
    code = await asyncio.wait_for(proc.wait(), CRASH_WAIT_S)
    expect(code == CRASH_EXIT, f"the client crashes in its handler (exit {CRASH_EXIT}), got exit {code}")


async def scenario_reset_mid_frame() -> None:
    client = RawClient("streamdump-reset-mid-frame")
    await client.connect()
    await client.open()
    await client.call(KEY_CREATE, string(RESET_STREAM) + struct.pack(">I", 0))
    await client.call(KEY_DECLARE_PUBLISHER, struct.pack(">B", 1) + string("") + string(RESET_STREAM))
    body = publish_body(1, [(1, amqp_data(b"x" * 2000))])
    frame = struct.pack(">IHH", 4 + len(body), KEY_PUBLISH, 1) + body
    half = frame[: int(len(frame) * SENT_OF_PUBLISH)]
    writer = client._writer
    assert writer is not None
    writer.write(half)
    await writer.drain()
    await asyncio.sleep(0.1)  # the half frame is on the wire, and the broker waits for the rest
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()  # with linger 0 the close is a reset
    await asyncio.sleep(0.1)


def _segments(pcap: Path) -> list[tuple[bool, str, bytes]]:
    """(from the broker?, TCP flags, payload) of every TCP packet."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    return [
        (p[TCP].sport == PORT, str(p[TCP].flags), bytes(p[TCP].payload))
        for p in rdpcap(str(pcap))
        if TCP in p
    ]


def verify_client_crash(pcap: Path, _outputs: Outputs) -> None:
    segments = _segments(pcap)
    # On loopback each Deliver starts a segment: its key follows the size.
    delivered = any(broker and payload[4:6] == b"\x00\x08" for broker, _, payload in segments)
    expect(delivered, "the broker delivered to the crashing client")
    ended = [flags for broker, flags, _ in segments if not broker and ("F" in flags or "R" in flags)]
    expect(len(ended) >= 1, "the client's side ended its connections")


def verify_reset_mid_frame(pcap: Path, _outputs: Outputs) -> None:
    segments = _segments(pcap)
    expect(
        any(not broker and "R" in flags for broker, flags, _ in segments), "the client reset the connection"
    )
    sent = [payload for broker, _, payload in segments if not broker and payload]
    size = struct.unpack(">I", sent[-1][:4])[0] if sent and len(sent[-1]) >= 4 else 0
    expect(0 < len(sent[-1]) < size + 4, "the client's last segment holds part of a frame")
