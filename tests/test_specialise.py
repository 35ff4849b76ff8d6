"""The generated fast path decodes exactly as the general ops do, or hands the frame back to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CAPTURES, ROCKETMQ_CAPTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_strategies import struct_strategy
from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.spec.layout import Ctx, Short, decode_ops
from streamdump.spec.registry import default_registry
from streamdump.spec.specialise import Fallback
from streamdump.views.render import _json_default
from streamdump.wire.frame import Frame

PROTOCOL = default_registry().get("rabbitmq_stream")
FAST = Decoder(PROTOCOL)
GENERAL = Decoder(PROTOCOL, fast=False)
ENTRIES = sorted(
    (command.name, kind, version)
    for command in PROTOCOL.commands.values()
    for kind in command.layouts
    for version in command.versions
)
CAPTURE_FILES = sorted(CAPTURES.glob("*.pcap")) + sorted((CAPTURES / "pathological").glob("*.pcap"))


def as_json(frame: Frame) -> str:
    """Everything a decode says: values (with what == on objects would hide), notes, command."""
    whole = {
        "fields": frame.fields,
        "expert": [e.as_dict() for e in frame.expert],
        "cut": [e.cut for e in frame.expert],
        "head": [frame.wire_key, frame.kind, frame.command, frame.version, frame.size],
    }
    return json.dumps(whole, default=_json_default, sort_keys=True)


def same_decode(data: bytes) -> None:
    for expand in (False, True):
        fast, general = FAST.decode(data, expand=expand), GENERAL.decode(data, expand=expand)
        assert fast.fields == general.fields
        assert fast.expert == general.expert
        assert as_json(fast) == as_json(general)


def test_every_layout_has_a_fast_path() -> None:
    assert set(FAST.fast) == set(FAST.compiled)
    assert GENERAL.fast == {}


def test_the_fast_path_is_taken() -> None:
    """Whole frames of the committed captures decode without falling back (else it is no fast path)."""
    fallbacks = 0
    frames = 0
    for path in sorted(CAPTURES.glob("*.pcap")):
        for frame in read_frames(path, GENERAL, [5552], ReadStats()):
            if frame.incomplete is not None or frame.command is None or frame.kind == "unknown":
                continue
            layout = PROTOCOL.layout(frame.key, frame.kind == "response")
            if layout is None or frame.version not in PROTOCOL.commands[layout.command].versions:
                continue
            frames += 1
            fast = FAST.fast[frame.key, frame.kind == "response", frame.version]
            try:
                fast(memoryview(frame.data), 8, len(frame.data), {}, Ctx([]))
            except Fallback:
                fallbacks += 1
    assert frames > 500
    # Only frames the general decoder flags (e.g. truncated on purpose) may fall back.
    assert fallbacks < frames // 100


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: p.name)
def test_captures_decode_the_same_both_ways(path: Path) -> None:
    for frame in read_frames(path, GENERAL, [5552], ReadStats()):
        if frame.incomplete is None:
            same_decode(bytes(frame.data))


def test_a_frame_that_falls_back_keeps_no_trace_of_the_fast_attempt() -> None:
    """A Publish whose last message is cut: the fast path fails late, after two whole messages."""
    messages = [{"publishing_id": n, "entry": simple_entry(b"x" * (n + 1))} for n in range(3)]
    wire = FAST.encode("Publish", "command", {"publisher_id": 1, "messages": messages})
    body = wire[4:-2]
    cut = len(body).to_bytes(4, "big") + body  # a whole frame, by its size, that ends inside message 3
    with pytest.raises((Fallback, Short)):  # a codec's own Short counts as falling back
        FAST.fast[0x0002, False, 1](memoryview(cut), 8, len(cut), {}, Ctx([]))
    same_decode(cut)
    frame = FAST.decode(cut)
    assert [m["publishing_id"] for m in frame.fields["messages"]] == [0, 1, 2]
    assert "entry" not in frame.fields["messages"][2]
    assert [e.severity for e in frame.expert] == ["error"]


@pytest.mark.parametrize(("command", "kind", "version"), ENTRIES, ids=lambda v: str(v))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_valid_and_damaged_frames_decode_the_same(
    command: str, kind: str, version: int, data: st.DataObject
) -> None:
    layout = PROTOCOL.commands[command].layouts[kind]
    wire = FAST.encode(command, kind, data.draw(struct_strategy(layout.fields, version)), version=version)
    same_decode(wire)
    # Damaged copies: cut anywhere (size prefix kept consistent, so the frame claims to be whole),
    # or bytes overwritten after the header.
    cut = data.draw(st.integers(8, len(wire)))
    body = wire[4:cut]
    same_decode(len(body).to_bytes(4, "big") + body)
    if len(wire) > 8:
        at = data.draw(st.integers(8, len(wire) - 1))
        junk = data.draw(st.binary(min_size=1, max_size=8))
        damaged = (wire[:at] + junk + wire[at + len(junk) :])[: len(wire)]
        same_decode(damaged)


@settings(max_examples=200, deadline=None)
@given(
    key=st.sampled_from(sorted({k | 0x8000 * response for k, response, _ in FAST.compiled})),
    body=st.binary(max_size=200),
)
def test_garbage_after_a_known_header_decodes_the_same(key: int, body: bytes) -> None:
    payload = key.to_bytes(2, "big") + b"\x00\x01" + body
    same_decode(len(payload).to_bytes(4, "big") + payload)


def test_general_ops_and_fast_path_agree_on_positions() -> None:
    """Both return the same end position for a whole frame (trailing-bytes notes depend on it)."""
    wire = FAST.encode(
        "Publish",
        "command",
        {"publisher_id": 1, "messages": [{"publishing_id": 7, "entry": simple_entry(b"seven")}]},
    )
    _, ops = FAST.compiled[FAST.protocol.commands["Publish"].layouts["command"].key, False, 1]
    general_out: dict = {}
    fast_out: dict = {}
    end = decode_ops(ops, memoryview(wire), 8, len(wire), general_out, Ctx([]))
    assert FAST.fast[0x0002, False, 1](memoryview(wire), 8, len(wire), fast_out, Ctx([])) == end
    assert fast_out == general_out


ROCKETMQ = default_registry().get("rocketmq")
ROCKETMQ_FAST, ROCKETMQ_GENERAL = Decoder(ROCKETMQ), Decoder(ROCKETMQ, fast=False)


@pytest.mark.parametrize("path", sorted(ROCKETMQ_CAPTURES.glob("*.pcap")), ids=lambda p: p.name)
def test_rocketmq_captures_decode_the_same_both_ways(path: Path) -> None:
    """Little of RocketMQ's header is fixed (JSON or packed words), yet both ways must agree."""
    frames = list(read_frames(path, ROCKETMQ_GENERAL, ROCKETMQ.wiring.ports, ReadStats()))
    assert frames
    for frame in frames:
        if frame.incomplete is not None:
            continue
        for expand in (False, True):
            data = bytes(frame.data)
            fast = ROCKETMQ_FAST.decode(data, expand=expand, key=frame.key)
            general = ROCKETMQ_GENERAL.decode(data, expand=expand, key=frame.key)
            assert as_json(fast) == as_json(general)
            assert fast.command == frame.command
