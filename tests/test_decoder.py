"""Decoder behaviour on hand-picked frames and on garbage: it never raises, it explains."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdump.spec.decoder import Decoder, EncodeError

DELETE_PUBLISHER = bytes.fromhex("00000009000600010000000701")


def test_delete_publisher_request_from_the_issue(decoder: Decoder) -> None:
    frame = decoder.decode(DELETE_PUBLISHER)
    assert (frame.command, frame.kind, frame.key, frame.version) == ("DeletePublisher", "request", 6, 1)
    assert frame.fields == {"correlation_id": 7, "publisher_id": 1}
    assert frame.expert == []


def test_response_bit_selects_the_response_layout(decoder: Decoder) -> None:
    frame = decoder.decode(bytes.fromhex("0000000a80060001000000070002"))
    assert (frame.command, frame.kind, frame.key, frame.wire_key) == (
        "DeletePublisher",
        "response",
        6,
        0x8006,
    )
    assert frame.fields == {"correlation_id": 7, "response_code": 2}


def test_tree_has_offsets_and_lengths(decoder: Decoder) -> None:
    nodes = decoder.tree(decoder.decode(DELETE_PUBLISHER))
    assert [(n.label, n.offset, n.length, n.value) for n in nodes] == [
        ("Size", 0, 4, 9),
        ("Key", 4, 2, 6),
        ("Version", 6, 2, 1),
        ("Correlation ID", 8, 4, 7),
        ("Publisher ID", 12, 1, 1),
    ]


def test_subscribe_offset_value_only_for_offset_and_timestamp(decoder: Decoder) -> None:
    base = {"correlation_id": 1, "subscription_id": 0, "stream": "s", "credit": 10}
    first = decoder.encode("Subscribe", "request", {**base, "offset_type": 1})
    at = decoder.encode("Subscribe", "request", {**base, "offset_type": 4, "offset": 42})
    ts = decoder.encode("Subscribe", "request", {**base, "offset_type": 5, "timestamp": -5})
    assert len(at) == len(first) + 8 == len(ts)
    assert decoder.decode(first).fields == {**base, "offset_type": 1}
    assert decoder.decode(at).fields["offset"] == 42
    assert decoder.decode(ts).fields["timestamp"] == -5


def test_truncated_frame_keeps_what_was_decoded(decoder: Decoder) -> None:
    wire = decoder.encode(
        "DeclarePublisher",
        "request",
        {"correlation_id": 3, "publisher_id": 2, "publisher_reference": "ref", "stream": "orders"},
    )
    cut = wire[:-3]
    # The size prefix still claims the full length: the capture lost the end.
    frame = decoder.decode(cut)
    assert frame.fields == {"correlation_id": 3, "publisher_id": 2, "publisher_reference": "ref"}
    messages = [e.message for e in frame.expert if e.severity == "error"]
    assert any("Stream needs 6 bytes" in m for m in messages), messages
    # A frame whose own size is short of its layout is also reported, not raised.
    reframed = struct.pack(">I", len(cut) - 4) + cut[4:]
    short = decoder.decode(reframed)
    assert short.fields["publisher_reference"] == "ref"
    assert [e.severity for e in short.expert] == ["error"]


def test_partial_array_is_kept(decoder: Decoder) -> None:
    wire = decoder.encode("PublishConfirm", "command", {"publisher_id": 1, "publishing_ids": [1, 2, 3]})
    frame = decoder.decode(struct.pack(">I", len(wire) - 4 - 4) + wire[4:-4])
    assert frame.fields["publisher_id"] == 1
    assert frame.expert and frame.expert[0].severity == "error"
    assert "Publishing IDs (3 entries)" in frame.expert[0].message


def test_trailing_bytes_are_a_warning_not_data(decoder: Decoder) -> None:
    body = DELETE_PUBLISHER[4:] + b"\xde\xad"
    frame = decoder.decode(struct.pack(">I", len(body)) + body)
    assert frame.fields["publisher_id"] == 1
    assert bytes(frame.fields["trailing"]) == b"\xde\xad"
    assert [(e.severity, e.message) for e in frame.expert] == [("warn", "2 bytes after the last field")]


def test_unknown_key_and_version(decoder: Decoder) -> None:
    unknown = decoder.decode(bytes.fromhex("00000008007f0001cafebabe"))
    assert unknown.command is None and unknown.name == "Unknown(0x007f)"
    assert unknown.expert[0].message == "unknown command key 0x007f"
    assert bytes(unknown.fields["payload"]) == bytes.fromhex("cafebabe")
    newer = decoder.decode(bytes.fromhex("00000009000600090000000701"))
    assert newer.command == "DeletePublisher" and newer.version == 9
    assert newer.fields == {"correlation_id": 7, "publisher_id": 1}
    assert "version 9 is not in the registry" in newer.expert[0].message


def test_negative_length_and_huge_count(decoder: Decoder) -> None:
    neg = decoder.decode(bytes.fromhex("0000000a000e000100000001fffe"))
    assert neg.expert[0].message == "stream has negative length -2"
    huge = decoder.decode(bytes.fromhex("0000000c000f0001000000017fffffff"))
    assert "Streams (2147483647 entries)" in huge.expert[0].message


def test_invalid_utf8_is_flagged(decoder: Decoder) -> None:
    frame = decoder.decode(bytes.fromhex("0000000b000e0001000000010001ff"))
    assert frame.fields["stream"] == "\ufffd"
    assert frame.expert[0].severity == "warn"


def test_encode_errors_are_clear(decoder: Decoder) -> None:
    for args, message in [
        (("Nope", "request", {}), "unknown command 'Nope'"),
        (("Deliver", "request", {}), "Deliver has no request layout"),
        (("Subscribe", "request", {"correlation_id": 1}), "cannot encode"),
    ]:
        try:
            decoder.encode(*args)
        except EncodeError as exc:
            assert message in str(exc)
        else:
            raise AssertionError(f"{args} encoded")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_raises(decoder: Decoder, data: bytes) -> None:
    frame = decoder.decode(data)
    assert frame.data == data
    decoder.tree(frame)


@settings(max_examples=300, deadline=None)
@given(key=st.integers(0, 0xFFFF), version=st.integers(0, 3), body=st.binary(max_size=120))
def test_garbage_with_a_real_header_never_raises(
    decoder: Decoder, key: int, version: int, body: bytes
) -> None:
    data = struct.pack(">IHH", 4 + len(body), key, version) + body
    frame = decoder.decode(data)
    nodes = decoder.tree(frame)
    assert frame.key == key & 0x7FFF
    # Every node lies inside the frame.
    stack = list(nodes)
    while stack:
        node = stack.pop()
        assert node.offset >= 0 and node.offset + node.length <= len(data), node
        stack.extend(node.children)


def test_size_field_shorter_than_the_header(decoder: Decoder) -> None:
    frame = decoder.decode(bytes.fromhex("00000002001700010000"))
    assert frame.kind == "unknown"
    assert any(e.severity == "error" and "too short for a header" in e.message for e in frame.expert)
