"""In-order reassembly and framing: segment boundaries, retransmissions and gaps do not change the frames."""

from __future__ import annotations

from dataclasses import replace

from conftest import CAPTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdump.capture import Segment, read_segments
from streamdump.decoder import Decoder
from streamdump.pipeline import ReadStats, decode_segments
from streamdump.reassembly import TCP_SYN

SESSION = list(read_segments(CAPTURES / "session.pcap"))


def frames_of(segments: list[Segment], decoder: Decoder) -> tuple[list[tuple[str, bytes]], ReadStats]:
    stats = ReadStats()
    frames = [(str(f.src), f.data) for f in decode_segments(segments, decoder, [5552], stats)]
    return frames, stats


def resegment(segments: list[Segment], cuts: list[int]) -> list[Segment]:
    """Split every payload at the given relative positions (cycled), keeping sequence numbers right."""
    out: list[Segment] = []
    i = 0
    for seg in segments:
        if not seg.payload:
            out.append(seg)
            continue
        pos = 0
        while pos < len(seg.payload):
            step = max(1, cuts[i % len(cuts)])
            i += 1
            part = seg.payload[pos : pos + step]
            out.append(replace(seg, seq=(seg.seq + pos) % (1 << 32), payload=part))
            pos += len(part)
    return out


def test_original_segments(decoder: Decoder) -> None:
    frames, stats = frames_of(SESSION, decoder)
    assert len(frames) == 56 and stats.connections == 1 and stats.notices == []


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=8))
def test_any_segmentation_gives_the_same_frames(decoder: Decoder, cuts: list[int]) -> None:
    expected, _ = frames_of(SESSION, decoder)
    actual, stats = frames_of(resegment(SESSION, cuts), decoder)
    assert actual == expected and stats.notices == []


def test_retransmissions_are_dropped(decoder: Decoder) -> None:
    expected, _ = frames_of(SESSION, decoder)
    doubled = [s for seg in resegment(SESSION, [7, 30]) for s in (seg, seg)]
    actual, stats = frames_of(doubled, decoder)
    assert actual == expected and stats.notices == []


def test_overlapping_retransmission_with_new_bytes(decoder: Decoder) -> None:
    expected, _ = frames_of(SESSION, decoder)
    pieces = resegment(SESSION, [10])
    # Resend each payload piece together with the next one's bytes, as a sender does after a loss.
    merged: list[Segment] = []
    for a, b in zip(pieces, [*pieces[1:], None], strict=True):
        merged.append(a)
        if (
            b is not None
            and a.payload
            and b.payload
            and (a.sport, a.seq + len(a.payload)) == (b.sport, b.seq)
        ):
            merged.append(replace(a, payload=a.payload + b.payload))
    actual, _ = frames_of(merged, decoder)
    assert actual == expected


def test_gap_is_reported_and_decoding_resumes_at_a_frame_start(decoder: Decoder) -> None:
    expected, _ = frames_of(SESSION, decoder)
    data_segments = [i for i, s in enumerate(SESSION) if s.payload and s.sport == 5552]
    lost = data_segments[len(data_segments) // 2]
    actual, stats = frames_of(SESSION[:lost] + SESSION[lost + 1 :], decoder)
    # Here every frame has its own segment, so only the lost one is missing.
    assert len(actual) == len(expected) - 1
    next_from_server = next(s for s in SESSION[lost + 1 :] if s.sport == 5552)
    assert [n.number for n in stats.notices] == [next_from_server.number]
    assert "bytes missing" in stats.notices[0].message


def test_mid_stream_start_waits_for_a_frame_boundary(decoder: Decoder) -> None:
    expected, _ = frames_of(SESSION, decoder)
    no_handshake = [s for s in SESSION if not s.flags & TCP_SYN]
    start = next(i for i, s in enumerate(no_handshake) if len(s.payload) > 20)
    # Start the capture in the middle of a frame: the first piece must not be decoded.
    head = no_handshake[start]
    cut = replace(head, seq=head.seq + 3, payload=head.payload[3:])
    actual, _ = frames_of([cut, *no_handshake[start + 1 :]], decoder)
    assert actual and set(actual) <= set(expected)
    assert len(actual) == len(expected) - len(frames_of(no_handshake[: start + 1], decoder)[0])


def test_late_segment_into_a_skipped_hole_is_reported(decoder: Decoder) -> None:
    from_server = [i for i, s in enumerate(SESSION) if s.payload and s.sport == 5552]
    a, b = from_server[5], from_server[6]
    swapped = list(SESSION)
    swapped[a], swapped[b] = swapped[b], swapped[a]
    expected, _ = frames_of(SESSION, decoder)
    actual, stats = frames_of(swapped, decoder)
    # Reordering is not repaired yet (buffering out-of-order segments is the robust
    # reassembly's job), but the user is told which packet's bytes were skipped.
    assert len(actual) == len(expected) - 1
    messages = [n.message for n in stats.notices]
    assert len(messages) == 2 and "bytes missing" in messages[0]
    assert f"packet {SESSION[a].number} arrived out of order" in messages[1]


def test_port_reuse_reports_the_old_connection_unfinished_frame(decoder: Decoder) -> None:
    syn = next(s for s in SESSION if s.flags & TCP_SYN and s.dport == 5552)
    first = next(s for s in SESSION if s.payload and s.dport == 5552)
    cut = replace(first, payload=first.payload[:5])
    reuse = replace(syn, number=first.number + 1, seq=syn.seq + 100_000)
    _, stats = frames_of([syn, cut, reuse], decoder)
    assert stats.connections == 2
    assert [n.message.split(": ", 1)[1] for n in stats.notices] == [
        "connection ends inside a frame (5 bytes buffered)"
    ]
