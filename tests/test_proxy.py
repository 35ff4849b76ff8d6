"""`streamdump proxy`: a real client (nats-py) through the proxy to the real NATS server; the bytes
pass unchanged, every frame is decoded, --write reads back the same; a dead upstream and Ctrl-C
end cleanly. Needs the NATS server (no privileges); skips elsewhere, fails in CI."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import need
from test_live_nats import nats_reachable

pytestmark = pytest.mark.nats
STREAMDUMP = [sys.executable, "-m", "streamdump"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(listen: int, upstream: int, *args: str) -> subprocess.Popen[bytes]:
    cmd = [
        *STREAMDUMP,
        "proxy",
        "--listen",
        f"127.0.0.1:{listen}",
        "--upstream",
        f"127.0.0.1:{upstream}",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", listen), timeout=0.1):
                pass  # a connection the proxy passes on and closes: harmless to NATS
            break
        except OSError:
            time.sleep(0.05)
    return proc


def through(port: int, messages: int) -> list[bytes]:
    import nats

    got: list[bytes] = []

    async def run() -> None:
        nc = await nats.connect(f"nats://127.0.0.1:{port}", name="proxied")

        async def keep(msg: object) -> None:
            got.append(msg.data)  # type: ignore[attr-defined]

        await nc.subscribe("proxy.>", cb=keep)
        for i in range(messages):
            await nc.publish("proxy.x", b"hello %d" % i)
        reply = await nc.request("$JS.API.INFO", b"", timeout=2)
        got.append(reply.data[:1])
        await nc.flush()
        await asyncio.sleep(0.2)
        await nc.close()

    asyncio.run(run())
    return got


def test_a_real_client_works_through_the_proxy_and_every_frame_is_decoded(tmp_path: Path) -> None:
    need(nats_reachable(), "no NATS server on 127.0.0.1:4222")
    saved = tmp_path / "proxy.pcap"
    port = free_port()
    proc = start(port, 4222, "-P", "nats", "--write", str(saved))
    got = through(port, 20)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert got[:20] == [b"hello %d" % i for i in range(20)] and got[20] == b"{"  # the JetStream API's JSON
    lines = out.decode().splitlines()
    assert sum("Publish command PUB subject=proxy.x" in line for line in lines) == 20
    assert sum("Message command MSG subject=proxy.x" in line for line in lines) == 20
    assert b"Traceback" not in err and b"== NATS ==" in err
    read = subprocess.run([*STREAMDUMP, "read", str(saved), "-P", "nats"], capture_output=True, timeout=60)
    assert read.returncode == 0 and read.stdout == out


def test_a_dead_upstream_closes_the_client_and_says_so_in_a_line() -> None:
    listen, dead = free_port(), free_port()
    proc = start(listen, dead)
    with socket.create_connection(("127.0.0.1", listen), timeout=5) as sock:
        sock.settimeout(5)
        assert sock.recv(10) == b""  # closed, nothing passed
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    warned = [line for line in err.decode().splitlines() if "refused the client" in line]
    assert warned and warned[0].startswith(f"streamdump: warn: upstream 127.0.0.1:{dead} refused the client")


def test_bad_addresses_are_usage_errors() -> None:
    result = subprocess.run([*STREAMDUMP, "proxy", "--listen", "nowhere", "--upstream", "127.0.0.1:1"],
                            capture_output=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and b"--listen takes HOST:PORT" in result.stderr


def stream_port_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5552), timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.broker
def test_rstream_through_the_proxy_and_where_the_broker_sends_it(tmp_path: Path) -> None:
    """rstream publishes and consumes through the proxy (its load-balancer mode keeps it there);
    the broker's advertised address, past the proxy, is said."""
    need(
        stream_port_reachable(),
        "no RabbitMQ stream port on 127.0.0.1:5552 (rabbitmq-plugins enable rabbitmq_stream)",
    )
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType, Producer

    port = free_port()
    proc = start(port, 5552, "-P", "rabbitmq_stream", "-T", "jsonl")
    got: list[bytes] = []

    async def run() -> None:
        async with Producer(
            "127.0.0.1", port=port, username="guest", password="guest", load_balancer_mode=True
        ) as p:
            await p.create_stream("proxy-test", exists_ok=True)
            for i in range(50):
                await p.send("proxy-test", b"m%d" % i)
        consumer = Consumer(
            "127.0.0.1", port=port, username="guest", password="guest", load_balancer_mode=True
        )
        await consumer.start()

        async def keep(body: bytes, _context: object) -> None:
            got.append(body)

        offset = ConsumerOffsetSpecification(OffsetType.FIRST, None)
        await consumer.subscribe("proxy-test", keep, offset_specification=offset)
        for _ in range(50):
            if len(got) >= 50:
                break
            await asyncio.sleep(0.1)
        await consumer.close()
        async with Producer(
            "127.0.0.1", port=port, username="guest", password="guest", load_balancer_mode=True
        ) as p:
            await p.delete_stream("proxy-test")

    asyncio.run(run())
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert got[:50] == [b"m%d" % i for i in range(50)]
    import json

    frames = [json.loads(line) for line in out.decode().splitlines()]
    published = sum(len(f["fields"]["messages"]) for f in frames if f["command"] == "Publish")
    assert published == 50
    assert any(f["command"] == "Deliver" for f in frames)
    assert b"tells the client to connect to localhost:5552, past this proxy" in err


def test_an_upstream_killed_and_a_client_vanishing_mid_frame_end_cleanly(tmp_path: Path) -> None:
    """No server needed: a stand-in upstream that dies after its INFO, and a client that leaves in
    the middle of a PUB; the proxy goes on, exits cleanly, and its file reads back."""
    upstream = socket.create_server(("127.0.0.1", 0))
    port = upstream.getsockname()[1]
    listen = free_port()
    saved = tmp_path / "cut.pcap"
    proc = start(listen, port, "-P", "nats", "--write", str(saved))
    # The probe connection of start() reached the stand-in first: accept and drop it.
    upstream.settimeout(5)
    probe, _ = upstream.accept()
    probe.close()
    client = socket.create_connection(("127.0.0.1", listen), timeout=5)
    server, _ = upstream.accept()
    server.sendall(b'INFO {"server_id":"x","max_payload":1048576} \r\n')
    assert client.recv(100).startswith(b"INFO")
    server.close()  # the upstream dies
    assert client.recv(100) == b""  # and the client's connection is closed
    client.close()
    second = socket.create_connection(("127.0.0.1", listen), timeout=5)
    third, _ = upstream.accept()
    second.sendall(b"PUB orders.a 10\r\nhel")  # and leaves in the middle of the payload
    second.close()
    time.sleep(0.3)
    third.close()
    upstream.close()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"Traceback" not in err, err
    read = subprocess.run([*STREAMDUMP, "read", str(saved), "-P", "nats", "--port", str(port)],
                          capture_output=True, timeout=60)  # fmt: skip
    assert read.returncode == 0 and read.stdout == out
    assert b"Info command max_payload=" in out and b"incomplete frame" in out
