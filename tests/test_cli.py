"""The command line as users meet it: documented commands work, bad input is one line and an exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dpkt
import pytest
from conftest import CAPTURES, ROOT
from typer.testing import CliRunner

from streamdump.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def one_line_error(stderr: str, text: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("streamdump: error: ") and text in lines[0], lines[0]
    assert "Traceback" not in stderr


def test_python_dash_m_decodes_the_issue_example() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "streamdump", "decode", "00000009000600010000000701"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "DeletePublisher request" in proc.stdout
    assert "Correlation ID: 7" in proc.stdout and "Publisher ID: 1" in proc.stdout


def test_decode_views() -> None:
    code, out, _ = run("decode", "00 00 00 09 00 06 00 01 00 00 00 07 01", "--brief")
    assert code == 0 and out.split()[2:] == ["DeletePublisher", "request", "0x0006", "corr=7", "pub=1"]
    code, out, _ = run("decode", "0x00000009000600010000000701", "--format", "jsonl")
    obj = json.loads(out)
    assert obj["command"] == "DeletePublisher" and obj["fields"] == {"correlation_id": 7, "publisher_id": 1}


def test_decode_several_frames_and_missing_size_prefix() -> None:
    code, out, _ = run("decode", "00000009000600010000000701", "0000000a80060001000000070001", "--brief")
    assert code == 0 and len(out.splitlines()) == 2 and "code=OK" in out.splitlines()[1]
    code, out, err = run("decode", "000600010000000701", "--brief")
    assert code == 0 and "corr=7" in out and "no size prefix" in err


@pytest.mark.parametrize(
    ("hexdump", "message"), [("zz", "not hex"), ("abc", "odd number"), (" ", "no hex digits")]
)
def test_decode_bad_hex(hexdump: str, message: str) -> None:
    code, out, err = run("decode", hexdump)
    assert code == 1 and out == ""
    one_line_error(err, message)


def test_read_default_line_view() -> None:
    code, out, err = run("read", str(CAPTURES / "session.pcap"))
    assert code == 0 and err == ""
    first = out.splitlines()[0].split()
    assert (
        first[1] == "0.000000"
        and first[3] == "→"
        and first[5:] == ["PeerProperties", "request", "0x0011", "corr=1"]
    )


def test_read_detail_and_jsonl() -> None:
    code, out, _ = run("read", str(CAPTURES / "subscribe_missing_stream.pcap"), "--detail")
    assert code == 0 and "Response Code: Stream does not exist (0x02)" in out
    code, out, _ = run("read", str(CAPTURES / "session.pcap"), "--format", "jsonl")
    assert code == 0 and all(json.loads(line)["protocol"] == "rabbitmq_stream" for line in out.splitlines())


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    code, out, err = run("read", str(empty))
    assert code == 1 and out == ""
    one_line_error(err, "empty file")


def test_not_a_capture(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a capture\n")
    code, _, err = run("read", str(text))
    assert code == 1
    one_line_error(err, "not a pcap or pcapng file")


def test_missing_file() -> None:
    code, _, err = run("read", "/nonexistent/capture.pcap")
    assert code == 1
    one_line_error(err, "cannot open")


@pytest.mark.parametrize("name", ["session.pcap", "session.pcapng"])
def test_truncated_capture_keeps_decoded_frames(tmp_path: Path, name: str) -> None:
    data = (CAPTURES / name).read_bytes()
    cut = tmp_path / name
    cut.write_bytes(data[: len(data) // 2 + 7])
    code, out, err = run("read", str(cut))
    assert code == 1
    assert len(out.splitlines()) > 10  # frames before the cut are printed
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "cut short" in errors[0] and "Traceback" not in err


def test_damaged_header(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes((CAPTURES / "session.pcap").read_bytes()[:10])
    code, _, err = run("read", str(bad))
    assert code == 1
    one_line_error(err, "damaged capture header")


def write_pcap(path: Path, dport: int, payload: bytes, linktype: int = dpkt.pcap.DLT_EN10MB) -> None:
    tcp = dpkt.tcp.TCP(
        sport=40000, dport=dport, seq=1000, flags=dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH, data=payload
    )
    ip = dpkt.ip.IP(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), p=dpkt.ip.IP_PROTO_TCP, data=tcp)
    ip.len += len(tcp)
    frame = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip) if linktype == 1 else ip
    with path.open("wb") as fh:
        writer = dpkt.pcap.Writer(fh, linktype=linktype)
        writer.writepkt(bytes(frame), ts=1.0)


def test_other_port_traffic_is_an_empty_result(tmp_path: Path) -> None:
    other = tmp_path / "http.pcap"
    write_pcap(other, 80, b"GET / HTTP/1.1\r\n\r\n")
    code, out, err = run("read", str(other))
    assert code == 0 and out == ""
    assert "no RabbitMQ Streams frames on port(s) 5552 in 1 packets" in err and "--port" in err


def test_packet_count_includes_non_tcp_packets(tmp_path: Path) -> None:
    capture = tmp_path / "udp.pcap"
    udp = dpkt.udp.UDP(sport=1, dport=2, data=b"x")
    ip = dpkt.ip.IP(src=bytes([1, 1, 1, 1]), dst=bytes([2, 2, 2, 2]), p=dpkt.ip.IP_PROTO_UDP, data=udp)
    with capture.open("wb") as fh:
        writer = dpkt.pcap.Writer(fh, linktype=dpkt.pcap.DLT_RAW)
        for ts in (1.0, 2.0, 3.0):
            writer.writepkt(bytes(ip), ts=ts)
    code, _, err = run("read", str(capture))
    assert code == 0 and "in 3 packets" in err


@pytest.mark.parametrize("view", [[], ["--detail"], ["--format", "jsonl"]])
def test_closed_pipe_exits_quietly(view: list[str]) -> None:
    command = [sys.executable, "-m", "streamdump", "read", str(CAPTURES / "offset_specs.pcap"), *view]
    shell = " ".join(f"'{c}'" for c in command) + ' | head -c 20 >/dev/null; exit "${PIPESTATUS[0]}"'
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stderr == ""


def test_extra_port_and_raw_ip_link(tmp_path: Path) -> None:
    capture = tmp_path / "moved.pcap"
    write_pcap(capture, 15552, bytes.fromhex("00000009000600010000000701"), linktype=dpkt.pcap.DLT_RAW)
    code, out, _ = run("read", str(capture))
    assert code == 0 and out == ""
    code, out, _ = run("read", str(capture), "--port", "15552")
    assert code == 0 and "DeletePublisher request 0x0006 corr=7 pub=1" in out
    code, _, err = run("read", str(capture), "--port", "0")
    assert code == 2 and "--port" in err


def test_unknown_protocol() -> None:
    code, _, err = run("decode", "00", "--protocol", "kafka")
    assert code == 1
    one_line_error(err, "unknown protocol 'kafka'")


def test_messages_view_lists_every_message_with_its_stream() -> None:
    code, out, err = run("read", str(CAPTURES / "compression.pcap"), "--messages")
    assert code == 0, err
    lines = out.splitlines()
    sent = json.loads((CAPTURES / "compression.sent.json").read_text())
    records = sum(len(p["records"]) for p in sent["publishes"])
    # every record twice: published, then delivered
    assert len(lines) == 2 * records
    assert all(" streamdump-compression " in line for line in lines)
    delivered = [line for line in lines if " deliver offset=" in line]
    assert [int(line.split("offset=")[1].split()[0]) for line in delivered] == list(range(records))
    assert "publish pub=1 id=18[2]" in out and "snappy-framed record 2" in out


def test_messages_view_does_not_combine_with_other_views() -> None:
    code, _, err = run("read", str(CAPTURES / "compression.pcap"), "--messages", "--detail")
    assert code == 2
    one_line_error(err, "--messages")
