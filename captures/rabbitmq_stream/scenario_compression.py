"""The `compression` scenario: sub-batch entries in every codec and framing clients use.

Owns the compression variants (code, compressor, decompressor, how the body starts), the
rstream codec that compresses with one variant (`VariantCodec`), the messages (plain entries
with every kind of AMQP section content, then one sub-batch per variant), the sidecar
compression.sent.json that says what was published record by record, and
`verify_compression`, which checks the capture's Publish and Deliver frames against it.
"""

from __future__ import annotations

import calendar
import gzip
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cramjam
import rstream
from broker import COMPRESSION_STREAM
from pcap_checks import KEY_DELIVER, KEY_PUBLISH, capture_frames, deliver_chunk, frame_key, publish_entries
from rstream import AMQPMessage, Properties, schema
from rstream.compression import (
    CompressionHelper,
    CompressionType,
    ICompressionCodec,
    StreamCompressionCodecs,
)
from scenario_tools import Outputs, Subscription, expect, from_first, publish, stream_with_publisher

log = logging.getLogger("record")

SNAPPY_STREAM_ID = bytes.fromhex("ff060000734e61507059")  # snappy framing format's first chunk
LZ4_FRAME_MAGIC = bytes.fromhex("04224d18")
ZSTD_MAGIC = bytes.fromhex("28b52ffd")
GZIP_MAGIC = bytes.fromhex("1f8b")


def lz4_block_size_prefixed(run: bytes) -> bytes:
    """python-lz4's `lz4.block.compress` default: u32 little-endian uncompressed size, then the block."""
    return len(run).to_bytes(4, "little") + bytes(cramjam.lz4.compress_block(run, store_size=False))


@dataclass(frozen=True)
class Variant:
    """One way of compressing a sub-batch body, as some client does it."""

    name: str
    # The compression code in the entry type byte (rstream's CompressionType value).
    code: int
    decompress: Callable[[bytes], bytes]
    # None: rstream's own codec for this code (none, gzip) compresses.
    compress: Callable[[bytes], bytes] | None
    # How the compressed body starts; empty for the variant its code falls back to.
    magic: bytes
    records: int


VARIANTS = (
    Variant("none", 0, bytes, None, b"", 3),
    Variant("gzip", 1, gzip.decompress, None, GZIP_MAGIC, 4),
    # The Java and Go clients' snappy: the framing format, starting with the stream identifier.
    Variant(
        "snappy-framed",
        2,
        lambda b: bytes(cramjam.snappy.decompress(b)),
        lambda b: bytes(cramjam.snappy.compress(b)),
        SNAPPY_STREAM_ID,
        5,
    ),
    # python-snappy's snappy.compress: one raw block, starting with the varint length.
    Variant(
        "snappy-raw",
        2,
        lambda b: bytes(cramjam.snappy.decompress_raw(b)),
        lambda b: bytes(cramjam.snappy.compress_raw(b)),
        b"",
        6,
    ),
    # The Java and Go clients' lz4: the frame format.
    Variant(
        "lz4-frame",
        3,
        lambda b: bytes(cramjam.lz4.decompress(b)),
        lambda b: bytes(cramjam.lz4.compress(b)),
        LZ4_FRAME_MAGIC,
        7,
    ),
    # cramjam reads the size prefix the same way python-lz4 writes it.
    Variant(
        "lz4-block-size-prefixed",
        3,
        lambda b: bytes(cramjam.lz4.decompress_block(b)),
        lz4_block_size_prefixed,
        b"",
        4,
    ),
    Variant(
        "zstd",
        4,
        lambda b: bytes(cramjam.zstd.decompress(b)),
        lambda b: bytes(cramjam.zstd.compress(b)),
        ZSTD_MAGIC,
        5,
    ),
)


def variant_of(code: int, body: bytes) -> Variant:
    """The variant of compression `code` that produced `body`, told by its first bytes."""
    same = [v for v in VARIANTS if v.code == code]
    for variant in same:
        if variant.magic and body.startswith(variant.magic):
            return variant
    fallback = [v for v in same if not v.magic]
    if not fallback:
        raise ValueError(f"compression {code}: body starts {body[:10].hex()}, no known variant")
    return fallback[0]


def sub_batch_run(records: Sequence[bytes]) -> bytes:
    """A sub-batch's uncompressed body: [u32 size][record] per record."""
    return b"".join(len(r).to_bytes(4, "big") + r for r in records)


class VariantCodec(ICompressionCodec):
    """rstream codec that compresses with one variant and uncompresses any variant of its code.

    rstream holds one codec per compression code, and the two snappy and two lz4 variants
    share a code, so the consumer side recognises the variant by the body's first bytes.
    """

    def __init__(self, variant: Variant) -> None:
        assert variant.compress is not None
        self.variant = variant
        self.run = b""
        self.body = b""
        self.count = 0

    def compress(self, messages: Sequence[Any]) -> None:
        assert self.variant.compress is not None
        self.run = sub_batch_run([bytes(m) for m in messages])
        self.body = self.variant.compress(self.run)
        self.count = len(messages)

    def uncompress(self, compressed_data: bytes, uncompressed_data_size: int) -> bytes:
        run = variant_of(self.variant.code, compressed_data).decompress(compressed_data)
        if len(run) != uncompressed_data_size:
            raise ValueError(f"uncompressed {len(run)} bytes, the entry says {uncompressed_data_size}")
        return run

    def compressed_size(self) -> int:
        return len(self.body)

    def uncompressed_size(self) -> int:
        return len(self.run)

    def messages_count(self) -> int:
        return self.count

    def compression_type(self) -> int:
        return self.variant.code

    def data(self) -> bytes:
        return self.body


# Fixed instants (ms since the epoch), so that the record bytes are the same in every run.
CREATION_MS = 1_795_000_000_000
EXPIRY_MS = CREATION_MS + 86_400_000
APP_TIMESTAMP = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
MESSAGE_UUID = uuid.UUID("6f1c2a52-8d3e-4b7a-9c10-5e2f7d4a8b91")
FILLER_TEXT = "the quick brown fox jumps over the lazy dog"


def compression_simple_messages() -> list[AMQPMessage | bytes]:
    """The plain entries: AMQP messages with every kind of section content, then two raw ones."""
    return [
        AMQPMessage(
            body=b'{"order": 1, "item": "widget", "qty": 3}',
            properties=Properties(
                message_id="cmp-1",
                user_id=b"guest",
                to="/queues/orders",
                subject="order.created",
                reply_to="/queues/replies",
                correlation_id=b"\x00\x01corr",
                content_type="application/json",
                content_encoding="utf-8",
                absolute_expiry_time=EXPIRY_MS,
                creation_time=CREATION_MS,
                group_id="orders",
                group_sequence=7,
                reply_to_group_id="replies",
            ),
            application_properties={
                "str": "streamdump",
                "int": 42,
                "negative": -7,
                "long": 2**40,
                "true": True,
                "false": False,
                "double": 2.5,
                "binary": b"\x00\xff\x10",
                "null": None,
                "timestamp": APP_TIMESTAMP,
            },
        ),
        AMQPMessage(
            body="grüße, 世界".encode(),
            properties=Properties(
                message_id=MESSAGE_UUID,
                correlation_id=123456789,
                content_type="text/plain; charset=utf-8",
                creation_time=CREATION_MS + 1000,
            ),
            application_properties={"lang": "de+zh", "retries": 0},
        ),
        # No properties section, and a body that is not text.
        AMQPMessage(body=bytes(range(40)), application_properties={"kind": "binary", "size": 40}),
        # No application-properties section.
        AMQPMessage(
            body=b"properties only", properties=Properties(message_id=b"\x01\x02\x03\x04", subject="x")
        ),
        b"raw bytes, not an AMQP message",
        b"\xde\xad\xbe\xef\x00\x01\x02\x7f\x80\xfe\xff\r\n\t\x1b",
    ]


def sub_batch_messages(variant: Variant) -> list[AMQPMessage]:
    """`variant.records` messages with distinct, compressible bodies; even ones carry properties."""
    messages = []
    for k in range(variant.records):
        body = f"{variant.name} record {k}: {FILLER_TEXT} {FILLER_TEXT}".encode()
        if k % 2:
            messages.append(AMQPMessage(body=body))
        else:
            messages.append(
                AMQPMessage(
                    body=body,
                    properties=Properties(message_id=f"{variant.name}-{k}", content_type="text/plain"),
                    application_properties={"variant": variant.name, "index": k},
                )
            )
    return messages


# The AMQP 1.0 type rstream 1.1.1 encodes each properties field as. message_id and
# correlation_id depend on the value: see _ID_TYPES.
PROPERTY_TYPES = {
    "user_id": "binary",
    "to": "string",
    "subject": "string",
    "reply_to": "string",
    "content_type": "symbol",
    "content_encoding": "symbol",
    "absolute_expiry_time": "timestamp",
    "creation_time": "timestamp",
    "group_id": "string",
    "group_sequence": "uint",
    "reply_to_group_id": "string",
}
_ID_TYPES: dict[type, str] = {str: "string", bytes: "binary", uuid.UUID: "uuid", int: "ulong"}
INT32 = range(-(2**31), 2**31)


def amqp_value_type(value: object) -> str:
    """The AMQP 1.0 type rstream 1.1.1 encodes an application property value as."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int" if value in INT32 else "long"
    types = {str: "string", bytes: "binary", float: "double", datetime: "timestamp", uuid.UUID: "uuid"}
    return types[type(value)]


def json_value(value: object) -> object:
    """JSON-safe form: bytes as hex, UUIDs as text, timestamps as int ms since the epoch."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return calendar.timegm(value.utctimetuple()) * 1000 + value.microsecond // 1000
    return value


def record_json(message: AMQPMessage | bytes) -> dict[str, Any]:
    """One record of the sidecar: its exact bytes and, for AMQP, what was given to rstream."""
    if isinstance(message, bytes):
        return {"offset": None, "bytes": message.hex(), "amqp": False}
    given = message.properties._asdict() if message.properties else {}
    properties = {name: value for name, value in given.items() if value is not None}
    app = message.application_properties or {}
    return {
        "offset": None,
        "bytes": bytes(message).hex(),
        "amqp": True,
        "body": bytes(message.body).hex(),
        "properties": {name: json_value(value) for name, value in properties.items()},
        "property_types": {
            name: _ID_TYPES[type(value)] if name in ("message_id", "correlation_id") else PROPERTY_TYPES[name]
            for name, value in properties.items()
        },
        "application_properties": {name: json_value(value) for name, value in app.items()},
        "application_property_types": {name: amqp_value_type(value) for name, value in app.items()},
    }


async def scenario_compression() -> Outputs:
    """Plain entries, then one sub-batch entry per compression variant, consumed from the first offset."""
    publisher_id = 1
    subscription_id = 2
    # The codec registry is process-wide; put rstream's own codecs back afterwards.
    saved_codecs = dict(StreamCompressionCodecs.available_compress_codecs)
    publishes: list[dict[str, Any]] = []
    try:
        async with stream_with_publisher("streamdump-compression", COMPRESSION_STREAM, publisher_id) as (
            client,
            tracker,
        ):
            publishing_id = 0
            # One message per Publish frame, each confirmed before the next: one chunk each.
            for message in compression_simple_messages():
                publishing_id += 1
                await publish(client, tracker, publisher_id, [(publishing_id, message)])
                publishes.append(
                    {"publishing_id": publishing_id, "kind": "simple", "records": [record_json(message)]}
                )

            for variant in VARIANTS:
                ctype = CompressionType(variant.code)
                if variant.compress is not None:
                    # One codec per code, so register this variant's just before its batch.
                    StreamCompressionCodecs.register_codec(ctype, VariantCodec(variant))
                messages = sub_batch_messages(variant)
                codec = CompressionHelper.compress(messages, ctype)
                run = sub_batch_run([bytes(m) for m in messages])
                body = codec.data()
                expect(codec.uncompressed_size() == len(run), f"{variant.name}: uncompressed size")
                expect(codec.compressed_size() == len(body), f"{variant.name}: compressed size")
                expect(variant.decompress(body) == run, f"{variant.name}: body decompresses to the records")
                expect(
                    variant_of(variant.code, body) is variant,
                    f"{variant.name}: recognised by its first bytes",
                )
                if variant.name == "lz4-block-size-prefixed":
                    expect(body[:4] == len(run).to_bytes(4, "little"), "lz4 block starts with its LE size")
                # As rstream's Producer.send_sub_entry: one publishing id per record, and the
                # entry carries the last one.
                publishing_id += len(messages)
                await client.send_frame(
                    schema.PublishSubBatching(
                        publisher_id=publisher_id,
                        number_of_root_messages=1,
                        publishing_id=publishing_id,
                        compress_type=0x80 | variant.code << 4,
                        subbatching_message_count=len(messages),
                        uncompressed_data_size=len(run),
                        compressed_data_size=len(body),
                        messages=body,
                    )
                )
                await tracker.wait({publishing_id})
                publishes.append(
                    {
                        "publishing_id": publishing_id,
                        "kind": "sub_batch",
                        "compression": variant.code,
                        "variant": variant.name,
                        "entry_type": 0x80 | variant.code << 4,
                        "uncompressed_size": len(run),
                        "compressed_size": len(body),
                        "compressed_data": body.hex(),
                        "records": [record_json(m) for m in messages],
                    }
                )

            records = [r for p in publishes for r in p["records"]]
            sub = Subscription(client, subscription_id, credit_each_chunk=False)
            # One chunk per Publish frame; credit for all of them, so no Credit frames.
            await sub.start(COMPRESSION_STREAM, from_first(), initial_credit=len(publishes))
            await sub.wait_for(len(records))
            expect(
                sub.offsets == list(range(len(records))), f"offsets 0..{len(records) - 1}, got {sub.offsets}"
            )
            expect(sub.chunk_entries == [1] * len(publishes), f"one entry per chunk, got {sub.chunk_entries}")
            expect(sub.bodies == [bytes.fromhex(r["bytes"]) for r in records], "delivered records equal sent")
            for record_, offset in zip(records, sub.offsets, strict=True):
                record_["offset"] = offset

            await sub.stop()
    finally:
        StreamCompressionCodecs.available_compress_codecs.clear()
        StreamCompressionCodecs.available_compress_codecs.update(saved_codecs)

    sidecar = {
        "scenario": "compression",
        "rstream": rstream.__version__,
        "connection_name": "streamdump-compression",
        "stream": COMPRESSION_STREAM,
        "publisher_id": publisher_id,
        "publisher_reference": None,
        "subscription_id": subscription_id,
        # rstream's low-level Deliver gives the chunk's first offset only; a record's offset is
        # that plus its index among the chunk's records (what rstream's Consumer reports too).
        "offsets": "chunk_first_offset + index of the record in the chunk",
        "publishes": publishes,
    }
    return {"compression.sent.json": (json.dumps(sidecar, indent=1, ensure_ascii=False) + "\n").encode()}


def verify_compression(pcap: Path, outputs: Outputs) -> None:
    """The capture's Publish and Deliver frames carry exactly what the sidecar says."""
    sent = json.loads(outputs["compression.sent.json"])
    to_server, to_client = capture_frames(pcap)
    published = [e for f in to_server if frame_key(f) == KEY_PUBLISH for e in publish_entries(f)]
    expect(len(published) == len(sent["publishes"]), f"{len(published)} Publish entries")
    for (publishing_id, entry), item in zip(published, sent["publishes"], strict=True):
        expect(publishing_id == item["publishing_id"], f"publishing id {publishing_id}")
        if item["kind"] == "simple":
            expect(entry.code is None and entry.body.hex() == item["records"][0]["bytes"], f"{publishing_id}")
        else:
            expect(
                entry.code == item["compression"]
                and entry.records == len(item["records"])
                and entry.uncompressed_size == item["uncompressed_size"]
                and entry.body.hex() == item["compressed_data"],
                f"sub-batch {publishing_id} ({item['variant']})",
            )
    delivered = [deliver_chunk(f) for f in to_client if frame_key(f) == KEY_DELIVER]
    expect(all(c.chunk_type == 0 for c, _ in delivered), "user chunks only")
    expect([e for _, entries in delivered for e in entries] == [e for _, e in published], "Deliver = Publish")
    first_offsets = [item["records"][0]["offset"] for item in sent["publishes"]]
    expect([c.chunk_id for c, _ in delivered] == first_offsets, "chunk ids = the sidecar's offsets")
    codes = [e.code for _, entries in delivered for e in entries if e.code is not None]
    expect(sorted(codes) == [0, 1, 2, 2, 3, 3, 4], f"sub-batch codes delivered: {codes}")
    log.info("%s: %d Deliver frames, sub-batch compression codes %s", pcap, len(delivered), codes)
