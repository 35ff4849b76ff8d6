"""Write the hostile corpus: captures made to hurt a decoder, from the committed recordings.

Every file is made from the captures in captures/ and fixed seeds, so running this again
writes the same bytes. tests/test_hostile.py reads each with streamdump (no traceback, a
one-line error at most, in bounded time) and with tshark and the generated plugins (no Lua
error, no hang), in CI.

- `<protocol>.damaged.pcap`: the frames of the protocol's first capture, each damaged as
  streamdump.fuzzing.damage damages fuzz inputs (absurd lengths and counts, truncation,
  deep AMQP nesting, a compression bomb, flipped bytes), one frame a segment;
- `rabbitmq_stream.bomb.pcap`: Deliver frames whose sub-batches inflate to 1 GiB (zstd) or
  64 MiB (gzip), saying so or claiming 100 bytes;
- `rabbitmq_stream.deep.pcap`: a Publish whose message nests AMQP lists 10,000 deep;
- `rabbitmq_stream.absurd.pcap`: frames whose sizes and counts claim gigabytes;
- reader cases: a record running past the end of the file, a record claiming 4 GB, a pcapng
  file of block types nobody knows, random bytes, a header alone, an empty file;
- findings of bench/fuzz.py, kept as `finding.<target>.<name>` (the raw input) once fixed.

    python tests/hostile/make.py [--out DIR]
"""

from __future__ import annotations

import random
import struct
import sys
import zlib
from pathlib import Path

import zstandard

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pcap_writer import tcp_pcap  # noqa: E402
from spec_strategies import encode_chunk  # noqa: E402
from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry, sub_batch_entry  # noqa: E402

from streamdump.analysis.pipeline import Dissection, ReadStats, decode_segments  # noqa: E402
from streamdump.fuzzing import damage  # noqa: E402
from streamdump.spec.decoder import Decoder  # noqa: E402
from streamdump.spec.registry import default_registry  # noqa: E402
from streamdump.wire.capture import CaptureError, read_segments  # noqa: E402

TS = 1_800_000_000.0


def first_connection(protocol: str) -> tuple[list[tuple[bool, bytes]], int]:
    """The frames of the protocol's first capture's first connection, with their direction."""
    decoders = [Decoder(p) for p in default_registry().protocols.values()]
    path = sorted((ROOT / "captures" / protocol).glob("*.pcap"))[0]
    frames: list[tuple[bool, bytes]] = []
    conn = None
    for frame in decode_segments(read_segments(path), Dissection(decoders), None, ReadStats()):
        if frame.protocol != protocol or frame.incomplete is not None:
            continue
        conn = frame.conn if conn is None else conn
        if frame.conn == conn:
            frames.append((bool(frame.from_client), bytes(frame.data)))
    port = default_registry().get(protocol).wiring.ports[0]
    return frames, port


def damaged(protocol: str) -> bytes:
    frames, port = first_connection(protocol)
    rng = random.Random(f"hostile {protocol}")
    return tcp_pcap([(side, damage(data, rng)[:16384]) for side, data in frames[:60]], ("127.0.0.1", port))


def deliver(decoder: Decoder, chunk: bytes, subscription: int = 1) -> bytes:
    values = struct.unpack(">BBHIqQQIIIB", chunk[:45])
    names = ("magic_version", "chunk_type", "num_entries", "num_records", "timestamp", "epoch", "chunk_id")
    names += ("crc", "data_length", "trailer_length", "bloom_size")
    fields = dict(zip(names, values, strict=True)) | {"reserved": chunk[45:48], "chunk_data": chunk[48:]}
    return decoder.encode("Deliver", "command", {"subscription_id": subscription, "chunk": fields})


def bomb(decoder: Decoder) -> bytes:
    """Sub-batches of zeros: 1 GiB of zstd saying so (over the frame's budget: not inflated),
    the same claiming 100 bytes, and 64 MiB of gzip claiming 100 bytes (inflated no further
    than the claim)."""
    zstd = zstandard.ZstdCompressor(level=19).compressobj()
    zst = b"".join([zstd.compress(bytes(1 << 20)) for _ in range(1024)] + [zstd.flush()])
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    gzipped = b"".join([gz.compress(bytes(1 << 20)) for _ in range(64)] + [gz.flush()])
    frames = []
    for code, packed, claim in ((4, zst, 1 << 30), (4, zst, 100), (1, gzipped, 100)):
        entry = sub_batch_entry([b""], code, packed)
        entry.record_count, entry.uncompressed_length = 65535, claim
        frames.append((False, deliver(decoder, encode_chunk([entry], chunk_id=len(frames) * 65535))))
    return tcp_pcap(frames, ("127.0.0.1", 5552))


def deep(decoder: Decoder) -> bytes:
    value = b"\x40"
    for _ in range(10_000):
        value = b"\xd0" + struct.pack(">II", len(value) + 4, 1) + value
    message = b"\x00\x53\x77" + value
    publish = decoder.encode(
        "Publish",
        "command",
        {"publisher_id": 1, "messages": [{"publishing_id": 1, "entry": simple_entry(message)}]},
    )
    chunk = encode_chunk([simple_entry(message)], chunk_id=0)
    return tcp_pcap([(True, publish), (False, deliver(decoder, chunk))], ("127.0.0.1", 5552))


def absurd(decoder: Decoder) -> bytes:
    frames: list[tuple[bool, bytes]] = []
    publish = bytearray(decoder.encode("Publish", "command", {"publisher_id": 1, "messages": []}))
    publish[-4:] = b"\xff\xff\xff\xff"  # 4 billion messages in an empty frame
    frames.append((True, bytes(publish)))
    chunk = bytearray(encode_chunk([simple_entry(b"\x00\x53\x75\xa0\x01x")], chunk_id=7))
    chunk[2:4] = b"\xff\xff"  # 65,535 entries
    chunk[4:8] = b"\xff\xff\xff\xff"  # 4 billion records
    frames.append((False, deliver(decoder, bytes(chunk))))
    chunk[36:40] = b"\x7f\xff\xff\xff"  # 2 GB of data
    frames.append((False, deliver(decoder, bytes(chunk))))
    # A frame that claims 2 GB, then what follows it.
    frames.append((True, b"\x7f\xff\xff\xff\x00\x02\x00\x01" + bytes(64)))
    return tcp_pcap(frames, ("127.0.0.1", 5552))


def pcap_header(linktype: int = 1) -> bytes:
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)


def reader_cases() -> dict[str, bytes]:
    good = (ROOT / "captures" / "rabbitmq_stream" / "session.pcap").read_bytes()
    record = struct.pack("<IIII", int(TS), 0, 0xFFFFFFF0, 0xFFFFFFF0)
    unknown = b"".join(
        struct.pack("<II", kind, 12 + 4) + b"\x00" * 4 + struct.pack("<I", 12 + 4)
        for kind in (0x0BAD, 0x7FFF0001)
    )
    section = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    rng = random.Random("hostile garbage")
    return {
        "reader.runs_past_end.pcap": good[: len(good) - 37],
        "reader.absurd_caplen.pcap": pcap_header() + record + b"\x00" * 64,
        "reader.unknown_blocks.pcapng": section + unknown * 3,
        "reader.garbage.pcap": bytes(rng.randrange(256) for _ in range(4096)),
        "reader.header_only.pcap": pcap_header(),
        "reader.empty.pcap": b"",
    }


def main() -> int:
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else HERE
    decoder = Decoder(default_registry().get("rabbitmq_stream"))
    files: dict[str, bytes] = {}
    for name, spec in sorted(default_registry().protocols.items()):
        if spec.wiring.carried_by is None and spec.wiring.ports:
            files[f"{name}.damaged.pcap"] = damaged(name)
    files["rabbitmq_stream.bomb.pcap"] = bomb(decoder)
    files["rabbitmq_stream.deep.pcap"] = deep(decoder)
    files["rabbitmq_stream.absurd.pcap"] = absurd(decoder)
    files |= reader_cases()
    for name, data in files.items():
        (out / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")
    try:  # the corpus must be readable as files: a reader case's error is its answer
        for name in files:
            for _ in read_segments(out / name):
                pass
    except CaptureError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
