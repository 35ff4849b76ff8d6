"""Record the RabbitMQ Streams test captures that live in captures/.

This module owns the capture tooling and nothing else: it makes sure the broker's stream
plugin listens on 127.0.0.1:5552, wraps each scenario in a tcpdump recording of the
loopback interface, drives a real rstream client (asyncio) against the real broker, and
finally converts session.pcap to session.pcapng. The decoder under streamdump/ never
imports it; the captures it writes are test inputs for that decoder.

Usage (needs root for tcpdump):

    python captures/record.py [--scenario NAME ...] [--outdir DIR]

Leftover streams from earlier runs are deleted by a separate connection *before* tcpdump
starts, so that cleanup traffic never appears in a capture.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import rstream
from rstream import AMQPMessage, OffsetType, Properties, schema
from rstream.client import Client
from rstream.exceptions import AuthenticationFailure, StreamDoesNotExist

log = logging.getLogger("record")

HOST = "127.0.0.1"
PORT = 5552
VHOST = "/"
USERNAME = "guest"
PASSWORD = "guest"
WRONG_PASSWORD = "not-the-password"

SESSION_STREAM = "streamdump-demo"
OFFSETS_STREAM = "streamdump-offsets"
MISSING_STREAM = "streamdump-missing"
ALL_STREAMS = (SESSION_STREAM, OFFSETS_STREAM, MISSING_STREAM)

PUBLISHER_REFERENCE = "streamdump-publisher"
CONSUMER_REFERENCE = "streamdump-consumer"

# Matches rstream's own default so the client's Tune answer looks like a stock client's.
FRAME_MAX = 1024 * 1024
HEARTBEAT = 60

PLUGIN_WAIT_S = 60.0
TCPDUMP_READY_WAIT_S = 10.0
# Lets the last FIN/ACK of the client's connection reach tcpdump before it is stopped.
TCPDUMP_TAIL_S = 0.5
DELIVERY_WAIT_S = 10.0
# Long enough for the broker to deliver a chunk it was going to deliver anyway; used to
# prove that nothing more arrives, e.g. for offset type "next".
QUIET_WAIT_S = 0.3

DEFAULT_OUTDIR = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- broker


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_stream_plugin() -> None:
    """Enable rabbitmq_stream when 5552 is closed; CI starts from a broker without it."""
    if port_open(HOST, PORT):
        return
    log.info("port %d closed: enabling rabbitmq_stream", PORT)
    # /usr/sbin is often missing from a non-login PATH (sudo, CI steps).
    plugins = shutil.which("rabbitmq-plugins") or "/usr/sbin/rabbitmq-plugins"
    subprocess.run([plugins, "enable", "rabbitmq_stream"], check=True)
    deadline = time.monotonic() + PLUGIN_WAIT_S
    while time.monotonic() < deadline:
        if port_open(HOST, PORT):
            return
        time.sleep(1.0)
    raise RuntimeError(f"{HOST}:{PORT} still closed {PLUGIN_WAIT_S:.0f} s after enabling the plugin")


class StreamClient(Client):
    """rstream's low-level Client, plus the Close frame its close() never sends.

    rstream 1.1.1's Client.close() stops the heartbeat task before BaseClient.close()
    checks `is_started` (which looks for that very task), so the Close/CloseResponse
    exchange is skipped and the connection just ends with a TCP FIN.
    """

    def __init__(self, connection_name: str) -> None:
        super().__init__(
            HOST,
            PORT,
            frame_max=FRAME_MAX,
            heartbeat=HEARTBEAT,
            connection_name=connection_name,
            # Without a handler rstream logs a traceback whenever the broker ends the
            # socket first, which it does after Close and after a failed authentication.
            connection_closed_handler=_ignore_close,
        )

    async def close(self) -> None:
        if self.is_started and self.is_connection_alive():
            await self.sync_request(
                schema.Close(self._corr_id_seq.next(), code=1, reason="OK"),
                resp_schema=schema.CloseResponse,
            )
        await super().close()
        # When the broker ended the socket first, rstream marks the connection broken and
        # never closes its StreamWriter, which leaks the transport (ResourceWarning).
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def _ignore_close(info: rstream.OnClosedErrorInfo) -> None:
    log.debug("connection closed by the broker: %s", info)


async def connect(connection_name: str) -> StreamClient:
    client = StreamClient(connection_name)
    await client.start()
    await client.authenticate(vhost=VHOST, username=USERNAME, password=PASSWORD)
    return client


async def delete_leftover_streams() -> None:
    client = await connect("streamdump-cleanup")
    try:
        for stream in ALL_STREAMS:
            with contextlib.suppress(StreamDoesNotExist):
                await client.delete_stream(stream)
                log.info("deleted leftover stream %s", stream)
    finally:
        await client.close()


# --------------------------------------------------------------------------- tcpdump


@dataclass
class CaptureStats:
    captured: int
    received: int
    dropped: int


def _read_stderr_until(proc: subprocess.Popen[bytes], pattern: str, timeout: float) -> str:
    """Read tcpdump's stderr until `pattern` shows up; stdout/stderr are unbuffered pipes."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while pattern.encode() not in seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None:
                raise RuntimeError(f"tcpdump did not report {pattern!r}: {seen.decode(errors='replace')}")
            if sel.select(remaining):
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    continue
                seen += chunk
    return seen.decode(errors="replace")


@contextlib.contextmanager
def tcpdump(out: Path) -> Iterator[list[CaptureStats]]:
    """Capture port 5552 on lo into `out` for the duration of the block.

    Yields a list that holds the capture statistics once the block has ended.
    """
    tcpdump_bin = shutil.which("tcpdump") or "/usr/bin/tcpdump"
    out.unlink(missing_ok=True)
    # --immediate-mode: without it libpcap's TPACKET_V3 ring hands packets over one block
    # at a time (1 s timeout) and SIGINT discards the unfinished block, which silently cut
    # the Close/FIN off every capture and left short scenarios empty.
    cmd = [tcpdump_bin, "-i", "lo", "-U", "--immediate-mode", "-w", str(out), f"tcp port {PORT}"]
    log.info("starting: %s", " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stats: list[CaptureStats] = []
    try:
        # The client must not connect before the BPF filter is attached, or the handshake
        # would be missing from the capture.
        _read_stderr_until(proc, "listening on", TCPDUMP_READY_WAIT_S)
        yield stats
        time.sleep(TCPDUMP_TAIL_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    text = err.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"tcpdump exited with {proc.returncode}: {text}")
    counts = {m[2]: int(m[1]) for m in re.finditer(r"(\d+) packets? (captured|received|dropped)", text)}
    stats.append(
        CaptureStats(counts.get("captured", -1), counts.get("received", -1), counts.get("dropped", -1))
    )
    if stats[0].dropped != 0:
        raise RuntimeError(f"tcpdump dropped packets: {text}")
    # Debian's tcpdump drops root and chowns the file to "tcpdump"; hand it back to whoever
    # owns the output directory so developers can overwrite it without root.
    if os.geteuid() == 0:
        st = out.parent.stat()
        os.chown(out, st.st_uid, st.st_gid)


# --------------------------------------------------------------------------- client helpers


def amqp_message(index: int, text: str) -> AMQPMessage:
    """Fixed AMQP 1.0 message; even indexes also carry properties and application properties."""
    body = f"{text} {index}".encode()
    if index % 2:
        return AMQPMessage(body=body)
    return AMQPMessage(
        body=body,
        properties=Properties(message_id=f"msg-{index}", content_type="text/plain"),
        application_properties={"index": index, "source": "streamdump"},
    )


class ConfirmTracker:
    """Collects PublishConfirm ids so the scenario can wait for specific publishing ids."""

    def __init__(self, client: Client, publisher_id: int) -> None:
        self._publisher_id = publisher_id
        self._confirmed: set[int] = set()
        self._errors: list[schema.PublishError] = []
        self._changed = asyncio.Event()
        client.add_handler(schema.PublishConfirm, self._on_confirm, name=f"confirm-{publisher_id}")
        client.add_handler(schema.PublishError, self._on_error, name=f"error-{publisher_id}")

    def _on_confirm(self, frame: schema.PublishConfirm) -> None:
        if frame.publisher_id == self._publisher_id:
            self._confirmed.update(frame.publishing_ids)
            self._changed.set()

    def _on_error(self, frame: schema.PublishError) -> None:
        # Raising here would only be logged by rstream's frame listener; wait() reports it.
        if frame.publisher_id == self._publisher_id:
            self._errors.append(frame)
            self._changed.set()

    async def wait(self, ids: set[int]) -> None:
        async def _until_all() -> None:
            while not ids <= self._confirmed and not self._errors:
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(_until_all(), DELIVERY_WAIT_S)
        except TimeoutError:
            raise RuntimeError(f"no confirm for {sorted(ids - self._confirmed)}") from None
        if self._errors:
            raise RuntimeError(f"broker rejected publish: {self._errors}")


async def publish(
    client: Client,
    tracker: ConfirmTracker,
    publisher_id: int,
    batch: list[tuple[int, AMQPMessage]],
) -> None:
    """Send one Publish frame holding `batch` and wait until every id in it is confirmed."""
    messages = [schema.Message(publishing_id=pid, filter_value=None, data=bytes(msg)) for pid, msg in batch]
    await client.publish(messages, publisher_id=publisher_id)
    await tracker.wait({pid for pid, _ in batch})


@dataclass
class Subscription:
    """One subscription on a low-level client: Deliver frames in, optional Credit out."""

    client: Client
    subscription_id: int
    credit_each_chunk: bool
    offsets: list[int] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    chunks: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    async def start(
        self,
        stream: str,
        offset_spec: schema.OffsetSpec,
        initial_credit: int,
        properties: dict[str, str] | None = None,
    ) -> None:
        # rstream routes Deliver frames to a per-subscription queue keyed by int(name).
        name = str(self.subscription_id)
        self.client.add_handler(schema.Deliver, self._on_deliver, name=name)
        await self.client.run_queue_listener_task(self.subscription_id, self._on_deliver)
        await self.client.subscribe(
            stream,
            subscription_id=self.subscription_id,
            offset_spec=offset_spec,
            initial_credit=initial_credit,
            properties=properties,
        )

    async def _on_deliver(self, frame: schema.Deliver) -> None:
        # Every registered Deliver handler sees every chunk, whatever its subscription.
        if frame.subscription_id != self.subscription_id:
            return
        self.chunks += 1
        for i, message in enumerate(frame.get_messages()):
            self.offsets.append(frame.chunk_first_offset + i)
            self.bodies.append(bytes(message))
        if self.credit_each_chunk:
            # Same policy as rstream's Consumer: one chunk consumed, one chunk of credit back.
            await self.client.credit(self.subscription_id, 1)
        self._changed.set()

    async def wait_for(self, count: int) -> None:
        async def _until() -> None:
            while len(self.offsets) < count:
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(_until(), DELIVERY_WAIT_S)
        except TimeoutError:
            raise RuntimeError(
                f"subscription {self.subscription_id}: expected {count} messages, got {self.offsets}"
            ) from None
        # Anything past `count` would make the capture differ from run to run.
        await asyncio.sleep(QUIET_WAIT_S)
        if len(self.offsets) != count:
            raise RuntimeError(
                f"subscription {self.subscription_id}: expected {count} messages, got {self.offsets}"
            )

    async def stop(self) -> None:
        await self.client.unsubscribe(self.subscription_id)
        await self.client.stop_queue_listener_task(self.subscription_id)
        self.client.remove_handler(schema.Deliver, name=str(self.subscription_id))


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"scenario check failed: {what}")


# --------------------------------------------------------------------------- scenarios


async def scenario_session() -> None:
    """One connection doing the whole publish/consume life cycle of a stream."""
    publisher_id = 1
    subscription_id = 2
    client = await connect("streamdump-session")
    try:
        await client.create_stream(SESSION_STREAM, arguments={"max-length-bytes": 100_000_000})
        await client.declare_publisher(
            SESSION_STREAM, reference=PUBLISHER_REFERENCE, publisher_id=publisher_id
        )
        tracker = ConfirmTracker(client, publisher_id)
        sequence = await client.query_publisher_sequence(SESSION_STREAM, PUBLISHER_REFERENCE)
        expect(sequence == 0, f"fresh stream has publisher sequence 0, got {sequence}")

        # Publishing ids continue from the stored sequence, as rstream's Producer does.
        messages = [(sequence + 1 + i, amqp_message(i, "hello streamdump")) for i in range(10)]
        # Five single-message frames (send_wait style: each waits for its confirm, so each
        # becomes its own chunk), then one frame with five messages (one multi-entry chunk).
        for item in messages[:5]:
            await publish(client, tracker, publisher_id, [item])
        await publish(client, tracker, publisher_id, messages[5:])

        leader, replicas = await client.query_leader_and_replicas(SESSION_STREAM)
        log.info("metadata: leader %s:%d, %d replicas", leader.host, leader.port, len(replicas))

        sub = Subscription(client, subscription_id, credit_each_chunk=True)
        await sub.start(
            SESSION_STREAM,
            schema.OffsetSpec.from_params(OffsetType.FIRST, None),
            initial_credit=1,
            properties={"name": CONSUMER_REFERENCE},
        )
        await sub.wait_for(len(messages))
        expect(sub.offsets == list(range(10)), f"offsets 0..9 delivered, got {sub.offsets}")
        expect(sub.chunks == 6, f"5 single-message chunks + 1 five-message chunk, got {sub.chunks}")
        expect(sub.bodies == [bytes(m) for _, m in messages], "delivered bodies equal published bodies")

        last_offset = sub.offsets[-1]
        await client.store_offset(SESSION_STREAM, CONSUMER_REFERENCE, last_offset)
        # StoreOffset has no response; the broker applies it asynchronously.
        await asyncio.sleep(0.5)
        stored = await client.query_offset(SESSION_STREAM, CONSUMER_REFERENCE)
        expect(stored == last_offset, f"stored offset {last_offset}, queried {stored}")

        await sub.stop()
        await client.delete_publisher(publisher_id)
        await client.delete_stream(SESSION_STREAM)
    finally:
        await client.close()


async def scenario_subscribe_missing_stream() -> None:
    client = await connect("streamdump-missing")
    try:
        try:
            await client.subscribe(
                MISSING_STREAM,
                subscription_id=0,
                offset_spec=schema.OffsetSpec.from_params(OffsetType.FIRST, None),
                initial_credit=10,
            )
        except StreamDoesNotExist:
            log.info("subscribe to %s failed as expected (0x02)", MISSING_STREAM)
        else:
            raise RuntimeError(f"subscribe to {MISSING_STREAM} unexpectedly succeeded")
    finally:
        await client.close()


async def scenario_offset_specs() -> None:
    """Subscribe once per OffsetType (1..5) to one stream, unsubscribing after each."""
    publisher_id = 0
    client = await connect("streamdump-offsets")
    try:
        await client.create_stream(OFFSETS_STREAM)
        # No reference: the other publisher flavour (deduplication off) next to session's.
        await client.declare_publisher(OFFSETS_STREAM, reference=None, publisher_id=publisher_id)
        tracker = ConfirmTracker(client, publisher_id)

        # One message per frame and per confirm, so offset n is chunk n and counts below
        # do not depend on how the broker batches.
        for i in range(5):
            await publish(client, tracker, publisher_id, [(i, amqp_message(i, "offset spec"))])
        # Gap on both sides of the timestamp so chunk timestamps (ms) cannot tie with it.
        await asyncio.sleep(0.05)
        timestamp_ms = time.time_ns() // 1_000_000
        await asyncio.sleep(0.05)
        for i in range(5, 8):
            await publish(client, tracker, publisher_id, [(i, amqp_message(i, "offset spec"))])

        spec = schema.OffsetSpec.from_params

        first = Subscription(client, 1, credit_each_chunk=False)
        await first.start(OFFSETS_STREAM, spec(OffsetType.FIRST, None), initial_credit=10)
        await first.wait_for(8)
        expect(first.offsets == list(range(8)), f"first: {first.offsets}")
        await first.stop()

        last = Subscription(client, 2, credit_each_chunk=False)
        await last.start(OFFSETS_STREAM, spec(OffsetType.LAST, None), initial_credit=10)
        await last.wait_for(1)
        expect(last.offsets == [7], f"last: {last.offsets}")
        await last.stop()

        # "next" delivers nothing that already exists, so publish one more message while
        # subscribed to show what it does deliver.
        nxt = Subscription(client, 3, credit_each_chunk=False)
        await nxt.start(OFFSETS_STREAM, spec(OffsetType.NEXT, None), initial_credit=10)
        await asyncio.sleep(QUIET_WAIT_S)
        expect(nxt.offsets == [], f"next before publishing: {nxt.offsets}")
        await publish(client, tracker, publisher_id, [(8, amqp_message(8, "offset spec"))])
        await nxt.wait_for(1)
        expect(nxt.offsets == [8], f"next: {nxt.offsets}")
        await nxt.stop()

        by_offset = Subscription(client, 4, credit_each_chunk=False)
        await by_offset.start(OFFSETS_STREAM, spec(OffsetType.OFFSET, 3), initial_credit=10)
        await by_offset.wait_for(6)
        expect(by_offset.offsets == list(range(3, 9)), f"offset 3: {by_offset.offsets}")
        await by_offset.stop()

        by_time = Subscription(client, 5, credit_each_chunk=False)
        await by_time.start(OFFSETS_STREAM, spec(OffsetType.TIMESTAMP, timestamp_ms), initial_credit=10)
        await by_time.wait_for(4)
        expect(by_time.offsets == list(range(5, 9)), f"timestamp: {by_time.offsets}")
        await by_time.stop()

        await client.delete_publisher(publisher_id)
        await client.delete_stream(OFFSETS_STREAM)
    finally:
        await client.close()


async def scenario_auth_failure() -> None:
    client = StreamClient("streamdump-auth-failure")
    await client.start()
    try:
        await client.authenticate(vhost=VHOST, username=USERNAME, password=WRONG_PASSWORD)
    except AuthenticationFailure:
        log.info("authentication failed as expected (0x08)")
    else:
        raise RuntimeError("authentication with a wrong password unexpectedly succeeded")
    finally:
        await client.close()


SCENARIOS: dict[str, Callable[[], Awaitable[None]]] = {
    "session": scenario_session,
    "subscribe_missing_stream": scenario_subscribe_missing_stream,
    "offset_specs": scenario_offset_specs,
    "auth_failure": scenario_auth_failure,
}


# --------------------------------------------------------------------------- pcapng


def _raw_packets(path: Path) -> list[tuple[int, int, bytes]]:
    """(timestamp in µs, wire length, bytes) of every packet, pcap or pcapng alike."""
    from scapy.utils import RawPcapReader

    packets: list[tuple[int, int, bytes]] = []
    with RawPcapReader(str(path)) as reader:  # picks the pcapng reader by itself
        for data, meta in reader:
            if hasattr(meta, "tshigh"):
                ticks = (meta.tshigh << 32) | meta.tslow
                micros = ticks * 1_000_000 // meta.tsresol
            else:
                micros = meta.sec * 1_000_000 + meta.usec
            packets.append((micros, meta.wirelen, bytes(data)))
    return packets


def check_capture(pcap: Path) -> tuple[int, int]:
    """Return (packets, TCP connections); fail unless every connection is whole.

    Whole means its SYN and a FIN or RST are in the file: a capture cut short at either
    end is useless as a decoder test even when tcpdump itself reported no error.
    """
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    packets = rdpcap(str(pcap))
    opened: set[int] = set()
    closed: set[int] = set()
    for pkt in packets:
        if TCP not in pkt:
            continue
        tcp = pkt[TCP]
        client_port = tcp.dport if tcp.sport == PORT else tcp.sport
        if tcp.flags.S and not tcp.flags.A:
            opened.add(client_port)
        if tcp.flags.F or tcp.flags.R:
            closed.add(client_port)
    if not opened or opened != closed:
        raise RuntimeError(f"{pcap}: connections opened {sorted(opened)}, closed {sorted(closed)}")
    return len(packets), len(opened)


def write_pcapng(pcap: Path, pcapng: Path) -> int:
    """Copy every packet of `pcap` into `pcapng`, keeping bytes and timestamps exact."""
    # Importing the layer registers Ether for link type 1; without it scapy reads raw
    # packets and the pcapng writer cannot tell which link type to declare.
    from scapy.layers.l2 import Ether  # noqa: F401
    from scapy.utils import PcapNgWriter, rdpcap

    packets = rdpcap(str(pcap))
    pcapng.unlink(missing_ok=True)
    with PcapNgWriter(str(pcapng)) as writer:
        # write_packet() skips the header logic of write(); the first packet tells scapy
        # which link type the interface block must declare.
        writer.write_header(packets[0])
        for pkt in packets:
            # Passing the EDecimal time through avoids scapy's float conversion, which can
            # shift a timestamp by one microsecond.
            writer.write_packet(pkt, sec=pkt.time, wirelen=pkt.wirelen)
    # Compare raw file contents, not re-dissected scapy packets, so that a scapy rebuild
    # quirk cannot hide a difference.
    if _raw_packets(pcapng) != _raw_packets(pcap):
        raise RuntimeError(f"{pcapng} does not hold the same packets as {pcap}")
    if os.geteuid() == 0:
        st = pcapng.parent.stat()
        os.chown(pcapng, st.st_uid, st.st_gid)
    return len(packets)


# --------------------------------------------------------------------------- main


def record(name: str, outdir: Path) -> CaptureStats:
    asyncio.run(delete_leftover_streams())
    out = outdir / f"{name}.pcap"
    with tcpdump(out) as stats:
        asyncio.run(SCENARIOS[name]())
    packets, connections = check_capture(out)
    if packets != stats[0].captured:
        raise RuntimeError(f"{out}: tcpdump reported {stats[0].captured} packets, file holds {packets}")
    log.info("%s: %d packets, %d TCP connection(s)", out, packets, connections)
    return stats[0]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="scenario to record (repeatable; default: all)",
    )
    parser.add_argument("--outdir", type=Path, default=DEFAULT_OUTDIR, help="where the captures go")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    names: list[str] = args.scenario or list(SCENARIOS)
    outdir: Path = args.outdir.resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    log.info("rstream %s, outdir %s", rstream.__version__, outdir)

    ensure_stream_plugin()
    for name in names:
        record(name, outdir)
    if "session" in names:
        count = write_pcapng(outdir / "session.pcap", outdir / "session.pcapng")
        log.info("%s: %d packets", outdir / "session.pcapng", count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
