"""The committed real captures: every frame decodes cleanly, and the three views are pinned by golden files.

Regenerate the golden files after an intended output change with
STREAMDUMP_UPDATE_GOLDEN=1 pytest tests/test_captures.py, and review the diff.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from conftest import CAPTURE_ROOT, CAPTURES, GOLDEN
from typer.testing import CliRunner

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.analysis.session import CaptureFile, Options
from streamdump.cli import app
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry
from streamdump.views.output import Display, Format, Views, write_frames

CAPTURE_FILES = sorted(p for p in CAPTURES.iterdir() if p.suffix in (".pcap", ".pcapng"))
VIEWS = {
    "line": (Format.text, False, False),
    "tree": (Format.text, True, False),
    "jsonl": (Format.jsonl, False, False),
    "messages": (Format.text, False, True),
}


def decode_all(path: Path, decoder: Decoder) -> tuple[list, ReadStats]:
    stats = ReadStats()
    return list(read_frames(path, decoder, [5552], stats)), stats


def test_captures_are_committed() -> None:
    names = {p.name for p in CAPTURE_FILES}
    assert {"session.pcap", "session.pcapng", "subscribe_missing_stream.pcap"} <= names
    for path in CAPTURE_FILES:
        assert path.stat().st_size < 1_000_000, path


# The decoder notes a capture is recorded to provoke: the client broke the protocol on purpose.
EXPECTED_DECODER_NOTES = {
    "unsupported_version.pcap": [
        (18, "Metadata", "warn", "Metadata version 2 is not in the registry (known: 1); decoded as version 1")
    ],
    # The client reset the connection half way through a Publish frame.
    "reset_mid_frame.pcap": [
        (24, "Publish", "error", "incomplete frame (1016 of 2033 bytes): the connection was reset"),
        (24, "Publish", "error", "frame too short: Entry needs 2008 bytes at offset 25, 991 left"),
    ],
}


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: p.name)
def test_every_frame_decodes_without_expert_error(path: Path, decoder: Decoder) -> None:
    frames, stats = decode_all(path, decoder)
    frames = [decoder.expand(f) for f in frames]  # records and AMQP sections too
    assert frames, f"{path.name}: no frames"
    problems = [
        (f.number, f.name, e.severity, e.message)
        for f in frames
        for e in f.expert
        if e.severity in ("warn", "error")
    ]
    assert problems == EXPECTED_DECODER_NOTES.get(path.name, [])
    assert [n for n in stats.notices if n.severity != "note"] == []
    assert all(f.command for f in frames)


def test_session_covers_the_protocol_walkthrough(decoder: Decoder) -> None:
    frames, _ = decode_all(CAPTURES / "session.pcap", decoder)
    seen = {(f.command, f.kind) for f in frames}
    for expected in [
        ("PeerProperties", "request"),
        ("PeerProperties", "response"),
        ("SaslHandshake", "response"),
        ("SaslAuthenticate", "response"),
        ("Tune", "command"),
        ("Open", "response"),
        ("Create", "response"),
        ("DeclarePublisher", "response"),
        ("QueryPublisherSequence", "response"),
        ("Publish", "command"),
        ("PublishConfirm", "command"),
        ("Metadata", "response"),
        ("Subscribe", "response"),
        ("Deliver", "command"),
        ("Credit", "command"),
        ("StoreOffset", "command"),
        ("QueryOffset", "response"),
        ("Unsubscribe", "response"),
        ("DeletePublisher", "response"),
        ("Delete", "response"),
        ("Close", "response"),
    ]:
        assert expected in seen, expected
    published = [m["publishing_id"] for f in frames if f.command == "Publish" for m in f.fields["messages"]]
    confirmed = [i for f in frames if f.command == "PublishConfirm" for i in f.fields["publishing_ids"]]
    assert published and sorted(published) == sorted(confirmed)
    delivered = sum(f.fields["chunk"]["num_records"] for f in frames if f.command == "Deliver")
    assert delivered == len(published)


def test_pcap_and_pcapng_give_the_same_frames(decoder: Decoder) -> None:
    pcap, _ = decode_all(CAPTURES / "session.pcap", decoder)
    ng, _ = decode_all(CAPTURES / "session.pcapng", decoder)
    assert [(f.number, f.ts, f.data) for f in pcap] == [(f.number, f.ts, f.data) for f in ng]


def test_plain_passwords_are_masked(decoder: Decoder) -> None:
    """The wire says "\0guest\0guest"; every view shows the user and a password of stars."""
    stats = ReadStats()
    frames = [
        f
        for f in read_frames(CAPTURES / "session.pcap", decoder, [5552], stats)
        if f.command == "SaslAuthenticate"
    ]
    request = next(f for f in frames if f.kind == "request")
    assert b"\0guest\0guest" in request.data
    assert bytes(request.fields["sasl_opaque_data"]) == b"\0guest\0*****"
    shown = [
        bytes(n.value)
        for n in decoder.tree(request)
        if n.spec is not None and n.spec.name == "sasl_opaque_data"
    ]
    assert shown == [b"\0guest\0*****"]


def test_missing_stream_error_response(decoder: Decoder) -> None:
    frames, _ = decode_all(CAPTURES / "subscribe_missing_stream.pcap", decoder)
    codes = [f.fields["response_code"] for f in frames if f.command == "Subscribe" and f.kind == "response"]
    assert codes and set(codes) == {2}


def render(path: Path, options: Options, view: str) -> str:
    """A view as `streamdump read` writes it: frames linked by the conversation tracker."""
    setup = options.prepare()
    session = setup.session()
    out = io.StringIO()
    fmt, detail, messages = VIEWS[view]
    frames = session.frames(CaptureFile(path))
    write_frames(frames, Views(setup.decoders), Display(fmt, detail, messages), out, lambda: session.first_ts)
    return out.getvalue()


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: p.name)
def test_golden_output(path: Path, view: str, decoder: Decoder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "dumb")
    actual = render(path, Options(protocols=(decoder.protocol.name,), ports=(5552,)), view)
    golden = GOLDEN / f"{path.name}.{view}.txt"
    if os.environ.get("STREAMDUMP_UPDATE_GOLDEN"):
        golden.write_text(actual, encoding="utf-8")
    assert golden.exists(), f"missing {golden.name}: run with STREAMDUMP_UPDATE_GOLDEN=1"
    assert actual == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["stats", "follow"])
@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: p.name)
def test_golden_stats_and_follow(path: Path, command: str) -> None:
    args = [command, str(path)] + (["--format", "json"] if command == "stats" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    golden = GOLDEN / f"{path.name}.{command}.txt"
    if os.environ.get("STREAMDUMP_UPDATE_GOLDEN"):
        golden.write_text(result.stdout, encoding="utf-8")
    assert golden.exists(), f"missing {golden.name}: run with STREAMDUMP_UPDATE_GOLDEN=1"
    assert result.stdout == golden.read_text(encoding="utf-8")


def test_json_lines_carry_the_documented_keys(decoder: Decoder) -> None:
    lines = render(
        CAPTURES / "session.pcap", Options(protocols=(decoder.protocol.name,)), "jsonl"
    ).splitlines()
    objects = [json.loads(line) for line in lines]
    for obj in objects:
        assert {
            "frame",
            "ts",
            "src",
            "dst",
            "protocol",
            "key",
            "kind",
            "command",
            "version",
            "fields",
            "expert",
        } <= set(obj)
        assert obj["protocol"] == "rabbitmq_stream" and obj["key"] < 0x8000
    publish = next(o for o in objects if o["command"] == "Publish")
    assert {"publishing_id", "entry", "records"} <= set(publish["fields"]["messages"][0])
    records = [r for o in objects if o["command"] == "Deliver" for r in o["fields"]["chunk"]["records"]]
    assert {"offset", "entry_index", "record_size", "message"} <= set(records[0])
    deliver = next(o for o in objects if o["command"] == "Deliver")
    assert {"num_entries", "num_records", "chunk_id", "timestamp", "epoch"} <= set(deliver["fields"]["chunk"])
    assert any(o["fields"].get("correlation_id") for o in objects)


def _json_names(value: object, opaque: set[str], out: set[str]) -> None:
    """Every key of the JSON fields, except inside maps and AMQP messages (their keys are data)."""
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(key)
            if key not in opaque:
                _json_names(item, opaque, out)
    elif isinstance(value, list):
        for item in value:
            _json_names(item, opaque, out)


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: p.name)
def test_every_json_field_name_comes_from_the_registry(path: Path, decoder: Decoder) -> None:
    declared = {f.name for f in decoder.protocol.all_fields()}
    opaque = {f.name for f in decoder.protocol.all_fields() if f.type in ("map", "amqp")}
    names: set[str] = set()
    for line in render(
        path, Options(protocols=(decoder.protocol.name,), ports=(5552,)), "jsonl"
    ).splitlines():
        _json_names(json.loads(line)["fields"], opaque, names)
    assert names and names <= declared, sorted(names - declared)


# ---------------------------------------------------------------------- other protocols' captures

# Each protocol's goldens live in tests/golden/<protocol>/ (RabbitMQ Streams', the first, at the top).
# (captures/tls/ holds several protocols' TLS captures, read with their key logs: tests/test_tls.py.)
OTHERS = [
    (folder.name, path)
    for folder in sorted(CAPTURE_ROOT.iterdir())
    if folder.is_dir() and folder != CAPTURES and folder.name in default_registry().protocols
    for path in sorted(folder.glob("*.pcap"))
]


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize(("name", "path"), OTHERS, ids=lambda v: v.name if isinstance(v, Path) else v)
def test_golden_output_of_other_protocols(
    name: str, path: Path, view: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "dumb")
    # As the CLI reads: the spec's ports, and its magic on any other port; a carried protocol
    # through its carrier.
    check_golden(GOLDEN / name / f"{path.name}.{view}.txt", render(path, Options(protocols=(name,)), view))


@pytest.mark.parametrize("command", ["stats", "follow"])
@pytest.mark.parametrize(("name", "path"), OTHERS, ids=lambda v: v.name if isinstance(v, Path) else v)
def test_golden_stats_and_follow_of_other_protocols(name: str, path: Path, command: str) -> None:
    args = [command, str(path)] + (["--format", "json"] if command == "stats" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    check_golden(GOLDEN / name / f"{path.name}.{command}.txt", result.stdout)


def check_golden(golden: Path, actual: str) -> None:
    if os.environ.get("STREAMDUMP_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(actual, encoding="utf-8")
    assert golden.exists(), f"missing {golden.name}: run with STREAMDUMP_UPDATE_GOLDEN=1"
    assert actual == golden.read_text(encoding="utf-8")
