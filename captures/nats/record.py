#!/usr/bin/env python3
"""Record the NATS client-protocol captures that live in captures/nats/.

    sudo python3 captures/nats/record.py                  # every scenario
    sudo python3 captures/nats/record.py pubsub trouble   # some of them
    sudo python3 captures/nats/record.py --restore-lo     # only undo a killed run's lo changes

Every byte is the real nats-py client's or the real NATS server's (with JetStream, on
127.0.0.1:4222), except in trouble.pcap, where plain sockets speak the protocol badly on
purpose so that the server answers with its real -ERR lines. Each scenario is one pcap:
tcpdump records `tcp port 4222` on lo (classic pcap, -s 0, -U) while lo runs at MTU 1500
with TSO/GSO/GRO off, so TCP segments are at most 1448 bytes as on an Ethernet link; lo is
always put back as it was. tcpdump is started, and its "listening on" line awaited, before
the scenario connects; it is stopped with SIGINT after a short tail so the FINs are in.

The loopback, tcpdump-readiness and capture checks are the ones of captures/rabbitmq_stream/
(loopback.py, tcpdump_tools.py, pcap_checks.py, system_tools.py), imported from there.
After each recording the file is checked (whole TCP connections, their count, link type,
segment sizes, packet count against tcpdump's own, size), then streamdump reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The rabbitmq_stream modules import each other by their bare names.
sys.path.insert(0, str(HERE.parent / "rabbitmq_stream"))

import nats  # noqa: E402
import pcap_checks  # noqa: E402
from loopback import LO_SAVED, LOOPBACK, WIRE_MSS, WIRE_MTU, restore_saved_loopback, wire_mtu  # noqa: E402
from nats.errors import NoRespondersError  # noqa: E402
from nats.js.api import ObjectMeta, ObjectMetaOptions, ObjectStoreConfig  # noqa: E402
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError  # noqa: E402
from pcap_checks import LINKTYPE_ETHERNET, check_capture  # noqa: E402
from tcpdump_tools import recording_lock, tcpdump  # noqa: E402

log = logging.getLogger("record")

HOST, PORT = "127.0.0.1", 4222
SERVER = f"nats://{HOST}:{PORT}"
# check_capture() tells client from server by this module global (5552 there).
pcap_checks.PORT = PORT
MAX_CAPTURE_BYTES = 40_000
RING_KIB = 65536
STREAM = "ORDERS"


# --- scenarios: the real nats-py client ------------------------------------------------------


async def pubsub() -> None:
    """A wildcard subscription and a queue-group one, publishes of text, JSON, bytes, an empty
    payload and one with headers, a subscription that the server ends after one message
    (UNSUB sid 1), an unsubscribe, flushes (PING/PONG) and a drain."""
    nc = await nats.connect(SERVER, name="orders-service")
    got: list[Any] = []
    all_in = asyncio.Event()

    async def keep(msg: Any) -> None:
        got.append(msg)
        # 5 publishes on orders.*, each to orders.> and the 3 on orders.created also to the
        # queue group, plus the one audit.orders message before the auto-unsubscribe.
        if len(got) >= 9:
            all_in.set()

    wide = await nc.subscribe("orders.>", cb=keep)
    await nc.subscribe("orders.created", queue="workers", cb=keep)
    audit = await nc.subscribe("audit.orders", cb=keep)
    # UNSUB 3 1: the server ends the subscription after one more message. (nats-py's
    # subscribe(max_msgs=1) would only count on the client side and send no UNSUB.)
    await audit.unsubscribe(limit=1)
    await nc.flush()
    await nc.publish("orders.created", b"order 7 created")
    await nc.publish("orders.created", json.dumps({"id": 1, "sku": "A-7"}).encode())
    await nc.publish("orders.blob", bytes([0, 1, 2, 0xFF, 0xFE, 0x0D, 0x0A, 0x7F, 0x80, 0x1B]))
    await nc.publish("orders.empty", b"")
    await nc.publish("orders.created", b'{"id": 2}', headers={"Trace-Id": "abc", "X-Multi": "one, two"})
    await nc.publish("audit.orders", b"first")
    await nc.publish("audit.orders", b"second, after the auto-unsubscribe")
    await nc.flush()
    await asyncio.wait_for(all_in.wait(), 2)
    await wide.unsubscribe()
    await nc.publish("orders.created", b"after the unsubscribe")
    await nc.flush()
    await asyncio.sleep(0.1)
    await nc.drain()


async def request_reply() -> None:
    """A responder on svc.echo and a requester: three requests answered (the last with
    headers), then one to a subject nobody listens on, which the server answers with a
    503 no-responders status."""
    responder = await nats.connect(SERVER, name="echo-responder")

    async def echo(msg: Any) -> None:
        await msg.respond(b"echo: " + msg.data)

    await responder.subscribe("svc.echo", cb=echo)
    await responder.flush()
    requester = await nats.connect(SERVER, name="echo-client")
    await requester.request("svc.echo", b"hello 0", timeout=1)
    await requester.request("svc.echo", b"hello 1", timeout=1)
    await requester.request("svc.echo", b"hello 2", timeout=1, headers={"Trace-Id": "req-2"})
    try:
        await requester.request("svc.nobody", b"anyone?", timeout=1)
        raise RuntimeError("svc.nobody was answered")
    except NoRespondersError:
        log.info("svc.nobody: no responders, as expected")
    await requester.drain()
    await responder.drain()


async def delete_stream() -> None:
    """Before the jetstream recording, from a connection tcpdump does not see."""
    nc = await nats.connect(SERVER)
    with contextlib.suppress(NotFoundError):
        await nc.jetstream().delete_stream(STREAM)
    await nc.close()


async def jetstream() -> None:
    """Stream ORDERS on js.orders.> created, three acknowledged publishes (one with a
    Nats-Msg-Id header), a durable pull consumer fetching and acking them, the stream deleted."""
    nc = await nats.connect(SERVER, name="jetstream-client")
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=["js.orders.>"])
    await js.publish("js.orders.created", json.dumps({"id": 1, "sku": "A-7"}).encode())
    await js.publish("js.orders.created", json.dumps({"id": 2, "sku": "B-3"}).encode())
    await js.publish("js.orders.shipped", b'{"id": 1}', headers={"Nats-Msg-Id": "ship-1"})
    sub = await js.pull_subscribe("js.orders.>", durable="billing")
    msgs = await sub.fetch(3, timeout=2)
    if len(msgs) != 3:
        raise RuntimeError(f"fetched {len(msgs)} messages, expected 3")
    for msg in msgs:
        await msg.ack()
    await nc.flush()
    await js.delete_stream(STREAM)
    await nc.drain()


async def natspy_store() -> None:
    """nats-py's KV and object store: a bucket with a put, an update, an update with a stale
    revision (refused: 10071 wrong last sequence), a get, a delete and a purge; an object put in
    three chunks and read back; then a pull consumer on a stream fetching with -NAK, +WPI, +TERM
    and +ACK. The streams are deleted at the end."""
    nc = await nats.connect(SERVER, name="natspy-store")
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="settings", history=3)
    rev = await kv.put("color", b"blue")
    await kv.update("color", b"green", last=rev)
    try:
        await kv.update("color", b"red", last=rev)
        raise RuntimeError("the stale update was accepted")
    except KeyWrongLastSequenceError:
        log.info("stale KV update refused, as expected")
    entry = await kv.get("color")
    if entry.value != b"green":
        raise RuntimeError(f"color is {entry.value!r}")
    await kv.delete("color")
    await kv.purge("color")
    obj = await js.create_object_store("assets", config=ObjectStoreConfig(bucket="assets"))
    await obj.put(
        "logo.svg",
        b"<svg>" + b"x" * 150 + b"</svg>",
        meta=ObjectMeta(name="logo.svg", options=ObjectMetaOptions(max_chunk_size=64)),
    )
    back = await obj.get("logo.svg")
    if len(back.data) != 161:
        raise RuntimeError("object not read back")
    await js.add_stream(name="TASKS", subjects=["tasks.>"])
    for i in range(3):
        await js.publish(f"tasks.t{i}", f"task {i}".encode())
    sub = await js.pull_subscribe("tasks.>", durable="worker")
    msgs = await sub.fetch(3, timeout=2)
    await msgs[0].nak()
    await msgs[1].in_progress()
    await msgs[1].ack()
    await msgs[2].term()
    again = await sub.fetch(1, timeout=2)
    await again[0].ack_sync()
    for name in ("TASKS", "KV_settings", "OBJ_assets"):
        await js.delete_stream(name)
    await nc.drain()


async def natspy_cleanup() -> None:
    """Before natspy_store, from a connection tcpdump does not see."""
    nc = await nats.connect(SERVER)
    for name in ("TASKS", "KV_settings", "OBJ_assets"):
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().delete_stream(name)
    await nc.close()


# --- scenarios: the real nats.js 3.x client (natsjs/client_natsjs.mjs) -----------------------

NATSJS = HERE / "natsjs"


def natsjs(part: str) -> Callable[[], Awaitable[None]]:
    """A part of the nats.js application, run with node (`npm ci` in natsjs/ first)."""

    async def run() -> None:
        if not (NATSJS / "node_modules").is_dir():
            raise RuntimeError(f"run `npm ci` in {NATSJS} first")
        proc = await asyncio.create_subprocess_exec("node", "client_natsjs.mjs", part, cwd=NATSJS)
        if await asyncio.wait_for(proc.wait(), 60) != 0:
            raise RuntimeError(f"client_natsjs.mjs {part} failed")

    return run


# --- scenario: plain sockets speaking the protocol badly ------------------------------------


def _read_quiet(sock: socket.socket, quiet_s: float = 0.3) -> bytes:
    """What the server sends until it is quiet for `quiet_s` or closes."""
    sock.settimeout(quiet_s)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return data
        if not chunk:
            return data
        data += chunk


def raw(label: str, steps: list[bytes]) -> None:
    """One connection: read the INFO, send each step and read the server's answer to it."""
    with socket.create_connection((HOST, PORT)) as sock:
        _read_quiet(sock)
        for step in steps:
            try:
                sock.sendall(step)
            except (BrokenPipeError, ConnectionResetError):
                log.info("%s: the server had closed the connection", label)
                break
            log.info("%s: sent %r, got %r", label, step, _read_quiet(sock))


CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"lang":"raw","version":"0","protocol":1}\r\n'


async def trouble() -> None:
    """What the server refuses or says to a careless client, each on its own connection."""
    # (a) pedantic: a subject with a wildcard in a PUB, then a payload longer than its size.
    raw("pedantic", [b'CONNECT {"verbose":false,"pedantic":true}\r\n',
                     b"PUB orders.*.bad 2\r\nhi\r\n",
                     b"PUB orders.bad 5\r\nhello, world\r\n"])  # fmt: skip
    # (b) a line that is no protocol operation.
    raw("garbage", [CONNECT, b"HELLO WORLD\r\n"])
    # (c) a PUB over max_payload (1048576); the payload is never sent.
    raw("too_big", [CONNECT, b"PUB orders.huge 2000000\r\n"])
    # (d) PING answered by PONG, then a clean close.
    raw("ping", [CONNECT, b"PING\r\n"])
    # (e) verbose: +OK after each command.
    raw("verbose", [b'CONNECT {"verbose":true}\r\n', b"SUB orders.* 9\r\n", b"PUB orders.x 2\r\nhi\r\n",
                    b"UNSUB 9\r\n", b"PING\r\n"])  # fmt: skip
    # Last: a PING, and the client closes without reading; the PONG may meet a closed socket.
    with socket.create_connection((HOST, PORT)) as sock:
        _read_quiet(sock)
        sock.sendall(CONNECT + b"PING\r\n")


@dataclass(frozen=True)
class Scenario:
    run: Callable[[], Awaitable[None]]
    # TCP connections it opens; more in the file means another client used the server.
    connections: int
    # Run before tcpdump starts, so its traffic stays out of the capture.
    before: Callable[[], Awaitable[None]] | None = None
    # The largest file it may make.
    max_bytes: int = MAX_CAPTURE_BYTES


SCENARIOS: dict[str, Scenario] = {
    "pubsub": Scenario(pubsub, 1),
    "request_reply": Scenario(request_reply, 2),
    "jetstream": Scenario(jetstream, 1, before=delete_stream),
    "trouble": Scenario(trouble, 6),
    "natsjs_jetstream": Scenario(natsjs("jetstream"), 1, before=natsjs("cleanup"), max_bytes=120_000),
    "natsjs_store": Scenario(natsjs("kv_obj"), 1, before=natsjs("cleanup"), max_bytes=120_000),
    "natsjs_services": Scenario(natsjs("services"), 2, max_bytes=120_000),
    "natspy_store": Scenario(natspy_store, 1, before=natspy_cleanup, max_bytes=120_000),
}


# --- recording and checks ---------------------------------------------------------------------


def record(name: str, outdir: Path = HERE) -> Path:
    """Record `name`.pcap (beside this script, or in outdir) and check it; the caller holds
    recording_lock()."""
    scenario = SCENARIOS[name]
    out = outdir / f"{name}.pcap"
    if scenario.before is not None:
        asyncio.run(scenario.before())
    # lo is changed before tcpdump starts and put back only after it has stopped.
    with wire_mtu(WIRE_MTU), tcpdump(out, buffer_kib=RING_KIB, port=PORT, whole_packets=True) as stats:
        asyncio.run(scenario.run())
    summary = check_capture(out)
    size = out.stat().st_size
    problems = []
    if summary.packets != stats[0].captured:
        problems.append(f"tcpdump reported {stats[0].captured} packets, the file holds {summary.packets}")
    if summary.connections != scenario.connections:
        problems.append(f"{summary.connections} TCP connections, expected {scenario.connections} "
                        f"(another client used {HOST}:{PORT} during the recording?)")  # fmt: skip
    if summary.linktype != LINKTYPE_ETHERNET:
        problems.append(f"link type {summary.linktype}, expected {LINKTYPE_ETHERNET}")
    if summary.max_payload > WIRE_MSS:
        problems.append(f"a {summary.max_payload}-byte segment: lo's offloads were not off")
    if size > scenario.max_bytes:
        problems.append(f"{size} bytes, over {scenario.max_bytes}")
    if problems:
        raise RuntimeError(f"{out}: " + "; ".join(problems))
    log.info("%s: %d bytes, %d packets, %d connection(s)", out, size, summary.packets, summary.connections)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help=f"scenarios (default: all): {', '.join(SCENARIOS)}")
    parser.add_argument("--restore-lo", action="store_true", help=f"only restore {LOOPBACK} from {LO_SAVED}")
    parser.add_argument("--quiet", action="store_true", help="do not read what was recorded")
    parser.add_argument(
        "--outdir", type=Path, default=HERE, help="where the pcaps go (default: beside this script)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.restore_lo:
        print("restored" if restore_saved_loopback() else "nothing to restore")
        return 0
    unknown = set(args.names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    with recording_lock():
        for name in args.names or SCENARIOS:
            out = record(name, args.outdir)
            if not args.quiet:
                print(f"=== {out.name}", flush=True)
                subprocess.run([sys.executable, "-m", "streamdump", "read", str(out)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
