"""EventMesh TCP: every spec entry round trips under both length conventions, frames are
found in any segmentation, the captures say what happened, credentials never show, and
garbage on its port gets notes and resynchronisation, never an exception."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import CAPTURE_ROOT, client_stream, need
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq_strategies import TEXT, comparable, keyed_struct, value
from streamdump.dissectors.eventmesh.framing import MAGIC, build, looks_whole
from streamdump.dissectors.eventmesh.packages import CONVENTIONS

from streamdump.analysis.pipeline import Dissection, ReadStats, decode_segments, read_frames
from streamdump.analysis.tracker import Tracker
from streamdump.spec.decoder import Decoder
from streamdump.spec.keyed import MASKED
from streamdump.spec.registry import FieldSpec, Layout, default_registry
from streamdump.wire.capture import Segment
from streamdump.wire.frame import Frame

PROTOCOL = default_registry().get("eventmesh")
EVENTMESH = Decoder(PROTOCOL)
ENTRIES = [(command.name, kind) for command in PROTOCOL.commands.values() for kind in command.layouts]
CAPTURES = CAPTURE_ROOT / "eventmesh"
SECRET = "Zx9+pw"  # the password the captures' user agents carry
ROOT = Path(__file__).resolve().parent.parent


def test_every_command_of_the_reference_has_its_key() -> None:
    """All 37 names of Command.java are keys: a request's, a response's or a one-way command's."""
    names = PROTOCOL.enums["command"]
    keys = {c.key for c in PROTOCOL.commands.values()} | set(PROTOCOL.answers)
    assert keys == set(names) == set(range(37))
    # Pairs as the reference's interaction tables give them.
    pairs = {
        (names[c.key], names[layout.wire])
        for c in PROTOCOL.commands.values()
        for layout in c.layouts.values()
        if layout.wire
    }
    assert ("REQUEST_TO_SERVER", "RESPONSE_TO_CLIENT") in pairs
    assert ("ASYNC_MESSAGE_TO_CLIENT", "ASYNC_MESSAGE_TO_CLIENT_ACK") in pairs
    assert ("HELLO_REQUEST", "HELLO_RESPONSE") in pairs


# ---------------------------------------------------------------------- round trips


def secrets_masked(values: dict[str, Any], specs: tuple[FieldSpec, ...]) -> dict[str, Any]:
    out = dict(values)
    for spec in specs:
        if spec.secret and out.get(spec.name):
            out[spec.name] = MASKED
    return out


@st.composite
def frame_values(draw: st.DrawFn, layout: Layout) -> dict[str, Any]:
    """A header and some of the layout's fields (an inline body's members stand among them)."""
    header = PROTOCOL.structs["em_header"]
    values: dict[str, Any] = {
        "code": draw(st.integers(-(2**31), 2**31 - 1)),
        "desc": draw(st.none() | TEXT),
        "seq": draw(st.none() | st.text("0123456789", min_size=1, max_size=10)),
        "properties": draw(keyed_struct(PROTOCOL.structs["em_properties"], PROTOCOL, text=True)),
    }
    if draw(st.booleans()):
        values["header_other"] = draw(value(next(s for s in header if s.name == "header_other"), PROTOCOL))
    for spec in layout.fields:
        if not draw(st.booleans()):
            continue  # an empty body
        if spec.inline:
            values |= draw(keyed_struct(spec.fields, PROTOCOL, text=False))
        else:
            values[spec.name] = draw(value(spec, PROTOCOL))
    return values


@pytest.mark.parametrize(("command", "kind"), ENTRIES, ids=str)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), generation=st.sampled_from(["1.8", "1.9"]))
def test_round_trip_of_every_entry(command: str, kind: str, generation: str, data: st.DataObject) -> None:
    layout = PROTOCOL.commands[command].layouts[kind]
    values = data.draw(frame_values(layout), label="values")
    wire = build(EVENTMESH, command, kind, values, generation)
    frame = EVENTMESH.decode(wire)
    assert (frame.command, frame.kind) == (command, kind)
    assert [e for e in frame.expert if e.severity in ("warn", "error")] == []
    assert frame.fields["length_counts"] == CONVENTIONS[generation]
    members = tuple(m for spec in layout.fields if spec.inline for m in spec.fields)
    want = {k: v for k, v in secrets_masked(values, members).items() if v is not None and v != {}}
    got = comparable(frame.fields)
    derived = {"magic", "codec_version", "message_length", "header_length", "cmd", "length_counts"}
    assert {k: v for k, v in got.items() if k not in derived} == want
    assert got["cmd"] == EVENTMESH.wire_key(PROTOCOL.commands[command].key, kind == "response")
    if want == values or not any(spec.secret for spec in members):
        # What was decoded encodes to the same frame again.
        assert build(EVENTMESH, command, kind, frame.fields, generation) == wire


# ---------------------------------------------------------------------- framing


def stream(*payloads: bytes, port: int = 10000) -> list[Segment]:
    return client_stream(payloads, port)


def decoded(*payloads: bytes, port: int = 10000) -> tuple[list[Frame], ReadStats]:
    stats = ReadStats()
    dissection = Dissection([EVENTMESH])
    return list(decode_segments(stream(*payloads, port=port), dissection, None, stats)), stats


def heartbeat(seq: str, generation: str = "1.9", **body: Any) -> bytes:
    return build(
        EVENTMESH, "Heartbeat", "request", {"seq": seq, "code": 0, "properties": {}, **body}, generation
    )


BODIES = (
    st.none()
    | st.dictionaries(
        st.text("abcdefgh", min_size=1, max_size=4),
        st.integers() | st.text(max_size=20) | st.lists(st.booleans()),
        max_size=4,
    )
    # Raw bodies that look like the next frame's start, or that are not JSON at all.
    | st.sampled_from([b'"EventMesh0000"', b'"Event"', b'{"a"', b"[[[", b'{"k":"EventMesh0000Event"}'])
)


@settings(max_examples=120, deadline=None)
@given(
    frames=st.lists(st.tuples(st.sampled_from(["1.8", "1.9"]), BODIES), min_size=1, max_size=6),
    cuts=st.lists(st.integers(1, 400), max_size=8),
)
def test_frames_of_both_conventions_are_found_in_any_segmentation(
    frames: list[tuple[str, dict[str, Any] | None]], cuts: list[int]
) -> None:
    """Several frames per segment, frames across segments, conventions mixed: each found whole."""
    wires = [heartbeat(str(n), generation, body=body) for n, (generation, body) in enumerate(frames)]
    data = b"".join(wires)
    payloads, at = [], 0
    for cut in cuts:
        if at + cut >= len(data):
            break
        payloads.append(data[at : at + cut])
        at += cut
    payloads.append(data[at:])
    got, stats = decoded(*payloads)
    assert [f.data for f in got] == wires, [(f.command, f.incomplete, len(f.data)) for f in got]
    assert [f.fields["length_counts"] for f in got] == [CONVENTIONS[g] for g, _ in frames]
    assert stats.notices == []


ODD = [
    ({"cmd": "SUBSCRIBE_REQUEST", "seq": "1"}, b'{"topicList":5}'),
    ({"cmd": True, "seq": "2"}, b""),
    ({"cmd": {"a": 1}, "seq": [1]}, b""),
    (
        {"cmd": "HELLO_REQUEST", "desc": [1, 2], "properties": "x", "seq": "3"},
        b'{"group":[1],"password":"p"}',
    ),
    ({"cmd": "ASYNC_MESSAGE_TO_SERVER", "seq": "4"}, b'{"specversion":"1.0","data_base64":null}'),
    ({"cmd": "ASYNC_MESSAGE_TO_SERVER", "seq": "5"}, b'{"topic":"t","body":"\\ud800"}'),
    ({"cmd": "ASYNC_MESSAGE_TO_SERVER", "seq": "6"}, b"[" * 3000),
    ({"cmd": "ASYNC_MESSAGE_TO_SERVER", "seq": "7"}, b'{"topic":"t","body":"NaN"}'),
]


def odd_frame(header: dict[str, Any], body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">ii", 13 + len(text) + len(body), len(text)) + text + body


def test_json_of_odd_shapes_never_breaks_a_view(tmp_path: Path) -> None:
    """Keys, ids, bodies and packages holding what the spec does not expect: notes, never an error."""
    from test_wireshark import tcp_pcap

    path = tmp_path / "odd.pcap"
    path.write_bytes(tcp_pcap([(True, odd_frame(h, b)) for h, b in ODD], server=("127.0.0.1", 10000)))
    for args in (["read", str(path)], ["read", str(path), "--detail"], ["read", str(path), "-T", "jsonl"],
                 ["read", str(path), "--messages"], ["stats", str(path)], ["follow", str(path)]):  # fmt: skip
        result = cli(*args)
        assert result.returncode == 0 and "error:" not in result.stderr, (args, result.stderr)
    lines = cli("read", str(path)).stdout.splitlines()
    assert len(lines) == len(ODD)
    assert "topics=5 [warn: subscription: topic_list: expected a list, got int]" in lines[0]
    assert "package is not JSON: nested too deeply" in lines[6]
    tshark = _tshark()
    env = dict(os.environ, HOME=str(tmp_path))
    shown = subprocess.run(
        [tshark, "-X", f"lua_script:{ROOT / 'lua' / 'streamdump.lua'}", "-r", str(path), "-V"],
        capture_output=True, env=env,
    )  # fmt: skip
    assert shown.returncode == 0 and b"Lua" not in shown.stdout + shown.stderr


def test_the_last_frame_of_a_stream_is_decoded_whatever_its_body() -> None:
    """A 1.9 frame whose body is not whole JSON waits for what follows; at the stream's end it is a frame."""
    last = odd_frame({"cmd": "HEARTBEAT_REQUEST", "seq": "9"}, b"[[[[[")
    frames, stats = decoded(heartbeat("1"), last)
    assert [(f.fields.get("seq"), f.incomplete) for f in frames] == [("1", None), ("9", None)]
    assert frames[1].fields["length_counts"] == CONVENTIONS["1.9"] and stats.incomplete == 0


def test_a_body_cut_short_does_not_look_whole() -> None:
    assert looks_whole(b"") and looks_whole(b'{"a":1}') and looks_whole(b'"text"') and looks_whole(b"null")
    assert not looks_whole(b'{"a":') and not looks_whole(b'"tex') and not looks_whole(b"[1,")
    # Closing what they open is not enough: a body 5 bytes short can still end in a brace.
    assert not looks_whole(b'{"a":{"b":1}') and not looks_whole(b'"{\\"x\\":\\"y\\"}"'[:-5])


def test_the_length_of_the_issue_and_the_reference_fits_neither() -> None:
    """A length counting the whole frame (21 + header + body), as the reference describes 1.9,
    is what no release writes: Codec.java counts 13 + header + body. It is flagged, and the
    frame still ends where the next one starts."""
    whole = bytearray(heartbeat("1"))
    struct.pack_into(">i", whole, 13, len(whole))
    frames, _ = decoded(bytes(whole) + heartbeat("2"))
    assert [f.fields.get("seq") for f in frames] == ["1", "2"]
    assert frames[0].fields["length_counts"] == "neither"
    assert "fits neither convention" in frames[0].expert[0].message


GARBAGE = [
    (
        b"EventMash0000" + bytes(8),
        "21 bytes from seq 184 passed over: no frame boundary after bytes at seq 184",
    ),
    (
        MAGIC + struct.pack(">ii", 2_000_000_000, 27) + b'{"cmd":"HEARTBEAT_REQUEST"}',
        "message length 2000000000 fits neither",
    ),
    (
        MAGIC + struct.pack(">ii", 30, 2_000_000_000),
        "and a header length of 2000000000 at seq 184, which is impossible",
    ),
    (MAGIC + struct.pack(">ii", 21, 8) + b'{"cmd":[', "header is not JSON"),
    (
        MAGIC + struct.pack(">ii", 25, 200) + b'{"cmd":"HELLO_REQUEST"}',
        "Header needs 200 bytes at offset 21, 23 left",
    ),
    (b"GET / HTTP/1.1\r\n\r\n", "18 bytes from seq 184 passed over"),
]


@pytest.mark.parametrize(
    ("garbage", "says"),
    GARBAGE,
    ids=[
        "wrong magic",
        "absurd length",
        "absurd header length",
        "bad header JSON",
        "header past the frame",
        "http",
    ],
)
def test_garbage_gets_notes_and_the_next_frame_is_found(garbage: bytes, says: str) -> None:
    frames, stats = decoded(heartbeat("1"), garbage, heartbeat("2"), heartbeat("3"))
    told = [e.message for f in frames for e in f.expert] + [n.message for n in stats.notices]
    assert any(says in text for text in told), told
    seqs = [f.fields.get("seq") for f in frames if f.command == "Heartbeat"]
    assert seqs[0] == "1" and seqs[-2:] == ["2", "3"]


@settings(max_examples=150, deadline=None)
@given(junk=st.lists(st.binary(max_size=64) | st.just(MAGIC), max_size=4), cut=st.integers(0, 200))
def test_any_bytes_on_its_port_decode_without_raising(junk: list[bytes], cut: int) -> None:
    payloads = [heartbeat("1")[:cut], *junk, heartbeat("2"), heartbeat("3")]
    frames, stats = decoded(*payloads)
    assert all(isinstance(f.expert, list) for f in frames)
    assert stats.frames + stats.incomplete >= 1 or stats.skipped_bytes > 0


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_frame_bytes_decode_without_raising(data: bytes) -> None:
    for partial in (False, True):
        frame = EVENTMESH.decode(MAGIC + data, partial=partial)
        EVENTMESH.expand(frame)
        assert isinstance(frame.expert, list)


# ---------------------------------------------------------------------- the captures


def read(name: str) -> tuple[list[Frame], Tracker]:
    tracker = Tracker(PROTOCOL)
    frames = []
    for frame in read_frames(CAPTURES / name, Dissection([EVENTMESH]), None, ReadStats()):
        tracker.feed(frame)
        frames.append(frame)
    tracker.finish()
    return frames, tracker


@pytest.mark.parametrize("name", ["session.pcap", "legacy.pcap", "trouble.pcap"])
def test_every_capture_decodes_without_expert_errors_in_its_frames(name: str) -> None:
    frames, _ = read(name)
    assert frames and all(f.command is not None or name == "trouble.pcap" for f in frames)
    malformed = [
        (f.number, e.message)
        for f in frames
        for e in f.expert
        if e.group == "malformed" and e.severity != "note"
    ]
    # The one frame the trouble capture's client got wrong: a command Command.java does not have.
    wrong = [
        (33, "header: cmd: 'MSG_TRACE' is not a name the spec knows"),
        (33, "unknown command key MSG_TRACE"),
    ]
    assert malformed == (wrong if name == "trouble.pcap" else [])


def test_the_legacy_capture_is_found_by_its_magic_and_counts_as_1_8_does() -> None:
    frames, _ = read("legacy.pcap")
    assert {f.dst.port for f in frames if f.from_client} == {10100}  # not a port of the spec
    assert {f.fields["length_counts"] for f in frames} == {CONVENTIONS["1.8"]}
    session, _ = read("session.pcap")
    assert {f.fields["length_counts"] for f in session} == {CONVENTIONS["1.9"]}


def test_every_request_is_answered_by_its_seq_in_the_session() -> None:
    frames, tracker = read("session.pcap")
    assert tracker.diagnoses == []
    for frame in frames:
        if frame.kind == "response":
            request = next(
                f for f in frames if f.number == frame.links["request_in"] and f.command == frame.command
            )
            assert request.fields["seq"] == frame.fields["seq"] and request.command == frame.command
            assert frame.links["response_time"] == round(frame.ts - request.ts, 6)


def test_trouble_is_said_in_plain_words() -> None:
    frames, tracker = read("trouble.pcap")
    at = {f.number: f.ts for f in frames}
    beats = [f.ts for f in frames if f.command == "Heartbeat" and f.kind == "request"]
    rhythm = sorted(b - a for a, b in itertools.pairwise(beats))[1]
    said = {d.kind: d.message for d in tracker.diagnoses}
    assert said["setup_refused"].startswith(
        "Hello for username 'PU4283', client group '', purpose 'sub' (packet 4) failed: FAIL (1) '[org.apache"
    )
    assert "AclException: group:EventmeshTest-consumerGroup has no auth" in said["error_response"]
    assert said["unanswered"] == (
        "Listen (packet 27) with seq 7730286154 was never answered; "
        "the server closed the connection at packet 35"
    )
    assert said["heartbeat_stopped"] == (
        "the client stopped sending Heartbeat requests: "
        f"3 sent (about one every {rhythm:.3f} s), the last at packet 22, "
        f"then none for {at[37] - at[22]:.3f} s until the connection's last frame (packet 37); "
        "EventMesh servers drop a session after 60 s without a heartbeat, without a word"
    )
    closes = [d.message for d in tracker.diagnoses if d.kind == "server_close"]
    assert closes == [
        "the server said goodbye: FAIL (1) 'Unknown Command type'; the client's last frame before it was "
        "Unknown(MSG_TRACE) (key MSG_TRACE, 84 bytes, packet 33)",
        "the server redirected the client to '127.0.0.2:10000'; the client's last frame before it was "
        "AsyncMessage (key ASYNC_MESSAGE_TO_SERVER, 292 bytes, packet 47)",
        "the server said goodbye: SUCCESS (0) 'graceful normal quit from eventmesh'; the client's last frame "
        "before it was AsyncMessage (key ASYNC_MESSAGE_TO_SERVER, 292 bytes, packet 47)",
    ]  # fmt: skip


def test_message_packages_give_topic_and_content() -> None:
    frames, _ = read("session.pcap")
    for frame in frames:
        EVENTMESH.expand(frame)
    published = {
        f.fields["seq"]: f.fields
        for f in frames
        if f.command in ("AsyncMessage", "Broadcast") and f.kind == "request"
    }
    assert published["5526071834"]["content"] == {"order": 42, "state": "paid"}  # CloudEvent data
    assert published["6612038457"]["content_bytes"] == b"\x00\x01\xfe\xff"  # data_base64
    assert published["2286403517"]["content_text"] == "hello everyone"  # EventMeshMessage body
    assert published["2286403517"]["topic"] == "TEST-TOPIC-TCP-BROADCAST"
    # An acknowledgement echoes the pushed package as a JSON string: read inside it.
    ack = next(f for f in frames if f.command == "AsyncPush" and f.kind == "response")
    assert ack.fields["topic"] == "TEST-TOPIC-TCP-ASYNC" and ack.fields["content"] == {
        "order": 42,
        "state": "paid",
    }


# ---------------------------------------------------------------------- the command line


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamdump", *args], capture_output=True, text=True, cwd=ROOT
    )


def test_passwords_never_show_in_any_view() -> None:
    assert SECRET.encode() in (CAPTURES / "session.pcap").read_bytes()  # it is on the wire
    path = str(CAPTURES / "session.pcap")
    for args in (["read", path], ["read", path, "--detail"], ["read", path, "--format", "jsonl"],
                 ["read", path, "--messages"], ["stats", path], ["stats", path, "--format", "json"],
                 ["follow", path]):  # fmt: skip
        result = cli(*args)
        assert result.returncode == 0, result.stderr
        assert SECRET not in result.stdout + result.stderr, args
    assert MASKED in cli("read", path, "--detail").stdout
    # A filter cannot find it either: the field holds the mask.
    assert cli("read", path, "-Y", f'password == "{SECRET}"').stdout == ""


@pytest.mark.parametrize(
    ("expression", "seqs"),
    [
        # The Subscribe request names the topic in its list; then the pushes, the reply and the round trip.
        ('topic == "TEST-TOPIC-TCP-SYNC"', ["4702368813", "3", "3", "8475013262", *["0754126638"] * 3]),
        ('eventmesh.seq == "0754126638"', ["0754126638"] * 3),
        ('content_text contains "everyone"', ["2286403517"]),
        ('cmd == 20 and length_counts contains "1.9"', ["5526071834", "1465300728", "6612038457"]),
        ('purpose == "sub"', ["1583904212"]),
    ],
)
def test_filters_reach_headers_bodies_and_packages(expression: str, seqs: list[str]) -> None:
    result = cli("read", str(CAPTURES / "session.pcap"), "-Y", expression, "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["fields"]["seq"] for line in result.stdout.splitlines()] == seqs


def test_decode_cuts_back_to_back_frames_of_both_conventions() -> None:
    hexed = (heartbeat("1") + heartbeat("2", "1.8")).hex()
    result = cli("decode", "--brief", hexed)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(
        re.search(r"Heartbeat request HEARTBEAT_REQUEST seq=\d$", line) for line in lines
    )


# ---------------------------------------------------------------------- the plugin


def _tshark() -> str:
    path = shutil.which("tshark")
    need(path is not None, "tshark is not installed")
    assert path is not None
    return path


def test_the_plugin_masks_passwords_and_survives_garbage(tmp_path: Path) -> None:
    from test_wireshark import tcp_pcap

    tshark = _tshark()
    plugin = ROOT / "lua" / "streamdump.lua"
    env = dict(os.environ, HOME=str(tmp_path))
    shown = subprocess.run(
        [tshark, "-X", f"lua_script:{plugin}", "-r", str(CAPTURES / "session.pcap"), "-V"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert shown.returncode == 0 and "Password: ********" in shown.stdout
    assert SECRET not in shown.stdout
    segments = [(True, heartbeat("1"))] + [
        (True, g + heartbeat(str(n + 2))) for n, (g, _) in enumerate(GARBAGE)
    ]
    path = tmp_path / "garbage.pcap"
    path.write_bytes(tcp_pcap(segments, server=("127.0.0.1", 10000)))
    lines = subprocess.run(
        [tshark, "-X", f"lua_script:{plugin}", "-r", str(path)], capture_output=True, text=True, env=env
    ).stdout  # fmt: skip
    assert "Lua" not in lines and "lua" not in lines
    for n in range(2, len(GARBAGE) + 2):
        assert f"Heartbeat request seq={n}" in lines, lines
