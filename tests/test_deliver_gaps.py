"""Deliver records on both sides of a gap: every record whose bytes survive is recovered, and
every offset given is the record's own.

A server's stream of Deliver frames (consecutive chunks of one subscription, made with the
project's encoder) is cut into MSS-sized segments, and some segments are dropped. Each
record's body names its offset, so a recovered record is known by its body: its offset must
be that one or unknown, never another, and no record recovered may have lost a byte.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from pathlib import Path

from conftest import CAPTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_strategies import encode_chunk
from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry, sub_batch_entry

from streamdump.analysis.pipeline import Reader, ReadStats, decode_segments, read_frames
from streamdump.codecs import amqp
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import dissector_of
from streamdump.spec.hooks import Cut
from streamdump.wire.capture import Segment
from streamdump.wire.frame import Frame
from streamdump.wire.limits import Limits
from streamdump.wire.reassembly import SEQ_MOD, TCP_ACK, TCP_SYN

MSS = 1448
CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 5552)
ISN = 5000


@dataclass(frozen=True)
class Record:
    offset: int
    start: int  # its entry's place in the server's byte stream, from the first data byte
    end: int
    # Its own [u32 size][record] inside an uncompressed sub-batch: these bytes alone look just
    # like a simple entry, so with them whole it may be recovered even when its entry was cut.
    inner: tuple[int, int] | None = None


def body(offset: int, size: int) -> bytes:
    head = f"rec {offset:09d} ".encode()
    return head + b"x" * max(0, size - len(head))


def chunks_stream(
    decoder: Decoder,
    sizes: list[list[int]],
    batched: set[int] = frozenset(),
    subscriptions: tuple[int, ...] = (1,),
) -> tuple[bytes, list[Record]]:
    """Deliver frames back to back, one chunk per list of record body sizes; chunks whose index
    is in batched hold one uncompressed sub-batch of their records after a simple entry. Chunks
    go to the subscriptions in turn, each numbering its offsets from 0."""
    wire = bytearray()
    records: list[Record] = []
    next_offset = dict.fromkeys(subscriptions, 0)
    for n, chunk_sizes in enumerate(sizes):
        sub = subscriptions[n % len(subscriptions)]
        first = next_offset[sub]
        messages = [amqp.encode_message([("data", body(first + i, s))]) for i, s in enumerate(chunk_sizes)]
        if n in batched and len(messages) > 1:
            plain = b"".join(len(m).to_bytes(4, "big") + m for m in messages[1:])
            entries = [simple_entry(messages[0]), sub_batch_entry(messages[1:], 0, plain)]
        else:
            entries = [simple_entry(m) for m in messages]
        chunk = encode_chunk(entries, chunk_id=first)
        frame = decoder.encode("Deliver", "command", {"subscription_id": sub, "chunk": chunk_fields(chunk)})
        at = len(wire) + len(frame) - (len(chunk) - 48)
        if len(subscriptions) == 1:
            for i, entry in enumerate(entries):
                size = entry.size
                if entry.kind == 0:
                    records.append(Record(first + i, at, at + size))
                else:  # a sub-batch's records stand or fall with its whole entry
                    inner = at + 11
                    for j in range(entry.record_count):
                        length = 4 + len(messages[1 + j])
                        records.append(Record(first + i + j, at, at + size, (inner, inner + length)))
                        inner += length
                at += size
        wire += frame
        next_offset[sub] = first + len(messages)
    return bytes(wire), records


def chunk_fields(chunk: bytes) -> dict:
    names = ("magic_version", "chunk_type", "num_entries", "num_records", "timestamp", "epoch", "chunk_id")
    names += ("crc", "data_length", "trailer_length", "bloom_size")
    values = struct.unpack(">BBHIqQQIIIB", chunk[:45])
    return dict(zip(names, values, strict=True)) | {"reserved": chunk[45:48], "chunk_data": chunk[48:]}


def frame_starts(wire: bytes) -> list[int]:
    out, at = [], 0
    while at < len(wire):
        out.append(at)
        at += 4 + int.from_bytes(wire[at : at + 4], "big")
    return out


def segments(
    wire: bytes, dropped: set[int], per_frame: bool = False
) -> tuple[list[Segment], list[tuple[int, int]]]:
    """The server's side of a connection (handshake seen) in MSS segments, without the dropped
    ones; the byte ranges lost. per_frame: each frame is cut on its own, as a sender that writes
    frame by frame has it, so segments end where frames end."""
    out = [
        Segment(1, 0.0, CLIENT[0], SERVER[0], CLIENT[1], SERVER[1], 100, 0, TCP_SYN, b"", 0),
        Segment(2, 0.0, SERVER[0], CLIENT[0], SERVER[1], CLIENT[1], ISN, 101, TCP_SYN | TCP_ACK, b"", 0),
    ]
    holes = []
    bounds = [*frame_starts(wire), len(wire)] if per_frame else [0, len(wire)]
    starts = [at for a, b in itertools.pairwise(bounds) for at in range(a, b, MSS)]
    ends = [*starts[1:], len(wire)]
    for n, (start, end) in enumerate(zip(starts, ends, strict=True)):
        part = wire[start:end]
        if n in dropped:
            holes.append((start, start + len(part)))
            continue
        seq = (ISN + 1 + start) % SEQ_MOD
        out.append(
            Segment(n + 3, n / 1000, SERVER[0], CLIENT[0], SERVER[1], CLIENT[1], seq, 101, TCP_ACK, part)
        )
    return out, holes


def recovered(decoder: Decoder, frames: list[Frame]) -> list[tuple[int, int | None]]:
    """(the offset its body names, the offset streamdump gave it) of every Deliver record."""
    out = []
    for frame in frames:
        if frame.command != "Deliver":
            continue
        decoder.expand(frame)
        for record in (frame.fields.get("chunk") or {}).get("records") or []:
            data = bytes(record["message"].sections[0].value)
            assert data.startswith(b"rec "), data[:20]
            out.append((int(data[4:13]), record.get("offset")))
    return out


def check(
    decoder: Decoder,
    sizes: list[list[int]],
    dropped: set[int],
    batched: set[int] = frozenset(),
    per_frame: bool = False,
) -> dict:
    wire, records = chunks_stream(decoder, sizes, batched)
    segs, holes = segments(wire, dropped, per_frame)
    stats = ReadStats()
    frames = list(decode_segments(segs, decoder, [5552], stats))
    got = recovered(decoder, frames)
    present = {r.offset for r in records if not any(s < r.end and r.start < e for s, e in holes)}
    maybe = {
        r.offset for r in records if r.inner and not any(s < r.inner[1] and r.inner[0] < e for s, e in holes)
    }
    found = [index for index, _ in got]
    assert len(found) == len(set(found)), "a record recovered twice"
    extra = set(found) - present - maybe
    assert not extra, f"recovered despite missing bytes: {sorted(extra)[:10]}"
    wrong = [(index, offset) for index, offset in got if offset is not None and offset != index]
    assert not wrong, f"records given another record's offset: {wrong[:10]}"
    assert present <= set(found), f"not recovered: {sorted(present - set(found))[:20]}"
    return {"unknown": sum(offset is None for _, offset in got), "recovered": len(found), "frames": frames}


def test_a_gap_inside_a_chunk_keeps_the_records_on_both_sides(decoder: Decoder) -> None:
    # One chunk of 120 records (about 13 KB): a segment from its middle is lost.
    result = check(decoder, [[100] * 120], {4})
    assert result["unknown"] == 0  # before the gap from the chunk id, after it back from the counts
    (frame,) = result["frames"]
    assert frame.incomplete and any("records recovered from the" in e.message for e in frame.expert)


def test_records_whose_length_prefix_looks_like_an_entry_are_not_taken_for_one(decoder: Decoder) -> None:
    # vbin32 bodies: 4 bytes into every record sits [u32 length][that many bytes], which ends
    # exactly where the next entry starts. Such a false entry is not an AMQP message.
    result = check(decoder, [[300] * 60, [300] * 60], {3, 16})
    assert result["unknown"] == 0


def test_two_gaps_in_a_chunk_leave_the_middle_records_unnumbered(decoder: Decoder) -> None:
    result = check(decoder, [[100] * 200], {3, 10})
    # The records between the gaps are recovered, but nothing says how many entries each gap took.
    assert 0 < result["unknown"] < result["recovered"]


def test_a_chunk_whose_start_was_lost_is_numbered_from_the_next_chunk(decoder: Decoder) -> None:
    # Chunk 1 starts in segment 10 (after chunk 0's 13 KB): lose the segments around its start.
    wire, _ = chunks_stream(decoder, [[100] * 120] * 3)
    result = check(decoder, [[100] * 120] * 3, {frame_starts(wire)[1] // MSS})
    assert result["unknown"] == 0
    orphans = [f for f in result["frames"] if f.incomplete == "start lost in a gap"]
    assert len(orphans) == 1 and type(orphans[0].fields["chunk"].get("chunk_data", Cut(b"", 0, 0))) is Cut


def test_without_one_subscription_a_lost_start_leaves_offsets_unknown(decoder: Decoder) -> None:
    # Two subscriptions take turns: the chunk after the lost start is another's, so it says
    # nothing of the lost chunk's offsets.
    wire, _ = chunks_stream(decoder, [[100] * 120] * 4, subscriptions=(1, 2))
    segs, _ = segments(wire, {frame_starts(wire)[2] // MSS})
    frames = list(decode_segments(segs, decoder, [5552], ReadStats()))
    orphans = [f for f in frames if f.incomplete == "start lost in a gap"]
    assert orphans
    for frame in orphans:
        decoder.expand(frame)
        records = frame.fields["chunk"]["records"]
        assert records and all("offset" not in r for r in records)


def test_a_sub_batch_behind_a_gap_counts_all_its_records(decoder: Decoder) -> None:
    result = check(decoder, [[100] * 60 + [90] * 40], {2}, batched={0})
    assert result["unknown"] == 0


def test_records_that_are_not_amqp_are_recovered_where_the_chunk_shows_them(decoder: Decoder) -> None:
    # Raw bytes, as a client that writes no AMQP sends them: believed because the records
    # before the gap are raw too.
    wire = bytearray()
    raw = [f"raw {i:09d} ".encode() + b"y" * 80 for i in range(120)]
    chunk = encode_chunk([simple_entry(r) for r in raw], chunk_id=0)
    wire += decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": chunk_fields(chunk)})
    segs, _ = segments(bytes(wire), {4})
    frames = list(decode_segments(segs, decoder, [5552], ReadStats()))
    (frame,) = frames
    decoder.expand(frame)
    offsets = [(int(bytes(r["bytes"])[4:13]), r.get("offset")) for r in frame.fields["chunk"]["records"]]
    assert all(a == b for a, b in offsets)
    assert len(offsets) > 100


def test_stats_count_the_records_a_cut_chunk_still_holds(decoder: Decoder) -> None:
    wire, _ = chunks_stream(decoder, [[100] * 120])
    segs, _ = segments(wire, {4})
    (frame,) = list(decode_segments(segs, decoder, [5552], ReadStats()))
    rules = dissector_of(decoder.protocol).messages(decoder.protocol)
    before = rules.volume(frame)
    count = len(recovered(decoder, [frame]))
    assert before.messages == count == rules.volume(frame).messages < 120


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(5, 600), min_size=1, max_size=150), min_size=2, max_size=5),
    st.sets(st.integers(2, 80), max_size=6),
    st.sets(st.integers(0, 4), max_size=2),
    st.booleans(),
)
def test_every_record_whose_bytes_survive_is_recovered(
    decoder: Decoder, sizes: list[list[int]], dropped: set[int], batched: set[int], per_frame: bool
) -> None:
    # The first two segments hold the first chunk's header: a direction's first Deliver is what
    # tells recovery that its lost starts are Deliver frames.
    check(decoder, sizes, dropped, batched, per_frame)


def test_a_chunk_that_lost_its_start_and_its_end_keeps_its_middle(decoder: Decoder) -> None:
    """Seen in a real recording: a chunk whose first and last segments were both lost, the next
    frame starting right where the second gap ends. Its middle records are recovered, their
    offsets unknown (nothing says how many entries the second gap took)."""
    wire, _ = chunks_stream(decoder, [[100] * 60] * 3)
    starts = frame_starts(wire)
    first = next(n for n, (s, _) in enumerate(segment_ranges(wire)) if s == starts[1])
    last = next(n for n, (_, e) in enumerate(segment_ranges(wire)) if e == starts[2])
    result = check(decoder, [[100] * 60] * 3, {first, last}, per_frame=True)
    assert result["unknown"] >= 30


def segment_ranges(wire: bytes) -> list[tuple[int, int]]:
    segs, _ = segments(wire, set(), per_frame=True)
    return [((s.seq - ISN - 1) % SEQ_MOD, (s.seq - ISN - 1) % SEQ_MOD + len(s.payload)) for s in segs[2:]]


def test_a_real_capture_reads_as_before(decoder: Decoder) -> None:
    frames = list(read_frames(CAPTURES / "bulk.pcap", decoder, None, ReadStats()))
    assert all(f.incomplete is None for f in frames)


def test_a_view_expanding_each_frame_as_it_comes_recovers_the_same(decoder: Decoder) -> None:
    """What recovery remembers of a frame is not what a view leaves of it after expanding it."""
    sizes = [
        [5, 5, 78],
        [600, 5, 489, 430, 600, 600],
        [600, 5, 600],
        [227] + [5] * 9 + [256, 280] + [600] * 3 + [28],
    ]
    sizes.append([15])
    wire, _ = chunks_stream(decoder, sizes)
    segs, _ = segments(wire, {2, 4})
    later = recovered(decoder, list(decode_segments(segs, decoder, [5552], ReadStats())))
    at_once = []
    for frame in decode_segments(segs, decoder, [5552], ReadStats()):
        at_once += recovered(decoder, [frame])
    assert at_once == later and (27, 27) in later


def test_what_recovery_remembers_of_a_cut_chunk_outlives_its_expansion(decoder: Decoder) -> None:
    """A view expands each frame before the next one is read, which replaces a cut chunk's data
    by its records; recovery behind a later gap still needs what the data said (how many of
    the chunk's records were seen), to bound the offsets of records whose chunk start was lost."""
    wire, _ = chunks_stream(decoder, [[100] * 120, [100] * 120, [100] * 120])
    segs, _ = segments(wire, {4})
    # A small reorder buffer: the loss is declared at once, not when the capture ends.
    hasty = Decoder(decoder.protocol, limits=Limits(reorder=2 * MSS))
    reader = Reader(hasty, [5552], ReadStats())
    cut = 0
    for seg in segs:
        for frame in reader.feed(seg):
            hasty.expand(frame)
            assert "chunk_data" not in frame.fields["chunk"]
            if frame.incomplete is not None:
                cut += 1
                (conn,) = reader.connections.values()
                (remembered,) = [holder for _, holder in conn.to_client.beside.values()]
                assert type(remembered["chunk_data"]) is Cut
    assert cut == 1


def test_messages_say_what_a_gap_left_unknown(decoder: Decoder) -> None:
    """A chunk whose header was lost, among chunks of two subscriptions: its records' lines say
    neither chunk nor offset, rather than None or a guess."""
    wire, _ = chunks_stream(decoder, [[100] * 120] * 4, subscriptions=(1, 2))
    segs, _ = segments(wire, {frame_starts(wire)[2] // MSS})
    rules = dissector_of(decoder.protocol).messages(decoder.protocol)
    lines = []
    for frame in decode_segments(segs, decoder, [5552], ReadStats()):
        decoder.expand(frame)
        if frame.incomplete == "start lost in a gap":
            lines += [row.where for row in rules.rows(frame)]
    assert lines and all(where == "deliver offset=? chunk=?" for where in lines)


def _stats_of(tmp: Path, name: str, wire: bytes, from_client: bool) -> tuple[int, int]:
    """Messages and bytes stats count for a frame the connection's end cut."""
    import json

    import dpkt
    from pcap_writer import tcp_pcap
    from typer.testing import CliRunner

    from streamdump.cli import app

    fin = dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK
    path = tmp / f"{name}.pcap"
    path.write_bytes(tcp_pcap([(from_client, wire)], ending=[(from_client, fin), (not from_client, fin)]))
    result = CliRunner().invoke(app, ["stats", str(path), "--format", "json"])
    (row,) = json.loads(result.stdout)["streams"]
    return row["messages"], row["bytes"]


def test_stats_count_cut_publish_and_deliver_alike(tmp_path: Path, decoder: Decoder) -> None:
    """A Publish and a Deliver cut after the same whole entries count the same messages and
    bytes (before, a Deliver cut in its chunk header counted what the header declared, and one
    cut in its data the bytes of its last, partial, entry too)."""
    record = b"\x00\x53\x75\xa0\x01x"  # an entry of 10 bytes
    entries = [simple_entry(record)] * 5
    fields = chunk_fields(encode_chunk(entries))
    deliver = decoder.encode("Deliver", "command", {"subscription_id": 1, "chunk": fields})
    messages = [{"publishing_id": n, "entry": e} for n, e in enumerate(entries)]
    publish = decoder.encode("Publish", "command", {"publisher_id": 1, "messages": messages})
    deliver_head, publish_head = len(deliver) - 50, len(publish) - 5 * 18  # before the first entry
    for whole in range(5):
        got = _stats_of(tmp_path, f"d{whole}", deliver[: deliver_head + whole * 10 + 3], False)
        sent = _stats_of(tmp_path, f"p{whole}", publish[: publish_head + whole * 18 + 3], True)
        assert got == sent == (whole, whole * 10)
    assert _stats_of(tmp_path, "header", deliver[:30], False) == (0, 0)
