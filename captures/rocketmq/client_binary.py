#!/usr/bin/env python3
"""A producer and consumer that speak the ROCKETMQ binary header, built by streamdump's encoder.

Neither real client that installs here sends binary headers (both send JSON), and Java
clients switch to them only when configured (rocketmq.serialize.type=ROCKETMQ). This
script covers that encoding: every request it sends is encoded by streamdump from
dissectors/rocketmq/spec.yaml with serialize type 1, over a real socket to the stand-in,
which answers in the same encoding. It also sends a zlib-compressed body (sys_flag 0x1)
and a one-way offset update (flag bit 1), which the real clients recorded here never do.

    python3 client_binary.py [--namesrv 127.0.0.1:9876]
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
import zlib
from typing import Any

from streamdump.spec.decoder import Decoder, DecodeState
from streamdump.spec.registry import default_registry

ROCKETMQ = Decoder(default_registry().get("rocketmq"))
PYTHON = 3  # the language code the header carries
TOPIC = "TopicTest"
GROUP = "PID_streamdump_binary"


class Connection:
    """One TCP connection: requests out, responses decoded back with streamdump."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.state = DecodeState()
        self.opaque = 0

    def send(self, command: str, fields: dict[str, Any], *, oneway: bool = False) -> dict[str, Any] | None:
        self.opaque += 1
        header = {"serialize_type": 1, "language": PYTHON, "version": 0, "opaque": self.opaque}
        header |= {"flag": 2 if oneway else 0, "remark": ""}
        frame = ROCKETMQ.encode(command, "request", header | fields)
        self.sock.sendall(frame)
        # The decoder learns this request's command, so the response's is known.
        ROCKETMQ.decode(frame, state=self.state, from_client=True)
        if oneway:
            return None
        answer = ROCKETMQ.decode(self._read(), state=self.state, from_client=False)
        print(f"client_binary: {command} -> {answer.fields.get('code')} {answer.fields.get('remark') or ''}")
        return answer.fields

    def _read(self) -> bytes:
        head = self._exactly(4)
        (length,) = struct.unpack(">i", head)
        return head + self._exactly(length)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the stand-in closed the connection")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", default="127.0.0.1:9876")
    ap.add_argument("--log-dir", help="ignored (the real clients keep logs there)")
    args = ap.parse_args()
    namesrv = Connection(args.namesrv)
    route = namesrv.send("GET_ROUTEINTO_BY_TOPIC", {"topic": TOPIC})
    namesrv.close()
    if route is None or route.get("code") != 0:
        print("client_binary: no route", file=sys.stderr)
        return 1
    addresses = route["route"]["broker_datas"][0]["broker_addrs"]
    broker = Connection(addresses[0])
    now = int(time.time() * 1000)
    plain = b"hello streamdump from a binary header"
    packed = zlib.compress(b"a compressed body " * 40)
    for n, (body, sys_flag) in enumerate(((plain, 0), (packed, 0x1))):
        broker.send(
            "SEND_MESSAGE_V2",
            {
                "producer_group": GROUP,
                "topic": TOPIC,
                "default_topic": "TBW102",
                "default_topic_queue_nums": 4,
                "queue_id": 0,
                "sys_flag": sys_flag,  # 0x1: compressed, codec 0 (zlib) in bits 8-10
                "born_timestamp": now + n,
                "message_flag": 0,
                "properties": {"keys": f"binary-{n}", "tags": "TagBin", "wait_store_msg_ok": True},
                "reconsume_times": 0,
                "unit_mode": False,
                "body": body,
            },
        )
    pulled = broker.send(
        "PULL_MESSAGE",
        {
            "consumer_group": "GID_streamdump_binary",
            "topic": TOPIC,
            "queue_id": 0,
            "queue_offset": 0,
            "max_msg_nums": 32,
            "sys_flag": 0x4,  # subscription, no suspend: answer at once
            "commit_offset": 0,
            "suspend_timeout_millis": 0,
            "subscription": "*",
            "sub_version": now,
            "expression_type": "TAG",
        },
    )
    print(f"client_binary: pulled {len((pulled or {}).get('messages') or [])} messages")
    broker.send(
        "UPDATE_CONSUMER_OFFSET",
        {"consumer_group": "GID_streamdump_binary", "topic": TOPIC, "queue_id": 0, "commit_offset": 2},
        oneway=True,
    )
    broker.send("UNREGISTER_CLIENT", {"client_id": "127.0.0.1@binary", "producer_group": GROUP})
    broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
