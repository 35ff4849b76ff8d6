"""The bounds decoding keeps: their defaults, --limit, and the notes that name them when hit."""

from __future__ import annotations

import pytest
from spec_strategies import encode_chunk
from streamdump.dissectors.rabbitmq_stream.osiris import records_body, simple_entry, sub_batch_entry
from test_deliver_gaps import chunk_fields, segments
from typer.testing import CliRunner

from streamdump.analysis.pipeline import ReadStats, decode_segments
from streamdump.cli import app
from streamdump.codecs import amqp
from streamdump.codecs.compression import compress
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry
from streamdump.wire.capture import Segment
from streamdump.wire.limits import LimitError, Limits, described
from streamdump.wire.reassembly import TCP_ACK, TCP_SYN

PROTOCOL = default_registry().get("rabbitmq_stream")


def deliver(decoder: Decoder, entries: list) -> dict:
    wire = decoder.encode(
        "Deliver", "command", {"subscription_id": 1, "chunk": chunk_fields(encode_chunk(entries))}
    )
    return decoder.expand(decoder.decode(wire))


def notes(frame) -> list[str]:
    return [e.message for e in frame.expert]


def test_settings_parse_sizes_and_refuse_what_is_not_a_limit() -> None:
    limits = Limits().setting("expanded=256M").setting("records=5").setting("sub-batch=1g")
    assert (limits.expanded, limits.records, limits.sub_batch) == (256 << 20, 5, 1 << 30)
    for bad in ("nonsense=1", "records", "records=-3", "records=lots", "amqp_depth=100000"):
        with pytest.raises(LimitError):
            Limits().setting(bad)
    assert [name for name, _, _ in described()] == [
        "frame",
        "sub_batch",
        "expanded",
        "records",
        "amqp_depth",
        "reorder",
        "buffered",
    ]


def test_records_per_frame_is_the_limit_set() -> None:
    entries = [simple_entry(amqp.encode_message([("data", b"x")])) for _ in range(10)]
    default = deliver(Decoder(PROTOCOL), entries)
    assert len(default.fields["chunk"]["records"]) == 10
    few = deliver(Decoder(PROTOCOL, limits=Limits(records=3)), entries)
    assert len(few.fields["chunk"]["records"]) == 3
    assert any(
        "stops at 64 MiB decompressed and 3 records (the expanded and records limits" in n for n in notes(few)
    )


def test_sub_batch_bytes_is_the_limit_set() -> None:
    record = amqp.encode_message([("data", bytes(5000))])
    body = compress("zstd frame", records_body([record]))
    entry = sub_batch_entry([record], 4, body)
    assert len(deliver(Decoder(PROTOCOL), [entry]).fields["chunk"]["records"]) == 1
    small = deliver(Decoder(PROTOCOL, limits=Limits(sub_batch=4096)), [entry])
    assert small.fields["chunk"]["records"] == []
    assert any("the sub_batch limit (4 KiB); raise it with --limit sub_batch=N" in n for n in notes(small))


def test_amqp_depth_is_the_limit_set() -> None:
    # The wire floor keeps the AMQP codec's default beside its own, the codecs being above it.
    assert Limits().amqp_depth == amqp.MAX_DEPTH
    value = b"\x40"
    for _ in range(20):
        value = b"\xc0" + bytes((len(value) + 1, 1)) + value  # list8 of one element
    message = b"\x00\x53\x77" + value
    assert amqp.decode_message(message).error is None
    assert "amqp_depth limit" in (amqp.decode_message(message, depth=10).error or "")
    shallow = deliver(Decoder(PROTOCOL, limits=Limits(amqp_depth=10)), [simple_entry(message)])
    assert any("amqp_depth limit" in n for n in notes(shallow))
    deep = b"\x00\x53\x77" + b"\xc0\x02\x01" * 0 + value
    for _ in range(60):
        deep = deep[:3] + b"\xd0" + (len(deep) - 3 + 4).to_bytes(4, "big") + b"\x00\x00\x00\x01" + deep[3:]
    assert amqp.decode_message(deep).error is not None  # 80 levels: over the default 64
    assert amqp.decode_message(deep, depth=100).error is None


def test_frame_size_is_the_limit_set() -> None:
    decoder = Decoder(PROTOCOL, limits=Limits(frame=1000))
    wire = decoder.encode(
        "Deliver",
        "command",
        {
            "subscription_id": 1,
            "chunk": chunk_fields(encode_chunk([simple_entry(amqp.encode_message([("data", bytes(2000))]))])),
        },
    )
    segs, _ = segments(wire, set())
    stats = ReadStats()
    frames = list(decode_segments(segs, decoder, [5552], stats))
    assert not any(f.command == "Deliver" and f.incomplete is None for f in frames)
    assert any(
        "the frame limit (1000 bytes); raise it with --limit frame=N" in n.message for n in stats.notices
    )


def test_the_cli_takes_limits_and_refuses_bad_ones_in_one_line() -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["read", "--limit", "records=many", "x.pcap"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "--limit records: 'many' is not a positive number" in bad.output
    good = runner.invoke(app, ["read", "--limit", "records=7", "--limit", "reorder=1M", "-"], input=b"")
    assert "--limit" not in good.output


def test_bytes_held_across_connections_are_the_limit_set() -> None:
    """Connections each assembling a large frame: past the buffered limit, the one holding most
    hands its frame on incomplete and goes on, and a notice names the limit."""
    decoder = Decoder(PROTOCOL, limits=Limits(buffered=3 << 20))
    big = amqp.encode_message([("data", bytes(3 << 20))])
    frame = decoder.encode(
        "Deliver", "command", {"subscription_id": 1, "chunk": chunk_fields(encode_chunk([simple_entry(big)]))}
    )
    segments: list[Segment] = []
    for port in (40001, 40002, 40003):
        client = ("10.0.0.1", port)
        segments.append(
            Segment(len(segments) + 1, 0.0, client[0], "10.0.0.2", port, 5552, 100, 0, TCP_SYN, b"")
        )
        segments.append(
            Segment(
                len(segments) + 1, 0.0, "10.0.0.2", client[0], 5552, port, 5000, 101, TCP_SYN | TCP_ACK, b""
            )
        )
    # Each connection sends most of its frame, in turn, 1 MiB at a time.
    for at in range(0, len(frame) - 1000, 1 << 20):
        for port in (40001, 40002, 40003):
            part = frame[at : min(at + (1 << 20), len(frame) - 1000)]
            segments.append(
                Segment(
                    len(segments) + 1, 0.0, "10.0.0.2", "10.0.0.1", 5552, port, 5001 + at, 101, TCP_ACK, part
                )
            )
    stats = ReadStats()
    frames = list(decode_segments(segments, decoder, [5552], stats))
    let_go = [n.message for n in stats.notices if n.kind == "buffered"]
    assert let_go and all(
        "over the buffered limit (3 MiB); raise it with --limit buffered=N" in m for m in let_go
    )
    assert len(frames) == 3 and all(f.incomplete for f in frames)
    held = Decoder(PROTOCOL)  # the default limit holds all three to the end
    stats = ReadStats()
    assert len(list(decode_segments(segments, held, [5552], stats))) == 3
    assert not [n for n in stats.notices if n.kind == "buffered"]
