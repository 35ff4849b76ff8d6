"""The generated fast path decodes exactly as the general ops do, or hands the frame back to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CAPTURES, ROCKETMQ_CAPTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_strategies import struct_strategy
from streamdump.dissectors.rabbitmq_stream.osiris import records_body, simple_entry, sub_batch_entry

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


def test_a_publishs_messages_are_read_in_one_call_sub_batches_among_them() -> None:
    """The hook reads the whole messages array while nothing expands; a sub-batch between simple
    entries is read there too, not left to the general decoder; expanding reads them one by one."""
    entries = [
        simple_entry(b"one"),
        sub_batch_entry([b"a", b"bc"], 0, records_body([b"a", b"bc"])),
        simple_entry(b""),
    ]
    messages = [{"publishing_id": 7 + n, "entry": entry} for n, entry in enumerate(entries)]
    wire = FAST.encode("Publish", "command", {"publisher_id": 2, "messages": messages})
    calls: list[int] = []
    fast = FAST.fast[0x0002, False, 1]
    reader = type(FAST.hooks["osiris_entry"])
    original = reader.read_items

    def counted(self, *args):  # type: ignore[no-untyped-def]
        got = original(self, *args)
        calls.append(len(got[0]) if got is not None else -1)
        return got

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader, "read_items", counted)
        out: dict = {}
        assert fast(memoryview(wire), 8, len(wire), out, Ctx([])) == len(wire)
        assert calls == [3]
        expanded: dict = {}
        fast(memoryview(wire), 8, len(wire), expanded, Ctx([], expand=True))
        assert calls == [3]
    assert [m["publishing_id"] for m in out["messages"]] == [7, 8, 9]
    assert [m["entry"] for m in out["messages"]] == entries
    assert [m["entry"].pos for m in out["messages"]] == [m["entry"].pos for m in expanded["messages"]]
    same_decode(wire)


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


# ---------------------------------------------------------------- text protocols (NATS)

NATS = default_registry().get("nats")
NATS_FAST, NATS_GENERAL = Decoder(NATS), Decoder(NATS, fast=False)
NATS_CAPTURES = sorted((CAPTURES.parent / "nats").glob("*.pcap")) + sorted(
    (CAPTURES.parent / "liftbridge").glob("*.pcap")
)


def same_text_decode(data: bytes) -> None:
    for expand in (False, True):
        fast, general = NATS_FAST.decode(data, expand=expand), NATS_GENERAL.decode(data, expand=expand)
        assert as_json(fast) == as_json(general), data


@pytest.mark.parametrize("path", NATS_CAPTURES, ids=lambda p: p.name)
def test_nats_captures_decode_the_same_both_ways(path: Path) -> None:
    frames = list(read_frames(path, NATS_GENERAL, NATS.wiring.ports, ReadStats()))
    assert frames
    for frame in frames:
        if frame.incomplete is None:
            same_text_decode(bytes(frame.data))


def test_the_text_fast_path_is_taken() -> None:
    """An operation's line, its words and its payload are read by the generated code, not handed
    back to the general ops: on the committed NATS captures, the header and every layout but
    JSON's (CONNECT, INFO, which call their op) decode without falling back."""
    frames = fallbacks = 0
    for path in NATS_CAPTURES:
        for frame in read_frames(path, NATS_GENERAL, NATS.wiring.ports, ReadStats()):
            if frame.incomplete is not None or frame.command is None or frame.expert:
                continue
            frames += 1
            data = bytes(frame.data)
            ctx, out = Ctx([]), {}
            try:
                assert NATS_FAST.header_fast is not None
                pos = NATS_FAST.header_fast(memoryview(data), 0, len(data), out, ctx)
                NATS_FAST.fast[frame.key, frame.kind == "response", frame.version](
                    memoryview(data), pos, len(data), out, ctx
                )
            except Fallback:
                fallbacks += 1
    assert frames > 400
    assert fallbacks == 0


_OPS = ["PUB", "pub", "HPUB", "MSG", "HMSG", "SUB", "UNSUB", "PING", "PONG", "+OK", "-ERR", "INFO", "CONNECT"]
_WORDS = st.lists(
    st.one_of(
        st.from_regex(r"[a-z.>*$_]{1,12}", fullmatch=True),
        st.integers(0, 1 << 40).map(str),
        st.sampled_from(["", "é", "\x0b", "\r", "12a", "0099", "4294967296"]),
    ),
    max_size=6,
)


@settings(max_examples=400, deadline=None)
@given(
    op=st.sampled_from(_OPS),
    words=_WORDS,
    gaps=st.sampled_from([" ", "\t", "  ", " \t "]),
    end=st.sampled_from(["\r\n", "\n", "", "\r", " \r\n"]),
    payload=st.binary(max_size=40),
    tail=st.sampled_from([b"\r\n", b"", b"\n", b"xy", b"\r\nPING\r\n"]),
    raw=st.binary(max_size=6),
)
def test_text_frames_decode_the_same(
    op: str, words: list[str], gaps: str, end: str, payload: bytes, tail: bytes, raw: bytes
) -> None:
    """Operation lines well made or not (words too few or too many, numbers that are not or are
    too large, bytes that are not UTF-8, a bare CR or LF, no line end), with a payload whose size
    the line may or may not give: the generated code decodes each as the general ops do."""
    line = gaps.join([op, *words]).encode() + end.encode()
    same_text_decode(line)
    same_text_decode(line + payload + tail)
    same_text_decode(line[: len(line) // 2] + raw + line[len(line) // 2 :] + payload + tail)
