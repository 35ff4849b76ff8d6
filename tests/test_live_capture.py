"""`streamdump live`: real traffic (nats-py against the real NATS server) captured through libpcap,
decoded as it comes, saved with --write so that `read` gives the same output; Ctrl-C and
--count end it cleanly. Needs root (CI runs as root) and the NATS server; skips elsewhere, fails
in CI."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import need
from test_live_nats import nats_reachable

from streamdump.live.run import bpf

pytestmark = [pytest.mark.live, pytest.mark.nats]
STREAMDUMP = [sys.executable, "-m", "streamdump"]


def traffic(messages: int = 5) -> None:
    import nats

    async def run() -> None:
        nc = await nats.connect("nats://127.0.0.1:4222", name="live-capture-test")
        await nc.subscribe("live.>")
        for i in range(messages):
            await nc.publish("live.x", b"hello %d" % i)
        await nc.flush()
        await nc.close()

    asyncio.run(run())


def need_capture() -> None:
    need(os.geteuid() == 0, "live capture needs root")
    need(nats_reachable(), "no NATS server on 127.0.0.1:4222")


def capturing(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Wait for `Capturing on 'lo'` on stderr, as a script waits for tshark's: the capture is
    open and the client may start (a fixed sleep was too short on a loaded machine)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    said = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stderr.readline()
        if not line:
            break
        said += line
        if line.startswith(b"Capturing on 'lo'"):
            return
    proc.kill()
    raise AssertionError(f"the capture never said it was open: {said!r}")


def start(*args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*STREAMDUMP, "live", "-P", "nats", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    capturing(proc)
    return proc


def test_live_decodes_what_the_client_did_and_write_reads_back_the_same(tmp_path: Path) -> None:
    need_capture()
    saved = tmp_path / "live.pcap"
    proc = start("--duration", "4", "--write", str(saved))
    traffic(5)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = out.decode().splitlines()
    assert sum("Publish command PUB subject=live.x" in line for line in lines) == 5
    assert sum("Message command MSG subject=live.x" in line for line in lines) == 5
    assert b"0 dropped by the kernel" in err and b"== NATS ==" in err
    read = subprocess.run([*STREAMDUMP, "read", str(saved), "-P", "nats"], capture_output=True, timeout=60)
    assert read.stdout == out


def test_ctrl_c_and_count_end_it_cleanly_with_a_valid_file(tmp_path: Path) -> None:
    need_capture()
    saved = tmp_path / "live.pcap"
    proc = start("--write", str(saved))
    traffic(3)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and b"packets captured on lo" in err
    read = subprocess.run([*STREAMDUMP, "read", str(saved), "-P", "nats"], capture_output=True, timeout=60)
    assert read.returncode == 0 and read.stdout == out
    counted = start("--count", "4")
    traffic(3)
    out, err = counted.communicate(timeout=60)
    assert counted.returncode == 0 and b"4 packets captured" in err, err


def test_the_kernel_filter_names_the_servers_ports() -> None:
    assert bpf([5552, 4222, 5552]) == "tcp port 4222 or tcp port 5552"


def test_a_file_that_cannot_be_written_is_said_as_such(tmp_path: Path) -> None:
    need_capture()
    result = subprocess.run([*STREAMDUMP, "live", "-a", "1", "--write", str(tmp_path / "no" / "x.pcap")],
                            capture_output=True, timeout=60)  # fmt: skip
    err = result.stderr.decode().strip()
    assert (
        result.returncode == 1
        and err == f"streamdump: error: {tmp_path / 'no' / 'x.pcap'}: cannot write: No such file or directory"
    )


def test_no_capture_says_why_in_one_line() -> None:
    result = subprocess.run(
        [*STREAMDUMP, "live", "-i", "no-such-interface0", "-a", "1"], capture_output=True, timeout=60
    )
    err = result.stderr.decode().strip()
    assert result.returncode == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("streamdump: error: cannot capture on no-such-interface0: ")


def test_libpcap_s_refusal_is_told_as_a_privilege() -> None:
    from streamdump.live.capture import _privilege

    assert _privilege(
        "lo: You don't have permission to capture on that device (socket: Operation not permitted)"
    )
    assert not _privilege("no-such-interface0: No such device exists")


@pytest.mark.broker
def test_rstream_under_live_every_message_decoded() -> None:
    need(os.geteuid() == 0, "live capture needs root")
    from test_proxy import stream_port_reachable

    need(stream_port_reachable(), "no RabbitMQ stream port on 127.0.0.1:5552")
    from rstream import Producer

    proc = subprocess.Popen([*STREAMDUMP, "live", "-P", "rabbitmq_stream", "-T", "jsonl", "--duration", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    capturing(proc)

    async def run() -> None:
        async with Producer("127.0.0.1", username="guest", password="guest") as producer:
            await producer.create_stream("live-test", exists_ok=True)
            for i in range(100):
                await producer.send("live-test", b"m%d" % i)
        async with Producer("127.0.0.1", username="guest", password="guest") as producer:
            await producer.delete_stream("live-test")

    asyncio.run(run())
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    import json

    frames = [json.loads(line) for line in out.decode().splitlines()]
    assert sum(len(f["fields"]["messages"]) for f in frames if f["command"] == "Publish") == 100
    assert not [e for f in frames for e in f["expert"] if e["severity"] == "error"]
