"""Notes on AMQP message content that point at client bugs, in streamdump and in the plugin.

The null case comes from a real client: rstream writes an application property set to None as
AMQP null (captures/rabbitmq_stream/client_crash.pcap, message 0). The content_type cases are
built here, since no client at hand sends them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CAPTURES
from pcap_writer import tcp_pcap
from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.codecs.amqp import Typed, decode_message, encode_message
from streamdump.codecs.amqp_content import body_mismatch, content_notes
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry

NULL_NOTE = (
    "AMQP 1.0 message: application properties 'i' is null: no value crossed the wire "
    "(a client that cannot encode a value's type may write null)"
)


def notes_of(sections: list) -> list[str]:
    return list(content_notes(decode_message(encode_message(sections))))


def test_a_null_among_the_values_an_application_fills() -> None:
    assert notes_of([("application_properties", {"color": "red", "i": None}), ("data", b"x")]) == [
        NULL_NOTE.removeprefix("AMQP 1.0 message: ")
    ]
    found = notes_of([("message_annotations", {"x-opt": None, 7: None}), ("data", b"x")])
    named = [n.split(" is null")[0] for n in found]
    assert named == ["message annotations 'x-opt'", "message annotations '7'"]
    # Properties and header write absent fields as nulls: that is not a lost value.
    plain = [("properties", {"message_id": "m"}), ("application_properties", {"i": 1}), ("data", b"x")]
    assert notes_of(plain) == []


@pytest.mark.parametrize(
    ("content_type", "body", "said"),
    [
        ("application/json", b'{"order": 1}', None),
        # Read leniently, as the servers' own clients do.
        ("application/json; charset=utf-8", b"{order: 1}", None),
        ("application/json", b'{"order": ', "says JSON, but the body does not parse as JSON"),
        ("application/vnd.acme+json", b"not json", "says JSON, but the body does not parse as JSON"),
        ("Text/Plain", b"caf\xe9", "says text, but the body is not UTF-8"),
        ("text/plain", "café".encode(), None),
        ("text/plain", b"\xed\xa0\x80", "says text, but the body is not UTF-8"),  # a surrogate
        ("application/octet-stream", b"\xff", None),
    ],
)
def test_a_body_its_content_type_does_not_describe(content_type: str, body: bytes, said: str | None) -> None:
    found = body_mismatch(content_type, body)
    assert (found.split("' ", 1)[1] if found else None) == said


def test_the_real_clients_null_is_noted_on_its_publish_and_delivery(decoder: Decoder) -> None:
    read = read_frames(CAPTURES / "client_crash.pcap", decoder, None, ReadStats())
    frames = [decoder.expand(f) for f in read]
    noted = [(f.number, f.name) for f in frames for e in f.expert if e.message == NULL_NOTE]
    assert [name for _, name in noted] == ["Publish", "Deliver"]
    assert all(e.group == "protocol" for f in frames for e in f.expert if e.message == NULL_NOTE)


def test_the_plugin_words_the_notes_alike(tmp_path: Path) -> None:
    from test_wireshark import _tshark, differences

    _tshark()
    decoder = Decoder(default_registry().get("rabbitmq_stream"))
    bodies = [
        (("application/json", None), b'{"order": '),
        (("text/plain", None), b"caf\xe9"),
        (("application/json", {"tenant": None, "n": 3}), b'{"ok": true}'),
    ]
    messages = []
    for n, ((content_type, props), body) in enumerate(bodies):
        properties = {"message_id": f"m{n}", "content_type": Typed("symbol", content_type)}
        sections: list = [("properties", properties)]
        if props is not None:
            sections.append(("application_properties", props))
        sections.append(("data", body))
        messages.append({"publishing_id": n, "entry": simple_entry(encode_message(sections))})
    publish = decoder.encode("Publish", "command", {"publisher_id": 1, "messages": messages})
    path = tmp_path / "content.pcap"
    path.write_bytes(tcp_pcap([(True, publish)]))
    (frame,) = [decoder.expand(f) for f in read_frames(path, decoder, None, ReadStats())]
    assert sorted(json.dumps(e.message) for e in frame.expert) == sorted(
        json.dumps(m)
        for m in [
            "AMQP 1.0 message: content_type 'application/json' says JSON, but the body does not parse "
            "as JSON",
            "AMQP 1.0 message: content_type 'text/plain' says text, but the body is not UTF-8",
            "AMQP 1.0 message: application properties 'tenant' is null: no value crossed the wire "
            "(a client that cannot encode a value's type may write null)",
        ]
    )
    found = list(differences(path, tmp_path, decoder.protocol))
    assert not found, "\n\n".join(found[:5])


def test_the_plugin_words_section_order_notes_alike(tmp_path: Path) -> None:
    """Sections out of order, repeated, mixing body kinds, or no body: streamdump's AMQP codec
    notes them, and (before, not) the plugin's twin too, at the same offsets."""
    from test_wireshark import _tshark, differences

    _tshark()
    decoder = Decoder(default_registry().get("rabbitmq_stream"))
    odd = [
        [("application_properties", {"a": 1}), ("properties", {"message_id": "m"}), ("data", b"x")],
        [("header", {"durable": True}), ("header", {"durable": False}), ("data", b"x")],
        [("data", b"x"), ("amqp_value", "y")],
        [("properties", {"message_id": "no body"})],
    ]
    messages = [{"publishing_id": n, "entry": simple_entry(encode_message(m))} for n, m in enumerate(odd)]
    publish = decoder.encode("Publish", "command", {"publisher_id": 1, "messages": messages})
    path = tmp_path / "order.pcap"
    path.write_bytes(tcp_pcap([(True, publish)]))
    (frame,) = [decoder.expand(f) for f in read_frames(path, decoder, None, ReadStats())]
    said = sorted(e.message.split(" at offset")[0] for e in frame.expert)
    assert said == [
        "AMQP 1.0 message: amqp_value section",
        "AMQP 1.0 message: header section",
        "AMQP 1.0 message: message has no body section (data, amqp_sequence or amqp_value)",
        "AMQP 1.0 message: properties section",
    ]
    found = list(differences(path, tmp_path, decoder.protocol))
    assert not found, "\n\n".join(found[:5])
