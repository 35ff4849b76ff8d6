"""Deliver records behind a lost chunk header: found by chaining entry sizes onto the next frame
(or up to the next hole), numbered back from the next chunk only where the count between is
certain, and left alone, with a note, where two readings of the bytes both chain.

The streams are a server's Deliver frames made with the project's encoder, cut into segments
as the broker's are (each frame starts a segment, header and first entries together) or
regardless of frames, with chosen segments lost.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import dpkt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_strategies import encode_chunk
from streamdump.dissectors.rabbitmq_stream.osiris import ChunkHook, simple_entry, sub_batch_entry
from test_deliver_gaps import MSS, chunk_fields, chunks_stream, frame_starts, recovered, segments
from typer.testing import CliRunner

from streamdump.analysis.pipeline import ReadStats, decode_segments
from streamdump.cli import app
from streamdump.codecs import amqp
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.spec.hooks import Around, Cut
from streamdump.wire.capture import Segment
from streamdump.wire.frame import Frame


def first_segment_of(wire: bytes, frame: int) -> int:
    """The index of the segment that starts frame (segments cut frame by frame)."""
    starts = frame_starts(wire)
    index = 0
    for a, b in zip(starts, [*starts[1:], len(wire)], strict=True):
        if a == starts[frame]:
            return index
        index += (b - a + MSS - 1) // MSS
    raise AssertionError(frame)


def read(decoder: Decoder, segs: list[Segment]) -> list[Frame]:
    return list(decode_segments(segs, decoder, [5552], ReadStats()))


def orphans(frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if f.incomplete == "start lost in a gap"]


def test_the_entries_behind_a_lost_header_are_found_and_numbered_from_the_next_chunk(
    decoder: Decoder,
) -> None:
    # As the broker sends them: each Deliver starts a segment, its header with its first entries.
    sizes = [[100] * 256] * 3
    wire, records = chunks_stream(decoder, sizes)
    lost = first_segment_of(wire, 1)
    segs, holes = segments(wire, {lost}, per_frame=True)
    frames = read(decoder, segs)
    (orphan,) = orphans(frames)
    got = recovered(decoder, frames)
    present = {r.offset for r in records if not any(s < r.end and r.start < e for s, e in holes)}
    behind = [(index, offset) for index, offset in recovered(decoder, [orphan])]
    assert {index for index, _ in got} == present
    # The chunk's first 13 entries went with its header; the rest chain to the next frame.
    assert len(behind) == 256 - 13 and all(index == offset for index, offset in behind)
    assert not any("chains of entries fit" in e.message for f in frames for e in f.expert)


def test_behind_a_lost_header_and_a_later_gap_offsets_are_known_only_where_the_count_is(
    decoder: Decoder,
) -> None:
    # The header's segment and one in the chunk's middle are lost: the entries between the two
    # gaps chain up to the second hole, but how many entries it took is not known, so their
    # offsets are not either; those after it chain to the next frame and count back from it.
    sizes = [[100] * 256] * 3
    wire, records = chunks_stream(decoder, sizes)
    lost = first_segment_of(wire, 1)
    segs, holes = segments(wire, {lost, lost + 8}, per_frame=True)
    frames = read(decoder, segs)
    (orphan,) = orphans(frames)
    behind = recovered(decoder, [orphan])
    present = {r.offset for r in records if not any(s < r.end and r.start < e for s, e in holes)}
    assert {index for index, _ in behind} == {i for i in present if 256 <= i < 512}
    second_hole = holes[1][0]
    before = [(i, o) for i, o in behind if next(r for r in records if r.offset == i).end <= second_hole]
    after = [(i, o) for i, o in behind if (i, o) not in before]
    assert before and all(o is None for _, o in before)
    assert after and all(i == o for i, o in after)


def nested_record(offset: int) -> bytes:
    """A record whose data section holds, to its last byte, what looks like a whole entry of
    its own: [u32 size][an AMQP message]. Behind a gap its bytes read two ways."""
    inner = amqp.encode_message([("data", f"rec {offset:09d} inner".encode())])
    return amqp.encode_message([("data", len(inner).to_bytes(4, "big") + inner)])


def test_two_chains_that_both_fit_give_a_note_and_no_guess(decoder: Decoder) -> None:
    messages = [amqp.encode_message([("data", f"rec {i:09d} ".encode() + b"x" * 90)]) for i in range(60)]
    messages[30] = nested_record(30)
    wire = bytearray()
    first = 0
    for n in range(3):
        records = messages if n == 1 else [amqp.encode_message([("data", b"y" * 100)])] * 60
        chunk = encode_chunk([simple_entry(m) for m in records], chunk_id=first)
        wire += decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": chunk_fields(chunk)})
        first += 60
    wire = bytes(wire)
    segs, _ = segments(wire, {first_segment_of(wire, 1)}, per_frame=True)
    stats = ReadStats()
    frames = list(decode_segments(segs, decoder, [5552], stats))
    (orphan,) = orphans(frames)
    notes = [e.message for e in orphan.expert if "chains of entries fit" in e.message]
    assert len(notes) == 1 and "2 chains" in notes[0]
    # The bytes passed over say it too, where a reader sees it without the frame's tree.
    assert any(notes[0] in n.message for n in stats.notices if n.kind == "skipped")
    decoder.expand(orphan)
    got = orphan.fields["chunk"]["records"]
    # The two readings meet after the nested record: only the records from there on are given,
    # each with its offset (the count back from the next chunk is the same either way).
    assert [r["offset"] for r in got] == list(range(91, 120))
    bodies = [bytes(r["message"].sections[0].value) for r in got]
    assert all(body.startswith(f"rec {60 + i:09d}".encode()[:4]) for i, body in enumerate(bodies))
    assert f"only the {len(got)} records they all hold" in notes[0]


def test_a_record_that_reads_two_ways_is_not_guessed_even_at_the_start(decoder: Decoder) -> None:
    """Straight to the hook: a byte the gap left of an entry, then the nested record and one
    more. Both the record's own start and the entry inside it chain to the end: only the last
    record is given, and the note says why. A plain record in its place gives both."""
    hook = ChunkHook(decoder.protocol)
    last = amqp.encode_message([("data", b"z" * 50)])
    plain = amqp.encode_message([("data", b"p" * 40)])
    for first, found_there, noted in ((nested_record(1), 1, True), (plain, 2, False)):
        data = b"\x7f" + b"".join(len(m).to_bytes(4, "big") + m for m in (first, last))
        cut = Cut(b"", -1, -1)
        found, used = hook.tail(cut, {}, Around((data,), True))
        assert found == found_there and bool(cut.notes) is noted
        assert used == (4 + len(last) if noted else len(data) - 1)


def write_pcap(path: Path, segs: list[Segment]) -> None:
    """The segments as an Ethernet pcap (what the command line reads)."""
    with path.open("wb") as fh:
        writer = dpkt.pcap.Writer(fh)
        for seg in segs:
            tcp = dpkt.tcp.TCP(sport=seg.sport, dport=seg.dport, seq=seg.seq, ack=seg.ack, flags=seg.flags,
                               win=65535, data=seg.payload)  # fmt: skip
            ip = dpkt.ip.IP(
                src=socket.inet_aton(seg.src), dst=socket.inet_aton(seg.dst), p=dpkt.ip.IP_PROTO_TCP
            )
            ip.data = tcp
            ip.len = 20 + len(bytes(tcp))
            eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP)
            eth.data = ip
            writer.writepkt(bytes(eth), ts=1_800_000_000 + seg.ts)


def test_stats_json_and_messages_count_the_records_behind_a_lost_header(
    tmp_path: Path, decoder: Decoder
) -> None:
    sizes = [[100] * 120] * 3
    wire, records = chunks_stream(decoder, sizes)
    segs, holes = segments(wire, {first_segment_of(wire, 1)}, per_frame=True)
    present = {r.offset for r in records if not any(s < r.end and r.start < e for s, e in holes)}
    path = tmp_path / "lost-header.pcap"
    write_pcap(path, segs)
    runner = CliRunner()
    stats = json.loads(runner.invoke(app, ["stats", str(path), "--format", "json"]).stdout)
    (row,) = [r for r in stats["streams"] if r["direction"] == "deliver"]
    assert row["messages"] == len(present) == 240 + 120 - 13
    lines = runner.invoke(app, ["read", str(path), "--messages"]).stdout.splitlines()
    delivered = [line for line in lines if "deliver offset=" in line]
    assert len(delivered) == len(present)
    assert sum("deliver offset=? " in line for line in delivered) == 0  # all numbered from the next chunk
    out = runner.invoke(app, ["read", str(path), "-T", "jsonl"]).stdout
    frames = [json.loads(line) for line in out.splitlines() if line.strip()]
    count = sum(len(f["fields"]["chunk"].get("records") or []) for f in frames if f["command"] == "Deliver")
    assert count == len(present)
    rules = dissector_of(decoder.protocol).messages(decoder.protocol)
    assert sum(rules.volume(f).messages for f in read(decoder, segs) if f.command == "Deliver") == count


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.binary(max_size=3000),
    st.lists(st.binary(max_size=400), max_size=3),
    st.booleans(),
    st.integers(-1, 5000),
    st.one_of(st.none(), st.fixed_dictionaries({"chunk_id": st.integers(0, 2**64 - 1)})),
    st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {"chunk_id": st.integers(0, 2**64 - 1), "num_records": st.integers(0, 2**32 - 1)}
        ),
    ),
)
def test_garbage_behind_a_gap_never_raises(
    decoder: Decoder,
    last: bytes,
    earlier: list[bytes],
    anchored: bool,
    span: int,
    after: dict | None,
    before: dict | None,
) -> None:
    hook = ChunkHook(decoder.protocol)
    cut = Cut(b"", -1, -1)
    found, used = hook.tail(cut, {}, Around((*earlier, last), anchored, span, before, after, True))
    assert 0 <= used <= sum(map(len, (*earlier, last))) and found == cut.found
    decoder.expand(_orphan_frame(decoder, cut))


def _orphan_frame(decoder: Decoder, cut: Cut) -> Frame:
    frame = decoder.decode(b"\x00\x00\x00\x04\x00\x08\x00\x01", partial=True)
    frame.fields["chunk"] = {"chunk_data": cut}
    return frame


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=1, max_size=6000), st.integers(0, 40), st.sets(st.integers(3, 40), max_size=3))
def test_garbage_in_a_stream_after_a_lost_header_never_raises(
    decoder: Decoder, garbage: bytes, where: int, lost: set[int]
) -> None:
    """Deliver frames whose bytes after a lost segment are partly garbage: the reader and the
    views' expand take them without an exception."""
    wire, _ = chunks_stream(decoder, [[100] * 120] * 3)
    at = min(len(wire) - 1, first_segment_of(wire, 1) * MSS + where * 100)
    spoiled = wire[:at] + garbage + wire[at + len(garbage) :]
    segs, _ = segments(spoiled[: len(wire)], {first_segment_of(wire, 1), *lost}, per_frame=False)
    for frame in read(decoder, segs):
        decoder.expand(frame)


def test_a_sub_batch_behind_a_gap_must_hold_its_records(decoder: Decoder) -> None:
    """An uncompressed sub-batch header whose lengths agree is not enough: its body must be its
    count of [u32 size][record] exactly, each record an AMQP message where the stream's are."""
    hook = ChunkHook(decoder.protocol)
    last = amqp.encode_message([("data", b"z" * 50)])
    entry = len(last).to_bytes(4, "big") + last
    records = [amqp.encode_message([("data", b"r" * 20)])] * 2
    good = b"".join(len(r).to_bytes(4, "big") + r for r in records)
    bad = b"\x00\x00\x00\x05" + b"q" * (len(good) - 4)
    for body, found_there in ((good, 3), (bad, 1)):
        head = bytes((0x80,)) + (2).to_bytes(2, "big") + len(body).to_bytes(4, "big") * 2
        cut = Cut(b"", -1, -1)
        found, _ = hook.tail(cut, {}, Around((b"\x7f" + head + body + entry,), True))
        assert found == found_there


def test_a_whole_sub_batch_behind_a_lost_header_is_one_reading(decoder: Decoder) -> None:
    """Its records read as simple entries on their own too; that is the same reading, not a
    second one: all are given, numbered from the next chunk, with no note."""
    wire = bytearray()
    first = 0
    for n in range(3):
        messages = [
            amqp.encode_message([("data", f"rec {first + i:09d} ".encode() + b"x" * 90)]) for i in range(60)
        ]
        entries = [simple_entry(m) for m in messages]
        if n == 1:
            plain = b"".join(len(m).to_bytes(4, "big") + m for m in messages[30:])
            entries = [*entries[:30], sub_batch_entry(messages[30:], 0, plain)]
        chunk = encode_chunk(entries, chunk_id=first)
        wire += decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": chunk_fields(chunk)})
        first += 60
    wire = bytes(wire)
    segs, _ = segments(wire, {first_segment_of(wire, 1)}, per_frame=True)
    frames = read(decoder, segs)
    (orphan,) = orphans(frames)
    assert not any("chains of entries fit" in e.message for e in orphan.expert)
    got = recovered(decoder, [orphan])
    assert got == [(i, i) for i in range(60 + 13, 120)]
