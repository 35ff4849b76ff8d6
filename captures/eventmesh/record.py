#!/usr/bin/env python3
"""Record EventMesh TCP captures: frames built by streamdump's encoder, sent over real sockets.

    sudo python3 record.py              # every scenario
    sudo python3 record.py session      # some of them

No EventMesh server or client installs from the package registries here, so both ends of
each connection are this script: a listening socket on 127.0.0.1:10000 (10100 for the one
found by its magic alone) and a client socket, each sending the frames of the reference's
interaction tables in turn, built from dissectors/eventmesh/spec.yaml by streamdump's
encoder with the bodies Apache EventMesh's Java and Go SDKs and runtime write (see
README.md). tcpdump records the loopback traffic. A step may send several frames in one
write (several frames per segment) or one frame in pieces with pauses between them (a
frame across segments).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from streamdump.dissectors.eventmesh.framing import MAGIC, build

from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry

HERE = os.path.dirname(os.path.abspath(__file__))
DECODER = Decoder(default_registry().get("eventmesh"))

# What the Java SDK's UserAgent carries (UserAgent.java; token since 1.9).
PRODUCER = {
    "env": "PRD", "subsystem": "5023", "path": "/data/app/umg_proxy", "pid": 32893,
    "host": "127.0.0.1", "port": 8362, "client_version": "2.0.11", "username": "PU4283",
    "password": "Zx9+pw", "client_group": "EventmeshTest-producerGroup", "purpose": "pub", "unack": 0,
    "idc": "FT",
}  # fmt: skip
CONSUMER = {
    **PRODUCER,
    "pid": 32894,
    "port": 8363,
    "client_group": "EventmeshTest-consumerGroup",
    "purpose": "sub",
}
CLOUDEVENTS = {"protocol_type": "cloudevents", "protocol_version": "1.0", "protocol_desc": "tcp"}
EMM = {"protocol_type": "eventmeshmessage", "protocol_version": "1.0", "protocol_desc": "tcp"}


def frame(command: str, kind: str, seq: str | None = None, *, code: int = 0, desc: str | None = None,
          properties: dict[str, Any] | None = None, generation: str = "1.9", java: bool = True,
          **body: Any) -> bytes:  # fmt: skip
    """One frame as the Java runtime and SDK write it (Jackson adds "command" after the header)."""
    fields: dict[str, Any] = {"code": code, "desc": desc, "seq": seq, "properties": properties or {}, **body}
    if java:
        key = DECODER.wire_key(DECODER.protocol.commands[command].key, kind == "response")
        fields["command_copy"] = DECODER.protocol.enums["command"][key]
    return build(DECODER, command, kind, fields, generation)


def cloudevent(topic: str, data: Any, event_id: str, *, base64_data: bytes | None = None) -> bytes:
    """A CloudEvent in its JSON format, as the Java SDK's EventFormat serialises it."""
    event: dict[str, Any] = {
        "specversion": "1.0", "id": event_id, "source": "/", "type": "cloudevents",
        "datacontenttype": "application/cloudevents+json", "subject": topic,
        "protocoltype": "cloudevents", "protocolversion": "1.0", "protocoldesc": "tcp",
    }  # fmt: skip
    if base64_data is not None:
        import base64

        event["datacontenttype"] = "application/octet-stream"
        event["data_base64"] = base64.b64encode(base64_data).decode()
    else:
        event["data"] = data
    return json.dumps(event, separators=(",", ":")).encode()


def emm(topic: str, body: str, **properties: str) -> dict[str, Any]:
    """An EventMeshMessage (EventMeshMessage.java) as Jackson writes it."""
    return {"topic": topic, "properties": properties, "headers": {}, "body": body}


def raw_frame(
    header: bytes, body: bytes = b"", *, length: int | None = None, header_length: int | None = None
) -> bytes:
    """A frame from bytes, lengths as given (else as 1.9 counts them): for damage no encoder writes."""
    size = len(MAGIC) + 8 + len(header) + len(body)
    length = size - 8 if length is None else length
    header_length = len(header) if header_length is None else header_length
    return MAGIC + struct.pack(">ii", length, header_length) + header + body


# A connection is a list of steps: (side, data, pieces, pause after). side "c" or "s";
# pieces: None to write data at once, else the sizes to write it in, with pauses between.
Step = tuple[str, bytes, list[int] | None, float]


def c(*frames: bytes, pieces: list[int] | None = None, pause: float = 0.004) -> Step:
    return ("c", b"".join(frames), pieces, pause)


def s(*frames: bytes, pieces: list[int] | None = None, pause: float = 0.004) -> Step:
    return ("s", b"".join(frames), pieces, pause)


def session() -> list[tuple[int, list[Step]]]:
    """A producer and a consumer talking to a 1.9+ server: every client-initiated and
    server-initiated interaction of the reference's tables, with a request/reply round trip."""
    ce = cloudevent(
        "TEST-TOPIC-TCP-ASYNC", {"order": 42, "state": "paid"}, "8d1bd0a6-0e55-4f6c-9a4b-5c3f2e2d7a10"
    )
    big = cloudevent("TEST-TOPIC-TCP-ASYNC", {"text": "x" * 3000}, "0c6f4c1e-5b1e-4a51-8d53-9a1b2f3c4d5e")
    binary = cloudevent(
        "TEST-TOPIC-TCP-ASYNC", None, "7a0e7c7e-3d0f-4b4e-9a55-2b0c5c1f0e11", base64_data=b"\x00\x01\xfe\xff"
    )
    request = emm("TEST-TOPIC-TCP-SYNC", '{"question":"stock?","sku":"A-17"}', msgtype="persistent")
    reply = emm("TEST-TOPIC-TCP-SYNC", '{"answer":12}', msgtype="persistent")
    subscription = {
        "topic_list": [
            {
                "topic": "TEST-TOPIC-TCP-ASYNC",
                "subscription_mode": "CLUSTERING",
                "subscription_type": "ASYNC",
            },
            {"topic": "TEST-TOPIC-TCP-SYNC", "subscription_mode": "CLUSTERING", "subscription_type": "SYNC"},
        ]
    }
    consumer = [
        c(frame("Hello", "request", "1583904212", **CONSUMER)),
        s(frame("Hello", "response", "1583904212", desc="success")),
        c(frame("Subscribe", "request", "4702368813", **subscription)),
        s(frame("Subscribe", "response", "4702368813", desc="success")),
        c(frame("Listen", "request", "2731051446")),
        s(frame("Listen", "response", "2731051446", desc="success")),
        c(frame("Heartbeat", "request", "0381262574")),
        s(frame("Heartbeat", "response", "0381262574", desc="success"), pause=0.05),
        # The server pushes the producer's event (its seq is the server's counter), then the request.
        s(frame("AsyncPush", "request", "1", properties={"protocoltype": "cloudevents"}, package=ce)),
        c(frame("AsyncPush", "response", "1", package=ce.decode())),
        s(frame("AsyncPush", "request", "2", properties={"protocoltype": "cloudevents"}, package=binary)),
        c(frame("AsyncPush", "response", "2", package=binary.decode()), pause=0.05),
        s(
            frame(
                "SyncPush", "request", "3", properties={"protocoltype": "eventmeshmessage"}, package=request
            )
        ),
        c(
            frame("SyncPush", "response", "3", package=json.dumps(request, separators=(",", ":"))),
            frame("SyncReply", "command", "8475013262", properties=EMM, package=reply),
        ),
        s(
            frame("BroadcastPush", "request", "4", properties={"protocoltype": "cloudevents"}, package=ce),
            pause=0.05,
        ),
        c(frame("BroadcastPush", "response", "4", package=ce.decode())),
        c(frame("Unsubscribe", "request", "6045713286")),
        s(frame("Unsubscribe", "response", "6045713286", desc="success")),
        c(frame("ClientGoodbye", "request", "3318627160")),
        s(frame("ClientGoodbye", "response", "3318627160", desc="success")),
    ]
    producer = [
        c(frame("Hello", "request", "2040616517", **PRODUCER)),
        s(frame("Hello", "response", "2040616517", desc="success")),
        # A heartbeat and a publish in one write: two frames in one segment.
        c(
            frame("Heartbeat", "request", "7361524802"),
            frame("AsyncMessage", "request", "5526071834", properties=CLOUDEVENTS, package=ce),
        ),
        s(
            frame("Heartbeat", "response", "7361524802", desc="success"),
            frame("AsyncMessage", "response", "5526071834", desc="success"),
        ),
        # A 3 KB event written in three pieces: one frame across three segments.
        c(
            frame("AsyncMessage", "request", "1465300728", properties=CLOUDEVENTS, package=big),
            pieces=[1000, 1200],
        ),
        s(frame("AsyncMessage", "response", "1465300728", desc="success")),
        c(frame("AsyncMessage", "request", "6612038457", properties=CLOUDEVENTS, package=binary)),
        s(frame("AsyncMessage", "response", "6612038457", desc="success")),
        c(
            frame(
                "Broadcast",
                "request",
                "2286403517",
                properties=EMM,
                package=emm("TEST-TOPIC-TCP-BROADCAST", "hello everyone"),
            )
        ),
        s(frame("Broadcast", "response", "2286403517", desc="success")),
        c(frame("SyncRequest", "request", "0754126638", properties=EMM, package=request)),
        s(
            frame(
                "SyncRequest",
                "response",
                "0754126638",
                properties={"protocoltype": "eventmeshmessage"},
                package=reply,
            )
        ),
        c(frame("ReplyAck", "command", "0754126638", package=json.dumps(reply, separators=(",", ":")))),
        c(frame("ClientGoodbye", "request", "5830241167")),
        s(frame("ClientGoodbye", "response", "5830241167", desc="success")),
    ]
    return [(10000, consumer), (10000, producer)]


def legacy() -> list[tuple[int, list[Step]]]:
    """A client of the Go SDK (or Java up to 1.8) with a 1.8 server: the message length counts
    8 + header + body; empty bodies are the 4 bytes `null`; the Go SDK sorts the header's keys
    and always writes desc. One connection on port 10100: found by its magic alone."""

    def go(command: str, kind: str, seq: str, body: bytes = b"null", **kw: Any) -> bytes:
        header = {
            "cmd": DECODER.protocol.enums["command"][
                DECODER.wire_key(DECODER.protocol.commands[command].key, kind == "response")
            ]
        }
        header |= {"code": kw.get("code", 0), "command": header["cmd"], "desc": kw.get("desc", ""),
                   "properties": kw.get("properties", {}), "seq": seq}  # fmt: skip
        text = json.dumps(dict(sorted(header.items())), separators=(",", ":")).encode()
        return raw_frame(text, body, length=8 + len(text) + len(body))

    agent = {k: v for k, v in PRODUCER.items() if k not in ("client_version",)} | {"version": "1.8.0"}
    agent = {("group" if k == "client_group" else k): v for k, v in agent.items()}
    event = cloudevent("TEST-TOPIC-GO", "hello from go", "5b7e3c1a-1f2d-4e3b-8a9c-0d1e2f3a4b5c")
    steps = [
        c(go("Hello", "request", "3749260158", json.dumps(agent).encode())),
        s(frame("Hello", "response", "3749260158", desc="success", generation="1.8", java=False)),
        # Two frames in one segment, then one split where its length field is cut.
        c(
            go("Heartbeat", "request", "8261095374"),
            go(
                "AsyncMessage",
                "request",
                "0183726455",
                event,
                properties={"protocoltype": "cloudevents", "protocolversion": "1.0", "protocoldesc": "tcp"},
            ),
        ),
        s(
            frame("Heartbeat", "response", "8261095374", desc="success", generation="1.8", java=False),
            frame("AsyncMessage", "response", "0183726455", desc="success", generation="1.8", java=False),
        ),
        c(
            go(
                "AsyncMessage",
                "request",
                "6638201947",
                event,
                properties={"protocoltype": "cloudevents", "protocolversion": "1.0", "protocoldesc": "tcp"},
            ),
            pieces=[15, 40],
        ),
        s(frame("AsyncMessage", "response", "6638201947", desc="success", generation="1.8", java=False)),
        c(go("ClientGoodbye", "request", "9920184736")),
        s(frame("ClientGoodbye", "response", "9920184736", desc="success", generation="1.8", java=False)),
    ]
    return [(10100, steps)]


def trouble() -> list[tuple[int, list[Step]]]:
    """What goes wrong: a refused hello, a refused subscribe, a request never answered,
    heartbeats that stop, an unknown command answered by the server's goodbye, a redirect."""
    stack = (
        "[org.apache.eventmesh.runtime.core.protocol.tcp.client.processor.HelloProcessor.validateUserAgent"
        "(HelloProcessor.java:148), org.apache.eventmesh.runtime.core.protocol.tcp.client.processor."
        "HelloProcessor.process(HelloProcessor.java:83)]"
    )
    refused = [
        c(frame("Hello", "request", "6172849305", **{**CONSUMER, "client_group": ""})),
        s(frame("Hello", "response", "6172849305", code=1, desc=stack)),
    ]
    acl = ("org.apache.eventmesh.common.exception.AclException: group:EventmeshTest-consumerGroup "
           "has no auth to sub the topic:TEST-TOPIC-TCP-SYNC")  # fmt: skip
    unknown = b'{"cmd":"MSG_TRACE","code":0,"seq":"3047162958","properties":{}}'
    silent = [
        c(frame("Hello", "request", "5201836647", **CONSUMER)),
        s(frame("Hello", "response", "5201836647", desc="success"), pause=0.02),
        c(frame("Heartbeat", "request", "0418362275")),
        s(frame("Heartbeat", "response", "0418362275", desc="success"), pause=0.2),
        c(frame("Heartbeat", "request", "2260417388")),
        s(frame("Heartbeat", "response", "2260417388", desc="success"), pause=0.2),
        c(frame("Heartbeat", "request", "5738104426")),
        s(frame("Heartbeat", "response", "5738104426", desc="success"), pause=0.02),
        c(
            frame(
                "Subscribe",
                "request",
                "1108374652",
                topic_list=[
                    {
                        "topic": "TEST-TOPIC-TCP-SYNC",
                        "subscription_mode": "CLUSTERING",
                        "subscription_type": "SYNC",
                    }
                ],
            )
        ),
        s(frame("Subscribe", "response", "1108374652", code=1, desc=acl), pause=0.02),
        # Never answered; the heartbeats have stopped too.
        c(frame("Listen", "request", "7730286154"), pause=0.5),
        c(
            frame(
                "AsyncMessage",
                "request",
                "4417290381",
                properties=EMM,
                package=emm("TEST-TOPIC-TCP-ASYNC", "still here"),
            ),
            pause=0.2,
        ),
        s(frame("AsyncMessage", "response", "4417290381", desc="success"), pause=0.2),
        c(raw_frame(unknown), pause=0.05),
        s(frame("ServerGoodbye", "request", None, code=1, desc="Unknown Command type"), pause=0.02),
        c(frame("ServerGoodbye", "response", None)),
    ]
    redirected = [
        c(frame("Hello", "request", "8836172094", **PRODUCER)),
        s(frame("Hello", "response", "8836172094", desc="success")),
        c(
            frame(
                "AsyncMessage",
                "request",
                "2953017746",
                properties=EMM,
                package=emm("TEST-TOPIC-TCP-ASYNC", '{"n":1}'),
            )
        ),
        s(frame("AsyncMessage", "response", "2953017746", desc="success"), pause=0.05),
        s(frame("Redirect", "command", None, ip="127.0.0.2", port=10000), pause=0.05),
        s(frame("ServerGoodbye", "request", None, desc="graceful normal quit from eventmesh")),
    ]
    return [(10000, refused), (10000, silent), (10000, redirected)]


SCENARIOS: dict[str, Callable[[], list[tuple[int, list[Step]]]]] = {
    "session": session,
    "legacy": legacy,
    "trouble": trouble,
}
PORTS = (10000, 10100)


def play(port: int, steps: list[Step]) -> None:
    """One connection: a listening socket and a client socket on loopback, steps in turn."""
    with socket.create_server(("127.0.0.1", port)) as listener:
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ends = {"c": client, "s": server}
        try:
            for side, data, pieces, pause in steps:
                sock = ends[side]
                if pieces is None:
                    sock.sendall(data)
                else:
                    at = 0
                    for size in (*pieces, len(data)):
                        sock.sendall(data[at : at + size] if size != len(data) else data[at:])
                        at += size
                        if at >= len(data):
                            break
                        time.sleep(0.02)
                time.sleep(pause)
            time.sleep(0.02)
        finally:
            client.close()
            time.sleep(0.01)
            server.close()


def record(name: str) -> str:
    out = os.path.join(HERE, f"{name}.pcap")
    bpf = " or ".join(f"tcp port {p}" for p in PORTS)
    with tempfile.TemporaryFile() as log:
        dump = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "--immediate-mode", "-w", out, bpf], stderr=log)
        for _ in range(100):
            log.seek(0)
            if b"listening" in log.read():
                break
            time.sleep(0.05)
        try:
            for port, steps in SCENARIOS[name]():
                play(port, steps)
                time.sleep(0.05)
        finally:
            time.sleep(0.2)
            dump.send_signal(signal.SIGINT)
            dump.wait(10)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help=f"scenarios (default: all): {', '.join(SCENARIOS)}")
    args = parser.parse_args()
    unknown = set(args.names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    for name in args.names or SCENARIOS:
        path = record(name)
        print(f"{path}: {os.path.getsize(path)} bytes")
        subprocess.run([sys.executable, "-m", "streamdump", "read", path], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
