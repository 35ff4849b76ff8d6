"""The fast paths of JSON and --messages give what the general paths give, byte for byte.

Each shortcut is checked against what it replaces: AMQP messages of the shape clients send
decoded without the general loop (amqp.plain_message, amqp.data_message), Publish frames
expanded from the values their decode gave instead of a second decode (Decoder.in_place), a
chunk's runs of simple entries made into records in one loop (against the detail tree's walk,
entry by entry), JSON lines written by orjson instead of json.dumps (Renderer.json_text, a
data body alone handed to it without message_json's call), and
a body alone previewed for --messages without the general summary; a complete frame's
lines without columns formatted in one step (the goldens check whole lines on every capture).
"""

from __future__ import annotations

import copy
import json
import math
import pickle
import struct
from pathlib import Path
from typing import Any

import pytest
from conftest import CAPTURE_ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from spec_strategies import encode_chunk
from streamdump.dissectors.rabbitmq_stream.messages import KEY_PROPERTIES, StreamMessages, _summary
from streamdump.dissectors.rabbitmq_stream.osiris import records_body, simple_entry, sub_batch_entry
from test_amqp import leading_sections, messages, values

from streamdump.analysis.conversations import Conversations
from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.analysis.session import CaptureFile, Options
from streamdump.codecs import amqp
from streamdump.codecs.values import preview
from streamdump.spec.decoder import Decoder, _merge_notes
from streamdump.spec.dissector import MessageRow, dissector_of, message_text
from streamdump.spec.hooks import Hook
from streamdump.spec.layout import Ctx
from streamdump.spec.registry import default_registry
from streamdump.views.messages import MessageLines, _plain_lines, line
from streamdump.views.render import Renderer, _json_default, _orjson_default
from streamdump.views.safe import json_text
from streamdump.wire.frame import Frame
from streamdump.wire.limits import Limits
from streamdump.wire.paths import int_values, path_values

PROTOCOL = default_registry().get("rabbitmq_stream")
DECODER = Decoder(PROTOCOL)
RENDERER = Renderer(DECODER)
CAPTURE_FILES = sorted(p for p in CAPTURE_ROOT.rglob("*.pcap*") if p.suffix in (".pcap", ".pcapng"))


def general(data: bytes, base: int) -> amqp.Message:
    return amqp._general_message(memoryview(data), len(data), base)


def same_message(a: amqp.Message, b: amqp.Message) -> None:
    # repr, not ==: a NaN inside equals nothing, itself included.
    assert repr(a) == repr(b)


# ---------------------------------------------------------------- AMQP messages


@st.composite
def plain_shaped(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Messages of the shape the shortcut takes: optional sections in order, then one data body."""
    return [*draw(leading_sections()), ("data", draw(st.binary(max_size=300)))]


@settings(max_examples=300, deadline=None)
@given(st.one_of(plain_shaped(), messages()), st.integers(0, 1000), st.data())
def test_messages_decode_as_the_general_loop_does(
    sections: list[tuple[str, Any]], base: int, data: st.DataObject
) -> None:
    wire = amqp.encode_message(sections)
    whole = general(wire, base)
    same_message(amqp.decode_message(wire, base), whole)
    plain = amqp.plain_message(memoryview(wire), base)
    if plain is not None:
        same_message(plain, whole)
    # Cut short, or a byte overwritten: the shortcut takes it whole or leaves it.
    cut = data.draw(st.integers(0, len(wire)))
    same_message(amqp.decode_message(wire[:cut], base), general(wire[:cut], base))
    if wire:
        at = data.draw(st.integers(0, len(wire) - 1))
        byte = data.draw(st.sampled_from((0x00, 0x40, 0x53, 0x73, 0x75, 0xA0, 0xB0, 0xFF)))
        damaged = wire[:at] + bytes([byte]) + wire[at + 1 :]
        same_message(amqp.decode_message(damaged, base), general(damaged, base))


PLAIN_SHAPES = [
    [("data", b"")],
    [("data", b"x" * 255)],
    [("data", b"x" * 256)],  # vbin32
    [("properties", {"message_id": "m-1", "content_type": "text/plain"}), ("data", b"body")],
    [("header", {"durable": True}), ("properties", {"subject": "s"}), ("data", b"body")],
    [
        ("message_annotations", {amqp.Symbol("x-k"): 1}),
        ("application_properties", {"k": "v"}),
        ("data", b"b"),
    ],
]
NOT_PLAIN_SHAPES = [
    [("data", b"a"), ("data", b"b")],  # two data sections
    [("amqp_value", "text")],
    [("data", b"a"), ("footer", {amqp.Symbol("x"): 1})],
    [("properties", {"subject": "s"}), ("header", {"durable": True}), ("data", b"b")],  # out of order
    [("properties", {}), ("properties", {}), ("data", b"b")],  # repeated
]


@pytest.mark.parametrize("sections", PLAIN_SHAPES, ids=lambda s: "+".join(n for n, _ in s))
def test_the_shapes_clients_send_take_the_shortcut(sections: list[tuple[str, Any]]) -> None:
    wire = amqp.encode_message(sections)
    plain = amqp.plain_message(wire, 9)
    assert plain is not None
    same_message(plain, general(wire, 9))


@pytest.mark.parametrize("sections", NOT_PLAIN_SHAPES, ids=lambda s: "+".join(n for n, _ in s))
def test_other_shapes_are_left_to_the_general_loop(sections: list[tuple[str, Any]]) -> None:
    wire = amqp.encode_message(sections)
    assert amqp.plain_message(wire, 9) is None
    same_message(amqp.decode_message(wire, 9), general(wire, 9))


@pytest.mark.parametrize("value", [0.0, -0.0, 0.5, 1e-4, 123.25, 1e15, 9.5e15])
def test_message_json_plain_floats_keeps_floats_written_without_exponent(value: float) -> None:
    message = amqp.decode_message(amqp.encode_message([("amqp_value", [value, {"k": value}])]))
    assert amqp.message_json(message, plain_floats=True) == amqp.message_json(message)


@pytest.mark.parametrize("value", [1e-05, 5e-324, 1e16, 1.5e300, -2.5e-7])
def test_message_json_plain_floats_refuses_floats_written_with_exponent(value: float) -> None:
    message = amqp.decode_message(amqp.encode_message([("amqp_value", {"k": [value]})]))
    assert "e" in json.dumps(amqp.message_json(message))
    with pytest.raises(ValueError):
        amqp.message_json(message, plain_floats=True)


def test_non_finite_floats_are_strings_either_way() -> None:
    message = amqp.decode_message(amqp.encode_message([("amqp_value", [math.nan, math.inf, -math.inf])]))
    expected = {"amqp_value": ["NaN", "Infinity", "-Infinity"]}
    assert amqp.message_json(message) == amqp.message_json(message, plain_floats=True) == expected


# ---------------------------------------------------------------- Publish frames


def publish(bodies: list[bytes]) -> bytes:
    entries = [{"publishing_id": n, "entry": simple_entry(body)} for n, body in enumerate(bodies)]
    return DECODER.encode("Publish", "command", {"publisher_id": 3, "messages": entries})


def reference_json(renderer: Renderer, frame: Frame) -> str:
    """The JSON line as json.dumps writes it: what orjson's bytes must equal."""
    text = json.dumps(
        renderer.to_dict(frame), default=_json_default, ensure_ascii=False, separators=(",", ":")
    )
    return json_text(text)


def expanded_twice(frame: Frame, decoder: Decoder = DECODER) -> Frame:
    """The frame as the second decode (the general expansion) makes it."""
    full = decoder.decode(frame.data, expand=True, key=frame.key)
    return replace(frame, fields=full.fields, expert=_merge_notes(full.expert, frame.expert), expanded=True)


def dumped(value: Any) -> str:
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def check_publish(wire: bytes, decoder: Decoder = DECODER) -> None:
    renderer = RENDERER if decoder is DECODER else Renderer(decoder)
    frame = decoder.decode(wire)
    twice = expanded_twice(frame, decoder)
    decoder.expand(frame)
    # Keys in the same order, values the same (JSON: memoryviews' reprs hold addresses, NaN != NaN).
    assert dumped(frame.fields) == dumped(twice.fields)
    assert frame.expert == twice.expert
    assert renderer.json_line(frame) == reference_json(renderer, twice)


def test_publish_expands_without_a_second_decode() -> None:
    assert (0x0002, False) in DECODER.in_place
    # A chunk's hook is not its struct's last field (the trailer follows): decoded again.
    assert (0x0008, False) not in DECODER.in_place


record_bodies = st.one_of(
    messages().map(amqp.encode_message),
    st.binary(max_size=300).map(lambda b: amqp.encode_message([("data", b)])),  # the commonest
    st.binary(max_size=30),  # not AMQP, or AMQP gone wrong: notes in the frame
    st.binary(max_size=30).map(lambda b: b"\x00\x53\x75" + b),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_bodies, max_size=6))
def test_publish_frames_expand_and_write_as_before(bodies: list[bytes]) -> None:
    check_publish(publish(bodies))


@pytest.mark.parametrize("left", [0, 1, 2, 3])
def test_a_publish_frame_past_the_record_budget_is_cut_as_a_second_decode_cuts_it(left: int) -> None:
    budget = Decoder(PROTOCOL, limits=Limits(records=left))
    check_publish(publish([amqp.encode_message([("data", b"m%d" % n)]) for n in range(3)]), budget)


def test_publish_runs_of_plain_records_are_expanded_at_once() -> None:
    """Decoder.expand hands Publish messages to the entry hook's expand_run, not one by one."""
    hook = DECODER.hooks["osiris_entry"]
    assert type(hook).expand_run is not Hook.expand_run
    frame = DECODER.decode(publish([amqp.encode_message([("data", b"x")])] * 3))
    messages = frame.fields["messages"]
    assert hook.expand_run(messages, 0, "entry", Ctx([], expand=True)) == 3


@pytest.mark.parametrize(
    "value",
    [
        1e-05,
        1e16,
        math.nan,
        0.25,
        "line\u2028sep",
        "para\u2029sep",
        "\x00\x1f\x7f",
        'q"\\',
        2**64 - 1,
        -(2**63),
        "é\U0001f600",
    ],
    ids=repr,
)
def test_json_corners_are_json_dumps_corners(value: Any) -> None:
    """Floats orjson writes otherwise, line separators, escapes, the widest integers."""
    check_publish(publish([amqp.encode_message([("amqp_value", {"v": [value]})])]))


@pytest.mark.parametrize(
    "links",
    [
        {"response_time": 5e-05},
        {"confirm_time": [0.25, 5e-05, None], "publish_in": [4, None]},
        {"confirm_time": [1e16]},
        {"confirm_time": [math.nan]},
        {"response_time": 0.000123, "stream": "queue-e-1"},
    ],
    ids=repr,
)
def test_links_orjson_would_write_otherwise_go_to_json_dumps(links: dict[str, Any]) -> None:
    frame = DECODER.decode(publish([b"\x00\x53\x75\xa0\x01x"]))
    frame.links, frame.ts = links, 1e-05
    assert RENDERER.json_line(frame) == reference_json(RENDERER, frame)
    frame.ts = 1795673676.952923
    assert RENDERER.json_line(frame) == reference_json(RENDERER, frame)


# ---------------------------------------------------------------- Deliver frames


CHUNK_HEADER = struct.Struct(">BBHIqQQIIIB")
CHUNK_HEADER_NAMES = (
    *("magic_version", "chunk_type", "num_entries", "num_records", "timestamp", "epoch", "chunk_id"),
    *("crc", "data_length", "trailer_length", "bloom_size"),
)


def deliver(entries: list[Any], declared: int | None) -> bytes:
    """A Deliver frame of a chunk holding these entries; declared: the entry count its header
    states instead of the true one (more: the data ends early; fewer: bytes after the last)."""
    chunk = encode_chunk(entries, chunk_id=1000)
    header = dict(zip(CHUNK_HEADER_NAMES, CHUNK_HEADER.unpack_from(chunk), strict=True))
    if declared is not None:
        header["num_entries"] = declared
    fields = header | {"reserved": chunk[45:48], "chunk_data": chunk[48:]}
    return DECODER.encode("Deliver", "command", {"subscription_id": 1, "chunk": fields})


def check_deliver(wire: bytes, decoder: Decoder = DECODER) -> None:
    """Expanded (simple entries in one loop) as the detail tree's decode makes it (each entry
    through entry_records), and written as json.dumps writes it."""
    renderer = RENDERER if decoder is DECODER else Renderer(decoder)
    frame = decoder.expand(decoder.decode(wire))
    walked = decoder.decode(wire, nodes=[], key=frame.key)
    assert dumped(frame.fields) == dumped(walked.fields)
    assert frame.expert == walked.expert
    assert renderer.json_line(frame) == reference_json(renderer, frame)


chunk_entries = st.lists(
    st.one_of(
        record_bodies.map(simple_entry),
        st.lists(record_bodies, min_size=1, max_size=3).map(
            lambda records: sub_batch_entry(records, 0, records_body(records))
        ),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_entries, st.one_of(st.none(), st.integers(0, 10)))
def test_chunks_expand_as_the_entry_by_entry_walk_does(entries: list[Any], declared: int | None) -> None:
    check_deliver(deliver(entries, declared))


@pytest.mark.parametrize("left", [0, 1, 2, 3])
def test_a_chunk_past_the_record_budget_is_cut_as_the_walk_cuts_it(left: int) -> None:
    budget = Decoder(PROTOCOL, limits=Limits(records=left))
    bodies = [amqp.encode_message([("data", b"m%d" % n)]) for n in range(3)]
    check_deliver(deliver([simple_entry(b) for b in bodies], None), budget)


def test_data_message_is_decode_message() -> None:
    for body in (b"", b"x", b"y" * 250):
        wire = b"pad" + amqp.encode_message([("data", body)]) + b"more"
        found = amqp.data_message(wire, 3, len(wire) - 4, 7)
        assert found is not None
        same_message(found, general(wire[3:-4], 7))
    for sections in NOT_PLAIN_SHAPES + PLAIN_SHAPES[2:]:
        wire = amqp.encode_message(sections)
        assert amqp.data_message(wire, 0, len(wire), 0) is None
    wire = amqp.encode_message([("data", b"abc")])
    assert amqp.data_message(wire, 0, len(wire) - 1, 0) is None  # cut short
    assert amqp.data_message(wire + b"!", 0, len(wire) + 1, 0) is None  # bytes after the body


@given(st.binary(max_size=255), st.integers(0, 1 << 20))
def test_a_body_alone_is_a_message_in_every_way(body: bytes, base: int) -> None:
    # data_message keeps a body alone as its bytes (amqp.DataAlone); what reads it as a
    # Message (sections, notes, equality, repr, pickling, both JSON writers, --messages' text)
    # gets what the general decode gives.
    wire = amqp.encode_message([("data", body)])
    found = amqp.data_message(wire, 0, len(wire), base)
    assert type(found) is amqp.DataAlone
    expected = general(wire, base)
    assert _orjson_default(found) == amqp.message_json(expected) == _json_default(found)
    text = StreamMessages(PROTOCOL)._text
    assert text({"record_size": 1, "message": found}) == text({"record_size": 1, "message": expected})
    assert found == expected and expected == found
    assert repr(found) == repr(expected)
    assert pickle.loads(pickle.dumps(found)) == expected and copy.deepcopy(found) == expected
    assert found.sections is found.sections and found.notes == [] and found.error is None
    assert found.section_values() == expected.section_values()
    with pytest.raises(AttributeError):
        found.length  # noqa: B018  (a name Message does not have stays missing)


# ---------------------------------------------------------------- every committed capture


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: str(p.relative_to(CAPTURE_ROOT)))
def test_json_lines_of_every_capture_are_json_dumps_lines(path: Path) -> None:
    setup = Options().prepare()
    renderers = {name: Renderer(d) for name, d in setup.decoders.items()}
    for frame in setup.session().frames(CaptureFile(path)):
        renderer = renderers[frame.protocol]
        assert renderer.json_line(frame) == reference_json(renderer, frame)


def test_frames_with_messages_take_orjson() -> None:
    """The point of it all: Publish and Deliver frames are written by orjson."""
    carrying = [
        frame
        for frame in read_frames(CAPTURE_ROOT / "rabbitmq_stream" / "bulk.pcap", DECODER, None, ReadStats())
        if frame.command in ("Publish", "Deliver")
    ]
    assert len(carrying) >= 18
    assert all(isinstance(RENDERER.json_text(frame), bytes) for frame in carrying)


# ---------------------------------------------------------------- --messages


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=80).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.lists(st.integers(0, 0x7F), max_size=100).map(bytes),  # ASCII: the byte-a-character step
        st.lists(st.sampled_from(b"ab\x00\xc3\xa9"), max_size=60).map(bytes),  # ASCII up to a point
    ),
    st.integers(0, 60),
)
def test_previews_of_bytes_are_the_general_previews(body: bytes, limit: int) -> None:
    # A bytearray takes the general branch, bytes the shortcut.
    assert preview(body, limit) == preview(bytearray(body), limit)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=100).map(lambda b: [("data", b)]),
        values.map(lambda v: [("amqp_value", v)]),
        st.lists(values, max_size=3).map(lambda v: [("amqp_sequence", v)]),
    )
)
def test_a_body_alone_is_summarised_as_message_text_would(sections: list[tuple[str, Any]]) -> None:
    message = amqp.decode_message(amqp.encode_message(sections))
    (section,) = message.sections
    expected = message_text(section.value, ((name, None) for name in KEY_PROPERTIES), {}, "app properties")
    assert _summary(message) == expected
    record = {"record_size": 9, "message": message}
    assert StreamMessages(PROTOCOL)._text(record) == (9, expected.rstrip())  # the record's shortcut


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=100).map(lambda b: [("data", b)]),
        values.map(lambda v: [("amqp_value", v)]),
        plain_shaped(),
    )
)
def test_a_record_row_says_what_the_general_summary_says(sections: list[tuple[str, Any]]) -> None:
    message = amqp.decode_message(amqp.encode_message(sections))
    record = {"record_size": 9, "sections": [s.code for s in message.sections], "message": message}
    row = StreamMessages(PROTOCOL)._row("s", "here", record, False, ())
    assert row.text == _summary(message).rstrip()


@pytest.mark.parametrize("size", [None, 0, 7, 99999, 123456, 1234567, 10**12])
@pytest.mark.parametrize("text", ["", "body  text"])
def test_plain_lines_are_line_lines(size: int | None, text: str) -> None:
    rows = [MessageRow("stream-1", "deliver offset=5 chunk=0", size, text)]
    assert _plain_lines("  12   0.5", iter(rows)) == [line("  12   0.5", row) for row in rows]


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: str(p.relative_to(CAPTURE_ROOT)))
def test_plain_rows_are_the_rows_of_whole_frames(path: Path) -> None:
    """Where a package gives a frame's rows as (where, size, text), they are its rows' values,
    and the lines made of them are the lines of its rows."""
    setup = Options().prepare()
    decoders = setup.decoders
    views = MessageLines(
        {name: dissector_of(d.protocol).messages(d.protocol) for name, d in decoders.items()}
    )
    plain_frames = 0
    for frame in setup.session().frames(CaptureFile(path)):
        rules = views.rules[frame.protocol]
        if not rules.carries(frame):
            continue
        decoders[frame.protocol].expand(frame)
        rows = list(rules.rows(frame))
        plain = rules.plain_rows(frame)
        if plain is None:
            continue
        plain_frames += 1
        assert not any(row.tag or row.size is None for row in rows)
        assert [(row.subject, row.where, row.size, row.text) for row in rows] == [
            (plain[0], *values) for values in plain[1]
        ]
        when = f"{frame.ts:>11.6f}"
        assert views.lines(frame, when) == _plain_lines(f"{frame.number:>6} {when}", rows)
    if path.name in ("bulk.pcap", "compression.pcap"):
        assert plain_frames > 0  # the shortcut is taken where clients publish and consume


def check_bare_rows(frame: Frame, decoder: Decoder = DECODER) -> bool:
    """A frame's rows read from its decode alone (bare_rows, not expanded) are what expanding it
    and asking plain_rows gives; whether the frame had them."""
    rules = dissector_of(decoder.protocol).messages(decoder.protocol)
    if not rules.carries(frame):
        return False
    bare = rules.bare_rows(frame, decoder.limits.records)
    assert not frame.expanded
    decoder.expand(frame)
    if bare is not None:
        assert bare == rules.plain_rows(frame)
    return bare is not None


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: str(p.relative_to(CAPTURE_ROOT)))
def test_bare_rows_are_the_plain_rows_of_the_expanded_frame(path: Path) -> None:
    setup = Options().prepare()
    bare = [
        check_bare_rows(frame, setup.decoders[frame.protocol])
        for frame in setup.session().frames(CaptureFile(path))
    ]
    if path.parent.name == "rabbitmq_stream" and path.name in ("session.pcap", "offset_specs.pcap"):
        assert any(bare)  # the shortcut is taken where clients publish and consume small messages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_bodies, max_size=6), st.integers(0, 7))
def test_bare_rows_of_publish_frames(bodies: list[bytes], left: int) -> None:
    decoder = Decoder(PROTOCOL, limits=Limits(records=left))
    check_bare_rows(decoder.decode(publish(bodies)), decoder)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_entries, st.one_of(st.none(), st.integers(0, 10)), st.integers(0, 10))
def test_bare_rows_of_deliver_frames(entries: list[Any], declared: int | None, left: int) -> None:
    decoder = Decoder(PROTOCOL, limits=Limits(records=left))
    check_bare_rows(decoder.decode(deliver(entries, declared)), decoder)


def test_bare_rows_read_plain_frames() -> None:
    bodies = [amqp.encode_message([("data", b"m%d" % n)]) for n in range(3)]
    assert check_bare_rows(DECODER.decode(publish(bodies)))
    assert check_bare_rows(DECODER.decode(deliver([simple_entry(b) for b in bodies], None)))
    # Past the budget, or a body that is more than a data section: expanded.
    two = Decoder(PROTOCOL, limits=Limits(records=2))
    assert not check_bare_rows(two.decode(publish(bodies)), two)
    other = amqp.encode_message([("properties", {"message_id": "x"}), ("data", b"m")])
    assert not check_bare_rows(DECODER.decode(deliver([simple_entry(other)], None)))


def check_bare_json(frame: Frame, decoder: Decoder = DECODER) -> bool:
    """A frame's JSON line written from its decode alone (bare_fields_json, not expanded) is the
    line of the frame expanded, as json.dumps writes it; whether the frame had one."""
    renderer = RENDERER if decoder is DECODER else Renderer(decoder)
    rules = dissector_of(decoder.protocol).messages(decoder.protocol)
    bare = rules.bare_fields_json(frame, decoder.limits.records)
    line = renderer.json_line(frame)
    if bare is not None:
        assert not frame.expanded  # written without its records
        expanded = decoder.expand(replace(frame, expert=list(frame.expert)))
        assert line == reference_json(renderer, expanded) == renderer.json_line(expanded)
        assert json.loads(bare) == json.loads(line)["fields"]
    return bare is not None


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: str(p.relative_to(CAPTURE_ROOT)))
def test_bare_json_is_the_json_of_the_expanded_frame(path: Path) -> None:
    setup = Options().prepare()
    decoders = setup.decoders
    bare = [
        check_bare_json(frame, decoders[frame.protocol])
        for frame in setup.session().frames(CaptureFile(path))
    ]
    if path.parent.name == "rabbitmq_stream" and path.name in ("session.pcap", "offset_specs.pcap"):
        assert any(bare)  # the shortcut is taken where clients publish small messages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_bodies, max_size=6), st.integers(0, 7))
def test_bare_json_of_publish_frames(bodies: list[bytes], left: int) -> None:
    decoder = Decoder(PROTOCOL, limits=Limits(records=left))
    check_bare_json(decoder.decode(publish(bodies)), decoder)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_entries, st.one_of(st.none(), st.integers(0, 10)), st.integers(0, 10))
def test_bare_json_of_deliver_frames(entries: list[Any], declared: int | None, left: int) -> None:
    decoder = Decoder(PROTOCOL, limits=Limits(records=left))
    check_bare_json(decoder.decode(deliver(entries, declared)), decoder)


def test_bare_json_writes_plain_deliver_frames() -> None:
    bodies = [amqp.encode_message([("data", b"m%d" % n)]) for n in range(3)]
    assert check_bare_json(DECODER.decode(deliver([simple_entry(b) for b in bodies], None)))
    frame = DECODER.decode(deliver([simple_entry(b) for b in bodies], None))
    frame.fields["chunk"]["crc_valid"] = False  # as a mismatch leaves it (with its note)
    assert not check_bare_json(frame)


def test_bare_json_leaves_a_chunk_with_a_trailer_to_expansion() -> None:
    # The trailer's hook adds its producers' sequences when the frame is expanded.
    trailer = bytes.fromhex("001273747265616d64756d702d747261636b65720000000000000003")
    chunk = encode_chunk([simple_entry(amqp.encode_message([("data", b"m")]))], chunk_id=1000)
    header = dict(zip(CHUNK_HEADER_NAMES, CHUNK_HEADER.unpack_from(chunk), strict=True))
    header["trailer_length"] = len(trailer)
    fields = header | {"reserved": chunk[45:48], "chunk_data": chunk[48:], "trailer": trailer}
    wire = DECODER.encode("Deliver", "command", {"subscription_id": 1, "chunk": fields})
    frame = DECODER.decode(wire)
    assert "trailer" in frame.fields["chunk"] and not frame.expert
    assert not check_bare_json(frame)
    assert "trailer_tracking" in frame.fields["chunk"]


def test_bare_json_writes_plain_publish_frames() -> None:
    bodies = [amqp.encode_message([("data", b"m%d" % n)]) for n in range(3)]
    assert check_bare_json(DECODER.decode(publish(bodies)))
    two = Decoder(PROTOCOL, limits=Limits(records=2))
    assert not check_bare_json(two.decode(publish(bodies)), two)  # past the budget: expanded
    other = amqp.encode_message([("properties", {"message_id": "x"}), ("data", b"m")])
    assert not check_bare_json(DECODER.decode(publish([*bodies, other])))


# ---------------------------------------------------------------- the conversation tracker


def tracked(command: str, fields: dict[str, Any], number: int, ts: float, from_client: bool) -> Frame:
    frame = DECODER.decode(DECODER.encode(command, "command", fields))
    frame.number, frame.ts, frame.conn, frame.from_client = number, ts, 1, from_client
    return frame


def test_confirms_link_what_was_sent_as_one_by_one_linking_would() -> None:
    """Confirms are linked in bulk (every id's publish popped at once, one wait per sending
    frame): ids sent in two frames, one never sent and one confirmed before it was sent."""
    frames = [
        tracked("Publish", {"publisher_id": 3, "messages": publish_items([1, 2])}, 2, 2.0, True),
        tracked("Publish", {"publisher_id": 3, "messages": publish_items([3])}, 3, 2.5, True),
        tracked("PublishConfirm", {"publisher_id": 3, "publishing_ids": [1, 9, 3, 2, 7]}, 4, 3.25, False),
        tracked("Publish", {"publisher_id": 3, "messages": publish_items([7])}, 5, 3.5, True),
    ]
    tracker = Conversations([PROTOCOL])
    for frame in frames:
        tracker.feed(frame)
    confirm = frames[2]
    assert confirm.links is not None
    assert confirm.links["publish_in"] == [2, None, 3, 2, 5]
    assert confirm.links["confirm_time"] == [1.25, None, 0.75, 1.25, None]


def publish_items(ids: list[int]) -> list[dict[str, Any]]:
    return [{"publishing_id": n, "entry": simple_entry(b"\x00\x53\x75\xa0\x01x")} for n in ids]


def stepwise_path_values(fields: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    """path_values one holder and one value at a time, as it was before it decided by types."""
    level: list[Any] = [fields]
    for step in path:
        found: list[Any] = []
        for holder in level:
            if isinstance(holder, dict):
                value = holder.get(step)
                if isinstance(value, list):
                    found.extend(value)
                elif value is not None:
                    found.append(value)
        level = found
    return level


path_leaves = st.one_of(st.none(), st.integers(), st.booleans(), st.text(max_size=3))
path_trees = st.recursive(
    path_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from("ab"), inner, max_size=2),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from("ab"), path_trees, max_size=2),
    st.lists(st.sampled_from("ab"), max_size=3),
)
def test_path_values_are_the_stepwise_values(fields: dict[str, Any], path: list[str]) -> None:
    stepwise = stepwise_path_values(fields, tuple(path))
    assert path_values(fields, tuple(path)) == stepwise
    assert int_values(fields, tuple(path)) == [v for v in stepwise if isinstance(v, int)]


@settings(max_examples=200, deadline=None)
@given(st.one_of(plain_shaped(), messages(), st.binary(max_size=40).map(lambda b: [("data", b)])))
def test_orjson_is_handed_a_message_as_message_json_gives_it(sections: list[tuple[str, Any]]) -> None:
    message = amqp.decode_message(amqp.encode_message(sections))
    try:
        expected = amqp.message_json(message, plain_floats=True)
    except ValueError:
        return  # a float orjson would write otherwise: the frame goes to json.dumps
    assert _orjson_default(message) == expected
