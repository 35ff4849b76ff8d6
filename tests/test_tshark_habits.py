"""tshark's options with tshark's meanings, Wireshark's times, a protocol column, exit statuses a
script can trust, `decode` taking what people paste, a proxy's file read back without options,
and filters that reach inside message bodies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CAPTURE_ROOT, CAPTURES, ROOT
from pcap_writer import tcp_pcap
from streamdump.dissectors.rabbitmq_stream.osiris import simple_entry
from test_wireshark import _tshark
from typer.testing import CliRunner

from streamdump.analysis.hexdump import parse_dump
from streamdump.analysis.session import CaptureFile, Options, Segments
from streamdump.cli import app
from streamdump.codecs.amqp import encode_message
from streamdump.live.proxy import Recorder, Side
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import default_registry
from streamdump.wire.reassembly import TCP_ACK, TCP_FIN, TCP_SYN
from streamdump.wire.writer import PacketWriter, WriteFormat

SESSION = str(CAPTURES / "session.pcap")
runner = CliRunner()


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "streamdump", *args], input=stdin, capture_output=True, cwd=ROOT, check=False
    )


# ---------------------------------------------------------------------- times and columns


def test_times_count_from_the_capture_s_first_packet_as_wireshark_s_do() -> None:
    """Packet 4 is 0.001115 s after packet 1 (the handshake's SYN), in every view and in follow."""
    tshark = subprocess.run(
        [_tshark(), "-r", SESSION, "-T", "fields", "-e", "frame.number", "-e", "frame.time_relative"],
        capture_output=True,
        text=True,
        check=True,
    )
    wireshark = dict(line.split("\t") for line in tshark.stdout.splitlines())
    _, out, _ = run("read", SESSION)
    for line in out.splitlines():
        number, when = line.split()[:2]
        assert abs(float(when) - float(wireshark[number])) < 1e-6, line
    _, follow, _ = run("follow", SESSION)
    row = next(line for line in follow.splitlines() if line.split()[:1] == ["4"])
    assert row.split()[1] == "0.001115"
    _, messages, _ = run("read", SESSION, "--messages")
    assert all(
        abs(float(ln.split()[1]) - float(wireshark[ln.split()[0]])) < 1e-6 for ln in messages.splitlines()
    )


@pytest.mark.parametrize(
    ("fmt", "first"),
    [("e", "1795342748.225864"), ("ud", "2026-11-22 10:19:08.225864"), ("u", "10:19:08.225864")],
)
def test_time_formats(fmt: str, first: str) -> None:
    code, out, _ = run("read", SESSION, "-t", fmt, "-c", "4")
    assert code == 0 and first in out.splitlines()[0]
    _, delta, _ = run("read", SESSION, "-t", "d", "-c", "6")
    assert [line.split()[1] for line in delta.splitlines()] == ["0.000000", "0.000665"]


def test_a_protocol_column_and_no_command_named_twice() -> None:
    _, out, _ = run("read", str(CAPTURE_ROOT / "liftbridge" / "session.pcap"))
    publishes = [line for line in out.splitlines() if line.split()[0] == "29"][:2]
    assert [line.split()[5:8] for line in publishes] == [
        ["NATS", "Publish", "command"],
        ["Liftbridge", "Publish", "command"],
    ]
    assert "Publish command PUB subject=orders" in publishes[0]
    assert "Publish command Publish" not in out and "Ping command PING" not in out


# ---------------------------------------------------------------------- tshark's options


def test_r_is_the_argument_and_c_stops_after_packets() -> None:
    _, whole, _ = run("read", SESSION)
    code, same, _ = run("read", "-r", SESSION)
    assert code == 0 and same == whole
    _, first, _ = run("read", "-r", SESSION, "-c", "10")
    assert [line.split()[0] for line in first.splitlines()] == ["4", "6", "8", "9", "10"]
    code, _, err = run("read", SESSION, "-c", "0")
    assert code == 2 and "--count takes a number of packets from 1" in err


def test_V_is_detail_and_q_prints_no_frames() -> None:
    _, tree, _ = run("read", SESSION, "-V", "-c", "4")
    assert tree.startswith("Frame 4: ") and "PeerProperties request" in tree
    code, quiet, err = run("read", str(CAPTURES / "auth_failure.pcap"), "-q")
    assert code == 0 and quiet == "" and "[error] packet 11: authentication failed" in err


def test_fields_with_header_separator_and_quotes() -> None:
    code, out, _ = run(
        "read", SESSION, "-T", "fields", "-e", "frame.number", "-e", "command", "-e", "correlation_id",
        "-E", "header=y", "-E", "separator=,", "-c", "10",
    )  # fmt: skip
    assert code == 0
    assert out.splitlines() == [
        "frame.number,command,correlation_id",
        "4,PeerProperties,1",
        "6,PeerProperties,1",
        "8,SaslHandshake,2",
        "9,SaslHandshake,2",
        "10,SaslAuthenticate,3",
    ]
    _, quoted, _ = run("read", SESSION, "-e", "stream", "-E", "quote=d", "-Y", 'command == "Create"')
    assert quoted.splitlines() == ['"streamdump-demo"', '""']  # the response carries no stream
    _, occurrence, _ = run(
        "read", SESSION, "-e", "publishing_ids", "-E", "occurrence=l", "-Y", "publishing_ids"
    )
    assert occurrence.splitlines()[0] == "1"
    for bad, says in (
        (["-T", "fields"], "add -e NAME"),
        (["-E", "header=y"], "-E sets how -T fields prints"),
        (["-e", "stream", "-E", "header=maybe"], "-E header takes y or n"),
        (["-e", "stream", "-E", "colour=red"], "-E colour: unknown"),
    ):
        code, out, err = run("read", SESSION, *bad)
        assert code == 2 and out == "" and says in err, (bad, err)


def test_json_is_one_array_of_the_jsonl_objects() -> None:
    _, lines, _ = run("read", SESSION, "-T", "jsonl")
    code, array, _ = run("read", SESSION, "-T", "json")
    assert code == 0 and json.loads(array) == [json.loads(line) for line in lines.splitlines()]
    _, empty, _ = run("read", SESSION, "-T", "json", "-Y", 'command == "Nothing"')
    assert json.loads(empty) == []


def test_x_dumps_each_frame_s_bytes_and_decode_reads_the_dump_back() -> None:
    code, out, _ = run("read", str(CAPTURES / "bulk.pcap"), "-x", "-Y", "frame == 115")
    assert code == 0
    line, heading, *dump = out.split("\n\n")[0].splitlines()
    assert line.split()[0] == "115" and heading.startswith("RMQS PDU (")
    assert "from packets " in heading  # a Publish of many segments names them all
    frame = next(
        f
        for f in Options().prepare().session().frames(CaptureFile(CAPTURES / "bulk.pcap"))
        if f.number == 115
    )
    assert parse_dump("\n".join([heading, *dump])).data == frame.data
    assert dump[0].startswith("0000  ") and len(dump) == (len(frame.data) + 15) // 16
    # JSON carries the bytes as hex, with the packets, behind -x.
    _, plain, _ = run("read", SESSION, "-T", "jsonl", "-c", "4")
    _, carried, _ = run("read", SESSION, "-T", "jsonl", "-c", "4", "-x")
    obj = json.loads(carried)
    assert "bytes" not in json.loads(plain) and obj["packets"] == [4]
    assert bytes.fromhex(obj["bytes"])[4:6] == b"\x00\x11"  # PeerProperties' key
    # decode reads -x's output back.
    code, again, _ = run("decode", "-", "--brief", stdin="\n".join([heading, *dump]) + "\n")
    assert code == 0 and " Publish command " in again


def test_w_writes_the_packets_of_the_frames_kept_and_tshark_reads_them(tmp_path: Path) -> None:
    out = tmp_path / "creates.pcapng"
    code, shown, _ = run("read", SESSION, "-Y", 'command == "Create"', "-w", str(out))
    assert code == 0 and len(shown.splitlines()) == 2
    listed = subprocess.run([_tshark(), "-r", str(out)], capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 2 + 4  # and the connection's SYN, SYN-ACK and FINs
    _, again, _ = run("read", str(out))
    assert [line.split()[4:] for line in again.splitlines()] == [
        line.split()[4:] for line in shown.splitlines()
    ]
    pcap = tmp_path / "all.pcap"
    code, _, _ = run("read", SESSION, "-q", "-w", str(pcap))
    assert code == 0 and pcap.read_bytes()[:4] == b"\xd4\xc3\xb2\xa1"
    _, original, _ = run("read", SESSION, "-T", "jsonl")
    _, copied, _ = run("read", str(pcap), "-T", "jsonl")
    assert [json.loads(a)["fields"] for a in original.splitlines()] == [
        json.loads(b)["fields"] for b in copied.splitlines()
    ]
    # A pipe is read once: its packets are kept aside, then copied.
    piped = tmp_path / "piped.pcapng"
    proc = cli(
        "read", "-", "-q", "-w", str(piped), "-Y", 'command == "Create"', stdin=Path(SESSION).read_bytes()
    )
    assert proc.returncode == 0
    _, from_pipe, _ = run("read", str(piped))
    assert from_pipe == again


def test_Y_on_follow() -> None:
    code, out, _ = run("follow", SESSION, "-Y", 'command == "Create"')
    assert code == 0
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    # The frames kept, and how their connection ended.
    assert [row.split()[0] for row in rows] == ["19", "69", "72"]
    assert "Create corr=5 stream=streamdump-demo" in rows[0] and "← 21" in rows[0]
    assert "[FIN]" in rows[1] and "[FIN]" in rows[2]


# ---------------------------------------------------------------------- exit statuses


def test_exit_statuses_a_script_can_trust(tmp_path: Path) -> None:
    code, _, err = run("read", str(CAPTURES / "auth_failure.pcap"))
    assert code == 0
    finding = next(line for line in err.splitlines() if "authentication failed" in line)
    assert finding.startswith("[error] packet 11: ") and not finding.startswith("streamdump: error:")
    assert run("read", "/nonexistent.pcap")[0] == 1
    assert run("read", SESSION, "-P", "foo")[0] == 2
    assert run("read", SESSION, "-d", "5552=foo")[0] == 2
    code, out, err = run("stats", "/nonexistent.pcap")
    assert code == 1 and out == "" and err.startswith("streamdump: error: /nonexistent.pcap: cannot open")


@pytest.mark.parametrize(("level", "status"), [("note", 3), ("warn", 3), ("error", 3)])
def test_fail_on_gives_its_own_status(level: str, status: int) -> None:
    assert run("read", str(CAPTURES / "auth_failure.pcap"), "--fail-on", level, "-q")[0] == status
    assert run("stats", str(CAPTURES / "auth_failure.pcap"), "--fail-on", level)[0] == status


def test_fail_on_levels_and_clean_captures() -> None:
    # deleted_stream's worst finding is a warning: --fail-on error lets it through.
    assert run("read", str(CAPTURES / "deleted_stream.pcap"), "-q", "--fail-on", "error")[0] == 0
    assert run("read", str(CAPTURES / "deleted_stream.pcap"), "-q", "--fail-on", "warn")[0] == 3
    assert run("read", SESSION, "-q", "--fail-on", "note")[0] == 0
    assert run("follow", str(CAPTURES / "auth_failure.pcap"), "--fail-on", "error")[0] == 3
    assert run("decode", "00000009000600010000000701", "--fail-on", "note")[0] == 0


def test_version_and_completion() -> None:
    proc = cli("--version")
    assert (
        proc.returncode == 0
        and proc.stdout.decode().strip() == f"streamdump {__import__('streamdump').__version__}"
    )
    env = {"_STREAMDUMP_COMPLETE": "complete_bash", "COMP_WORDS": "streamdump fo", "COMP_CWORD": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "streamdump"],
        env={**__import__("os").environ, **env},
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert completed.stdout.split() == ["follow"]
    assert "--show-completion" in cli("--help").stdout.decode()


# ---------------------------------------------------------------------- decode


DELETE_PUBLISHER = "00000009000600010000000701"


@pytest.mark.parametrize(
    "dump",
    [
        # tshark -x and Wireshark's Copy as Hex Dump: offsets, bytes, ASCII
        "0000  00 00 00 09 00 06 00 01 00 00 00 07 01            .............\n",
        "0000   00 00 00 09 00 06 00 01 00 00 00 07 01   .............\n",
        # xxd and hexdump -C
        "00000000: 0000 0009 0006 0001 0000 0007 01        .............\n",
        "00000000  00 00 00 09 00 06 00 01  00 00 00 07 01              |.............|\n0000000d\n",
    ],
)
def test_decode_takes_the_dumps_people_paste(dump: str) -> None:
    code, out, err = run("decode", dump, "--brief")
    assert code == 0, err
    assert out.split()[2:] == ["RMQS", "DeletePublisher", "request", "0x0006", "corr=7", "pub=1"]
    code, same, _ = run("decode", "-", "--brief", stdin=dump)
    assert code == 0 and same == out


def test_decode_a_last_line_whose_ascii_looks_like_hex() -> None:
    # The bytes "ab" show as ASCII "ab", which is hex too: the ASCII column is told by what it shows.
    dump = "0000  00 00 00 0d 00 06 00 01 00 00 00 07 01 61 62 63   .............abc\n"
    assert parse_dump(dump).data == bytes.fromhex("0000000d000600010000000701") + b"abc"
    last = "0000  61 62   ab\n"
    assert parse_dump(last).data == b"ab"


def test_decode_reads_tshark_x_of_a_real_packet() -> None:
    dump = subprocess.run(
        [_tshark(), "-r", SESSION, "-x", "-Y", "frame.number == 4"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    code, out, err = run("decode", dump, "--brief")
    assert code == 0, err
    assert "PeerProperties request 0x0011 corr=1" in out and "TCP payload" in err


def test_Y_on_decode() -> None:
    two = [DELETE_PUBLISHER, "0000000a80060001000000070001"]
    code, out, _ = run("decode", *two, "--brief", "-Y", 'kind == "response"')
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["2"]


def test_decode_says_when_no_protocol_reads_the_bytes() -> None:
    code, out, err = run("decode", "0000")
    assert code == 1 and out == ""
    assert err.startswith("streamdump: error: no protocol reads these 2 bytes")
    code, out, _ = run("decode", "0000", "--protocol", "rabbitmq_stream")
    assert code == 0 and "RabbitMQ Streams" in out


# ---------------------------------------------------------------------- a proxy's file


def test_a_proxy_s_file_reads_back_as_the_proxy_showed_it(tmp_path: Path) -> None:
    """The upstream listens on a port no spec names: the proxy decodes it by --port's guess, and
    its file says so, so `read` needs no options."""
    decoder = Decoder(default_registry().get("rabbitmq_stream"))
    request = bytes.fromhex(DELETE_PUBLISHER)
    answer = decoder.encode("DeletePublisher", "response", {"correlation_id": 7, "response_code": 1})
    setup = Options(ports=(15552,)).prepare()
    path = tmp_path / "proxy.pcapng"
    segments = []
    with path.open("wb") as out:
        writer = PacketWriter(out, WriteFormat.pcapng, setup.hints())
        rec = Recorder(segments.append, writer)
        client, server = Side("127.0.0.1", 40000, 1000), Side("127.0.0.1", 15552, 5000)
        rec.segment(client, server, TCP_SYN)
        rec.segment(server, client, TCP_SYN | TCP_ACK)
        rec.segment(client, server, TCP_ACK, request)
        rec.segment(server, client, TCP_ACK, answer)
        rec.segment(client, server, TCP_FIN | TCP_ACK)
        writer.close()
    shown = [f.command for f in setup.session().frames(Segments(segments))]
    assert shown == ["DeletePublisher", "DeletePublisher"]
    code, out, err = run("read", str(path))
    assert code == 0, err
    assert [line.split()[6] for line in out.splitlines()] == shown
    # tshark reads the file too.
    assert (
        len(
            subprocess.run(
                [_tshark(), "-r", str(path)], capture_output=True, text=True, check=True
            ).stdout.splitlines()
        )
        == 5
    )


# ---------------------------------------------------------------------- filters inside bodies


def test_filters_reach_inside_maps_and_lists(tmp_path: Path) -> None:
    decoder = Decoder(default_registry().get("rabbitmq_stream"))

    def publish(*numbers: int) -> bytes:
        messages = [
            {
                "publishing_id": n,
                "entry": simple_entry(
                    encode_message(
                        [("amqp_value", {"seq": n, "text": f"msg {n}", "tags": ["a", {"deep": "x"}]})]
                    )
                ),
            }
            for n in numbers
        ]
        return decoder.encode("Publish", "command", {"publisher_id": 1, "messages": messages})

    path = tmp_path / "values.pcap"
    path.write_bytes(tcp_pcap([(True, publish(198, 199)), (True, publish(200))]))

    def kept(expression: str) -> list[str]:
        code, out, err = run("read", str(path), "-Y", expression)
        assert code == 0, err
        return [line.split()[0] for line in out.splitlines()]

    assert kept('amqp_value contains "msg 199"') == ["4"]
    assert kept("amqp_value == 200") == ["5"]
    assert kept('amqp_value == "deep"') == ["4", "5"]  # a key of a map inside a list
    assert kept('amqp_value matches "^msg 20"') == ["5"]
    assert kept('amqp_value != "msg 199"') == ["5"]
    assert kept('amqp_value contains "nothing"') == []
