"""RocketMQ remoting: every spec entry round trips in both header encodings, the real clients'
captures decode cleanly and say what happened, and garbage on its ports never raises."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import cramjam
import pytest
import zstandard
from conftest import ROCKETMQ_CAPTURES, client_stream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq_strategies import comparable, expected, header_values, layout_values

from streamdump.analysis.pipeline import ReadStats, decode_segments, read_frames
from streamdump.analysis.tracker import Tracker
from streamdump.spec.decoder import Decoder, EncodeError
from streamdump.spec.registry import default_registry
from streamdump.wire.capture import Segment
from streamdump.wire.frame import Frame

PROTOCOL = default_registry().get("rocketmq")
ROCKETMQ = Decoder(PROTOCOL)
ENTRIES = [(command.name, kind) for command in PROTOCOL.commands.values() for kind in command.layouts]
# Commands whose fields the spec names (the rest carry a body only): the most examples.
DETAILED = {
    name
    for name, command in PROTOCOL.commands.items()
    if any(len(layout.fields) > 1 or layout.fields[0].name != "body" for layout in command.layouts.values())
}


def test_every_request_code_of_the_reference_is_a_command() -> None:
    codes = {c.key for c in PROTOCOL.commands.values()}
    reference = {*range(10, 16), 17, *range(21, 44), 45, *range(100, 107), *range(200, 225), *range(300, 322)}
    gaps = {16, 19, 20, 24, 44, 218 - 0}  # never defined (218 is the reference's DELETE_KV_CONFIG_BY_VALUE)
    assert reference - gaps - {218} <= codes
    assert {217, 218} <= codes  # the reference's KV-config-by-value pair
    assert len(ENTRIES) == 2 * len(PROTOCOL.commands)


def round_trip(command: str, kind: str, serialize: int, data: st.DataObject) -> None:
    spec = PROTOCOL.commands[command]
    if spec.key > 0x7FFF:
        serialize = 0  # POP codes do not fit the binary header's 16-bit code: JSON only
    response = kind == "response"
    values = data.draw(layout_values(spec.layouts[kind], PROTOCOL), label="fields")
    header = data.draw(header_values(serialize, response), label="header")
    wire = ROCKETMQ.encode(command, kind, header | values)
    frame = ROCKETMQ.decode(wire, key=spec.key)
    assert (frame.command, frame.kind, frame.key) == (command, kind, spec.key)
    assert [e for e in frame.expert if e.severity in ("warn", "error")] == []
    want = expected(header | values, ROCKETMQ)
    want["code"] = header["code"] if response else spec.key
    want["flag"] = header["flag"] | (1 if response else 0)
    assert comparable(frame.fields) == want
    assert frame.version == header["version"]
    # What was decoded encodes to the same frame again.
    again = ROCKETMQ.encode(command, kind, {**frame.fields, "version": frame.version})
    assert again == wire


@pytest.mark.parametrize(("command", "kind"), [e for e in ENTRIES if e[0] in DETAILED], ids=str)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), serialize=st.sampled_from([0, 1]))
def test_round_trip_of_commands_with_fields(
    command: str, kind: str, serialize: int, data: st.DataObject
) -> None:
    round_trip(command, kind, serialize, data)


@pytest.mark.parametrize(("command", "kind"), [e for e in ENTRIES if e[0] not in DETAILED], ids=str)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), serialize=st.sampled_from([0, 1]))
def test_round_trip_of_commands_with_a_body(
    command: str, kind: str, serialize: int, data: st.DataObject
) -> None:
    round_trip(command, kind, serialize, data)


def test_binary_codes_must_fit_sixteen_bits() -> None:
    """POP codes travel in JSON headers only; a binary one says why it cannot be written."""
    with pytest.raises(EncodeError, match="POP_MESSAGE request: cannot encode"):
        ROCKETMQ.encode(
            "POP_MESSAGE",
            "request",
            {"serialize_type": 1, "language": 0, "version": 0, "opaque": 1, "flag": 0, "remark": ""},
        )


# ---------------------------------------------------------------------- the real clients' captures

CAPTURE_FILES = sorted(ROCKETMQ_CAPTURES.glob("*.pcap"))
# Decoder notes a capture holds because its client broke the protocol, not the decoder.
EXPECTED_NOTES = {
    # The C++ client writes a batch's flag as "1", which Java's Boolean.parseBoolean reads as false.
    "cpp_producer.pcap": [
        ("SEND_MESSAGE", "warn", "batch: '1' is not true or false (Java reads it as false)")
    ],
}


def frames_of(path: Path) -> tuple[list[Frame], ReadStats]:
    stats = ReadStats()
    frames = [ROCKETMQ.expand(f) for f in read_frames(path, ROCKETMQ, None, stats)]
    return frames, stats


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: p.name)
def test_every_capture_decodes_without_expert_errors(path: Path) -> None:
    frames, stats = frames_of(path)
    assert frames and all(f.command for f in frames)
    problems = [
        (f.command, e.severity, e.message)
        for f in frames
        for e in f.expert
        if e.severity in ("warn", "error")
    ]
    assert problems == EXPECTED_NOTES.get(path.name, [])
    assert [n for n in stats.notices if n.severity != "note"] == []


def test_what_ali_ons_sent_is_what_it_pulled() -> None:
    """Six messages sent with SEND_MESSAGE_V2 come back in PULL_MESSAGE answers, body and properties."""
    frames, _ = frames_of(ROCKETMQ_CAPTURES / "alions.pcap")
    sent = [
        (bytes(f.fields["body"]), f.fields["properties"]["keys"])
        for f in frames
        if f.command == "SEND_MESSAGE_V2" and f.kind == "request"
    ]
    pulled = [
        (bytes(m["message_body"]), m["properties"]["keys"])
        for f in frames
        if f.command == "PULL_MESSAGE" and f.kind == "response"
        for m in f.fields.get("messages", [])
    ]
    assert len(sent) == 6 and sorted(sent) == sorted(pulled)
    languages = {(f.from_client, f.fields["language"]) for f in frames}
    assert languages == {(True, 0), (False, 0)}  # ali-ons says JAVA, and so does the stand-in


def test_the_cpp_client_counts_its_header_newline() -> None:
    """librocketmq's JSON header ends with a newline that its header length counts (FACTS.md)."""
    frames, _ = frames_of(ROCKETMQ_CAPTURES / "cpp_producer.pcap")
    requests = [f for f in frames if f.from_client]
    assert {f.command for f in requests} == {
        "GET_ROUTEINTO_BY_TOPIC",
        "SEND_MESSAGE",
        "HEART_BEAT",
        "UNREGISTER_CLIENT",
    }
    for frame in requests:
        header = frame.data[8 : 8 + frame.fields["header_length"]]
        assert header.endswith(b"}\n"), header[-8:]
        assert frame.fields["language"] == 1  # CPP


def test_binary_headers_carry_the_same_fields() -> None:
    """The binary capture's frames name their fields as the JSON captures' do, and its
    compressed body and one-way offset update are told as such."""
    binary, _ = frames_of(ROCKETMQ_CAPTURES / "binary.pcap")
    json_frames, _ = frames_of(ROCKETMQ_CAPTURES / "alions.pcap")
    assert {f.fields["serialize_type"] for f in binary} == {1}
    header_only = {"serialize_type_current_rpc", "ext_fields", "header_other", "remark"}

    def names(frames: list[Frame], command: str) -> set[str]:
        found = [f for f in frames if f.command == command and f.kind == "request"]
        return set(found[0].fields) - header_only

    assert names(binary, "SEND_MESSAGE_V2") - {"unit_mode"} <= names(json_frames, "SEND_MESSAGE_V2")
    sends = [f for f in binary if f.command == "SEND_MESSAGE_V2" and f.kind == "request"]
    packed = sends[1]
    assert packed.fields["sys_flag"] & 1 and packed.fields["compression"] == 0
    assert packed.fields["uncompressed_body"] == zlib.decompress(bytes(packed.fields["body"]))
    pulled = [
        m
        for f in binary
        if f.command == "PULL_MESSAGE" and f.kind == "response"
        for m in f.fields["messages"]
    ]
    assert [
        m["uncompressed_body"] if "uncompressed_body" in m else bytes(m["message_body"]) for m in pulled
    ] == [bytes(sends[0].fields["body"]), packed.fields["uncompressed_body"]]
    (update,) = [f for f in binary if f.command == "UPDATE_CONSUMER_OFFSET"]
    assert update.kind == "command" and update.fields["flag"] == 2  # one-way: no answer expected


DIAGNOSES = {
    "topic_missing.pcap": (
        "warn",
        "GET_ROUTEINTO_BY_TOPIC for topic 'NoSuchTopic' (packet 4) failed: TOPIC_NOT_EXIST (17) "
        "'No topic route info in name server for the topic: NoSuchTopic': no broker has registered this "
        "topic with the name server (create it, or enable auto-creation)",
    ),
    "send_refused.pcap": (
        "warn",
        "SEND_MESSAGE_V2 for producer group 'PID_streamdump', topic 'TopicTest' (packet 11) failed: "
        "NO_PERMISSION (16) 'the broker[127.0.0.1] sending message is forbidden': the broker does not allow "
        "writes to this topic",
    ),
}


@pytest.mark.parametrize("name", sorted(DIAGNOSES))
def test_refusals_are_said_in_plain_words(name: str) -> None:
    frames, stats = frames_of(ROCKETMQ_CAPTURES / name)
    tracker = Tracker(PROTOCOL)
    for frame in frames:
        tracker.feed(frame)
    tracker.finish(stats.lossy, stats.lives)
    assert (DIAGNOSES[name][0], DIAGNOSES[name][1]) in {(d.severity, d.message) for d in tracker.diagnoses}


def test_a_request_never_answered_and_pulls_held() -> None:
    """The broker left a send unanswered (a warning, with when the client gave up); a consumer's
    held pulls that its closing cut short are long polls, notes."""
    frames, stats = frames_of(ROCKETMQ_CAPTURES / "unanswered.pcap")
    tracker = Tracker(PROTOCOL)
    for frame in frames:
        tracker.feed(frame)
    tracker.finish(stats.lossy, stats.lives)
    (unanswered,) = [d for d in tracker.diagnoses if d.kind == "unanswered"]
    assert unanswered.severity == "warn"
    assert "SEND_MESSAGE for producer group 'PID_streamdump_cpp', topic 'TopicTest'" in unanswered.message
    assert (
        "with opaque 1 was never answered; the client closed the connection at packet" in unanswered.message
    )
    frames, stats = frames_of(ROCKETMQ_CAPTURES / "alions.pcap")
    tracker = Tracker(PROTOCOL)
    for frame in frames:
        tracker.feed(frame)
    tracker.finish(stats.lossy, stats.lives)
    held = [d for d in tracker.diagnoses if d.kind == "unanswered"]
    assert held and all(d.severity == "note" and "(a long poll)" in d.message for d in held)
    routine = [d for d in tracker.diagnoses if d.kind == "routine_response"]
    assert routine and all("PULL_NOT_FOUND (19)" in d.message for d in routine)


# ---------------------------------------------------------------------- bodies


def stored(body: bytes, sys_flag: int = 0, crc: int | None = None) -> dict[str, Any]:
    return {
        "magic_code": 0xDAA320A7, "body_crc": zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc,
        "queue_id": 0, "message_flag": 0, "queue_offset": 0, "physical_offset": 0, "sys_flag": sys_flag,
        "born_timestamp": 0, "born_host": "127.0.0.1", "born_port": 1, "store_timestamp": 0,
        "store_host": "127.0.0.1", "store_port": 2, "reconsume_times": 0, "prepared_transaction_offset": 0,
        "message_body": body, "topic": "T", "properties": {},
    }  # fmt: skip


def pull_answer(*messages: dict[str, Any]) -> Frame:
    wire = ROCKETMQ.encode(
        "PULL_MESSAGE",
        "response",
        {"serialize_type": 0, "language": 0, "opaque": 1, "code": 0, "messages": list(messages)},
    )
    return ROCKETMQ.decode(wire, key=11, expand=True)


@pytest.mark.parametrize(
    ("code", "pack"),
    [(0, zlib.compress), (3, zlib.compress), (1, cramjam.lz4.compress), (2, lambda b: zstandard.compress(b))],
    ids=["zlib0", "zlib3", "lz4", "zstd"],
)
def test_compressed_bodies_are_inflated_by_their_sys_flag(code: int, pack: Any) -> None:
    body = b"streamdump " * 50
    packed = bytes(pack(body))
    frame = pull_answer(stored(packed, sys_flag=0x1 | code << 8))
    (message,) = frame.fields["messages"]
    assert message["compression"] == code and message["uncompressed_body"] == body
    assert message["body_crc_valid"] and frame.expert == []


def test_a_body_crc_mismatch_is_an_error() -> None:
    frame = pull_answer(stored(b"hello", crc=7))
    assert frame.fields["messages"][0]["body_crc_valid"] is False
    gives = zlib.crc32(b"hello") & 0x7FFFFFFF
    assert [e.message for e in frame.expert] == [
        f"message body CRC mismatch: header says 0x00000007, body gives 0x{gives:08x}"
    ]


def test_a_decompression_bomb_stops_at_the_frame_budget() -> None:
    """Bodies inflate within the same bound as Osiris sub-batches: one note, no memory blown."""
    bomb = zlib.compress(b"\0" * (40 << 20), 9)  # 40 MiB each, a few KiB on the wire
    frame = pull_answer(stored(bomb, 0x1), stored(bomb, 0x1))
    inflated = [m for m in frame.fields["messages"] if "uncompressed_body" in m]
    assert len(inflated) == 1
    (refused,) = [e for e in frame.expert if e.severity == "error"]
    assert "expanding this frame stops at 64 MiB decompressed" in refused.message


# ---------------------------------------------------------------------- garbage


def frame_bytes(opaque: int, topic: str = "TopicTest") -> bytes:
    return ROCKETMQ.encode(
        "GET_ROUTEINTO_BY_TOPIC",
        "request",
        {"serialize_type": 0, "language": 0, "opaque": opaque, "topic": topic},
    )


def stream(*payloads: bytes) -> list[Segment]:
    return client_stream(payloads, 10911)


def decoded(*payloads: bytes) -> tuple[list[Frame], ReadStats]:
    stats = ReadStats()
    return list(decode_segments(stream(*payloads), ROCKETMQ, [10911], stats)), stats


@pytest.mark.parametrize(
    ("garbage", "says"),
    [
        (b'\x7f\xff\xff\xff\x00\x00\x00\x05{"a"', "a frame size of 2147483647 at seq"),
        (struct.pack(">iI", 12, 7 << 24 | 8) + b"\x00" * 8, "no layout for serialize_type 7"),
        (struct.pack(">iI", 10, 40) + b'{"code"', "frame too short for a header"),
        (struct.pack(">iI", 13, 9) + b"{not json", "header is not JSON"),
        (struct.pack(">iI", -5, 0), "a frame size of -5 at seq"),
    ],
    ids=[
        "absurd length",
        "bad serialize type",
        "header longer than frame",
        "invalid JSON",
        "negative length",
    ],
)
def test_garbage_gets_notes_and_the_next_frame_is_found(garbage: bytes, says: str) -> None:
    frames, stats = decoded(frame_bytes(1), garbage, frame_bytes(2), frame_bytes(3))
    told = [e.message for f in frames for e in f.expert] + [n.message for n in stats.notices]
    assert any(says in text for text in told), told
    opaques = [f.fields.get("opaque") for f in frames if f.command == "GET_ROUTEINTO_BY_TOPIC"]
    assert opaques[0] == 1 and opaques[-2:] == [2, 3]


@settings(max_examples=150, deadline=None)
@given(junk=st.lists(st.binary(max_size=64), max_size=4), cut=st.integers(0, 200))
def test_any_bytes_on_its_ports_decode_without_raising(junk: list[bytes], cut: int) -> None:
    """Garbage in any place, whole frames after it: never an exception, always a result."""
    payloads = [frame_bytes(1)[:cut], *junk, frame_bytes(2), frame_bytes(3)]
    frames, stats = decoded(*payloads)
    for frame in frames:
        assert isinstance(frame.expert, list)
    assert stats.frames + stats.incomplete >= 1 or stats.skipped_bytes > 0
