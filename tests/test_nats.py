"""NATS and the Liftbridge envelopes it carries: round trips of every spec entry, framing of a
text protocol across any segmentation, garbage, the conversation's diagnoses, the captures."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import crc32c
import pytest
from conftest import CAPTURE_ROOT, ROOT, client_stream
from gufo.liftbridge import api_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdump.analysis.conversations import Conversations
from streamdump.analysis.pipeline import Dissection, ReadStats, decode_segments, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.spec.keyed import MASKED
from streamdump.spec.registry import INT_TYPES, FieldSpec, SpecError, default_registry, load_registry
from streamdump.wire.frame import Frame

REGISTRY = default_registry()
NATS = Decoder(REGISTRY.get("nats"))
LIFTBRIDGE = Decoder(REGISTRY.get("liftbridge"))
NATS_CAPTURES = CAPTURE_ROOT / "nats"
LB_CAPTURES = CAPTURE_ROOT / "liftbridge"

# ---------------------------------------------------------------------- values from the spec

TOKEN = st.text("abcdefghijklmnopqrstuvwxyz0123456789_.>*$-", min_size=1, max_size=16)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=16)


def word(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.type in INT_TYPES:
        return st.integers(0, 10**6)
    return TOKEN


def member(spec: FieldSpec) -> st.SearchStrategy[Any]:
    """A JSON member of INFO or CONNECT."""
    if spec.type in INT_TYPES:
        return st.integers(0, 2**31 - 1)
    if spec.type == "bool":
        return st.booleans()
    if spec.type == "array":
        return st.lists(TEXT, max_size=3)
    if spec.type == "map":
        return st.dictionaries(
            st.text("xyz", min_size=1, max_size=4).map(lambda s: "x_" + s), TEXT, min_size=1, max_size=2
        )
    return TEXT


@st.composite
def nats_values(draw: st.DrawFn, command: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for spec in NATS.protocol.commands[command].layouts["command"].fields:
        if spec.type == "words":
            for m in spec.fields:
                if m.name in ("payload_size", "header_size", "total_size"):
                    continue  # the encoder derives them from what follows
                if m.optional and not draw(st.booleans()):
                    continue
                values[m.name] = draw(word(m))
        elif spec.type == "json":
            for m in spec.fields:
                if draw(st.booleans()):
                    values[m.name] = draw(member(m))
        elif spec.name == "data":
            values["data"] = draw(st.binary(max_size=40))
        elif spec.name == "headers":
            headers = draw(st.dictionaries(st.text("ABCdef-", min_size=1, max_size=6), TOKEN, max_size=3))
            block = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            values["headers"] = block.encode()
        elif spec.name == "error_text":
            values["error_text"] = "'" + draw(st.text("abcdefgh XYZ", max_size=30)) + "'"
    if "headers" in values:  # HPUB/HMSG: the sizes count headers and payload together
        values["header_size"] = len(values["headers"])
        values["total_size"] = len(values["headers"]) + len(values.get("data", b""))
    return values


NATS_COMMANDS = sorted(NATS.protocol.commands)


@pytest.mark.parametrize("command", NATS_COMMANDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_of_every_nats_entry(command: str, data: st.DataObject) -> None:
    values = data.draw(nats_values(command), label="values")
    wire = NATS.encode(command, "command", values)
    frame = NATS.decode(wire)
    assert frame.command == command, (wire, frame.expert)
    assert [e for e in frame.expert if e.severity in ("warn", "error")] == [], wire
    secrets = {s.name for s in NATS.protocol.all_fields() if s.secret}
    for name, value in values.items():
        got = frame.fields.get(name)
        got = bytes(got) if isinstance(got, memoryview) else got
        want = MASKED if name in secrets and value else value
        assert got == want, (name, wire)
    if not secrets & values.keys():
        assert NATS.encode(command, "command", frame.fields) == wire


def test_nats_py_writes_two_spaces_where_nothing_is_and_the_line_still_reads() -> None:
    frame = NATS.decode(b"SUB foo  1\r\n")
    assert frame.fields == {"op": "SUB", "subject": "foo", "sid": "1"} and not frame.expert
    frame = NATS.decode(b"HPUB foo  12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    assert frame.fields["payload_size"] == 2 and bytes(frame.fields["data"]) == b"hi" and not frame.expert
    frame = NATS.decode(b"sub foo q 7\n")  # a telnet user's line: lower case, a bare LF
    assert (frame.command, frame.fields["queue_group"], frame.fields["sid"]) == ("Subscribe", "q", "7")


# ---------------------------------------------------------------------- Liftbridge


def lb_member(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.type == "map":
        return st.dictionaries(
            st.text("abc", min_size=1, max_size=4), st.binary(max_size=6), min_size=1, max_size=3
        )
    if spec.type in ("bytes", "raw"):
        return st.binary(min_size=1, max_size=20)
    if spec.type == "string":
        return st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
    if spec.enum is not None:
        return st.sampled_from(sorted(k for k in LIFTBRIDGE.protocol.enums[spec.enum] if k))
    ranges = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1)}
    low, high = ranges[spec.type]
    return st.integers(low, high).filter(bool)  # proto3: zero is no value at all


LB_COMMANDS = sorted(c for c in LIFTBRIDGE.protocol.commands)


@pytest.mark.parametrize("command", LB_COMMANDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), crc=st.booleans())
def test_round_trip_of_every_liftbridge_entry(command: str, crc: bool, data: st.DataObject) -> None:
    fields = LIFTBRIDGE.protocol.commands[command].layouts["command"].fields
    if fields[0].type == "protobuf":
        members = [m for m in fields[0].fields if m.tag and data.draw(st.booleans())]
    else:  # ReplicationResponse: no protobuf, the leader's epoch and watermark, then log bytes
        members = list(fields)
    values = {m.name: data.draw(lb_member(m), label=m.name) for m in members}
    wire = envelope(command, values, crc=crc)
    frame = LIFTBRIDGE.decode(wire)
    assert frame.command == command and not frame.expert
    assert frame.fields["crc_check" if crc else "header_length"] == ("valid" if crc else 8)
    got = {k: frame.fields[k] for k in values}
    assert {k: bytes(v) if isinstance(v, bytes) else v for k, v in got.items()} == values


def envelope(command: str, values: dict[str, Any], *, crc: bool = False) -> bytes:
    base = {"envelope_version": 0, "header_length": 8, "flags": 0}
    body = LIFTBRIDGE.encode(command, "command", base | values)
    if not crc:
        return body
    message = body[8:]
    return body[:4] + bytes([0, 12, 1, body[7]]) + struct.pack(">I", crc32c.crc32c(message)) + message


def test_the_api_s_own_classes_read_what_the_spec_writes_and_the_other_way() -> None:
    """Field numbers and types as the Liftbridge API's generated classes have them."""
    ours = {"stream": "orders", "subject": "orders", "message_key": b"k1", "value": b"hello",
            "headers": {"trace": b"abc"}, "ack_inbox": "_INBOX.x", "correlation_id": "c1", "ack_policy": 1,
            "offset": 7, "timestamp": 1_700_000_000_123_456_789, "partition": 3,
            "reply_subject": "r"}  # fmt: skip
    message = api_pb2.Message.FromString(envelope("Publish", ours)[8:])
    assert (message.stream, message.key, message.value, dict(message.headers)) == (
        "orders",
        b"k1",
        b"hello",
        {"trace": b"abc"},
    )
    assert (message.ackInbox, message.correlationId, message.ackPolicy) == ("_INBOX.x", "c1", api_pb2.ALL)
    assert (message.offset, message.timestamp, message.partition, message.replySubject) == (
        7,
        ours["timestamp"],
        3,
        "r",
    )
    ack = api_pb2.Ack(stream="s", partitionSubject="p", msgSubject="m", offset=9, ackInbox="a",
                      correlationId="c", ackPolicy=api_pb2.NONE, receptionTimestamp=1, commitTimestamp=2,
                      ackError=api_pb2.Ack.TOO_LARGE)  # fmt: skip
    frame = LIFTBRIDGE.decode(bytes.fromhex("b90e43b400080001") + ack.SerializeToString())
    assert frame.command == "Ack" and not frame.expert
    assert {k: frame.fields[k] for k in ("stream", "partition_subject", "msg_subject", "offset", "ack_inbox",
            "correlation_id", "ack_policy", "reception_timestamp", "commit_timestamp", "ack_error")} == {
        "stream": "s", "partition_subject": "p", "msg_subject": "m", "offset": 9, "ack_inbox": "a",
        "correlation_id": "c", "ack_policy": 2, "reception_timestamp": 1, "commit_timestamp": 2,
        "ack_error": 3,
    }  # fmt: skip


def test_envelope_trouble_each_gets_its_note() -> None:
    good = envelope("Publish", {"stream": "orders", "value": b"hello"}, crc=True)
    cases = {
        good[:8] + bytes([good[8] ^ 1]) + good[9:]: "CRC-32C mismatch",
        good[:5] + bytes([6]) + good[6:]: "header length 6 is shorter than the header (12 bytes)",
        envelope("Publish", {"stream": "orders", "value": b"cut off"})[:-4]: "not a protobuf Lb Message",
        bytes.fromhex("b90e43b4") + bytes([0, 8, 0, 99]): "unknown command key 99",
        bytes.fromhex("b90e43b4") + bytes([0, 12, 1, 0, 0]): "frame too short for a header",
    }  # fmt: skip
    for wire, says in cases.items():
        frame = LIFTBRIDGE.decode(wire)
        assert any(says in e.message for e in frame.expert), (wire.hex(), frame.expert)
    # A longer header is honoured: its extra bytes are passed over, the message still reads.
    longer = bytes.fromhex("b90e43b4") + bytes([0, 11, 0, 0]) + b"\x07\x07\x07" + good[12:]
    frame = LIFTBRIDGE.decode(longer)
    assert frame.fields["stream"] == "orders" and bytes(frame.fields["header_padding"]) == b"\x07\x07\x07"
    assert not frame.expert


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_any_envelope_bytes_decode_without_raising(data: bytes) -> None:
    frame = LIFTBRIDGE.decode(bytes.fromhex("b90e43b4") + data)
    LIFTBRIDGE.expand(frame)
    LIFTBRIDGE.tree(frame)


# ---------------------------------------------------------------------- framing and garbage


def decoded(*payloads: bytes) -> list[Frame]:
    dissection = Dissection([NATS, LIFTBRIDGE])
    return list(decode_segments(client_stream(payloads, 4222), dissection, None, ReadStats()))


LB_PAYLOAD = envelope("Publish", {"stream": "orders", "value": b"v"})
STREAM = (
    b'CONNECT {"verbose":false,"pass":"hunter2","auth_token":"tok"}\r\nPING\r\nSUB orders.>  1\r\n'
    b"PUB orders.a 5\r\nhello\r\nHPUB orders.b  24 26\r\nNATS/1.0\r\nA: b\r\nX: y\r\n\r\nhi\r\n"
    + f"PUB orders.lb {len(LB_PAYLOAD)}\r\n".encode()
    + LB_PAYLOAD
    + b"\r\nUNSUB 1\r\n"
)


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(1, len(STREAM) - 1), max_size=10, unique=True))
def test_frames_are_found_in_any_segmentation(cuts: list[int]) -> None:
    pieces, at = [], 0
    for cut in sorted(cuts):
        pieces.append(STREAM[at:cut])
        at = cut
    pieces.append(STREAM[at:])
    frames = decoded(*pieces)
    assert [(f.protocol, f.command) for f in frames] == [
        ("nats", "Connect"), ("nats", "Ping"), ("nats", "Subscribe"), ("nats", "Publish"),
        ("nats", "HeadersPublish"), ("nats", "Publish"), ("liftbridge", "Publish"), ("nats", "Unsubscribe"),
    ]  # fmt: skip
    assert not [e for f in frames for e in f.expert]


@pytest.mark.parametrize(
    ("garbage", "says"),
    [
        (b"HELLO WORLD\r\n", "unknown command key HELLO"),
        (b"PUB orders.a 3\r\nhello\r\n", "Data End is 0x6c6f, expected 0x0d0a"),
        (b"PUB orders.a x\r\n", "payload_size 'x' is not a number"),
        (b"PUB\r\n", "pub: 0 words where subject [reply_to] payload_size are expected"),
        (b"UNSUB 1 2 3\r\n", "unsub: 1 words more than expected"),
        (b"UNSUB 1 99999999999\r\n", "max_msgs '99999999999' is out of range for uint32"),
        (b"HPUB a  9 4\r\nNATS/1.0\r\n\r\n\r\n", "Headers needs 9 bytes"),
    ],
)
def test_garbage_gets_its_note_and_the_next_line_is_read(garbage: bytes, says: str) -> None:
    frames = decoded(garbage, b"PING\r\n")
    assert any(says in e.message for f in frames for e in f.expert), [(f.command, f.expert) for f in frames]
    assert frames[-1].command == "Ping" and not frames[-1].expert


@settings(max_examples=200, deadline=None)
@given(
    junk=st.lists(
        st.binary(max_size=40) | st.sampled_from([b"PUB a 3\r\n", b"\r\n", b"MSG x 1 99\r\n"]), max_size=6
    )
)
def test_any_bytes_on_its_port_decode_without_raising(junk: list[bytes]) -> None:
    for frame in decoded(*junk):
        decoder = NATS if frame.protocol == "nats" else LIFTBRIDGE
        decoder.expand(frame)
        decoder.tree(frame)


# ---------------------------------------------------------------------- conversations


def tracked(*steps: tuple[bool, bytes], gap: float = 0.0) -> tuple[list[Frame], Conversations]:
    """Frames of one connection (client first when True) through the tracker."""
    from tests.test_wireshark import tcp_pcap

    path = Path(__file__).parent / ".nats_tracked.pcap"
    path.write_bytes(tcp_pcap(list(steps), server=("127.0.0.1", 4222)))
    try:
        tracker = Conversations([NATS.protocol, LIFTBRIDGE.protocol])
        frames = []
        for frame in read_frames(path, Dissection([NATS, LIFTBRIDGE]), None, ReadStats()):
            tracker.feed(frame)
            frames.append(frame)
        tracker.finish()
        return frames, tracker
    finally:
        path.unlink()


INFO = b'INFO {"server_id":"x","version":"2.9.10","max_payload":64,"headers":true} \r\n'
CONNECT = b'CONNECT {"verbose":false,"lang":"python3","version":"2.16.0"}\r\n'


def test_subscriptions_requests_pings_and_limits_in_plain_words() -> None:
    frames, tracker = tracked(
        (False, INFO),
        (True, CONNECT + b"SUB orders.* q 1\r\nUNSUB 1 2\r\nPING\r\nPUB svc.x _INBOX.a 2\r\nhi\r\n"),
        (
            False,
            b"MSG orders.a 1 1\r\na\r\nMSG orders.b 1 1\r\nb\r\n"
            b"MSG orders.c 1 1\r\nc\r\nMSG orders.d 7 1\r\nd\r\n",
        ),
        (False, b"HMSG _INBOX.a 2  16 16\r\nNATS/1.0 503\r\n\r\n\r\nPONG\r\n"),
        (True, b"PUB big 65\r\n" + b"x" * 65 + b"\r\nPING\r\n"),
        (True, b"HPUB big  12 70\r\nNATS/1.0\r\n\r\n" + b"x" * 58 + b"\r\n"),
        (False, b"-ERR 'Maximum Payload Violation'\r\n"),
    )
    msgs = [f for f in frames if f.command == "Message"]
    assert [(f.links or {}).get("subscribed") for f in msgs] == ["orders.*", "orders.*", None, None]
    assert (msgs[0].links or {})["queue_group"] == "q"
    said = [e.message for f in frames for e in f.expert if e.group != "malformed"]
    assert (
        "Message for subscription sid 1 after packet 6 ended it (sent before the server read the Unsubscribe)"
        in said
    )
    assert "Message for subscription sid 7, which no Subscribe in the capture opened" in said
    assert any("with status 503: no one is subscribed to its subject (no responders)" in m for m in said)
    assert "Publish payload size 65 exceeds the max_payload of 64 the server announced at packet 4" in said
    # An HPUB is bounded by its headers and payload together, as the server counts it.
    assert (
        "HeadersPublish total size 70 exceeds the max_payload of 64 the server announced at packet 4" in said
    )
    assert any(
        m.startswith(
            "the server refused what the client sent \"'Maximum Payload Violation'\"; "
            "the client's last frame before it was HeadersPublish"
        )
        for m in said
    )
    pong = next(f for f in frames if f.command == "Pong")
    assert (pong.links or {})["request_in"] == 5
    reply = next(f for f in frames if f.command == "HeadersMessage")
    assert (reply.links or {})["request_subject"] == "svc.x"
    kinds = {d.kind for d in tracker.diagnoses}
    assert "unanswered_ping" in kinds  # the last PING got no PONG before the capture ended


def test_an_unanswered_ping_is_a_warning_when_traffic_goes_on() -> None:
    from streamdump.dissectors.nats import pings as conversation

    frames, tracker = tracked(
        (False, INFO), (True, CONNECT + b"PING\r\n"), *[(True, b"PUB a 1\r\nx\r\n")] * 3
    )
    assert [d.severity for d in tracker.diagnoses if d.kind == "unanswered_ping"] == ["note"]
    assert frames[-1].ts - frames[1].ts < conversation.PING_PATIENCE  # the capture went on for less


# ---------------------------------------------------------------------- captures


def test_every_capture_decodes_without_expert_errors_but_the_trouble_ones() -> None:
    for path in sorted(NATS_CAPTURES.glob("*.pcap")) + sorted(LB_CAPTURES.glob("*.pcap")):
        frames = list(read_frames(path, Dissection([NATS, LIFTBRIDGE]), None, ReadStats()))
        assert frames, path
        errors = [(f.number, e.message) for f in frames for e in f.expert if e.severity == "error"]
        if path.name != "trouble.pcap":
            assert not errors, (path.name, errors)
        else:
            assert errors, path.name


def test_the_captures_show_what_the_real_peers_did() -> None:
    def frames(name: str, folder: Path = NATS_CAPTURES) -> list[Frame]:
        return list(read_frames(folder / name, Dissection([NATS, LIFTBRIDGE]), None, ReadStats()))

    pubsub = frames("pubsub.pcap")
    assert {f.fields.get("queue_group") for f in pubsub if f.command == "Subscribe"} == {None, "workers"}
    headers = next(f for f in pubsub if f.command == "HeadersPublish")
    assert headers.fields["message_headers"] == {"Trace-Id": "abc", "X-Multi": "one, two"}
    audit = [f for f in pubsub if f.command == "Message" and f.fields["subject"] == "audit.orders"]
    assert len(audit) == 1  # UNSUB 3 1: the server delivers one message, then ends the subscription
    js = frames("jetstream.pcap")
    delivered = [f for f in js if f.fields.get("js_consumer") == "billing" and "sid" in f.fields]
    assert [f.fields["js_stream_seq"] for f in delivered] == [1, 2, 3]
    acked = [f for f in js if "js_stream_seq" in f.fields and f.fields["subject"].startswith("_INBOX.")]
    publish_acks = [(f.fields["js_stream"], f.fields["js_stream_seq"]) for f in acked]
    assert publish_acks == [("ORDERS", 1), ("ORDERS", 2), ("ORDERS", 3)]
    created = next(f for f in js if f.fields.get("subject") == "$JS.API.STREAM.CREATE.ORDERS")
    NATS.expand(created)
    assert created.fields["data_json"]["name"] == "ORDERS"
    lb = frames("session.pcap", LB_CAPTURES)
    # Each Publish twice: as the client publishes it, and as the server delivers it to the leader.
    envelopes = [f for f in lb if f.protocol == "liftbridge" and f.command == "Publish"]
    published = [f for f in envelopes if f.from_client]
    assert len(envelopes) == 8 and len(published) == 4
    assert [f.fields["correlation_id"] for f in published] == ["c-1", "c-2", "c-3", "c-4"]
    assert [f.fields.get("crc_check") for f in published] == ["valid", None, "valid", "valid"]
    acks = [f for f in lb if f.command == "Ack" and not f.from_client]
    assert [(f.fields["correlation_id"], f.fields["offset"]) for f in acks] == [
        ("c-1", 41), ("c-2", 42), ("c-3", 43), ("c-4", 44),
    ]  # fmt: skip


def cli(*args: str) -> tuple[int, str, str]:
    result = subprocess.run([sys.executable, "-m", "streamdump", *args], capture_output=True, text=True)
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("path", "expression", "count"),
    [
        ("nats/pubsub.pcap", 'nats.subject matches "orders\\\\."', 17),
        # API calls (5), publish acks (3) and deliveries (3).
        ("nats/jetstream.pcap", 'nats.js_stream == "ORDERS"', 11),
        ("nats/jetstream.pcap", 'nats.js_stream == "ORDERS" && nats.js_consumer_seq', 3),
        # The refused KV update: its publish ack's error, where it lands.
        ("nats/natsjs_store.pcap", "nats.js_err_code == 10071", 1),
        ("nats/natspy_store.pcap", "nats.js_error_code == 400", 1),
        ("nats/natsjs_store.pcap", 'nats.kv_operation == "DEL" || nats.kv_operation == "PURGE"', 2),
        ("nats/natsjs_store.pcap", 'nats.obj_name == "reports/q3 summary.txt"', 2),
        ("nats/natsjs_services.pcap", 'nats.service_error == "division by zero"', 2),
        ("nats/natsjs_services.pcap", 'nats.srv_verb == "PING"', 2),
        ("nats/natsjs_jetstream.pcap", 'nats.js_ack == "-NAK" || nats.js_ack == "+TERM"', 2),
        ("nats/natsjs_jetstream.pcap", "nats.js_duplicate", 1),
        ("nats/request_reply.pcap", "nats.status == 503", 1),
        ("liftbridge/session.pcap", 'liftbridge.stream == "orders" && liftbridge.command == "Publish"', 8),
        ("liftbridge/trouble.pcap", 'liftbridge.crc_check == "wrong"', 1),
    ],
)
def test_filters_reach_lines_payloads_and_envelopes(path: str, expression: str, count: int) -> None:
    code, out, err = cli("read", str(CAPTURE_ROOT / path), "--filter", expression, "-T", "jsonl")
    assert code == 0, err
    assert len(out.splitlines()) == count, out


def test_secrets_never_show_in_any_view() -> None:
    stream = b'CONNECT {"pass":"hunter2","auth_token":"s3cret-token","user":"bob"}\r\n'
    frame = NATS.decode(stream)
    assert frame.fields["pass"] == frame.fields["auth_token"] == MASKED and frame.fields["user"] == "bob"
    text = json.dumps([str(n) for n in NATS.tree(frame)])
    assert "hunter2" not in text and "s3cret" not in text


def test_new_grammar_is_checked_when_a_spec_loads(tmp_path: Path) -> None:
    base = (Path(__file__).parent.parent / "dissectors" / "liftbridge" / "spec.yaml").read_text()
    cases = {
        "    - offset: {type: int64, tag: 1,": ("    - offset: {type: int64,", "needs 'tag'"),
        "carried_by: {protocol: nats, field: data}": ("carried_by: {protocol: nats}", "carried_by"),
    }
    for old, (new, says) in cases.items():
        folder = tmp_path / old[:8].strip().replace(" ", "_").replace(":", "") / "liftbridge"
        folder.mkdir(parents=True)
        (folder / "spec.yaml").write_text(base.replace(old, new, 1))
        with pytest.raises(SpecError, match=says):
            load_registry(folder.parent, package=None)


# ---------------------------------------------------------------------- the plugin


def test_the_plugins_agree_on_odd_shapes_and_mask_secrets(tmp_path: Path) -> None:
    """tshark with both plugins against streamdump, frame by frame, on what the captures lack:
    secrets, lower case and bare LFs, negative and 64-bit protobuf values, unknown protobuf
    fields, a header length longer than the header, garbage lines."""
    from tests.test_wireshark import _tshark, differences, tcp_pcap

    _tshark()
    odd = envelope("Publish", {"stream": "s", "offset": -1, "partition": -7, "timestamp": 2**63 - 1,
                               "headers": {"a": b"", "b": b"\x00\xff"},
                               "value": b"\r\nPUB x 1\r\n"})  # fmt: skip
    unknown = (
        odd + bytes.fromhex("f80701") + bytes.fromhex("fd0704030201") + bytes.fromhex("f9070102030405060708")
    )
    longer = bytes.fromhex("b90e43b4") + bytes([0, 10, 0, 1]) + b"\x00\x00" + odd[8:]
    frames = [
        (False, INFO),
        (True, b'CONNECT {"pass":"hunter2","auth_token":"tok-123","user":"bob","verbose":false}\r\n'),
        (True, b"sub orders.*\tq  7\nping\r\n"),
        (True, f"PUB orders.a {len(odd)}\r\n".encode() + odd + b"\r\n"),
        (True, f"PUB orders.b {len(unknown)}\r\n".encode() + unknown + b"\r\n"),
        (True, f"PUB orders.c {len(longer)}\r\n".encode() + longer + b"\r\n"),
        (True, b"HELLO\r\nPUB orders.d 3\r\nhello\r\n"),
        # Found by review: words before a bad one still count, numbers past their type, statuses of
        # other lengths, digits of other scripts, a byte-order mark, Unicode spaces around a header.
        (True, b"PUB orders.e -2\r\nSUB orders.f 8\r\nUNSUB 8 99999999999\r\n"),
        (
            False,
            b"MSG orders.f 8 0\r\n\r\nHMSG orders.f 8  33 33\r\nNATS/1.0 99999999999999999999\r\n\r\n\r\n",
        ),
        (False, "MSG orders.f 8 $JS.ACK.s.c.1.2.3.4.\u0663 2\r\nhi\r\n".encode()),
        (True, b"PUB orders.g 5\r\n\xef\xbb\xbf{}\r\n"),
        # JSON nested past what either twin reads (tshark's Lua crashed on 500 levels), a line break
        # of Unicode's that splitlines() would cut a JSON line at.
        (True, b"PUB orders.i 1000\r\n" + b"[" * 500 + b"]" * 500 + b"\r\n"),
        (True, "PUB orders.j 3\r\n\u2028\r\n".encode()),
        (True, "HPUB orders.h  21 21\r\nNATS/1.0\r\nA:\u00a0x\u00a0\r\n\r\n\r\n".encode()),
        (False, b"MSG orders.a 7 2\r\nhi\r\n-ERR 'Unknown Protocol Operation'\r\n"),
    ]
    path = tmp_path / "odd.pcap"
    path.write_bytes(tcp_pcap(frames, server=("127.0.0.1", 4222)))
    for name in ("nats", "liftbridge"):
        found = list(differences(path, tmp_path, REGISTRY.get(name)))
        assert not found, "\n\n".join(found[:5])
    shown = subprocess.run(
        [_tshark(), "-X", f"lua_script:{ROOT / 'lua' / 'streamdump.lua'}", "-r", str(path), "-V"],
        capture_output=True, text=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert shown.returncode == 0 and "Connect" in shown.stdout
    assert "hunter2" not in shown.stdout and "tok-123" not in shown.stdout and "bob" in shown.stdout


@pytest.mark.parametrize(
    ("pattern", "name", "matched"),
    [
        (">", "orders", True),
        (">", "a.b.c", True),
        ("orders.>", "orders", False),
        ("orders.>", "orders.a.b", True),
        ("orders.*", "orders.a", True),
        ("orders.*", "orders.a.b", False),
        ("*.created", "orders.created", True),
        ("orders", "orders.a", False),
        ("a.>.c", "a.b.c", False),  # `>` only ends a pattern
    ],
)
def test_wildcards_as_subjects_use_them(pattern: str, name: str, matched: bool) -> None:
    from streamdump.wire.wildcards import matches

    assert matches(pattern, name) is matched


def test_where_a_carried_protocol_is_looked_for_is_data_in_its_spec(tmp_path: Path) -> None:
    """`wiring.carried_by.where` names the carrier's subjects that may hold envelopes."""
    root = Path(__file__).parent.parent / "dissectors"
    for name in ("nats", "liftbridge"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        spec = (root / name / "spec.yaml").read_text()
        if name == "liftbridge":
            spec = spec.replace("where: {subject: ['>']}".replace("'", '"'), "where: {subject: [orders.*]}")
            assert "orders.*" in spec
        (tmp_path / name / "spec.yaml").write_text(spec)
    registry = load_registry(tmp_path, package="streamdump.dissectors")
    decoders = [Decoder(registry.get("nats")), Decoder(registry.get("liftbridge"))]
    payload = envelope("Publish", {"stream": "s", "value": b"v"})
    stream = b"".join(
        f"PUB {subject} {len(payload)}\r\n".encode() + payload + b"\r\n"
        for subject in ("orders.a", "audit.a")
    )
    frames = list(decode_segments(client_stream((stream,), 4222), Dissection(decoders), None, ReadStats()))
    assert [(f.protocol, f.fields.get("subject")) for f in frames] == [
        ("nats", "orders.a"), ("liftbridge", None), ("nats", "audit.a"),
    ]  # fmt: skip
    spec = (tmp_path / "liftbridge" / "spec.yaml").read_text()
    (tmp_path / "liftbridge" / "spec.yaml").write_text(spec.replace("where: {subject:", "where: {nope:"))
    with pytest.raises(SpecError, match="nats has no text field 'nope'"):
        load_registry(tmp_path, package="streamdump.dissectors")


def test_text_that_is_not_utf_8_reads_the_same_in_both_twins(tmp_path: Path) -> None:
    """Bad bytes become U+FFFD as Python's decoder makes them (the plugin used to write raw bytes,
    or Wireshark's own shorter repair, into tshark's output); a protobuf string that is not UTF-8
    is refused by Google's library, and by the plugin alike."""
    from tests.test_wireshark import _tshark, differences, tcp_pcap

    _tshark()
    bad = [b"\xff", b"\xff\xfe", b"a\xc3", b"\xe0\x80x", b"\xed\xa0\x80", b"\xf0\x9f\x98",
           b"\xf4\x90\x80\x80", b"ok\xc3\xa9", b"\xc0\xaf", b"\xe2\x82"]  # fmt: skip
    frames = [(False, INFO)]
    for index, text in enumerate(bad):
        frames.append((True, b"SUB s" + text + b" %d\r\nPUB p" % index + text + b" 1\r\nx\r\n"))
    not_utf8 = bytes.fromhex("b90e43b400080000") + b"\x2a\x02\xff\xfe"  # stream = ff fe
    frames.append((True, f"PUB lb {len(not_utf8)}\r\n".encode() + not_utf8 + b"\r\n"))
    path = tmp_path / "utf8.pcap"
    path.write_bytes(tcp_pcap(frames, server=("127.0.0.1", 4222)))
    for name in ("nats", "liftbridge"):
        found = list(differences(path, tmp_path, REGISTRY.get(name)))
        assert not found, "\n\n".join(found[:5])
    lb = LIFTBRIDGE.decode(not_utf8)
    assert [e.message for e in lb.expert] == ["Message is not a protobuf Lb Message: truncated or corrupt"]


def test_a_ping_right_after_garbage_is_read_when_it_arrives() -> None:
    """Resynchronising after a bad frame judges a line as soon as its name shows (5 bytes)."""
    frames = decoded(b"PUB a 2\r\nhiXYPIN", b"G\r\n", b"PUB b 0\r\n\r\n")
    assert [(f.number, f.command) for f in frames] == [(2, "Publish"), (3, "Ping"), (4, "Publish")]
    frames = decoded(b"GARBAGE\r\nCONNE", b"CT {}\r\n")
    assert [f.command for f in frames] == [None, "Connect"]


# ---------------------------------------------------------------------- JetStream, KV, objects, services


@pytest.mark.parametrize(
    ("pattern", "name", "found"),
    [
        ("$KV.{b}.{k>}", "$KV.profiles.a.b", {"b": "profiles", "k": "a.b"}),
        ("$KV.{b}.{k>}", "$KV.profiles", None),  # `{k>}` takes one token or more
        ("$O.{b}.C.{n}", "$O.files.C.x", {"b": "files", "n": "x"}),
        ("$O.{b}.C.{n}", "$O.files.M.x", None),
        ("$O.{b}.C.{n}", "$O.files.C.x.y", None),
        ("$SRV.{v}", "$SRV..x", None),  # an empty token names nothing
        ("a.*.{x}", "a.b.c", {"x": "c"}),
    ],
)
def test_what_a_subject_names(pattern: str, name: str, found: dict[str, str] | None) -> None:
    from streamdump.wire.wildcards import captures

    assert captures(pattern, name) == found


def with_headers(line: bytes, *headers: bytes, payload: bytes = b"") -> bytes:
    """An HPUB or HMSG: its line's start, then the header block's and total sizes it computes."""
    block = b"NATS/1.0\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"
    return b"%s %d %d\r\n%s%s\r\n" % (line, len(block), len(block) + len(payload), block, payload)


def test_subjects_payloads_and_headers_say_what_jetstream_kv_objects_and_services_do() -> None:
    def one(stream: bytes) -> dict[str, Any]:
        frame = NATS.decode(stream)
        assert not [e for e in frame.expert if e.group == "malformed"], frame.expert
        return {**frame.fields, "notes": [e.message for e in frame.expert]}

    # nats.js 3.x: a header block of size 0 for a JetStream publish without headers.
    empty = one(b"HPUB shop.orders _INBOX.a.1 0 2\r\nhi\r\n")
    assert empty["payload_size"] == 2 and empty["notes"] == []
    pull = one(b'PUB $JS.API.CONSUMER.MSG.NEXT.ORDERS.billing _INBOX.p 11\r\n{"batch":1}\r\n')
    assert (pull["js_api"], pull["js_stream"], pull["js_consumer"]) == (
        "CONSUMER.MSG.NEXT",
        "ORDERS",
        "billing",
    )
    direct = one(b"PUB $JS.API.DIRECT.GET.KV_p.$KV.p.a.b _INBOX.x 0\r\n\r\n")
    assert (direct["js_api"], direct["js_stream"], direct["js_subject"]) == (
        "DIRECT.GET",
        "KV_p",
        "$KV.p.a.b",
    )
    newer = one(b"PUB $JS.API.SOME.FUTURE.CALL _INBOX.x 0\r\n\r\n")
    assert newer["js_api"] == "SOME.FUTURE.CALL"
    delete = one(with_headers(b"HPUB $KV.p.a.b _INBOX.x", b"KV-Operation: DEL"))
    assert (delete["kv_bucket"], delete["kv_key"], delete["kv_operation"]) == ("p", "a.b", "DEL")
    assert one(b"PUB $KV.p.k _INBOX.x 1\r\nv\r\n")["kv_operation"] == "PUT"
    got = one(
        with_headers(b"HMSG _INBOX.x 1", b"Nats-Subject: $KV.p.alice", b"Nats-Sequence: 7", payload=b"v2")
    )
    assert (got["kv_bucket"], got["kv_key"], got["kv_revision"], got["kv_operation"]) == (
        "p",
        "alice",
        7,
        "PUT",
    )
    meta = b'{"name":"a b","nuid":"N1","size":3,"chunks":1,"digest":"SHA-256=x"}'
    named = one(b"PUB $O.files.M.YSBi _INBOX.x %d\r\n%s\r\n" % (len(meta), meta))
    assert (named["obj_bucket"], named["obj_name"], named["obj_nuid"], named["obj_chunks"]) == (
        "files",
        "a b",
        "N1",
        1,
    )
    assert one(b"PUB $O.files.M.n*t _INBOX.x 0\r\n\r\n")["obj_name"] == "n*t"  # not base64: kept
    assert one(b"PUB $O.files.M.YQ== _INBOX.x 0\r\n\r\n")["obj_name"] == "a"  # padded
    assert one(b"PUB $O.files.C.N1 _INBOX.x 1\r\nz\r\n")["obj_nuid"] == "N1"
    assert one(b"PUB $SRV.PING.calc _INBOX.x 0\r\n\r\n")["srv_verb"] == "PING"
    for payload, name in ((b"", "+ACK"), (b"+ACK", "+ACK"), (b"-NAK {\"delay\":1}", "-NAK"),
                          (b"+WPI", "+WPI"), (b"+NXT {}", "+NXT"), (b"+TERM bad", "+TERM")):  # fmt: skip
        ack = one(b"PUB $JS.ACK.S.C.1.2.3.4.5 %d\r\n%s\r\n" % (len(payload), payload))
        assert ack["js_ack"] == name
    # A publish ack, a duplicate noted, an error wherever it lands; a delivery's own JSON is not one.
    acked = b'{"stream":"S", "seq":5,"duplicate": true}'
    pub_ack = one(b"MSG _INBOX.a 1 %d\r\n%s\r\n" % (len(acked), acked))
    assert (pub_ack["js_stream"], pub_ack["js_stream_seq"], pub_ack["js_duplicate"]) == ("S", 5, True)
    assert pub_ack["notes"] == [
        "duplicate publish: S already had this Nats-Msg-Id (sequence 5); not stored again"
    ]
    refused = (
        b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"},"stream":"KV_p"}'
    )
    error = one(b"MSG _INBOX.a 1 %d\r\n%s\r\n" % (len(refused), refused))
    assert (error["js_error_code"], error["js_err_code"]) == (400, 10071)
    assert error["notes"] == ["JetStream error 400 (10071): wrong last sequence: 1"]
    published = one(b"PUB app.events %d\r\n%s\r\n" % (len(refused), refused))  # a client's own payload
    assert "js_error_code" not in published and published["notes"] == []
    # A service error: shown where the responder sends it, told where it is delivered.
    block = b"NATS/1.0\r\nNats-Service-Error: division by zero\r\nNats-Service-Error-Code: 400\r\n\r\n"
    sent = one(b"HPUB _INBOX.r %d %d\r\n%s\r\n" % (len(block), len(block), block))
    delivered = one(b"HMSG _INBOX.r 1 %d %d\r\n%s\r\n" % (len(block), len(block), block))
    assert (sent["service_error"], sent["service_error_code"], sent["notes"]) == ("division by zero", 400, [])
    assert delivered["notes"] == ["service error 400: division by zero"]


def test_a_pull_is_answered_by_its_messages_heartbeats_and_end() -> None:
    frames, tracker = tracked(
        (False, INFO),
        (
            True,
            CONNECT + b'SUB _INBOX.p1 1\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.c _INBOX.p1 11\r\n{"batch":2}\r\n',
        ),
        (False, b"MSG s.one 1 $JS.ACK.S.c.1.1.1.1.1 1\r\na\r\nMSG s.two 1 $JS.ACK.S.c.1.2.2.1.0 1\r\nb\r\n"),
        (True, b"PUB $JS.ACK.S.c.1.1.1.1.1 4\r\n+ACK\r\nSUB _INBOX.p2 2\r\n"),
        (True, b'PUB $JS.API.CONSUMER.MSG.NEXT.S.c _INBOX.p2 11\r\n{"batch":5}\r\n'),
        (False, b"HMSG _INBOX.p2 2 31 31\r\nNATS/1.0 100 Idle Heartbeat\r\n\r\n\r\n"),
        (False, b"HMSG _INBOX.p2 2 32 32\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n"),
        (True, b'PUB $JS.API.CONSUMER.MSG.NEXT.S.c _INBOX.p3 11\r\n{"batch":5}\r\n'),
    )
    pulls = [f for f in frames if f.fields.get("js_api") == "CONSUMER.MSG.NEXT"]
    first, second, silent = pulls
    delivered = [f for f in frames if f.command == "Message"]
    assert [(f.links or {}).get("request_in") for f in delivered] == [first.number, first.number]
    assert "response_time" in (delivered[0].links or {}) and "response_time" not in (delivered[1].links or {})
    assert (first.links or {})["response_in"] == delivered[0].number
    heartbeat, timeout = (f for f in frames if f.command == "HeadersMessage")
    assert (heartbeat.links or {})["request_in"] == second.number and "response_time" not in heartbeat.links
    assert (second.links or {})["response_in"] == timeout.number  # it ended without a message
    ack = next(f for f in frames if f.fields.get("js_ack"))
    assert (ack.links or {})["request_in"] == delivered[0].number  # the message it acknowledges
    # +WPI leaves the message open: the acknowledgement after it links to it too.
    working, _ = tracked(
        (False, INFO),
        (True, CONNECT + b"SUB in 1\r\n"),
        (False, b"MSG s.one 1 $JS.ACK.S.c.1.1.1.1.0 1\r\na\r\n"),
        (True, b"PUB $JS.ACK.S.c.1.1.1.1.0 4\r\n+WPI\r\nPUB $JS.ACK.S.c.1.1.1.1.0 4\r\n+ACK\r\n"),
        (True, b"PUB $JS.ACK.S.c.1.1.1.1.0 4\r\n+ACK\r\n"),
    )
    acks = [f for f in working if f.fields.get("js_ack")]
    message = next(f for f in working if f.command == "Message")
    assert [(f.links or {}).get("request_in") for f in acks] == [message.number] * 2 + [None]
    said = {(d.kind, d.number) for d in tracker.diagnoses}
    assert ("reply_status", timeout.number) in said
    assert ("no_reply", silent.number) in said and ("no_reply", first.number) not in said
    # Two passes: each pull is kept for what answers it.
    replies = tracker.trackers["nats"].rules[1]
    assert replies.awaits_later(first) and replies.later(first) == {"response_in": delivered[0].number}


def test_the_plugin_agrees_on_jetstream_shapes_the_captures_lack(tmp_path: Path) -> None:
    from tests.test_wireshark import _tshark, differences, tcp_pcap

    _tshark()
    refused = b'{"error":{"code":503,"description":"no responders"}}'
    frames = [
        (False, INFO),
        (True, CONNECT + b"SUB _INBOX.* 1\r\nPUB $JS.API.CONSUMER.MSG.NEXT.S.c _INBOX.w 2\r\n{}\r\n"),
        (False, b"MSG s.x 1 $JS.ACK.d.h.S.c.1.1.1.1.1.r 1\r\na\r\n"),
        (False, b"HMSG _INBOX.w 1 33 33\r\nNATS/1.0 409 Consumer Deleted\r\n\r\n\r\n"),
        (False, b"MSG _INBOX.q 1 %d\r\n%s\r\n" % (len(refused), refused)),
        (True, b"PUB $O.b.M.4pyT 0\r\n\r\nPUB $O.b.M.YQ=== 0\r\n\r\nPUB $O.b.M.Y 0\r\n\r\n"),
        (True, b"PUB $KV.b.k.\xc3\xa9 0\r\n\r\nPUB $SRV.STATS.calc.ID1 0\r\n\r\n"),
        (
            True,
            b"HPUB x.y 0 0\r\n\r\nHPUB _INBOX.z 38 38\r\nNATS/1.0\r\nNats-Service-Error-Code: 5\r\n\r\n\r\n",
        ),
    ]
    # An object whose chunks match its metadata, and one whose second chunk does not.
    frames += object_put("good", b"N1", [b"abc", b"defg"]) + object_put(
        "bad", b"N2", [b"abc", b"defg"], b"defh"
    )
    path = tmp_path / "jetstream_odd.pcap"
    path.write_bytes(tcp_pcap(frames, server=("127.0.0.1", 4222)))
    for two_pass in (False, True):
        found = list(differences(path, tmp_path, REGISTRY.get("nats"), two_pass=two_pass))
        assert not found, "\n\n".join(found[:5])


def object_put(
    name: str, nuid: bytes, chunks: list[bytes], last: bytes | None = None
) -> list[tuple[bool, bytes]]:
    """An object store put: its chunks (the last one replaced by last, if given), then its metadata."""
    import base64
    import hashlib

    sent = [*chunks[:-1], last if last is not None else chunks[-1]]
    out = [(True, b"PUB $O.b.C.%s %d\r\n%s\r\n" % (nuid, len(c), c)) for c in sent]
    digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(b"".join(chunks)).digest()).decode()
    meta = json.dumps(
        {"name": name, "bucket": "b", "nuid": nuid.decode(), "size": sum(map(len, chunks)),
         "chunks": len(chunks), "digest": digest}
    ).encode()  # fmt: skip
    subject = b"$O.b.M." + base64.urlsafe_b64encode(name.encode())
    return [*out, (True, b"PUB %s %d\r\n%s\r\n" % (subject, len(meta), meta))]


def test_an_objects_chunks_are_linked_and_checked_against_its_digest() -> None:
    frames, tracker = tracked(
        (False, INFO),
        (True, CONNECT),
        *object_put("good", b"N1", [b"abc", b"defg"]),
        *object_put("bad", b"N2", [b"abc", b"defg"], b"defh"),
        *object_put("short", b"N3", [b"abc", b"defg"], b"de"),
        (
            False,
            b"MSG $O.b.C.N1 1 $JS.ACK.OBJ_b.c.1.1.1.1.1 3\r\nabc\r\n"
            b"MSG $O.b.C.N1 1 $JS.ACK.OBJ_b.c.1.2.2.1.0 4\r\ndefg\r\n",
        ),
    )
    metas = [f for f in frames if "obj_name" in f.fields]
    chunks = [f for f in frames if "obj_nuid" in f.fields and "obj_name" not in f.fields]
    assert [(m.links or {}).get("chunks_in") for m in metas] == [
        [c.number for c in chunks[i : i + 2]] for i in (0, 2, 4)
    ]
    delivered = chunks[-2:]
    assert [(f.links or {}).get("object_in") for f in delivered] == [metas[0].number] * 2
    said = [d.message for d in tracker.diagnoses if d.kind == "digest"]
    assert len(said) == 2
    assert (
        said[0].startswith("object 'bad' (metadata in packet") and "its chunks' digest is SHA-256=" in said[0]
    )
    assert said[1].endswith("its 2 chunks hold 5 bytes, its metadata says 7")


def test_a_hooks_names_are_checked_when_a_spec_loads(tmp_path: Path) -> None:
    spec = (ROOT / "dissectors" / "nats" / "spec.yaml").read_text()
    for bad, says in (
        ('- {pattern: "$KV.{kv_bucket}.{kv_key>}"}', '- {pattern: "$KV.{nowhere}"}'),
        ('- {pattern: "$KV.{kv_bucket}.{kv_key>}"}', '- {pattern: "$KV.{kv_key>}.x"}'),
        ('- {pattern: "$SRV.{srv_verb}"}', '- {pattern: "$SRV.x", js_delivered: "1"}'),
    ):
        folder = tmp_path / "specs" / "nats"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "spec.yaml").write_text(spec.replace(bad, says))
        with pytest.raises(SpecError, match=r"hooks\.payload\.names"):
            load_registry(tmp_path / "specs", package=None)


def names_patterns() -> list[tuple[str, dict[str, str]]]:
    names = REGISTRY.get("nats").hooks["payload"].names
    assert names is not None
    return [(pattern, dict(fixed)) for pattern, fixed in names[1]]


def subject_of(pattern: str) -> tuple[str, dict[str, str]]:
    """A subject the pattern stands for, and the fields it should name."""
    tokens, named = [], {}
    for index, token in enumerate(pattern.split(".")):
        if token.startswith("{"):
            field_name = token.strip("{}>")
            value = f"v{index}.w{index}" if token.endswith(">}") else f"v{index}"
            tokens.append(value)
            named[field_name] = value
        else:
            tokens.append(token)
    return ".".join(tokens), named


@pytest.mark.parametrize(
    ("pattern", "fixed"), names_patterns(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_subject_pattern_of_the_spec_names_its_fields(pattern: str, fixed: dict[str, str]) -> None:
    subject, named = subject_of(pattern)
    fields = NATS.decode(f"PUB {subject} _INBOX.r 0\r\n\r\n".encode()).fields
    expected = {**fixed, **named}  # an object name "v3" is no base64 of UTF-8 text: kept as it is
    assert {k: fields.get(k) for k in expected} == expected
    # The first pattern that matches wins: a subject made of a later pattern is not taken earlier.
    earlier = [p for p, _ in names_patterns()[: names_patterns().index((pattern, fixed))]]
    from streamdump.wire.wildcards import captures

    assert all(captures(p, subject) is None for p in earlier), pattern


def test_the_plugin_names_what_every_subject_pattern_names(tmp_path: Path) -> None:
    from tests.test_wireshark import _tshark, differences, tcp_pcap

    _tshark()
    lines = b"".join(f"PUB {subject_of(p)[0]} _INBOX.r 0\r\n\r\n".encode() for p, _ in names_patterns())
    path = tmp_path / "subjects.pcap"
    path.write_bytes(tcp_pcap([(False, INFO), (True, CONNECT + lines)], server=("127.0.0.1", 4222)))
    found = list(differences(path, tmp_path, REGISTRY.get("nats")))
    assert not found, "\n\n".join(found[:5])
