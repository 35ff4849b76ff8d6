"""The conversation tracker: links and diagnoses on the real captures, and on frames built to break rules.

The capture tests pin every diagnosis of every committed capture, and check the links
against pairings computed here independently (by correlation id and publishing id, with
the capture's own timestamps). The built-frame tests cover what a real broker would not
do on request: reused correlation ids, silence, frames over frame_max, lost grants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import CAPTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_strategies import struct_strategy
from streamdump.dissectors.rabbitmq_stream.credit import CREDIT_STALL_S

from streamdump.analysis.endings import HEARTBEAT_SLACK
from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.analysis.tracker import Tracker
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry
from streamdump.wire.frame import Endpoint, Frame

CLEAN = [
    "session.pcap",
    "session.pcapng",
    "session_any.pcap",
    "session_sll.pcap",
    "offset_specs.pcap",
    "bulk.pcap",
    "tracking.pcap",
    "v2_frames.pcap",  # RabbitMQ 4.0: version-2 frames, StreamStats, an orderly Close
]

# RabbitMQ 4.0 recordings of real rstream applications: rstream ends every connection without
# Close (the broker logs each as an unexpected close), and nothing else is wrong. Pinned by kind.
RSTREAM_ONLY_CLOSES = {"filtering_v4.pcap": 6, "super_stream_v4.pcap": 9}

# Every diagnosis of every capture that has one: (severity, kind, packet, message).
EXPECTED = {
    # The client sends every kind of record on purpose, raw bytes among AMQP messages too.
    "compression.pcap": [
        (
            "note",
            "mixed_formats",
            32,
            "publisher 1 (stream 'streamdump-compression'): the message with publishing id 5 (packet 32) is "
            "not AMQP 1.0, while its first message (packet 24) was AMQP 1.0",
        )
    ],
    "auth_failure.pcap": [
        (
            "error",
            "auth_failure",
            11,
            "authentication failed: the broker answered SaslAuthenticate (PLAIN, user 'guest', packet 10) "
            "with Authentication failure (0x08)",
        ),
        (
            "note",
            "abrupt_close",
            12,
            "the broker closed the connection (FIN at packet 12) without Close, 0.1 ms after refusing "
            "SaslAuthenticate at packet 11",
        ),
    ],
    "wrong_vhost.pcap": [
        (
            "error",
            "setup_refused",
            17,
            "Open for virtual host 'streamdump-no-such-vhost' (packet 15) failed: "
            "Virtual host access failure (0x0c)",
        ),
        (
            "note",
            "abrupt_close",
            18,
            "the broker closed the connection (FIN at packet 18) without Close, 0.2 ms after refusing "
            "Open at packet 17",
        ),
    ],
    "unknown_command.pcap": [
        (
            "error",
            "server_close",
            19,
            "the broker closed the connection: Unknown frame (0x0d) 'unknown frame'; the client's last frame "
            "before it was ExchangeCommandVersions (key 0x001b, version 1, 34 bytes, packet 18): the broker "
            "does not know this command key or version",
        ),
        (
            "warn",
            "unanswered",
            18,
            "ExchangeCommandVersions (packet 18) with correlation id 5 was never answered; the broker closed "
            "the connection at packet 19",
        ),
    ],
    "unsupported_version.pcap": [
        (
            "error",
            "server_close",
            19,
            "the broker closed the connection: Unknown frame (0x0d) 'unknown frame'; the client's last frame "
            "before it was Metadata (key 0x000f, version 2, 36 bytes, packet 18): the broker does not know "
            "this command key or version",
        ),
        (
            "warn",
            "unanswered",
            18,
            "Metadata (packet 18) with correlation id 5 was never answered; the broker closed the connection "
            "at packet 19",
        ),
    ],
    "deleted_stream.pcap": [
        (
            "note",
            "announcement",
            30,
            "the broker announced stream 'streamdump-deleted': Stream not available (0x06)",
        ),
        (
            "warn",
            "refused_items",
            33,
            "2 messages of publisher 1 (stream 'streamdump-deleted') refused: Publisher does not exist "
            "(0x12); at packet 30 the broker had announced stream 'streamdump-deleted': Stream not "
            "available (0x06)",
        ),
        (
            "warn",
            "error_response",
            36,
            "DeclarePublisher for stream 'streamdump-deleted' (packet 35) failed: Stream does not exist "
            "(0x02); at packet 30 the broker had announced stream 'streamdump-deleted': Stream not "
            "available (0x06)",
        ),
    ],
    "subscribe_missing_stream.pcap": [
        (
            "warn",
            "error_response",
            21,
            "Subscribe for stream 'streamdump-missing' (packet 19) failed: Stream does not exist (0x02)",
        )
    ],
    "frame_too_large.pcap": [
        (
            "error",
            "frame_max",
            25,
            "Publish frame of 100033 bytes exceeds the frame_max of 65536 bytes negotiated at packet 14",
        )
    ],
    "heartbeat_timeout.pcap": [
        (
            "warn",
            "heartbeat",
            15,
            "no frame from the client for {quiet} s until the connection's last frame (packet 23), while the "
            "negotiated heartbeat is 1 s",
        ),
        (
            "warn",
            "abrupt_close",
            25,
            "the broker closed the connection (FIN at packet 25) without Close: the client had sent no frame "
            "for 3.002 s (since its Open at packet 15), while the negotiated heartbeat is 1 s",
        ),
    ],
    # A real rstream application that dies in its message handler: its five connections end within
    # 38 ms, the consumer's with a reset (the broker's deliveries were still unread). rstream ends its
    # connections without Close even when it does not crash, as the first one shows.
    "client_crash.pcap": [
        (
            "warn",
            "abrupt_close",
            23,
            "the client closed the connection (FIN at packet 23) without Close, 200.8 ms after the broker's "
            "Create at packet 21",
        ),
        (
            "warn",
            "abrupt_close",
            66,
            "the client closed the connection (FIN at packet 66) without Close, 218.8 ms after the broker's "
            "Metadata at packet 45",
        ),
        (
            "warn",
            "abrupt_close",
            188,
            "the client closed the connection (FIN at packet 188) without Close, 18.8 ms after the broker's "
            "PublishConfirm at packet 131",
        ),
        (
            "warn",
            "abrupt_close",
            189,
            "the client closed the connection (FIN at packet 189) without Close, 14.8 ms after the broker's "
            "Metadata at packet 152",
        ),
        (
            "warn",
            "abrupt_close",
            187,
            "the client reset the connection (RST at packet 187) without Close, 1.6 ms after the broker's "
            "Deliver at packet 186 (1 record); a client that crashes while handling a delivery ends its "
            "connection this way",
        ),
    ],
    "reset_mid_frame.pcap": [
        (
            "note",
            "unconfirmed",
            24,
            "1 message of publisher 1 (stream 'streamdump-reset') never confirmed (id 1; first sent in "
            "packet 24); the client reset the connection at packet 24, 0.000 s after the last was sent",
        ),
        (
            "warn",
            "cut_frame",
            24,
            "the client reset the connection (RST at packet 24) in the middle of a frame from the client: "
            "1016 bytes of it had arrived (incomplete Publish at packet 24)",
        ),
    ],
    "credit_exhausted.pcap": [
        (
            "warn",
            "credit_exhausted",
            45,
            "subscription 1 (stream 'streamdump-credit') ran out of credit at packet 45; no delivery "
            "could follow for {stall} s until the client granted more at packet 47; deliveries resumed "
            "at packet 48",
        ),
        (
            "warn",
            "error_response",
            54,
            "Credit for subscription 9 (packet 53) refused: Subscription ID does not exist (0x04)",
        ),
    ],
}


def track(path: Path, decoder: Decoder) -> tuple[list[Frame], Tracker]:
    stats = ReadStats()
    tracker = Tracker(decoder.protocol)
    frames = []
    for frame in read_frames(path, decoder, [5552], stats):
        tracker.feed(frame)
        frames.append(frame)
    tracker.finish(stats.lossy, stats.lives)
    return frames, tracker


def test_a_client_host_ending_its_connections_at_once(decoder: Decoder) -> None:
    """The crashing application's four connections that were open when it died: one finding for
    them all, made from every connection's end (the first, closed 200 ms before, is not of them)."""
    from streamdump.analysis.conversations import Conversations

    stats = ReadStats()
    conversations = Conversations([decoder.protocol])
    for frame in read_frames(CAPTURES / "client_crash.pcap", decoder, [5552], stats):
        conversations.feed(frame)
    conversations.finish(stats.lossy, stats.lives)
    (together,) = [d for d in conversations.diagnoses if d.kind == "ended_together"]
    assert (together.severity, together.number, together.conn) == ("note", 66, 2)
    assert together.message == (
        "the client host 127.0.0.1 ended 4 connections within 38.1 ms without the protocol's close: "
        "2 (FIN at packet 66), 5 (RST at packet 187), 3 (FIN at packet 188), 4 (FIN at packet 189); a "
        "client process ends all its connections at once when it exits or crashes"
    )


def test_every_capture_is_pinned() -> None:
    names = {p.name for p in CAPTURES.iterdir() if p.suffix in (".pcap", ".pcapng")}
    assert names == set(CLEAN) | set(EXPECTED) | set(RSTREAM_ONLY_CLOSES)


@pytest.mark.parametrize("name", sorted(RSTREAM_ONLY_CLOSES))
def test_rstream_applications_on_rabbitmq_4_only_leave_without_close(name: str, decoder: Decoder) -> None:
    _, tracker = track(CAPTURES / name, decoder)
    kinds = [(d.severity, d.kind) for d in tracker.diagnoses]
    assert kinds == [("warn", "abrupt_close")] * RSTREAM_ONLY_CLOSES[name]
    assert all("the client closed the connection" in d.message for d in tracker.diagnoses)


@pytest.mark.parametrize("name", CLEAN)
def test_clean_captures_have_no_diagnoses(name: str, decoder: Decoder) -> None:
    _, tracker = track(CAPTURES / name, decoder)
    assert tracker.diagnoses == []
    assert tracker.summary() == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_refusals_get_exactly_their_diagnoses(name: str, decoder: Decoder) -> None:
    frames, tracker = track(CAPTURES / name, decoder)
    by_number = {f.number: f for f in frames}
    expected = []
    for severity, kind, number, message in EXPECTED[name]:
        # Durations come from the capture's timestamps, computed here on their own.
        if "{quiet}" in message:
            client = [f for f in frames if f.from_client]
            message = message.format(quiet=f"{frames[-1].ts - client[-1].ts:.3f}")
        if "{stall}" in message:
            message = message.format(stall=f"{by_number[47].ts - by_number[45].ts:.3f}")
        expected.append((severity, kind, number, message))
    assert [(d.severity, d.kind, d.number, d.message) for d in tracker.diagnoses] == expected
    # What a frame reveals is on the frame too (the line and JSON views show it).
    for d in tracker.diagnoses:
        if d.kind in ("auth_failure", "setup_refused", "error_response", "server_close", "frame_max"):
            assert d.message in [e.message for e in by_number[d.number].expert]


def test_summary_counts_rows(decoder: Decoder) -> None:
    _, tracker = track(CAPTURES / "unknown_command.pcap", decoder)
    assert tracker.summary() == [
        {
            "severity": "error",
            "group": "protocol",
            "summary": "the broker closed the connection: Unknown frame (0x0d)",
            "count": 1,
            "first_packet": 19,
        },
        {
            "severity": "warn",
            "group": "sequence",
            "summary": "ExchangeCommandVersions request never answered",
            "count": 1,
            "first_packet": 18,
        },
    ]


def _independent_pairs(frames: list[Frame]) -> dict[int, tuple[Frame, Frame]]:
    """Requests and responses paired by (asker, correlation id) in capture order, without the tracker."""
    waiting: dict[tuple[bool, int], Frame] = {}
    pairs = {}
    for frame in frames:
        corr = frame.fields.get("correlation_id")
        if corr is None:
            continue
        if frame.kind == "request":
            waiting[bool(frame.from_client), corr] = frame
        else:
            request = waiting.pop((not frame.from_client, corr))
            pairs[id(frame)] = (request, frame)
    assert waiting == {}
    return pairs


@pytest.mark.parametrize("name", CLEAN)
def test_every_response_links_to_its_request(name: str, decoder: Decoder) -> None:
    frames, _ = track(CAPTURES / name, decoder)
    pairs = _independent_pairs(frames)
    assert pairs
    for request, response in pairs.values():
        assert response.links["request_in"] == request.number
        assert response.links["response_time"] == pytest.approx(response.ts - request.ts, abs=1e-6)
        assert request.links["response_in"] == response.number
    requests = [f for f in frames if f.kind == "request" and "correlation_id" in f.fields]
    assert len(requests) == len(pairs)


@pytest.mark.parametrize("name", ["session.pcap", "bulk.pcap", "compression.pcap"])
def test_confirms_link_to_their_publishes(name: str, decoder: Decoder) -> None:
    frames, _ = track(CAPTURES / name, decoder)
    published = {}
    for frame in frames:
        if frame.command == "Publish":
            for message in frame.fields["messages"]:
                published[message["publishing_id"]] = frame
    confirmed = 0
    for frame in frames:
        if frame.command == "PublishConfirm":
            ids = frame.fields["publishing_ids"]
            assert frame.links["publish_in"] == [published[i].number for i in ids]
            assert frame.links["confirm_time"] == pytest.approx(
                [frame.ts - published[i].ts for i in ids], abs=1e-6
            )
            confirmed += len(ids)
    assert confirmed == len(published)


@pytest.mark.parametrize("name", CLEAN)
def test_publish_and_deliver_know_their_stream(name: str, decoder: Decoder) -> None:
    frames, _ = track(CAPTURES / name, decoder)
    opened = {}
    for frame in frames:
        if frame.command in ("Subscribe", "DeclarePublisher") and frame.kind == "request":
            opened[frame.command, frame.fields.get("subscription_id", frame.fields.get("publisher_id"))] = (
                frame
            )
        elif frame.command in ("Deliver", "Publish", "PublishConfirm"):
            key = (
                ("Subscribe", frame.fields["subscription_id"])
                if frame.command == "Deliver"
                else (
                    "DeclarePublisher",
                    frame.fields["publisher_id"],
                )
            )
            assert frame.links["stream"] == opened[key].fields["stream"]
            assert frame.links["opened_in"] == opened[key].number


def test_tune_and_peer_properties_per_connection(decoder: Decoder) -> None:
    _, tracker = track(CAPTURES / "session.pcap", decoder)
    (conn,) = tracker.connections.values()
    assert (conn.facts["frame_max"], conn.facts["heartbeat_s"]) == (1048576, 60)
    assert conn.client_side.properties["product"] == "RabbitMQ Stream"
    assert conn.server_side.properties["version"] == "3.10.8"
    assert conn.facts["user"] == "guest"


def test_credit_left_counts_down(decoder: Decoder) -> None:
    frames, _ = track(CAPTURES / "credit_exhausted.pcap", decoder)
    left = [f.links["credit_left"] for f in frames if f.command == "Deliver"]
    assert left == [1, 0, 2, 1, 0]


# ---------------------------------------------------------------------- built frames


class Wire:
    """Frames of one made-up connection, numbered and timed as a capture would give them."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.tracker = Tracker(decoder.protocol)
        self.number = 0
        self.client, self.server = Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 5552)

    def send(self, ts: float, command: str, kind: str, from_client: bool = True, **fields: Any) -> Frame:
        self.number += 1
        frame = self.decoder.decode(self.decoder.encode(command, kind, fields))
        frame.number, frame.ts, frame.conn, frame.from_client = self.number, ts, 1, from_client
        frame.src, frame.dst = (self.client, self.server) if from_client else (self.server, self.client)
        self.tracker.feed(frame)
        return frame

    def kinds(self) -> list[str]:
        self.tracker.finish()
        return [d.kind for d in self.tracker.diagnoses]

    def tune(self, frame_max: int = 1_048_576, heartbeat: int = 60) -> None:
        self.send(0.0, "Tune", "command", False, frame_max=frame_max, heartbeat=heartbeat)
        self.send(0.001, "Tune", "command", True, frame_max=frame_max, heartbeat=heartbeat)


def test_duplicate_correlation_id_in_flight(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.send(1.0, "Metadata", "request", correlation_id=7, streams=["a"])
    second = wire.send(1.1, "Metadata", "request", correlation_id=7, streams=["b"])
    assert "reuses correlation id 7" in second.expert[-1].message
    assert wire.kinds() == ["duplicate_correlation", "unanswered"]


def test_correlation_ids_are_per_asker(decoder: Decoder) -> None:
    # The broker's Close uses correlation id 1, like the client's first request: no clash.
    wire = Wire(decoder)
    wire.send(1.0, "PeerProperties", "request", correlation_id=1, properties={})
    wire.send(1.1, "Close", "request", False, correlation_id=1, closing_code=1, closing_reason="bye")
    reply = wire.send(1.2, "Close", "response", True, correlation_id=1, response_code=1)
    assert reply.links == {"request_in": 2, "response_time": pytest.approx(0.1)}
    assert wire.kinds() == ["server_close", "unanswered"]
    assert wire.tracker.diagnoses[0].severity == "note"  # closing with OK is the broker's right


def test_response_to_another_command_is_not_paired(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.send(1.0, "Delete", "request", correlation_id=3, stream="s")
    wrong = wire.send(1.1, "Create", "response", False, correlation_id=3, response_code=1)
    assert "answers a Delete request (packet 1)" in wrong.expert[-1].message
    assert wire.kinds() == ["mismatched_response", "unanswered", "orphan_response"]


def test_orphan_response_is_a_note_before_the_first_request(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.send(1.0, "Delete", "response", False, correlation_id=3, response_code=1)
    wire.send(1.1, "Delete", "request", correlation_id=4, stream="s")
    wire.send(1.2, "Delete", "response", False, correlation_id=4, response_code=1)
    wire.send(1.3, "Delete", "response", False, correlation_id=9, response_code=1)
    assert [(d.kind, d.severity, d.number) for d in (wire.kinds() and wire.tracker.diagnoses)] == [
        ("orphan_response", "note", 1),
        ("orphan_response", "warn", 4),
    ]


def test_response_before_its_request_still_pairs(decoder: Decoder) -> None:
    # A gap in one direction holds its frames back: the answer can come out first.
    wire = Wire(decoder)
    response = wire.send(2.0, "Delete", "response", False, correlation_id=4, response_code=1)
    request = wire.send(2.5, "Delete", "request", correlation_id=4, stream="s")
    assert response.links == {"request_in": request.number}
    assert request.links == {"response_in": response.number}
    assert wire.kinds() == []


def test_frame_over_the_negotiated_frame_max(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.tune(frame_max=64)
    small = wire.send(1.0, "Metadata", "request", correlation_id=1, streams=["x" * 10])
    big = wire.send(1.1, "Metadata", "request", correlation_id=2, streams=["x" * 100])
    assert small.expert == []
    assert "Metadata frame of 118 bytes exceeds the frame_max of 64 bytes" in big.expert[-1].message
    assert big.expert[-1].group == "protocol"


def test_heartbeat_silence_between_frames(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.tune(heartbeat=2)
    wire.send(1.0, "Heartbeat", "command")
    wire.send(1.0 + 2 * HEARTBEAT_SLACK - 0.01, "Heartbeat", "command")  # within the slack
    wire.send(10.0, "Heartbeat", "command")
    assert wire.kinds() == ["heartbeat"]
    assert "no frame from the client for 6.010 s (packets 4 to 5)" in wire.tracker.diagnoses[0].message


def test_no_heartbeat_check_when_disabled(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.tune(heartbeat=0)
    wire.send(1.0, "Heartbeat", "command")
    wire.send(100.0, "Heartbeat", "command")
    assert wire.kinds() == []


def _subscribe(wire: Wire, credit: int) -> None:
    wire.send(
        0.1,
        "Subscribe",
        "request",
        correlation_id=1,
        subscription_id=3,
        stream="s",
        offset_type=1,
        credit=credit,
    )
    wire.send(0.2, "Subscribe", "response", False, correlation_id=1, response_code=1)


def _deliver(wire: Wire, ts: float) -> Frame:
    chunk = {
        "magic_version": 0x50,
        "chunk_type": 0,
        "num_entries": 0,
        "num_records": 0,
        "timestamp": 0,
        "epoch": 1,
        "chunk_id": 0,
        "crc": 0,
        "data_length": 0,
        "trailer_length": 0,
        "bloom_size": 0,
        "reserved": b"\0\0\0",
        "chunk_data": b"",
    }
    return wire.send(ts, "Deliver", "command", False, subscription_id=3, chunk=chunk)


def test_credit_never_granted_again(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _subscribe(wire, credit=1)
    _deliver(wire, 1.0)
    wire.send(1.0 + CREDIT_STALL_S + 0.5, "Heartbeat", "command")
    assert wire.kinds() == ["credit_exhausted"]
    assert (
        "was never granted more (1.500 s until the connection's last frame)"
        in wire.tracker.diagnoses[0].message
    )


def test_short_zero_credit_is_normal(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _subscribe(wire, credit=1)
    _deliver(wire, 1.0)
    wire.send(1.0 + CREDIT_STALL_S / 2, "Credit", "command", subscription_id=3, credit=1)
    _deliver(wire, 1.6)
    assert wire.kinds() == []


def test_deliveries_beyond_credit(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _subscribe(wire, credit=1)
    _deliver(wire, 1.0)
    _deliver(wire, 1.1)
    _deliver(wire, 1.2)
    assert wire.kinds() == ["beyond_credit"]
    assert wire.tracker.diagnoses[0].message.startswith(
        "2 Deliver frames to subscription 3 while it had no credit"
    )


def test_unconfirmed_publishes_are_counted_by_publisher(decoder: Decoder) -> None:
    from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry

    wire = Wire(decoder)
    wire.send(
        0.1,
        "DeclarePublisher",
        "request",
        correlation_id=1,
        publisher_id=2,
        publisher_reference="",
        stream="s",
    )
    messages = [{"publishing_id": i, "entry": simple_entry(b"x")} for i in range(5)]
    wire.send(1.0, "Publish", "command", publisher_id=2, messages=messages)
    confirm = wire.send(1.2, "PublishConfirm", "command", False, publisher_id=2, publishing_ids=[0, 1])
    assert confirm.links["confirm_time"] == [pytest.approx(0.2), pytest.approx(0.2)]
    wire.send(5.0, "Heartbeat", "command")
    assert wire.kinds() == ["unanswered", "unconfirmed"]
    assert wire.tracker.diagnoses[1].message == (
        "3 messages of publisher 2 (stream 's') never confirmed (ids 2..4; first sent in packet 2)"
    )


def test_version_outside_what_the_peer_announced(decoder: Decoder) -> None:
    wire = Wire(decoder)
    versions = [{"command_key": 0x0F, "min_version": 1, "max_version": 1}]
    wire.send(0.1, "ExchangeCommandVersions", "request", correlation_id=1, commands=versions)
    wire.send(
        0.2,
        "ExchangeCommandVersions",
        "response",
        False,
        correlation_id=1,
        response_code=1,
        commands=versions,
    )
    frame = wire.decoder.decode(
        wire.decoder.encode("Metadata", "request", {"correlation_id": 2, "streams": []})
    )
    data = bytearray(frame.data)
    data[6:8] = (2).to_bytes(2, "big")  # the same request, sent as version 2
    late = wire.decoder.decode(bytes(data))
    late.number, late.ts, late.conn, late.from_client = 9, 0.3, 1, True
    wire.tracker.feed(late)
    assert "Metadata version 2 is outside the versions the peer announced (1..1)" in late.expert[-1].message


def test_plain_user_is_shown_and_the_password_never(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.send(
        0.1,
        "SaslAuthenticate",
        "request",
        correlation_id=1,
        mechanism="PLAIN",
        sasl_opaque_data=b"\0alice\0s3cret",
    )
    wire.send(0.2, "SaslAuthenticate", "response", False, correlation_id=1, response_code=8)
    wire.kinds()
    (d,) = wire.tracker.diagnoses
    assert "user 'alice'" in d.message and "s3cret" not in d.message
    assert (d.severity, d.kind) == ("error", "auth_failure")


def test_routine_codes_are_notes(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.send(0.1, "QueryOffset", "request", correlation_id=1, reference="r", stream="s")
    wire.send(0.2, "QueryOffset", "response", False, correlation_id=1, response_code=0x13, offset=0)
    assert [(d.kind, d.severity) for d in (wire.kinds() and wire.tracker.diagnoses)] == [
        ("routine_response", "note")
    ]


def test_expanding_keeps_the_trackers_notes(decoder: Decoder) -> None:
    frames, _ = track(CAPTURES / "deleted_stream.pcap", decoder)
    refused = next(f for f in frames if f.command == "PublishError")
    before = [e.message for e in refused.expert]
    decoder.expand(refused)
    decoder.tree(refused)
    assert [e.message for e in refused.expert] == before


# ---------------------------------------------------------------------- garbage


LAYOUTS = [
    (command.name, kind, version)
    for command in default_registry().get("rabbitmq_stream").commands.values()
    for kind, layout in command.layouts.items()
    for version in command.versions
]


@st.composite
def conversations(draw: st.DrawFn, decoder: Decoder) -> list[Frame]:
    """Frames of any command with any values, in any order, from either side, at any time."""
    frames = []
    ts = 0.0
    for number in range(1, draw(st.integers(1, 40)) + 1):
        if draw(st.booleans()):
            name, kind, version = draw(st.sampled_from(LAYOUTS))
            layout = decoder.protocol.commands[name].layouts[kind]
            values = draw(struct_strategy(layout.fields, version))
            frame = decoder.decode(decoder.encode(name, kind, values, version))
        else:
            frame = decoder.decode(draw(st.binary(max_size=60)))
        ts += draw(st.floats(0, 200, allow_nan=False))
        frame.number, frame.ts = number, ts
        frame.conn = draw(st.integers(1, 2))
        frame.from_client = draw(st.sampled_from([True, False, None]))
        frames.append(frame)
    return frames


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tracker_never_raises_on_any_conversation(decoder: Decoder, data: st.DataObject) -> None:
    tracker = Tracker(decoder.protocol)
    frames = data.draw(conversations(decoder))
    for frame in frames:
        tracker.feed(frame)
    tracker.finish(lossy=data.draw(st.sets(st.integers(1, 2))))
    for d in tracker.diagnoses:
        assert d.severity in ("note", "warn", "error") and "\n" not in d.message
    assert all(row["count"] >= 1 for row in tracker.summary())


def test_a_capture_that_just_stops_is_not_the_clients_fault(decoder: Decoder) -> None:
    wire = Wire(decoder)
    wire.send(1.0, "Metadata", "request", correlation_id=1, streams=["a"])
    wire.send(1.0005, "Heartbeat", "command", False)
    wire.kinds()
    (d,) = wire.tracker.diagnoses
    assert (d.kind, d.severity) == ("unanswered", "note")
    assert d.message.endswith("; the capture ended 0.500 ms after it")


def test_a_reused_publisher_id_is_a_new_publisher(decoder: Decoder) -> None:
    from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry

    wire = Wire(decoder)
    for n, stream in enumerate(("orders", "invoices")):
        wire.send(
            n,
            "DeclarePublisher",
            "request",
            correlation_id=n,
            publisher_id=1,
            publisher_reference="",
            stream=stream,
        )
        wire.send(n + 0.1, "DeclarePublisher", "response", False, correlation_id=n, response_code=1)
        messages = [{"publishing_id": i, "entry": simple_entry(b"x")} for i in range(3)]
        wire.send(n + 0.2, "Publish", "command", publisher_id=1, messages=messages)
    wire.send(9.0, "PublishConfirm", "command", False, publisher_id=1, publishing_ids=[0, 1, 2])
    assert wire.kinds() == ["unconfirmed"]
    assert "3 messages of publisher 1 (stream 'orders') never confirmed" in wire.tracker.diagnoses[0].message


# ---------------------------------------------------------------- bounded memory


def test_diagnoses_past_the_cap_are_counted_not_kept(
    decoder: Decoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture with endless findings keeps MAX_DIAGNOSES of them whole; the summary still counts all."""
    import streamdump.analysis.tracker as conversation
    from streamdump.analysis.statistics import Statistics

    name = max(EXPECTED, key=lambda n: len(EXPECTED[n]))
    _, whole = track(CAPTURES / name, decoder)
    monkeypatch.setattr(conversation, "MAX_DIAGNOSES", 1)
    _, capped = track(CAPTURES / name, decoder)
    assert len(whole.diagnoses) > 1
    assert capped.diagnoses == whole.diagnoses[:1]
    assert sum(count for count, _ in capped.untold.values()) == len(whole.diagnoses) - 1
    assert capped.summary() == whole.summary()
    capped_result = Statistics(decoder.protocol, capped).result()
    whole_result = Statistics(decoder.protocol, whole).result()
    assert capped_result["diagnoses_not_listed"] == len(whole.diagnoses) - 1
    assert [c["expert"] for c in capped_result["connections"]] == [
        c["expert"] for c in whole_result["connections"]
    ]


def test_the_tracker_keeps_no_frame_bytes_of_finished_traffic(decoder: Decoder) -> None:
    """Per connection only a small record of the latest frame stays, not the frame and its fields."""
    from streamdump.analysis.state import Seen

    frames, tracker = track(CAPTURES / "bulk.pcap", decoder)
    for conn in tracker.connections.values():
        assert isinstance(conn.last, Seen)
        assert conn.last.number == max(f.number for f in frames if f.conn == conn.number)
        for side in (conn.client_side, conn.server_side):
            assert side.last is None or isinstance(side.last, Seen)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 30, allow_nan=False), min_size=1, max_size=300))
def test_latency_figures_are_the_exact_nearest_rank_percentiles(samples: list[float]) -> None:
    import math

    from streamdump.analysis.statistics import Samples, latency

    store = Samples()
    for value in samples:
        store.add(value)
    ms = sorted(round(round(v * 1_000_000) / 1000, 3) for v in samples)

    def nearest(p: float) -> float:
        return ms[max(0, math.ceil(p / 100 * len(ms)) - 1)]

    assert latency(store) == {
        "count": len(ms),
        "min_ms": ms[0],
        "median_ms": nearest(50),
        "p95_ms": nearest(95),
        "p99_ms": nearest(99),
        "max_ms": ms[-1],
    }


def test_latency_store_stays_small_for_any_number_of_distinct_values(monkeypatch: pytest.MonkeyPatch) -> None:
    import streamdump.analysis.statistics as stats

    monkeypatch.setattr(stats, "MAX_DISTINCT", 1000)
    store = stats.Samples()
    for n in range(50_000):
        store.add(n * 0.000_137)  # every value distinct, spread over 7 s
    # Below 10 ms every microsecond value is kept; above, 9,000 values per decade at most.
    assert len(store) == 50_000 and len(store.counts) <= 10_000 + 9_000 * 3
    figures = stats.latency(store)
    assert figures["approximate"] is True and figures["count"] == 50_000
    exact_median = 25_000 * 0.137
    assert abs(figures["median_ms"] - exact_median) / exact_median < 0.001


# ---------------------------------------------------------------------- publishing id order


def _publisher(wire: Wire) -> None:
    wire.send(0.1, "DeclarePublisher", "request", correlation_id=1, publisher_id=2,
              publisher_reference="app", stream="s")  # fmt: skip


def _publish(wire: Wire, ts: float, ids: list[int], records: int = 1) -> Frame:
    from streamdump.dissectors.rabbitmq_stream.osiris import records_body, simple_entry, sub_batch_entry

    record = b"\x00\x53\x75\xa0\x01x"
    batch = [record] * records
    entry = (
        (lambda: simple_entry(record))
        if records == 1
        else (lambda: sub_batch_entry(batch, 0, records_body(batch)))
    )
    messages = [{"publishing_id": i, "entry": entry()} for i in ids]
    return wire.send(ts, "Publish", "command", publisher_id=2, messages=messages)


def _order_notes(wire: Wire, lossy: tuple[int, ...] = ()) -> list[tuple[int, str]]:
    wire.tracker.finish(lossy)
    return [(d.number, d.message) for d in wire.tracker.diagnoses if d.kind == "item_order"]


def test_publishing_ids_that_go_back_or_skip_are_noted(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _publisher(wire)
    _publish(wire, 1.0, [1, 2, 3])
    _publish(wire, 1.1, [4, 5])  # in order: nothing to say
    _publish(wire, 1.2, [3])  # a counter reset, or two threads sharing it
    _publish(wire, 1.3, [4, 9, 10])
    assert _order_notes(wire) == [
        (4, "publisher 2 (stream 's'): publishing id 3 follows 5 (packet 3): the ids went back"),
        (5, "publisher 2 (stream 's'): publishing id 9 follows 4: 4 ids skipped"),
    ]


def test_a_sub_batch_may_take_the_id_of_its_last_record(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _publisher(wire)
    _publish(wire, 1.0, [1])
    _publish(wire, 1.1, [4], records=3)  # rstream: records 2, 3 and 4 in one sub-batch, id 4
    _publish(wire, 1.2, [5], records=3)  # another client: one id per sub-batch
    _publish(wire, 1.3, [6])
    assert _order_notes(wire) == []


def test_skips_on_a_connection_that_lost_bytes_are_not_the_clients(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _publisher(wire)
    _publish(wire, 1.0, [1, 2])
    _publish(wire, 1.1, [7])  # the frames between were lost with the capture's bytes
    _publish(wire, 1.2, [3])  # but no loss makes ids go back
    assert _order_notes(wire, lossy=(1,)) == [
        (4, "publisher 2 (stream 's'): publishing id 3 follows 7 (packet 3): the ids went back")
    ]


def test_a_close_for_an_unknown_frame_names_that_frame_not_the_last(tmp_path: Path, decoder: Decoder) -> None:
    """The broker closes for an unknown frame after the client sent more frames: the diagnosis, in
    streamdump and in the plugin, names the unknown one (before, it blamed the client's last)."""
    from pcap_writer import tcp_pcap
    from test_wireshark import _tshark, differences

    unknown = bytes.fromhex("00000004 00ff 0001")
    close = decoder.encode(
        "Close", "request", {"correlation_id": 1, "closing_code": 0x0D, "closing_reason": "unknown frame"}
    )
    path = tmp_path / "unknown_then_more.pcap"
    path.write_bytes(
        tcp_pcap(
            [
                (True, unknown),
                (True, decoder.encode("Heartbeat", "command", {})),
                (False, close),
                (True, decoder.encode("Close", "response", {"correlation_id": 1, "response_code": 1})),
            ]
        )
    )
    _, tracker = track(path, decoder)
    (closed,) = [d.message for d in tracker.diagnoses if d.kind == "server_close"]
    assert closed == (
        "the broker closed the connection: Unknown frame (0x0d) 'unknown frame'; the client's frame it is "
        "about was Unknown(0x00ff) (key 0x00ff, version 1, 8 bytes, packet 4), before its last (packet 5): "
        "the broker does not know this command key or version"
    )
    _tshark()
    found = list(differences(path, tmp_path, decoder.protocol))
    assert not found, "\n\n".join(found[:5])


# ---------------------------------------------------------------------- a publisher's messages


def _rstream_message(message_id: str | None, raw: bool = False) -> bytes:
    """A record as the real rstream client encodes it (AMQP 1.0, or its RawMessage's bytes)."""
    from rstream import AMQPMessage, Properties

    if raw:
        return b"raw bytes, not an AMQP message"
    props = Properties(message_id=message_id) if message_id is not None else None
    return bytes(AMQPMessage(body=b"order", properties=props))


def _publish_records(wire: Wire, ts: float, first: int, records: list[bytes]) -> Frame:
    from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry

    messages = [{"publishing_id": first + n, "entry": simple_entry(r)} for n, r in enumerate(records)]
    return wire.send(ts, "Publish", "command", publisher_id=2, messages=messages)


def _content_notes(wire: Wire) -> list[tuple[str, int, str]]:
    wire.tracker.finish()
    kinds = ("mixed_formats", "reused_message_id")
    return [(d.kind, d.number, d.message) for d in wire.tracker.diagnoses if d.kind in kinds]


def test_a_publisher_reusing_message_ids(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _publisher(wire)
    _publish_records(wire, 1.0, 1, [_rstream_message("order-1"), _rstream_message("order-2")])
    _publish_records(wire, 1.1, 3, [_rstream_message("order-1")])
    _publish_records(wire, 1.2, 4, [_rstream_message("order-2"), _rstream_message("order-1")])
    assert _content_notes(wire) == [
        (
            "reused_message_id",
            3,
            "publisher 2 (stream 's'): message id 'order-1' of publishing id 3 (packet 3) is that of "
            "publishing id 1 (packet 2) too",
        ),
        ("reused_message_id", 3, "publisher 2 (stream 's'): 2 more messages reused an earlier message id"),
    ]


def test_a_publisher_mixing_raw_bytes_with_amqp_messages(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _publisher(wire)
    _publish_records(wire, 1.0, 1, [_rstream_message(None), _rstream_message(None)])
    _publish_records(wire, 1.1, 3, [_rstream_message(None, raw=True), _rstream_message(None, raw=True)])
    assert _content_notes(wire) == [
        (
            "mixed_formats",
            3,
            "publisher 2 (stream 's'): the message with publishing id 3 (packet 3) is not AMQP 1.0, "
            "while its first message (packet 2) was AMQP 1.0",
        )
    ]


def test_message_ids_are_not_looked_for_where_a_publisher_sends_none(
    decoder: Decoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import streamdump.dissectors.rabbitmq_stream.confirms as conversation

    monkeypatch.setattr(conversation, "ID_PATIENCE", 3)
    wire = Wire(decoder)
    _publisher(wire)
    _publish_records(wire, 1.0, 1, [_rstream_message(None)] * 3)
    (seen,) = wire.tracker.connections[1].rules["acks"].content.values()
    assert not seen.watching  # what follows costs no message id lookup
    _publish_records(wire, 1.1, 4, [_rstream_message("x"), _rstream_message("x")])
    assert _content_notes(wire) == []


def test_a_publisher_id_declared_again_starts_with_no_message_ids(decoder: Decoder) -> None:
    wire = Wire(decoder)
    _publisher(wire)
    _publish_records(wire, 1.0, 1, [_rstream_message("order-1")])
    wire.send(1.1, "DeletePublisher", "request", correlation_id=2, publisher_id=2)
    _publisher(wire)  # the same publisher id, a new publisher
    _publish_records(wire, 1.2, 1, [_rstream_message("order-1")])
    assert _content_notes(wire) == []
