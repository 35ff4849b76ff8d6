"""Osiris entries and chunks: real compressed captures checked message by message, and damage handled."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest
from conftest import CAPTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_strategies import encode_chunk
from streamdump.dissectors.rabbitmq_stream.osiris import (
    SUB_BATCH,
    records_body,
    simple_entry,
    sub_batch_entry,
)

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.codecs import amqp
from streamdump.codecs.compression import FRAMINGS, compress
from streamdump.spec.decoder import Decoder
from streamdump.wire.frame import Frame

SENT = json.loads((CAPTURES / "compression.sent.json").read_text())
# The recording script's names for the variants it sent, and what streamdump calls them.
FRAMING_NAMES = {
    "none": "none",
    "gzip": "gzip",
    "snappy-framed": "snappy framed",
    "snappy-raw": "snappy raw",
    "lz4-frame": "lz4 frame",
    "lz4-block-size-prefixed": "lz4 block, size-prefixed",
    "zstd": "zstd frame",
}


def frames_of(decoder: Decoder, name: str) -> list[Frame]:
    return [decoder.expand(f) for f in read_frames(CAPTURES / name, decoder, [5552], ReadStats())]


def check_record(record: dict[str, Any], want: dict[str, Any]) -> None:
    """One decoded record against what the client sent: size, body, properties, application properties."""
    sent = bytes.fromhex(want["bytes"])
    assert record["record_size"] == len(sent)
    if not want["amqp"]:
        assert "message" not in record and bytes(record["bytes"]) == sent
        return
    message = record["message"]
    assert message.error is None, message.error
    got = amqp.message_json(message)
    assert got["data"] == want["body"]
    properties = got.get("properties", {})
    for name, value in want["properties"].items():
        assert properties[name] == value, name
    # rstream writes every property field; the ones the client left out must be null.
    assert all(v is None for k, v in properties.items() if k not in want["properties"])
    assert got.get("application_properties", {}) == want.get("application_properties", {})
    # And the sections are exactly those of the bytes the client handed to the library.
    assert amqp.message_json(amqp.decode_message(sent)) == got


def check_published(frames: list[Frame], sent: dict[str, Any]) -> None:
    """Every Publish message against the sidecar: publishing id, entry kind, codec, framing, records."""
    messages = [m for f in frames if f.command == "Publish" for m in f.fields["messages"]]
    assert len(messages) == len(sent["publishes"])
    for message, want in zip(messages, sent["publishes"], strict=True):
        entry = message["entry"]
        assert message["publishing_id"] == want["publishing_id"]
        if want["kind"] == "sub_batch":
            assert entry.kind == SUB_BATCH and entry.compression == want["compression"]
            assert entry.framing == FRAMING_NAMES[want["variant"]]
            assert entry.record_count == len(want["records"])
        assert len(message["records"]) == len(want["records"])
        for record, want_record in zip(message["records"], want["records"], strict=True):
            check_record(record, want_record)


def check_delivered(frames: list[Frame], sent: dict[str, Any]) -> None:
    """Every Deliver record against the sidecar, with its offset; every framing came back, every CRC holds."""
    delivers = [f for f in frames if f.command == "Deliver"]
    records = [r for f in delivers for r in f.fields["chunk"]["records"]]
    wanted = [r for p in sent["publishes"] for r in p["records"]]
    assert [r["offset"] for r in records] == [w["offset"] for w in wanted] == list(range(len(wanted)))
    for record, want in zip(records, wanted, strict=True):
        check_record(record, want)
    framings = {e.get("framing") for f in delivers for e in f.fields["chunk"]["entries"]}
    assert framings >= {FRAMING_NAMES[p["variant"]] for p in sent["publishes"] if p["kind"] == "sub_batch"}
    # The client sent a null application property on purpose (every AMQP type): its content
    # note is the only one.
    sections = [amqp.decode_message(bytes.fromhex(w["bytes"])).section_values() for w in wanted]
    nulls = sum(None in (s.get("application_properties") or {}).values() for s in sections)
    for frame in delivers:
        assert frame.fields["chunk"]["crc_valid"] is True
        assert all(e.group == "protocol" and "'null' is null" in e.message for e in frame.expert)
    assert nulls and sum(len(f.expert) for f in delivers) == nulls


def test_published_messages_are_what_the_client_sent(decoder: Decoder) -> None:
    check_published(frames_of(decoder, "compression.pcap"), SENT)


def test_delivered_records_are_what_the_client_sent_with_their_offsets(decoder: Decoder) -> None:
    check_delivered(frames_of(decoder, "compression.pcap"), SENT)


def test_one_line_decoding_does_not_touch_records(decoder: Decoder, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded below the chunk header")

    monkeypatch.setattr("streamdump.dissectors.rabbitmq_stream.osiris.decompress", boom)
    monkeypatch.setattr("streamdump.dissectors.rabbitmq_stream.osiris.amqp.decode_message", boom)
    frames = list(read_frames(CAPTURES / "compression.pcap", decoder, [5552], ReadStats()))
    delivers = [f for f in frames if f.command == "Deliver"]
    assert delivers and all("records" not in f.fields["chunk"] for f in delivers)
    assert all(f.expert == [] for f in frames)


# ---------------------------------------------------------------- damaged chunks

RECORDS = [amqp.encode_message([("data", f"record {i}".encode())]) for i in range(3)]


def deliver(decoder: Decoder, chunk: bytes) -> Frame:
    wire = decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": _chunk_fields(chunk)})
    return decoder.expand(decoder.decode(wire))


HEADER_NAMES = (
    "magic_version",
    "chunk_type",
    "num_entries",
    "num_records",
    "timestamp",
    "epoch",
    "chunk_id",
    "crc",
    "data_length",
    "trailer_length",
    "bloom_size",
)


def _chunk_fields(chunk: bytes) -> dict[str, Any]:
    """A chunk's header fields by name, the rest as its data."""
    values = struct.unpack(">BBHIqQQIIIB", chunk[:45])
    return dict(zip(HEADER_NAMES, values, strict=True)) | {"reserved": chunk[45:48], "chunk_data": chunk[48:]}


def messages(frame: Frame) -> list[str]:
    return [e.message for e in frame.expert]


def good_chunk(chunk_id: int = 100) -> bytes:
    body = records_body(RECORDS)
    return encode_chunk(
        [simple_entry(RECORDS[0]), sub_batch_entry(RECORDS, 4, compress("zstd frame", body))],
        chunk_id=chunk_id,
    )


def test_a_good_chunk_numbers_its_records_from_the_chunk_id(decoder: Decoder) -> None:
    frame = deliver(decoder, good_chunk())
    chunk = frame.fields["chunk"]
    assert frame.expert == [] and chunk["crc_valid"] is True
    assert [r["offset"] for r in chunk["records"]] == [100, 101, 102, 103]
    assert [r["entry_index"] for r in chunk["records"]] == [0, 1, 1, 1]
    assert [amqp.message_json(r["message"])["data"] for r in chunk["records"]] == [
        b"record 0".hex(),
        b"record 0".hex(),
        b"record 1".hex(),
        b"record 2".hex(),
    ]


def test_bad_crc_is_an_error_on_every_decode_and_records_still_decode(decoder: Decoder) -> None:
    chunk = bytearray(good_chunk())
    chunk[-1] ^= 0xFF  # damage the data, keep the header's CRC
    wire = decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": _chunk_fields(bytes(chunk))})
    assert any("CRC mismatch" in m for m in messages(decoder.decode(wire)))
    frame = deliver(decoder, bytes(chunk))
    assert frame.fields["chunk"]["crc_valid"] is False
    assert any("CRC mismatch" in m for m in messages(frame))


def _rebuilt(chunk: bytes, **changes: int) -> bytes:
    fields = _chunk_fields(chunk) | changes
    data = fields["chunk_data"]
    if "crc" not in changes:
        fields["crc"] = zlib.crc32(data)
    header = struct.pack(">BBHIqQQIIIB", *(fields[n] for n in HEADER_NAMES))
    return header + fields["reserved"] + data


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"num_entries": 3}, "declares 3 entries but its data holds 2"),
        ({"num_entries": 1}, "bytes after the chunk's last entry"),
        ({"num_records": 9}, "declares 9 records but its entries hold 4"),
        ({"magic_version": 0x60}, "not an Osiris chunk"),
        ({"chunk_type": 7}, "unknown chunk type 7"),
    ],
)
def test_header_disagreeing_with_the_data_is_named(
    decoder: Decoder, changes: dict[str, int], expected: str
) -> None:
    frame = deliver(decoder, _rebuilt(good_chunk(), **changes))
    assert any(expected in m for m in messages(frame)), messages(frame)


def sub_batch_chunk(code: int, body: bytes, records: list[bytes], uncompressed: int | None = None) -> bytes:
    entry = sub_batch_entry(records, code, body)
    if uncompressed is not None:
        entry.uncompressed_length = uncompressed
    return encode_chunk([entry])


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        (sub_batch_chunk(5, b"\x00" * 10, RECORDS), "unknown compression code 5"),
        (sub_batch_chunk(4, b"not zstd at all", RECORDS), "zstd data does not start with a zstd frame magic"),
        (sub_batch_chunk(1, compress("gzip", records_body(RECORDS))[:-9], RECORDS), "gzip stream ends early"),
        (
            sub_batch_chunk(4, compress("zstd frame", records_body(RECORDS)), RECORDS, uncompressed=10),
            "longer than the declared 10 bytes",
        ),
        (
            sub_batch_chunk(3, compress("lz4 frame", records_body(RECORDS)), RECORDS, uncompressed=1 << 30),
            "3 records not decoded; expanding this frame stops at 64 MiB",
        ),
        (
            sub_batch_chunk(
                0, records_body(RECORDS)[:-3], RECORDS, uncompressed=len(records_body(RECORDS)) - 3
            ),
            "body ends inside record 2",
        ),
    ],
    ids=["bogus-code", "not-zstd", "truncated-gzip", "longer-than-declared", "over-cap", "truncated-records"],
)
def test_broken_sub_batches_become_expert_errors(decoder: Decoder, chunk: bytes, expected: str) -> None:
    frame = deliver(decoder, chunk)
    assert any(expected in m for m in messages(frame)), messages(frame)
    assert frame.worst_severity == "error"


def test_a_decompression_bomb_stops_at_the_declared_size(decoder: Decoder) -> None:
    bomb = compress("zstd frame", bytes(32 << 20))  # 32 MiB of zeros in about a kilobyte
    frame = deliver(decoder, sub_batch_chunk(4, bomb, RECORDS, uncompressed=1000))
    assert any("longer than the declared 1000 bytes" in m for m in messages(frame))


def test_every_framing_decodes_in_a_chunk(decoder: Decoder) -> None:
    body = records_body(RECORDS)
    for code, framings in FRAMINGS.items():
        for framing in framings:
            frame = deliver(decoder, encode_chunk([sub_batch_entry(RECORDS, code, compress(framing, body))]))
            assert frame.expert == [], (framing, messages(frame))
            assert frame.fields["chunk"]["entries"][0].get("framing") == framing
            assert len(frame.fields["chunk"]["records"]) == 3


def test_records_that_are_not_amqp_are_kept_as_bytes(decoder: Decoder) -> None:
    frame = deliver(decoder, encode_chunk([simple_entry(b"plain \x00 bytes")]))
    (record,) = frame.fields["chunk"]["records"]
    assert bytes(record["bytes"]) == b"plain \x00 bytes" and "message" not in record


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), entries=st.integers(0, 5), records=st.integers(0, 9))
def test_garbage_chunk_data_never_raises(decoder: Decoder, data: bytes, entries: int, records: int) -> None:
    header = _chunk_fields(encode_chunk([]))
    fields = header | {
        "num_entries": entries,
        "num_records": records,
        "chunk_data": data,
        "crc": zlib.crc32(data),
        "data_length": len(data),
    }
    wire = decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": fields})
    frame = decoder.expand(decoder.decode(wire))
    assert isinstance(frame.fields["chunk"]["records"], list)
    decoder.tree(frame)


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, 400), flip=st.integers(0, 4000))
def test_damaged_good_chunks_never_raise(decoder: Decoder, cut: int, flip: int) -> None:
    chunk = bytearray(good_chunk())
    chunk[flip % len(chunk)] ^= 0x5A
    wire = decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": _chunk_fields(bytes(chunk))})
    for data in (wire, wire[: max(8, len(wire) - cut)]):
        frame = decoder.expand(decoder.decode(data))
        decoder.tree(frame)
        frame.fields.get("chunk")


# ---------------------------------------------------------------- tracking chunks from the broker's files

CHUNKS = CAPTURES / "chunks"


def stored_chunk(decoder: Decoder, name: str) -> Frame:
    """A chunk cut from the broker's segment file (header, data, trailer), framed as a Deliver."""
    stored = (CHUNKS / name).read_bytes()
    fields = _chunk_fields(stored)
    data_length, trailer_length = fields["data_length"], fields["trailer_length"]
    fields["chunk_data"] = stored[48 : 48 + data_length]
    fields["trailer"] = stored[48 + data_length :]
    assert len(fields["trailer"]) == trailer_length
    return deliver_fields(decoder, fields)


def deliver_fields(decoder: Decoder, chunk: dict[str, Any]) -> Frame:
    wire = decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": chunk})
    return decoder.expand(decoder.decode(wire))


def test_tracking_delta_from_the_broker(decoder: Decoder) -> None:
    frame = stored_chunk(decoder, "tracking_delta.bin")
    assert frame.expert == []
    (record,) = frame.fields["chunk"]["records"]
    assert record["offset"] == 4
    assert record["tracking"] == [{"tracking_type": 1, "id": "streamdump-tracking-consumer", "value": 2}]


def test_tracking_snapshot_from_the_broker(decoder: Decoder) -> None:
    frame = stored_chunk(decoder, "tracking_snapshot.bin")
    assert frame.expert == []
    (record,) = frame.fields["chunk"]["records"]
    assert record["tracking"] == [
        {"tracking_type": 1, "id": "streamdump-tracking-consumer", "value": 5},
        {"tracking_type": 0, "id": "streamdump-tracker", "chunk_id": 7, "value": 8},
    ]


def test_trailer_of_a_named_producers_chunk(decoder: Decoder) -> None:
    frame = stored_chunk(decoder, "user_with_trailer.bin")
    chunk = frame.fields["chunk"]
    assert frame.expert == [] and len(chunk["records"]) == 3
    assert chunk["trailer_tracking"] == [{"tracking_type": 0, "id": "streamdump-tracker", "value": 3}]
    # As brokers send it: the frame ends after the data, and that is no error.
    chunk_only = _chunk_fields((CHUNKS / "user_with_trailer.bin").read_bytes())
    chunk_only["chunk_data"] = chunk_only["chunk_data"][: chunk_only["data_length"]]
    assert deliver_fields(decoder, chunk_only).expert == []


def test_many_sub_batches_cannot_add_up_to_a_huge_expansion(decoder: Decoder) -> None:
    """Each sub-batch is within its own cap, but a small frame of many must not add up to gigabytes."""
    big = bytes((16 << 20) - 4)  # with its size prefix, exactly 16 MiB per sub-batch
    body = compress("zstd frame", records_body([big]))
    entries = [sub_batch_entry([big], 4, body) for _ in range(8)]  # 128 MiB declared in ~10 KB
    frame = deliver(decoder, encode_chunk(entries))
    records = frame.fields["chunk"]["records"]
    assert len(records) == 4  # 64 MiB worth, then the budget says no
    assert [m for m in messages(frame) if "expanding this frame stops" in m] == [
        "entry 4: 1 records not decoded; expanding this frame stops at 64 MiB decompressed and "
        "100000 records (the expanded and records limits: streamdump --limit raises them)"
    ]


def test_records_declared_but_absent_allocate_nothing(decoder: Decoder) -> None:
    empty = sub_batch_entry([], 4, compress("zstd frame", b""))
    empty.record_count = 65535  # declared, with no bytes behind them
    frame = deliver(decoder, encode_chunk([empty] * 50))
    assert frame.fields["chunk"]["records"] == []
    assert any("declares 65535 records but its body ends inside record 0" in m for m in messages(frame))


def test_a_gzip_sub_batch_declaring_nothing_is_not_inflated_without_limit(decoder: Decoder) -> None:
    body = compress("zlib", bytes(1 << 20))
    frame = deliver(decoder, sub_batch_chunk(1, body, RECORDS, uncompressed=0))
    assert any("zlib output is longer than the declared 0 bytes" in m for m in messages(frame))


def test_the_detail_view_shows_what_expanding_found(decoder: Decoder) -> None:
    from rich.console import Console

    from streamdump.views.render import Renderer

    chunk = sub_batch_chunk(4, b"not zstd at all", RECORDS)
    wire = decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": _chunk_fields(chunk)})
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(Renderer(decoder).tree(decoder.decode(wire), 0.0))
    assert "zstd data does not start with a zstd frame magic" in console.export_text()


def test_publish_notes_name_the_message(decoder: Decoder) -> None:
    bad = sub_batch_entry(RECORDS, 4, b"not zstd")
    wire = decoder.encode(
        "Publish",
        "command",
        {
            "publisher_id": 1,
            "messages": [
                {"publishing_id": 7, "entry": simple_entry(RECORDS[0])},
                {"publishing_id": 8, "entry": bad},
            ],
        },
    )
    frame = decoder.expand(decoder.decode(wire))
    assert [m for m in messages(frame) if "zstd" in m] == [
        "message 8: sub-batch: zstd data does not start with a zstd frame magic"
    ]
    assert "entry_index" not in frame.fields["messages"][0]["records"][0]


def test_a_version_the_registry_lacks_is_still_expanded(decoder: Decoder) -> None:
    fields = {"subscription_id": 1, "committed_chunk_id": 0, "chunk": _chunk_fields(good_chunk())}
    wire = bytearray(decoder.encode("Deliver", "command", fields, version=2))
    wire[6:8] = (3).to_bytes(2, "big")  # a future Deliver v3, decoded with v2's layout
    frame = decoder.expand(decoder.decode(bytes(wire)))
    assert [m for m in messages(frame)] == [
        "Deliver version 3 is not in the registry (known: 1, 2); decoded as version 2"
    ]
    assert [r["offset"] for r in frame.fields["chunk"]["records"]] == [100, 101, 102, 103]
