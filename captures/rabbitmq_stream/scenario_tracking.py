"""The `tracking` scenario: a named producer and stored offsets, so that osiris writes tracking chunks.

Owns the scenario (publish, store offsets, fill a 500-byte segment so that a second one
starts with a tracking snapshot), reading the broker's own segment and index files
(`read_segment`, `read_index`, finding the stream's data directory), cutting one chunk of
each type out of them into chunks/*.bin with chunks/manifest.json (`tracking_fixtures`),
and `verify_tracking`, which checks that the capture's Deliver frames carry the user
chunks only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

from broker import TRACKING_STREAM
from osiris_chunks import CHUNK_HEADER_LEN, CHUNK_MAGIC_VERSION, StoredChunk, chunk_entries, tracking_entries
from pcap_checks import KEY_DELIVER, capture_frames, deliver_chunk, frame_key
from rstream import AMQPMessage
from scenario_tools import (
    QUIET_WAIT_S,
    Outputs,
    Subscription,
    expect,
    from_first,
    publish,
    stream_with_publisher,
)
from system_tools import find_program, run

log = logging.getLogger("record")

TRACKING_PUBLISHER_REFERENCE = "streamdump-tracker"
TRACKING_CONSUMER_REFERENCE = "streamdump-tracking-consumer"
# Segment size limit for `streamdump-tracking`: the first segment passes it with the second
# tracking delta (511 bytes then), so the next write opens a second segment, and osiris
# starts every new segment with a tracking snapshot chunk.
TRACKING_SEGMENT_BYTES = 500
# (segment file, [(chunk type, chunk id), ...]) the scenario must leave on disk.
TRACKING_LAYOUT = [
    ("00000000000000000000.segment", [(0, 0), (0, 3), (1, 4), (0, 5), (1, 6)]),
    ("00000000000000000007.segment", [(2, 7), (0, 8), (0, 11)]),
]
# Offsets of the user records: 4, 6 and 7 are the tracking chunks, which take one offset each.
TRACKING_USER_OFFSETS = [0, 1, 2, 3, 5, 8, 9, 10, 11]

RABBITMQ_MNESIA = Path("/var/lib/rabbitmq/mnesia")
SEGMENT_MAGIC = b"OSIL"
INDEX_MAGIC = b"OSII"
# "OSIL"/"OSII" then a u32 version (1).
FILE_HEADER_LEN = 8
# Index record: chunk id u64, timestamp i64, epoch u64, segment file position u32, chunk type u8.
INDEX_RECORD = struct.Struct(">QqQIB")
CHUNK_FIXTURES = {0: "user_with_trailer.bin", 1: "tracking_delta.bin", 2: "tracking_snapshot.bin"}


def read_segment(path: Path) -> list[StoredChunk]:
    """Every chunk of a segment file, with its data CRC checked."""
    content = path.read_bytes()
    expect(content[:4] == SEGMENT_MAGIC, f"{path.name} starts with {content[:8].hex()}")
    expect(
        content[FILE_HEADER_LEN] == CHUNK_MAGIC_VERSION, f"{path.name}: first chunk right after the header"
    )
    chunks = []
    pos = FILE_HEADER_LEN
    while pos < len(content):
        chunk = StoredChunk.unpack(content, pos, path.name)
        expect(len(chunk.raw) == chunk.size, f"{path.name}: chunk at {pos} runs past the end of the file")
        expect(chunk.crc_ok(), f"{path.name}: data CRC of chunk {chunk.chunk_id}")
        chunks.append(chunk)
        pos += chunk.size
    return chunks


def read_index(path: Path) -> list[tuple[int, int, int, int, int]]:
    content = path.read_bytes()
    expect(content[:4] == INDEX_MAGIC, f"{path.name} starts with {content[:8].hex()}")
    body = content[FILE_HEADER_LEN:]
    expect(len(body) % INDEX_RECORD.size == 0, f"{path.name}: {len(body)} bytes of index records")
    return [INDEX_RECORD.unpack_from(body, i) for i in range(0, len(body), INDEX_RECORD.size)]


def osiris_data_dirs() -> list[Path]:
    """Where the broker keeps its streams: <mnesia dir>/stream, else what osiris says."""
    found = sorted(RABBITMQ_MNESIA.glob("*/stream"))
    if found:
        return found
    ctl = find_program("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    out = run([ctl, "eval", "application:get_env(osiris, data_dir)."])
    m = re.search(r'\{ok,"(.*)"\}', out)
    if not m:
        raise RuntimeError(f"cannot find the broker's stream data directory (rabbitmqctl said {out!r})")
    return [Path(m[1])]


def stream_directory(stream: str) -> Path:
    """The newest directory of `stream`: osiris names it <vhost>_<stream>_<creation time>."""
    pattern = re.compile(rf"_{re.escape(stream)}_(\d+)$")
    found = [
        (int(m[1]), path)
        for root in osiris_data_dirs()
        for path in root.iterdir()
        if (m := pattern.search(path.name))
    ]
    if not found:
        raise RuntimeError(
            f"no data directory for {stream} in {osiris_data_dirs()}; try find / -name '*.segment'"
        )
    return max(found)[1]


def tracking_fixtures(stream_dir: Path) -> Outputs:
    """Copy the stream's files aside, check their layout, and cut one chunk per type out of them."""
    with tempfile.TemporaryDirectory(prefix="streamdump-segments-") as tmp:
        copies = []
        for path in sorted(stream_dir.iterdir()):
            if path.suffix in (".segment", ".index"):
                copies.append(Path(shutil.copy2(path, tmp)))
        log.info("copied %s from %s", [p.name for p in copies], stream_dir)
        segments = {p.name: read_segment(p) for p in copies if p.suffix == ".segment"}
        indexes = {p.name: read_index(p) for p in copies if p.suffix == ".index"}
        header = (Path(tmp) / TRACKING_LAYOUT[0][0]).read_bytes()[:FILE_HEADER_LEN]

    layout = [
        (name, [(c.chunk_type, c.chunk_id) for c in in_segment]) for name, in_segment in segments.items()
    ]
    expect(layout == TRACKING_LAYOUT, f"segment layout {layout}")
    for name, in_segment in segments.items():
        records = indexes[name.replace(".segment", ".index")]
        expect(
            records == [(c.chunk_id, c.timestamp, c.epoch, c.position, c.chunk_type) for c in in_segment],
            f"{name}: index records match the chunks",
        )
    stored = [c for in_segment in segments.values() for c in in_segment]
    expect(
        all(c.magic_version == CHUNK_MAGIC_VERSION and c.bloom_size == 0 for c in stored),
        "magic 0x50, no bloom",
    )

    outputs: Outputs = {}
    fixtures = []
    for chunk_type, file_name in CHUNK_FIXTURES.items():
        # The first chunk of each type; for user chunks, the first with a trailer.
        chunk = next(c for c in stored if c.chunk_type == chunk_type and (chunk_type or c.trailer_length))
        info: dict[str, Any] = {
            "file": file_name,
            "segment": chunk.segment,
            "size": len(chunk.raw),
            "parts": {
                "header": CHUNK_HEADER_LEN,
                "data": chunk.data_length,
                "trailer": chunk.trailer_length,
                "bloom": chunk.bloom_size,
            },
            "header": chunk.header(),
            "position": chunk.position,
        }
        if chunk_type:
            # Tracking data is one simple entry: u32 size, then the tracking entries.
            (size,) = struct.unpack_from(">I", chunk.data)
            expect(chunk.num_entries == 1 and size + 4 == chunk.data_length, "tracking data is one entry")
            info["tracking"] = tracking_entries(chunk.data[4:], snapshot=chunk_type == 2)
        else:
            info["records"] = [r.body.hex() for r in chunk_entries(chunk.data, chunk.num_entries)]
        info["trailer_tracking"] = tracking_entries(chunk.trailer, snapshot=False)
        fixtures.append(info)
        outputs[f"chunks/{file_name}"] = chunk.raw
    manifest = {
        "stream": TRACKING_STREAM,
        "broker": "RabbitMQ 3.10.8, osiris 1.3.1",
        "segment_file_header": header.hex(),
        "segments": [
            {"file": name, "chunks": [c.layout() for c in in_segment]}
            for name, in_segment in segments.items()
        ],
        "fixtures": fixtures,
    }
    outputs["chunks/manifest.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    return outputs


async def scenario_tracking() -> Outputs:
    """A named producer and stored consumer offsets, so that osiris writes tracking chunks."""
    publisher_id = 0
    subscription_id = 1
    async with stream_with_publisher(
        "streamdump-tracking",
        TRACKING_STREAM,
        publisher_id,
        reference=TRACKING_PUBLISHER_REFERENCE,
        arguments={"stream-max-segment-size-bytes": TRACKING_SEGMENT_BYTES},
    ) as (client, tracker):
        sequence = await client.query_publisher_sequence(TRACKING_STREAM, TRACKING_PUBLISHER_REFERENCE)
        expect(sequence == 0, f"fresh stream has publisher sequence 0, got {sequence}")

        def batch(*ids: int) -> list[tuple[int, AMQPMessage | bytes]]:
            return [(i, AMQPMessage(body=f"tracking {i}".encode())) for i in ids]

        async def store(offset: int) -> None:
            await client.store_offset(TRACKING_STREAM, TRACKING_CONSUMER_REFERENCE, offset)
            # No response; give the broker time to write the tracking chunk before the next one.
            await asyncio.sleep(QUIET_WAIT_S)

        await publish(client, tracker, publisher_id, batch(1, 2, 3))  # chunk 0, offsets 0..2
        await publish(client, tracker, publisher_id, batch(4))  # chunk 3
        await store(2)  # tracking delta, chunk 4
        await publish(client, tracker, publisher_id, batch(5))  # chunk 5
        await store(5)  # tracking delta, chunk 6; the segment is now full
        # Three messages, so that the snapshot's sequence (8) differs from its chunk id (7).
        await publish(client, tracker, publisher_id, batch(6, 7, 8))  # snapshot chunk 7, then chunk 8
        await publish(client, tracker, publisher_id, batch(9))  # chunk 11

        stored = await client.query_offset(TRACKING_STREAM, TRACKING_CONSUMER_REFERENCE)
        expect(stored == 5, f"stored offset 5, queried {stored}")
        sequence = await client.query_publisher_sequence(TRACKING_STREAM, TRACKING_PUBLISHER_REFERENCE)
        expect(sequence == 9, f"publisher sequence 9, queried {sequence}")

        sub = Subscription(client, subscription_id, credit_each_chunk=False)
        # rstream's Deliver parser rejects chunk types other than 0, so a tracking chunk sent
        # to the consumer would stop the client's reader and end in a timeout here.
        await sub.start(TRACKING_STREAM, from_first(), initial_credit=20)
        await sub.wait_for(len(TRACKING_USER_OFFSETS))
        expect(
            sub.offsets == TRACKING_USER_OFFSETS, f"user offsets {TRACKING_USER_OFFSETS}, got {sub.offsets}"
        )
        expect(sub.chunk_entries == [3, 1, 1, 3, 1], f"user chunks only, got {sub.chunk_entries}")
        await sub.stop()

        # The files must be read before the end of the block deletes the stream.
        outputs = tracking_fixtures(stream_directory(TRACKING_STREAM))
    return outputs


def verify_tracking(pcap: Path, outputs: Outputs) -> None:
    """Deliver frames carry the user chunks only, never the tracking chunks on disk."""
    manifest = json.loads(outputs["chunks/manifest.json"])
    stored = [c for segment in manifest["segments"] for c in segment["chunks"]]
    _, to_client = capture_frames(pcap)
    delivered = [deliver_chunk(f)[0] for f in to_client if frame_key(f) == KEY_DELIVER]
    seen = [(c.chunk_type, c.chunk_id, c.trailer_length) for c in delivered]
    user = [(c["chunk_type"], c["chunk_id"], c["trailer_length"]) for c in stored if c["chunk_type"] == 0]
    expect(seen == user, f"Deliver (type, chunk id, trailer length) {seen}, user chunks on disk {user}")
    log.info("%s: Deliver chunks (type, id, trailer length) %s; tracking chunks not sent", pcap, seen)
