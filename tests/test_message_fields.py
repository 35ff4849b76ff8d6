"""AMQP message fields declared in the registry: filters reach inside messages.

Checked on the compression capture against what the client sent (compression.sent.json):
every string property the client set (one value each), an application property by key and
value, a body's text and a numeric correlation id select exactly the Publish frames that
carried the messages and the Deliver frames that brought them back.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from typing import Any

import pytest

from streamdump.analysis.fieldnames import FrameFilter, field_types, message_names
from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry
from tests.conftest import CAPTURE_ROOT

CAPTURE = CAPTURE_ROOT / "rabbitmq_stream" / "compression.pcap"
SENT = json.loads((CAPTURE_ROOT / "rabbitmq_stream" / "compression.sent.json").read_text())
PROTOCOL = default_registry().protocols["rabbitmq_stream"]


def every_record() -> list[dict[str, Any]]:
    """Every record the client sent, AMQP or not, in order."""
    return [record for publish in SENT["publishes"] for record in publish["records"]]


def sent_records() -> list[tuple[int, int, dict[str, Any]]]:
    """(publishing id, offset, record) of every AMQP record the client sent."""
    return [
        (publish["publishing_id"], record["offset"], record)
        for publish in SENT["publishes"]
        for record in publish["records"]
        if record.get("amqp")
    ]


def selected(filter_text: str) -> list[dict[str, Any]]:
    args = [sys.executable, "-m", "streamdump", "read", str(CAPTURE), "-T", "jsonl", "--filter", filter_text]
    result = subprocess.run(args, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in result.stdout.splitlines()]


def carriers(frames: list[dict[str, Any]]) -> tuple[set[int], set[int]]:
    """The publishing ids of the Publish frames and the offsets of the Deliver frames given."""
    published: set[int] = set()
    delivered: set[int] = set()
    for frame in frames:
        if frame["command"] == "Publish":
            published |= {m["publishing_id"] for m in frame["fields"]["messages"]}
        elif frame["command"] == "Deliver":
            delivered |= {r["offset"] for r in frame["fields"]["chunk"]["records"]}
    return published, delivered


def quoted(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def expected(match: Any) -> tuple[set[int], set[int]]:
    """The publish ids and offsets whose records satisfy match (at offset granularity)."""
    records = [(pid, offset, r) for pid, offset, r in sent_records() if match(r)]
    pids = {pid for pid, _, _ in records}
    # A Publish frame or Deliver chunk selected for one record shows all its records.
    frames = selected_all()
    published, delivered = set(), set()
    for frame in frames:
        if frame["command"] == "Publish":
            ids = {m["publishing_id"] for m in frame["fields"]["messages"]}
            if ids & pids:
                published |= ids
        elif frame["command"] == "Deliver":
            offsets = {r["offset"] for r in frame["fields"]["chunk"]["records"]}
            if offsets & {offset for _, offset, _ in records}:
                delivered |= offsets
    return published, delivered


@functools.cache
def selected_all() -> list[dict[str, Any]]:
    return selected('command == "Publish" or command == "Deliver"')


STRING_PROPERTIES = sorted(
    {
        (name, value)
        for _, _, record in sent_records()
        for name, value in record.get("properties", {}).items()
        if record.get("property_types", {}).get(name) == "string" or name == "content_type"
    }
)


# One value of each property (the client set some to many values).
@pytest.mark.parametrize(("name", "value"), sorted(dict(STRING_PROPERTIES).items()))
def test_a_property_selects_the_frames_that_carried_it(name: str, value: Any) -> None:
    field = {"correlation_id": "message_correlation_id"}.get(name, name)
    got = carriers(selected(f"{field} == {quoted(value)}"))
    assert got == expected(lambda r: r.get("properties", {}).get(name) == value)
    assert got[0] and got[1], "the message was published and delivered"


def test_an_application_property_selects_by_key_and_value() -> None:
    key, value = "variant", "gzip"
    text = f'application_properties.key == "{key}" and application_properties.value == "{value}"'
    got = carriers(selected(text))
    assert got == expected(lambda r: r.get("application_properties", {}).get(key) == value)
    assert got[0] and got[1]


def test_data_contains_finds_the_body_text() -> None:
    got = carriers(selected('data contains "fox"'))
    assert got == expected(lambda r: b"fox" in bytes.fromhex(r.get("body") or ""))
    assert got[0] and got[1]


def test_a_numeric_correlation_id_is_the_messages_not_the_frames() -> None:
    got = carriers(selected("message_correlation_id == 123456789"))
    assert got == expected(lambda r: r.get("properties", {}).get("correlation_id") == 123456789)
    assert got[0] and got[1]


def test_message_names_are_declared_in_the_registry() -> None:
    types = field_types(PROTOCOL)
    for name in ("message_id", "subject", "content_type", "creation_time", "data", "amqp_value",
                 "application_properties.key", "application_properties.value", "durable"):  # fmt: skip
        assert name in types and name in message_names(PROTOCOL)
    assert types["correlation_id"].kind == "int"  # the frame's, untouched by AMQP's


def test_the_registry_names_every_field_the_codec_decodes() -> None:
    """The codec's header and properties fields are the spec's, by entry where renamed."""
    from streamdump.codecs import amqp

    struct = {s.name: s for s in PROTOCOL.all_fields() if s.type == "amqp" and s.fields}["message"]
    sections = {s.entry or s.name: s for s in struct.fields}
    assert set(sections) == set(amqp.SECTION_NAMES.values())
    for section, codec_fields in (("header", amqp.HEADER_FIELDS), ("properties", amqp.PROPERTIES_FIELDS)):
        declared = [s.entry or s.name for s in sections[section].fields]
        assert declared == [name for name, _ in codec_fields]  # in order: the plugin reads by position


def test_a_filter_on_message_fields_expands_only_frames_that_carry_messages() -> None:
    decoder = Decoder(PROTOCOL)
    expanded: list[str] = []
    real = decoder.expand

    def spy(frame: Any) -> Any:
        expanded.append(frame.command)
        return real(frame)

    decoder.expand = spy  # type: ignore[method-assign]
    frame_filter = FrameFilter(decoder, 'message_id == "cmp-1"')
    frames = list(read_frames(CAPTURE, decoder, [5552], ReadStats()))
    kept = [f for f in frames if frame_filter(f)]
    assert [f.command for f in kept] == ["Publish", "Deliver"]
    assert expanded and set(expanded) <= {"Publish", "Deliver"}
    assert len(expanded) == sum(f.command in ("Publish", "Deliver") for f in frames)


def streamdump(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamdump", *args], capture_output=True, text=True)


def test_stats_count_messages_per_content_type_as_the_client_sent_them() -> None:
    result = streamdump("stats", str(CAPTURE), "--format", "json", "--by", "content_type")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["messages_by"]
    sent: dict[str, int] = {}
    for record in every_record():
        value = (record.get("properties") or {}).get("content_type") or "(none)"
        sent[value] = sent.get(value, 0) + 1
    for direction in ("publish", "deliver"):  # every message sent came back
        got = {r["value"]: r["messages"] for r in rows if r["direction"] == direction}
        assert got == sent
    assert {r["field"] for r in rows} == {"content_type"}


def test_messages_column_shows_each_messages_value() -> None:
    result = streamdump("read", str(CAPTURE), "--messages", "--column", "message_id")
    assert result.returncode == 0, result.stderr
    shown = [
        line.split("message_id=", 1)[1].split()[0]
        for line in result.stdout.splitlines()
        if " publish " in line
    ]
    sent = [str((record.get("properties") or {}).get("message_id") or "-") for record in every_record()]
    assert shown == sent


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ("stats", "--by", "content_typ"),
            "--by content_typ: no field of that name (did you mean content_type",
        ),
        (
            ("read", "--messages", "--column", "mesage_id"),
            "--column mesage_id: no field of that name (did you mean",
        ),
        (("read", "-e", "mesage_id"), "-e mesage_id: no field of that name (did you mean"),
        (("read", "--column", "message_id"), "--column names values --messages lines show; add --messages"),
        (("read", "-T", "json", "-e", "message_id"), "-e names the columns of -T fields, not of -T json"),
        (
            ("stats", "--by", "content_type == 1"),
            "--by content_type == 1: give a field name, not an expression",
        ),
    ],
)
def test_unknown_or_misplaced_names_are_refused_in_one_line(args: tuple[str, ...], error: str) -> None:
    result = streamdump(args[0], str(CAPTURE), *args[1:])
    assert result.returncode == 2
    assert error in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_name_may_carry_its_protocols_prefix() -> None:
    plain = streamdump("read", str(CAPTURE), "--messages", "--column", "message_id")
    prefixed = streamdump("read", str(CAPTURE), "--messages", "--column", "rabbitmq_stream.message_id")
    assert prefixed.returncode == 0 and prefixed.stdout == plain.stdout
    assert "message_id=cmp-1" in plain.stdout
    # -e is tshark's: the field's values alone, a row per message with --messages.
    rows = streamdump("read", str(CAPTURE), "--messages", "-e", "message_id").stdout.splitlines()
    prefixed_rows = streamdump("read", str(CAPTURE), "--messages", "-e", "rabbitmq_stream.message_id")
    assert prefixed_rows.stdout.splitlines() == rows and "cmp-1" in rows
