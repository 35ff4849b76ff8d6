"""Real parts: record fresh traffic from a real client against the real broker, then decode it.

Needs root (tcpdump), tcpdump and the RabbitMQ broker; captures/rabbitmq_stream/record.py enables the
stream plugin itself. On a laptop without them these tests skip; in CI they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CAPTURES, ROOT, need
from test_osiris import check_delivered, check_published

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.wire.capture import read_segments

pytestmark = pytest.mark.broker


def broker_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=2):
            return True
    except OSError:
        return False


def need_recording_tools() -> None:
    need(os.geteuid() == 0, "recording with tcpdump needs root")
    need(shutil.which("tcpdump") is not None, "tcpdump is not installed")
    need(broker_reachable(), "no RabbitMQ broker on 127.0.0.1:5672")


def record_scenarios(outdir: Path, *scenarios: str) -> None:
    """Run captures/rabbitmq_stream/record.py for `scenarios` into `outdir`; its own checks must pass."""
    cmd = [sys.executable, str(CAPTURES / "record.py"), "--outdir", str(outdir)]
    for name in scenarios:
        cmd += ["--scenario", name]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_recording_tools()
    outdir = tmp_path_factory.mktemp("live")
    record_scenarios(outdir, "session", "subscribe_missing_stream", "bulk")
    return outdir


def decode(path: Path, decoder: Decoder) -> list:
    stats = ReadStats()
    frames = list(read_frames(path, decoder, [5552], stats))
    assert [n for n in stats.notices if n.severity != "note"] == []
    return frames


def test_fresh_session_decodes_cleanly(recorded: Path, decoder: Decoder) -> None:
    frames = decode(recorded / "session.pcap", decoder)
    assert [(f.number, e) for f in frames for e in f.expert] == []
    committed = decode(CAPTURES / "session.pcap", decoder)

    # Same dialogue as the committed capture (Heartbeat timing varies between runs).
    def dialogue(fs: list) -> list:
        return [(f.command, f.kind) for f in fs if f.command != "Heartbeat"]

    assert dialogue(frames) == dialogue(committed)
    published = sum(len(f.fields["messages"]) for f in frames if f.command == "Publish")
    delivered = sum(f.fields["chunk"]["num_records"] for f in frames if f.command == "Deliver")
    assert published == delivered == 10


def test_fresh_error_response(recorded: Path, decoder: Decoder) -> None:
    frames = decode(recorded / "subscribe_missing_stream.pcap", decoder)
    errors = [f for f in frames if f.command == "Subscribe" and f.kind == "response"]
    assert errors and all(f.fields["response_code"] == 2 for f in errors)


def test_fresh_bulk_at_mtu_1500_reassembles(recorded: Path, decoder: Decoder) -> None:
    # Frames of tens of KB over 1448-byte segments: reassembly on real traffic, not resegmented files.
    segments = [s for s in read_segments(recorded / "bulk.pcap") if s.payload]
    assert max(len(s.payload) for s in segments) == 1448
    frames = decode(recorded / "bulk.pcap", decoder)
    assert [(f.number, e) for f in frames for e in f.expert] == []
    published = [m["publishing_id"] for f in frames if f.command == "Publish" for m in f.fields["messages"]]
    delivered = sum(f.fields["chunk"]["num_records"] for f in frames if f.command == "Deliver")
    assert published == list(range(300)) and delivered == 300
    assert max(f.size for f in frames) > 10 * 1448


def test_fresh_compression_decodes_to_what_the_client_sent(tmp_path: Path, decoder: Decoder) -> None:
    """A fresh `compression` recording, message by message against its fresh compression.sent.json:
    every Publish message and every Deliver record (with its offset), as tests/test_osiris.py checks
    the committed capture."""
    need_recording_tools()
    record_scenarios(tmp_path, "compression")
    sent = json.loads((tmp_path / "compression.sent.json").read_text())
    frames = [decoder.expand(f) for f in decode(tmp_path / "compression.pcap", decoder)]
    # The scenario sends an application property "null" set to null on purpose (every AMQP type):
    # its content note, on its Publish and its Deliver, is the only one.
    null = "AMQP 1.0 message: application properties 'null' is null"
    notes = [(f.name, e.message.startswith(null)) for f in frames for e in f.expert]
    assert notes == [("Publish", True), ("Deliver", True)]

    check_published(frames, sent)
    check_delivered(frames, sent)


def test_flood_recovery_with_and_without_losses(tmp_path: Path) -> None:
    """The recovery check of bench/, on a smaller flood: every message back, and with 1% of the
    segments dropped, exactly the messages whose bytes are gone are lost, all inside reported gaps."""
    need_recording_tools()
    out = tmp_path / "flood.pcap"
    bench = ROOT / "bench"
    record = subprocess.run(
        [sys.executable, str(bench / "record_flood.py"), "--messages", "20000", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert record.returncode == 0, record.stdout[-2000:] + record.stderr[-2000:]
    check = subprocess.run(
        [sys.executable, str(bench / "recovery_check.py"), str(out), "--drop-rate", "0.01"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert check.returncode == 0 and check.stdout.rstrip().endswith("OK"), check.stdout + check.stderr
    # What the bytes allow, by a walk apart from streamdump: Deliver records found are exactly those.
    walk = subprocess.run(
        [sys.executable, str(bench / "byte_walk.py"), str(out), "--rates", "0.01", "--no-time"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert walk.returncode == 0 and walk.stdout.rstrip().endswith("OK"), walk.stdout + walk.stderr
