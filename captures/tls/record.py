"""Record TLS captures of real clients against real brokers, with the clients' own key logs.

    sudo python captures/tls/record.py [--out captures/tls]

What it records, each with tcpdump on lo, and the key log Python's ssl wrote for it
(SSLContext.keylog_filename):

- rstream_tls13.pcap / .keys: rstream (a producer of 20 messages and a consumer of them) over
  TLS 1.3 to RabbitMQ's TLS stream listener on 127.0.0.1:5551;
- rstream_tls12.pcap / .keys: the same over TLS 1.2 (ECDHE-RSA-AES128-GCM-SHA256);
- rstream_plain.pcap: the same scenario in plaintext on 5552, to compare the frames with;
- nats_tls.pcap / .keys: nats-py (subscribe, publish, request and reply) against a second
  nats-server with a `tls` block on port 4443 (INFO in plaintext says tls_required, then the
  client upgrades);
- nats_plain.pcap: the same scenario against a nats-server without TLS on port 4442.

The broker's listener is configured by .ci/run (stream.listeners.ssl.default = 5551 and
ssl_options, with the CA and certificate captures/tls/make_pki.sh makes with openssl in
/etc/rabbitmq/tls); this script makes sure of them the same way, idempotently, and starts and
stops the two nats-servers itself (/usr/sbin/nats-server). nats-server 2.9 has no
handshake_first; TLS before INFO is tested with conversations made in memory (tests/test_tls.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PKI = Path("/etc/rabbitmq/tls")
HOST = "127.0.0.1"
STREAM_PLAIN, STREAM_TLS = 5552, 5551
NATS_PLAIN, NATS_TLS = 4442, 4443
MESSAGES = 20


def ensure_broker_tls() -> None:
    """RabbitMQ's TLS stream listener, as .ci/run configures it."""
    subprocess.run([str(HERE / "make_pki.sh"), str(PKI)], check=True)
    if not _open(STREAM_TLS):
        subprocess.run(["bash", "-c", _ci_rabbitmq_section()], check=True, cwd=ROOT)


def _ci_rabbitmq_section() -> str:
    """The RabbitMQ part of .ci/run, run as it is (one place says how the broker is set up)."""
    text = (ROOT / ".ci" / "run").read_text()
    start = text.index('echo "== RabbitMQ')
    end = text.index('echo "== NATS')
    return "set -euo pipefail\n" + text[start:end]


def _open(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def tcpdump(out: Path, port: int) -> Iterator[None]:
    proc = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-U", "--immediate-mode", "-s", "0", "-w", str(out), f"tcp port {port}"],
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 10
    line = b""
    while b"listening on" not in line:
        line = proc.stderr.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("tcpdump did not start")
    time.sleep(1.0)  # its "listening on" comes a moment before the filter sees packets
    try:
        yield
    finally:
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


@contextlib.contextmanager
def nats_server(port: int, tls: bool) -> Iterator[None]:
    folder = Path(tempfile.mkdtemp(prefix="streamdump-nats-"))
    conf = folder / "server.conf"
    text = f"listen: {HOST}:{port}\n"
    if tls:
        text += f'tls {{\n  cert_file: "{PKI / "server.pem"}"\n  key_file: "{PKI / "server.key"}"\n}}\n'
    conf.write_text(text)
    proc = subprocess.Popen(["/usr/sbin/nats-server", "-c", str(conf)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            if _open(port):
                break
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def client_context(
    keylog: Path, version: ssl.TLSVersion | None, ciphers: str | None = None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(PKI / "ca.pem"))
    ctx.check_hostname = False  # rstream connects to the node's advertised name
    ctx.keylog_filename = str(keylog)
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


async def remove_stream(stream: str = "tls-orders") -> None:
    """A stream a failed run left behind, deleted before recording (not in the capture)."""
    from rstream import Producer

    async with Producer(HOST, STREAM_PLAIN, username="guest", password="guest") as producer:
        with contextlib.suppress(Exception):
            await producer.delete_stream(stream)


async def rstream_scenario(port: int, ctx: ssl.SSLContext | None) -> None:
    """A stream declared, 20 messages published and confirmed, consumed from the first, deleted."""
    from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer, amqp_decoder

    stream = "tls-orders"
    async with Producer(HOST, port, ssl_context=ctx, username="guest", password="guest") as producer:
        await producer.create_stream(stream, exists_ok=True)
        for i in range(MESSAGES):
            await producer.send_wait(stream, AMQPMessage(body=f"order {i}".encode()))
    got: list[bytes] = []
    done = asyncio.Event()
    consumer = Consumer(HOST, port, ssl_context=ctx, username="guest", password="guest")

    async def keep(message: AMQPMessage, context: object) -> None:  # decoded by amqp_decoder
        got.append(bytes(message.body))
        if len(got) == MESSAGES:
            done.set()

    await consumer.start()
    await consumer.subscribe(
        stream,
        keep,
        offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        decoder=amqp_decoder,
    )
    await asyncio.wait_for(done.wait(), 30)
    await consumer.close()
    async with Producer(HOST, port, ssl_context=ctx, username="guest", password="guest") as producer:
        await producer.delete_stream(stream)
    assert got == [f"order {i}".encode() for i in range(MESSAGES)], got


async def nats_scenario(port: int, ctx: ssl.SSLContext | None) -> None:
    """A subscription, three publishes, a request answered by a responder, a drain."""
    import nats

    url = f"{'tls' if ctx else 'nats'}://{HOST}:{port}"
    nc = await nats.connect(url, tls=ctx, name="tls-recording", allow_reconnect=False)
    got: list[bytes] = []

    async def keep(msg: object) -> None:
        got.append(msg.data)  # type: ignore[attr-defined]

    async def answer(msg: object) -> None:
        await msg.respond(b"pong " + msg.data)  # type: ignore[attr-defined]

    await nc.subscribe("orders.>", cb=keep)
    await nc.subscribe("svc.ping", cb=answer)
    for i in range(3):
        await nc.publish(f"orders.{i}", f"order {i}".encode())
    reply = await nc.request("svc.ping", b"hi", timeout=5)
    assert reply.data == b"pong hi"
    await nc.flush()
    await nc.drain()
    assert len(got) == 3, got


def record(out: Path) -> None:
    ensure_broker_tls()
    for name, port, version, ciphers in (
        ("rstream_tls13", STREAM_TLS, ssl.TLSVersion.TLSv1_3, None),
        ("rstream_tls12", STREAM_TLS, ssl.TLSVersion.TLSv1_2, "ECDHE-RSA-AES128-GCM-SHA256"),
        ("rstream_plain", STREAM_PLAIN, None, None),
    ):
        keys = out / f"{name}.keys"
        keys.unlink(missing_ok=True)
        ctx = client_context(keys, version, ciphers) if port == STREAM_TLS else None
        asyncio.run(remove_stream())
        with tcpdump(out / f"{name}.pcap", port):
            asyncio.run(rstream_scenario(port, ctx))
        print(f"{name}: {(out / f'{name}.pcap').stat().st_size} bytes")
    for name, port, tls in (("nats_tls", NATS_TLS, True), ("nats_plain", NATS_PLAIN, False)):
        keys = out / f"{name}.keys"
        keys.unlink(missing_ok=True)
        ctx = client_context(keys, ssl.TLSVersion.TLSv1_3) if tls else None
        with nats_server(port, tls), tcpdump(out / f"{name}.pcap", port):
            asyncio.run(nats_scenario(port, ctx))
        print(f"{name}: {(out / f'{name}.pcap').stat().st_size} bytes")
    for pcap in out.glob("*.pcap"):
        owner = out.stat()
        os.chown(pcap, owner.st_uid, owner.st_gid)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("record.py: tcpdump needs root")
    args.out.mkdir(parents=True, exist_ok=True)
    record(args.out)


if __name__ == "__main__":
    main()
