"""Record a large RabbitMQ Streams capture for benchmarks; the file stays out of the repo.

    python bench/record_flood.py --messages 500000 --out /tmp/flood.pcap [--body-size 100] [--mtu 1500]

One connection (`streamdump-flood`) creates the stream `streamdump-flood`, publishes N
AMQP messages as fast as rstream's low-level client allows (many messages per Publish
frame, a bounded number unconfirmed), waits for every confirm, consumes them all from
the first offset (one credit back per chunk), then unsubscribes, deletes the publisher
and the stream, and sends Close. tcpdump records it on lo, with lo at --mtu and its
offloads off (captures/rabbitmq_stream/record.py's machinery; `--mtu 0` leaves lo alone). The JSON
sidecar `<out>.sent.json` holds what was sent and what tcpdump reported. Needs root.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rstream import AMQPMessage, OffsetType, schema
from rstream.client import Client

# record.py lives in captures/rabbitmq_stream/, which is not a package; this makes the script runnable
# as `python bench/record_flood.py` from anywhere.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "captures" / "rabbitmq_stream"))
import record

log = logging.getLogger("record_flood")

PUBLISHER_ID = 0
SUBSCRIPTION_ID = 1
# The fixed-width head every body starts with; the rest of the body is a constant filler.
HEAD = "flood {:09d} "
HEAD_SIZE = len(HEAD.format(0))
# Kernel capture ring for tcpdump -B, in KiB: the flood outruns tcpdump's disk writes in
# bursts, and drops happen when this ring is full.
RING_KIB = 262144
# Headroom under frame_max for the Publish header (key, version, publisher id, count).
FRAME_OVERHEAD = 64
PER_MESSAGE_OVERHEAD = 8 + 4  # publishing id + length
# Chunks the consumer may have outstanding: enough to keep the broker busy while the
# client decodes, few enough that its queue stays small.
INITIAL_CREDIT = 10
# No progress (confirm or delivery) for this long fails the run instead of hanging.
STALL_S = 30.0


def amqp_message(index: int, body_size: int, filler: bytes) -> bytes:
    """AMQP 1.0 bare message with one data section: the same bytes rstream's AMQPMessage makes."""
    body = HEAD.format(index).encode() + filler
    if body_size <= 0xFF:
        return b"\x00\x53\x75\xa0" + bytes((body_size,)) + body  # vbin8
    return b"\x00\x53\x75\xb0" + body_size.to_bytes(4, "big") + body  # vbin32


class Confirms:
    """Counts PublishConfirm ids for one publisher, so the sender can keep a bounded window."""

    def __init__(self, client: Client, publisher_id: int, messages: int) -> None:
        self._publisher_id = publisher_id
        self._messages = messages
        self.confirmed = 0
        self._errors: list[str] = []
        self._changed = asyncio.Event()
        client.add_handler(schema.PublishConfirm, self._on_confirm, name="flood-confirm")
        client.add_handler(schema.PublishError, self._on_error, name="flood-error")

    def _on_confirm(self, frame: schema.PublishConfirm) -> None:
        if frame.publisher_id == self._publisher_id:
            # Counting instead of keeping a set of 500k ids; a stray id would only show
            # up as a wrong total, so check the range here.
            stray = [pid for pid in frame.publishing_ids if not 0 <= pid < self._messages]
            if stray:
                self._errors.append(f"confirm for unknown ids {stray[:5]}")
            self.confirmed += len(frame.publishing_ids)
            self._changed.set()

    def _on_error(self, frame: schema.PublishError) -> None:
        if frame.publisher_id == self._publisher_id:
            self._errors.append(f"PublishError {frame.errors[:5]}")
            self._changed.set()

    async def wait_until(self, count: int) -> None:
        """Return once at least `count` ids are confirmed."""
        while self.confirmed < count and not self._errors:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), STALL_S)
            except TimeoutError:
                raise RuntimeError(f"no confirm for {STALL_S:.0f} s at {self.confirmed}/{count}") from None
        if self._errors:
            raise RuntimeError(f"publish rejected or unexpected confirm: {self._errors[:3]}")


class Consumer:
    """One subscription that checks every delivered body and hands back a credit per chunk."""

    def __init__(self, client: Client, body_size: int, filler: bytes) -> None:
        self.client = client
        self.body_size = body_size
        self.filler = filler
        self.consumed = 0
        self.chunks = 0
        self.mismatches: list[int] = []
        self._changed = asyncio.Event()

    async def start(self, stream: str) -> None:
        # rstream routes Deliver frames to a per-subscription queue keyed by int(name).
        self.client.add_handler(schema.Deliver, self._on_deliver, name=str(SUBSCRIPTION_ID))
        await self.client.run_queue_listener_task(SUBSCRIPTION_ID, self._on_deliver)
        await self.client.subscribe(
            stream,
            subscription_id=SUBSCRIPTION_ID,
            offset_spec=schema.OffsetSpec.from_params(OffsetType.FIRST, None),
            initial_credit=INITIAL_CREDIT,
        )

    async def _on_deliver(self, frame: schema.Deliver) -> None:
        if frame.subscription_id != SUBSCRIPTION_ID:
            return
        # Credit first: the broker can read the next chunk while this one is checked.
        await self.client.credit(SUBSCRIPTION_ID, 1)
        self.chunks += 1
        if frame.chunk_first_offset != self.consumed:
            self.mismatches.append(frame.chunk_first_offset)
        for i, message in enumerate(frame.get_messages()):
            offset = frame.chunk_first_offset + i
            if message != amqp_message(offset, self.body_size, self.filler) and len(self.mismatches) < 100:
                self.mismatches.append(offset)
        self.consumed += frame.num_entries
        self._changed.set()

    async def wait_for(self, count: int) -> None:
        while self.consumed < count:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), STALL_S)
            except TimeoutError:
                raise RuntimeError(f"no delivery for {STALL_S:.0f} s at {self.consumed}/{count}") from None

    async def stop(self) -> None:
        await self.client.unsubscribe(SUBSCRIPTION_ID)
        await self.client.stop_queue_listener_task(SUBSCRIPTION_ID)
        self.client.remove_handler(schema.Deliver, name=str(SUBSCRIPTION_ID))


@dataclass
class FloodResult:
    consumed: int = 0
    chunks: int = 0
    publish_frames: int = 0
    publish_s: float = 0.0
    consume_s: float = 0.0


async def flood(messages: int, body_size: int, batch: int, window: int, result: FloodResult) -> None:
    filler = b"streamdump-flood-" * (body_size // 17 + 1)
    filler = filler[: body_size - HEAD_SIZE]
    # Cheap insurance that the hand-built encoding is what rstream would send.
    sample = HEAD.format(0).encode() + filler
    if amqp_message(0, body_size, filler) != bytes(AMQPMessage(body=sample)):
        raise RuntimeError("hand-built AMQP encoding differs from rstream's")

    client = await record.connect("streamdump-flood")
    try:
        await client.create_stream(record.FLOOD_STREAM)
        await client.declare_publisher(record.FLOOD_STREAM, reference=None, publisher_id=PUBLISHER_ID)
        confirms = Confirms(client, PUBLISHER_ID, messages)

        start = time.monotonic()
        for first in range(0, messages, batch):
            ids = range(first, min(first + batch, messages))
            await confirms.wait_until(ids.stop - window)
            frame = schema.Publish(
                publisher_id=PUBLISHER_ID,
                messages=[schema.Message(i, None, amqp_message(i, body_size, filler)) for i in ids],
            )
            # send_publish_frame uses rstream's dedicated Publish encoder; Client.publish()
            # goes through the generic per-field one, which is several times slower.
            await client.send_publish_frame(frame)
            result.publish_frames += 1
        await confirms.wait_until(messages)
        if confirms.confirmed != messages:
            raise RuntimeError(f"{confirms.confirmed} confirms for {messages} messages")
        result.publish_s = time.monotonic() - start

        start = time.monotonic()
        consumer = Consumer(client, body_size, filler)
        await consumer.start(record.FLOOD_STREAM)
        await consumer.wait_for(messages)
        result.consume_s = time.monotonic() - start
        result.consumed, result.chunks = consumer.consumed, consumer.chunks
        await consumer.stop()
        if consumer.consumed != messages or consumer.mismatches:
            raise RuntimeError(
                f"consumed {consumer.consumed}/{messages}; wrong offsets/bodies at {consumer.mismatches[:10]}"
            )

        await client.delete_publisher(PUBLISHER_ID)
        await client.delete_stream(record.FLOOD_STREAM)
    finally:
        await client.close()


def segment_stats(pcap: Path) -> tuple[int, int]:
    """(packets, largest TCP payload) of an Ethernet (lo) capture, without dissecting it."""
    packets = largest = 0
    with pcap.open("rb") as fh:
        magic = fh.read(24)[:4]
        record_header = struct.Struct(
            "<IIII" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">IIII"
        )
        while len(head := fh.read(16)) == 16:
            caplen = record_header.unpack(head)[2]
            data = fh.read(caplen)
            packets += 1
            ihl = (data[14] & 0x0F) * 4
            total = int.from_bytes(data[16:18], "big")
            dataofs = (data[14 + ihl + 12] >> 4) * 4
            largest = max(largest, total - ihl - dataofs)
    return packets, largest


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000, help="messages to publish and consume")
    parser.add_argument("--out", type=Path, required=True, help="pcap to write (keep it out of the repo)")
    parser.add_argument("--body-size", type=int, default=100, help=f"bytes per body (>= {HEAD_SIZE})")
    parser.add_argument(
        "--mtu", type=int, default=record.WIRE_MTU, help="lo MTU, offloads off; 0 leaves lo alone"
    )
    parser.add_argument(
        "--batch", type=int, default=500, help="messages per Publish frame (capped by frame_max)"
    )
    parser.add_argument("--window", type=int, default=20_000, help="most messages unconfirmed at once")
    args = parser.parse_args(argv)
    if args.body_size < HEAD_SIZE:
        parser.error(f"--body-size must be at least {HEAD_SIZE} (the index is embedded)")
    if args.messages < 1 or args.batch < 1 or args.window < args.batch:
        parser.error("need --messages >= 1, --batch >= 1 and --window >= --batch")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    out: Path = args.out.resolve()
    if record.DEFAULT_OUTDIR.parent in out.parents:
        raise SystemExit(f"{out} is inside the repository; flood captures must not be committed")
    out.parent.mkdir(parents=True, exist_ok=True)
    message_size = len(amqp_message(0, args.body_size, b"x" * (args.body_size - HEAD_SIZE)))
    batch = min(args.batch, (record.FRAME_MAX - FRAME_OVERHEAD) // (message_size + PER_MESSAGE_OVERHEAD))
    if batch < 1:
        raise SystemExit(f"a {args.body_size}-byte body does not fit in one {record.FRAME_MAX}-byte frame")

    result = FloodResult()
    with contextlib.ExitStack() as stack:
        # The lock keeps other recordings (and their clients) out of this capture and this
        # flood out of theirs; the plugin check connects to 5552, so it goes inside.
        stack.enter_context(record.recording_lock())
        record.ensure_stream_plugin()
        asyncio.run(record.delete_leftover_streams())
        if args.mtu:
            stack.enter_context(record.wire_mtu(args.mtu))
        # No -U: flushing after every packet costs a write() per packet, and the file is
        # complete anyway once tcpdump exits on SIGINT. Drops are reported, not fatal.
        stats = stack.enter_context(
            record.tcpdump(out, buffer_kib=RING_KIB, packet_buffered=False, allow_drops=True)
        )
        start = time.monotonic()
        asyncio.run(flood(args.messages, args.body_size, batch, args.window, result))
        wall = time.monotonic() - start
    tcpdump_stats = stats[0]
    packets, largest = segment_stats(out)
    if packets != tcpdump_stats.captured:
        log.warning("%s holds %d packets, tcpdump reported %d captured", out, packets, tcpdump_stats.captured)

    sidecar = {
        "stream": record.FLOOD_STREAM,
        "messages": args.messages,
        "publisher_id": PUBLISHER_ID,
        "first_publishing_id": 0,
        "last_publishing_id": args.messages - 1,
        "body_size": args.body_size,
        "amqp_message_size": message_size,
        "messages_per_publish_frame": batch,
        "max_unconfirmed": args.window,
        "consumed": result.consumed,
        "chunks_delivered": result.chunks,
        "publish_frames": result.publish_frames,
        "mtu": args.mtu or None,
        "tcpdump": asdict(tcpdump_stats),
        "file_packets": packets,
        "file_bytes": out.stat().st_size,
        "largest_tcp_payload": largest,
        "publish_s": round(result.publish_s, 3),
        "consume_s": round(result.consume_s, 3),
        "wall_time_s": round(wall, 3),
    }
    sidecar_path = out.with_name(out.name + ".sent.json")
    sidecar_path.write_text(json.dumps(sidecar, indent=2) + "\n")
    print(
        f"flood: {args.messages} x {args.body_size} B bodies in {result.publish_frames} Publish frames, "
        f"published {result.publish_s:.1f} s ({args.messages / max(result.publish_s, 1e-9):,.0f} msg/s), "
        f"consumed {result.consumed} in {result.consume_s:.1f} s, wall {wall:.1f} s; "
        f"{out}: {packets} packets, {sidecar['file_bytes'] / 1e6:.1f} MB, largest segment {largest} B; "
        f"tcpdump captured {tcpdump_stats.captured} received {tcpdump_stats.received} "
        f"dropped {tcpdump_stats.dropped}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
