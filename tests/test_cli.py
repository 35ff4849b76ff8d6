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
    assert code == 0 and out.split()[2:] == [
        "RMQS",
        "DeletePublisher",
        "request",
        "0x0006",
        "corr=7",
        "pub=1",
    ]
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
    # Wireshark's time: packet 4 comes 0.001115 s after the capture's first packet (the handshake's).
    assert (
        first[1] == "0.001115"
        and first[3] == "→"
        and first[5:] == ["RMQS", "PeerProperties", "request", "0x0011", "corr=1"]
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
    line = err.strip()
    assert line.startswith("[note] no frames of ") and "in 1 packets" in line
    assert "RabbitMQ Streams on 5552" in line and "NATS on 4222" in line
    assert "--port" in line and "--decode-as" in line and "\n" not in line


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


@pytest.mark.parametrize("command", [["decode", "00"], ["read", str(CAPTURES / "session.pcap")]])
def test_unknown_protocol_is_a_usage_error(command: list[str]) -> None:
    code, out, err = run(*command, "--protocol", "kafka")
    assert code == 2 and out == ""
    one_line_error(err, "--protocol kafka: unknown protocol (known: eventmesh, liftbridge, nats,")


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


# ---------------------------------------------------------------------- conversation


REFUSALS = {
    # capture: the one line a user gets on stderr after the frames, naming the packet
    "auth_failure.pcap": "[error] packet 11: authentication failed: the broker answered "
    "SaslAuthenticate (PLAIN, user 'guest', packet 10) with Authentication failure (0x08)",
    "wrong_vhost.pcap": "[error] packet 17: Open for virtual host 'streamdump-no-such-vhost' "
    "(packet 15) failed: Virtual host access failure (0x0c)",
    "unknown_command.pcap": "[error] packet 19: the broker closed the connection: Unknown frame "
    "(0x0d) 'unknown frame'; the client's last frame before it was ExchangeCommandVersions (key 0x001b, "
    "version 1, 34 bytes, packet 18): the broker does not know this command key or version",
    "unsupported_version.pcap": "[error] packet 19: the broker closed the connection: Unknown "
    "frame (0x0d) 'unknown frame'; the client's last frame before it was Metadata (key 0x000f, version 2, "
    "36 bytes, packet 18): the broker does not know this command key or version",
    "deleted_stream.pcap": "[warn] packet 33: 2 messages of publisher 1 (stream "
    "'streamdump-deleted') refused: Publisher does not exist (0x12); at packet 30 the broker had announced "
    "stream 'streamdump-deleted': Stream not available (0x06)",
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_end_with_a_one_line_diagnosis(name: str) -> None:
    code, out, err = run("read", str(CAPTURES / name))
    assert code == 0 and out
    assert REFUSALS[name] in err.splitlines()
    assert "Traceback" not in err


def test_filter_selects_frames_by_linked_stream() -> None:
    code, out, _ = run(
        "read", str(CAPTURES / "session.pcap"), "-Y", 'command == "Deliver" and stream == "streamdump-demo"'
    )
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6 and all(" Deliver command " in line for line in lines)
    code, out, _ = run("read", str(CAPTURES / "session.pcap"), "--filter", 'stream == "elsewhere"')
    assert code == 0 and out == ""


def test_filter_on_codes_names_and_hook_fields() -> None:
    code, out, _ = run("read", str(CAPTURES / "subscribe_missing_stream.pcap"), "-Y", "response_code != 1")
    assert code == 0 and out and all('code="Stream does not exist"' in line for line in out.splitlines())
    code, same, _ = run(
        "read",
        str(CAPTURES / "subscribe_missing_stream.pcap"),
        "-Y",
        'response_code == "stream does not exist"',
    )
    assert same == out
    # Names only expanded frames have (records below the chunk header) work too.
    code, out, _ = run("read", str(CAPTURES / "compression.pcap"), "-Y", 'framing contains "snappy"')
    assert (
        code == 0
        and len(out.splitlines()) >= 2
        and all("Publish" in line or "Deliver" in line for line in out.splitlines())
    )


def test_filter_on_map_entries_and_amqp_sections() -> None:
    """Map entries are name.key / name.value, record sections are named by their enum: as in Wireshark."""
    session = str(CAPTURES / "session.pcap")
    product = 'properties.key == "product" && properties.value contains "Rabbit"'
    code, out, _ = run("read", session, "-Y", product)
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["4", "6"]
    code, out, _ = run("read", session, "-Y", 'connection_properties.key == "advertised_port"')
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["17"]
    compression = str(CAPTURES / "compression.pcap")
    code, out, _ = run("read", compression, "-Y", 'sections == "application_properties"')
    assert code == 0 and out
    code, none, _ = run("read", compression, "-Y", "sections == 0x70")
    assert code == 0 and none == ""  # no record of that capture carries a header section


def test_filter_times_count_from_the_first_frame_of_the_capture() -> None:
    _, everything, _ = run("read", str(CAPTURES / "session.pcap"))
    _, some, _ = run("read", str(CAPTURES / "session.pcap"), "-Y", 'command == "Close"')
    assert some.splitlines() == [line for line in everything.splitlines() if " Close " in line]


@pytest.mark.parametrize(
    ("expression", "column", "text"),
    [
        ("strem == 1", 1, "unknown field 'strem' (did you mean: stream"),
        ("stream == ", 11, "(end of filter)"),
        ('command == "Deliver" and', 25, "(end of filter)"),
        ("stream contains 5", 17, ""),
        ('response_code == "no such code"', 18, "unknown"),
    ],
)
def test_bad_filter_is_one_line_with_the_column(expression: str, column: int, text: str) -> None:
    code, out, err = run("read", str(CAPTURES / "session.pcap"), "-Y", expression)
    assert code == 2 and out == ""
    one_line_error(err, f"--filter: column {column}")
    assert text in err


def test_stats_json_and_text() -> None:
    code, out, _ = run("stats", str(CAPTURES / "session.pcap"), "--format", "json")
    result = json.loads(out)
    assert code == 0 and result["frames"] == 56
    srt = {row["command"]: row for row in result["response_times"]}
    assert srt["Create"]["count"] == 1 and srt["Create"]["max_ms"] == 6.81
    (conn,) = result["connections"]
    assert conn["client_properties"] == {
        "product": "RabbitMQ Stream",
        "version": "1.1.1",
        "platform": "Python",
        "connection_name": "streamdump-session",
    }
    assert {(s["stream"], s["direction"], s["messages"]) for s in result["streams"]} == {
        ("streamdump-demo", "publish", 10),
        ("streamdump-demo", "deliver", 10),
    }
    assert result["expert"] == [] and result["confirm_latency"][0]["count"] == 10
    code, text, _ = run("stats", str(CAPTURES / "session.pcap"))
    assert code == 0
    for heading in (
        "Service response time (ms)",
        "Response codes",
        "Publish to confirm latency (ms)",
        "Messages per stream",
        "Expert summary",
    ):
        assert heading in text


def test_stats_filter_and_bad_input(tmp_path: Path) -> None:
    code, out, _ = run("stats", str(CAPTURES / "session.pcap"), "-T", "json", "-Y", 'command == "Create"')
    assert code == 0 and json.loads(out)["frames"] == 2
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    code, _, err = run("stats", str(bad))
    assert code == 1 and "Traceback" not in err


def test_follow_puts_responses_beside_requests() -> None:
    code, out, _ = run("follow", str(CAPTURES / "session.pcap"))
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("Connection 1: 127.0.0.1:")
    create = next(line for line in lines if "Create corr=5" in line)
    assert "Create corr=5 code=OK" in create and create.rstrip().endswith("← 21, 6.810 ms")
    assert sum(" Deliver sub=2" in line for line in lines) == 6


def test_follow_picks_one_connection() -> None:
    code, out, _ = run("follow", str(CAPTURES / "session.pcap"), "--connection", "1")
    assert code == 0 and out.startswith("Connection 1:")
    code, out, err = run("follow", str(CAPTURES / "session.pcap"), "--connection", "2")
    assert code == 1 and out == ""
    one_line_error(err, "no connection 2")
    code, _, err = run("follow", str(CAPTURES / "session.pcap"), "--connection", "0")
    assert code == 2


def test_two_pass_links_requests_to_their_responses() -> None:
    _, once, _ = run("read", str(CAPTURES / "session.pcap"), "-T", "jsonl")
    _, twice, _ = run("read", str(CAPTURES / "session.pcap"), "-T", "jsonl", "--two-pass")
    once_objects = [json.loads(line) for line in once.splitlines()]
    objects = [json.loads(line) for line in twice.splitlines()]
    answered = {o["links"]["request_in"]: o["frame"] for o in objects if "request_in" in o["links"]}
    requests = [o for o in objects if o["kind"] == "request" and "correlation_id" in o["fields"]]
    assert requests and all(o["links"]["response_in"] == answered[o["frame"]] for o in requests)
    # A publish learns the confirms of its ids (before, two passes gave it none).
    confirms = {p: o["frame"] for o in objects for p in o["links"].get("publish_in", [])}
    publishes = [o for o in objects if o["command"] == "Publish"]
    assert len(publishes) == 6 and all(o["links"]["confirm_in"] == [confirms[o["frame"]]] for o in publishes)
    # One pass cannot know a response or a confirm before it comes; everything else is the same.
    assert not any("response_in" in o["links"] or "confirm_in" in o["links"] for o in once_objects)
    for a, b in zip(once_objects, objects, strict=True):
        b["links"].pop("response_in", None)
        b["links"].pop("confirm_in", None)
        assert a == b


def test_two_pass_links_a_credit_to_its_refusal() -> None:
    _, twice, _ = run("read", str(CAPTURES / "credit_exhausted.pcap"), "-T", "jsonl", "--two-pass")
    refused = [json.loads(line) for line in twice.splitlines() if '"frame":53,' in line]
    assert [(o["command"], o["links"].get("response_in")) for o in refused] == [("Credit", 54)]


def test_the_note_on_unreassembled_fragments_names_their_first_packet() -> None:
    capture = ROOT / "captures/rabbitmq_stream/pathological/session.ipfrag.pcap"
    code, _, stderr = run("read", str(capture))
    assert code == 0
    assert "[note] packet 30: 7 IP fragments were not reassembled" in stderr, stderr


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ["follow", "--connection", "abc", "captures/rabbitmq_stream/session.pcap"],
            "Invalid value for '--connection'",
        ),
        (["read", "--no-such-option", "x.pcap"], "No such option: --no-such-option"),
        (["frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_a_command_line_typer_refuses_gets_one_line(args: list[str], text: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "streamdump", *args], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert proc.returncode == 2 and proc.stdout == ""
    one_line_error(proc.stderr, text)
    assert "--help)" in proc.stderr and "╭" not in proc.stderr


def test_read_without_a_capture_is_a_usage_error() -> None:
    code, out, err = run("read")
    assert code == 2 and out == ""
    one_line_error(err, "which capture? give a file (or -r FILE")
    code, out, err = run("read", "a.pcap", "-r", "b.pcap")
    assert code == 2 and out == ""
    one_line_error(err, "give the capture once")


def test_stats_filter_reaches_the_connection_totals_and_the_findings() -> None:
    """stats -Y counts only the frames it selects: in the tables, and (before, not) in each
    connection's totals and in the findings, which keep those about a selected frame or about
    no frame at all (a connection's end)."""
    path = str(CAPTURES / "credit_exhausted.pcap")
    code, out, _ = run("stats", path, "-Y", 'command == "Deliver"', "--format", "json")
    assert code == 0
    doc = json.loads(out)
    (conn,) = doc["connections"]
    assert (conn["client_frames"], conn["server_frames"]) == (0, 5)
    assert [d["kind"] for d in doc["diagnoses"]] == ["credit_exhausted"]  # not the refused Credit
    code, out, _ = run(
        "stats", str(CAPTURES / "heartbeat_timeout.pcap"), "-Y", 'command == "Open"', "--format", "json"
    )
    # The broker's FIN is no frame: its finding stays with the connection the filter kept.
    assert [d["kind"] for d in json.loads(out)["diagnoses"]] == ["heartbeat", "abrupt_close"]
    code, out, _ = run("stats", path, "-Y", 'command == "StoreOffset"', "--format", "json")
    assert json.loads(out)["connections"] == [] and json.loads(out)["diagnoses"] == []
