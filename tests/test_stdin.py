"""Reading a capture from standard input: the same output as from the file, and frames shown as
soon as their packets have arrived (a capture being written, `tcpdump -w - | streamdump read -`)."""

from __future__ import annotations

import gzip
import select
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CAPTURE_ROOT

STREAMDUMP = [sys.executable, "-m", "streamdump"]
SOME = [
    CAPTURE_ROOT / "rabbitmq_stream" / "session.pcap",
    CAPTURE_ROOT / "rabbitmq_stream" / "session.pcapng",
    CAPTURE_ROOT / "nats" / "jetstream.pcap",
    CAPTURE_ROOT / "liftbridge" / "trouble.pcap",
]


def run(args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*STREAMDUMP, *args], input=data, capture_output=True, timeout=120)


@pytest.mark.parametrize("path", SOME, ids=lambda p: str(p.relative_to(CAPTURE_ROOT)))
@pytest.mark.parametrize("view", [["read"], ["read", "-T", "jsonl"], ["stats", "-T", "json"], ["follow"]])
def test_standard_input_gives_what_the_file_gives(path: Path, view: list[str]) -> None:
    from_file = run([*view, str(path)])
    piped = run([*view, "-"], path.read_bytes())
    assert (piped.returncode, piped.stdout, piped.stderr) == (
        from_file.returncode,
        from_file.stdout,
        from_file.stderr,
    )


def test_a_compressed_stream_is_read_too() -> None:
    path = CAPTURE_ROOT / "nats" / "pubsub.pcap"
    assert run(["read", "-"], gzip.compress(path.read_bytes())).stdout == run(["read", str(path)]).stdout


def test_frames_show_as_their_packets_arrive() -> None:
    """The first packets go in, their frames come out while the writer is still writing."""
    data = (CAPTURE_ROOT / "nats" / "pubsub.pcap").read_bytes()
    proc = subprocess.Popen([*STREAMDUMP, "read", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(data[:1000])  # the file header and the first packets: INFO, CONNECT...
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "no frame came out before the capture ended"
        assert b"Info command server=" in proc.stdout.readline()
        proc.stdin.write(data[1000:])
        proc.stdin.close()
        assert proc.wait(30) == 0
    finally:
        proc.kill()


def test_what_standard_input_cannot_do_is_said_in_one_line() -> None:
    two = run(["read", "-", "--two-pass"], b"")
    assert two.returncode == 2 and b"standard input can be read only once" in two.stderr
    empty = run(["read", "-"], b"")
    assert (
        empty.returncode == 1
        and empty.stderr.strip() == b"streamdump: error: standard input: empty file, not a capture"
    )
    cut = run(["read", "-"], (CAPTURE_ROOT / "nats" / "pubsub.pcap").read_bytes()[:3000])
    assert cut.returncode == 1 and b"Info command server=" in cut.stdout
    assert cut.stderr.strip().endswith(b"standard input: capture is cut short in the middle of packet 20")
