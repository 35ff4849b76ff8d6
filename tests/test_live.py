"""Real parts: record fresh traffic from a real client against the real broker, then decode it.

Needs root (tcpdump), tcpdump and the RabbitMQ broker; captures/record.py enables the
stream plugin itself. On a laptop without them these tests skip; in CI they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CAPTURES, need

from streamdump.decoder import Decoder
from streamdump.pipeline import ReadStats, read_frames

pytestmark = pytest.mark.broker


def broker_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(os.geteuid() == 0, "recording with tcpdump needs root")
    need(shutil.which("tcpdump") is not None, "tcpdump is not installed")
    need(broker_reachable(), "no RabbitMQ broker on 127.0.0.1:5672")
    outdir = tmp_path_factory.mktemp("live")
    proc = subprocess.run(
        [
            sys.executable,
            str(CAPTURES / "record.py"),
            "--scenario",
            "session",
            "--scenario",
            "subscribe_missing_stream",
            "--outdir",
            str(outdir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
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
