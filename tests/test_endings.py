"""How connections end: the reader's SYN/FIN/RST marks and the tracker's findings about them.

The recorded cases (a real rstream application crashing in its handler, a client reset in the
middle of a Publish) are pinned in test_conversation.py; here are the cases no broker makes on
demand, built as pcaps: a refused connection, a half-closed one, a server FIN in the middle of
a frame, and a protocol whose connections simply end with TCP.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import dpkt
import pytest
from conftest import CAPTURES
from pcap_writer import tcp_pcap
from typer.testing import CliRunner

from streamdump.analysis.conversations import Conversations
from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.analysis.state import id_runs
from streamdump.cli import app
from streamdump.spec.decoder import Decoder
from streamdump.spec.registry import SpecError, default_registry, load_spec
from streamdump.wire.frame import Endpoint
from streamdump.wire.lifecycle import CLOSED, REFUSED, RESET, Life, Mark

FIN_ACK = dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK
RST = dpkt.tcp.TH_RST


def read(path: Path, decoder: Decoder) -> tuple[ReadStats, Conversations]:
    stats = ReadStats()
    tracker = Conversations([decoder.protocol])
    for frame in read_frames(path, decoder, None, stats):
        tracker.feed(frame)
    tracker.finish(stats.lossy, stats.lives)
    return stats, tracker


def found(tracker: Conversations) -> list[tuple[str, str, int, str]]:
    return [(d.severity, d.kind, d.number, d.message) for d in tracker.diagnoses]


def heartbeat(decoder: Decoder) -> bytes:
    return decoder.encode("Heartbeat", "command", {})


def test_a_refused_connection_is_named_with_its_syn_and_reset(tmp_path: Path, decoder: Decoder) -> None:
    path = tmp_path / "refused.pcap"
    path.write_bytes(tcp_pcap([], refused=True))
    stats, tracker = read(path, decoder)
    assert stats.lives[1].end == REFUSED
    assert found(tracker) == [
        (
            "warn",
            "refused",
            2,
            "the broker 127.0.0.1:5552 refused the connection from 127.0.0.1:40000: its SYN (packet 1) was "
            "answered by a reset (packet 2)",
        )
    ]
    # stats lists it, though it carried no frame, and says how it ended.
    result = CliRunner().invoke(app, ["stats", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    (conn,) = json.loads(result.stdout)["connections"]
    assert conn["ended"]["end"] == "refused"
    assert conn["ended"]["how"] == "refused: the broker answered the SYN with a reset"


def test_a_connection_half_closed_at_the_capture_end(tmp_path: Path, decoder: Decoder) -> None:
    path = tmp_path / "half.pcap"
    path.write_bytes(
        tcp_pcap([(True, heartbeat(decoder)), (False, heartbeat(decoder))], ending=[(True, FIN_ACK)])
    )
    stats, tracker = read(path, decoder)
    life = stats.lives[1]
    assert life.end is None and life.half_closed == Mark(6, life.half_closed.ts, True)  # type: ignore[union-attr]
    assert found(tracker) == [
        (
            "note",
            "half_closed",
            6,
            "the client closed its side (FIN at packet 6) and the broker had not closed its own when the "
            "capture ended, 0.000 s later",
        )
    ]
    assert life.how("broker") == "half-closed by the client (FIN at packet 6) when the capture ended"


def test_a_server_fin_in_the_middle_of_a_frame(tmp_path: Path, decoder: Decoder) -> None:
    whole = decoder.encode(
        "Close", "request", {"correlation_id": 1, "closing_code": 1, "closing_reason": "OK"}
    )
    path = tmp_path / "cut.pcap"
    path.write_bytes(
        tcp_pcap(
            [(True, heartbeat(decoder)), (False, whole[:9])],
            ending=[(False, FIN_ACK), (True, FIN_ACK)],
        )
    )
    stats, tracker = read(path, decoder)
    assert stats.lives[1].end == CLOSED
    assert stats.lives[1].cut == {False: 9}
    assert ("warn", "cut_frame") in [(s, k) for s, k, _, _ in found(tracker)]
    (cut,) = [m for _, k, _, m in found(tracker) if k == "cut_frame"]
    assert cut.startswith(
        "the broker closed the connection (FIN at packet 6) in the middle of a frame from the broker: "
        "9 bytes of it had arrived"
    )
    # The broker's own frame was cut by its FIN: that one finding says it all.
    assert [k for _, k, _, _ in found(tracker)] == ["cut_frame"]


def test_a_client_that_ends_without_close_after_a_delivery(tmp_path: Path, decoder: Decoder) -> None:
    path = tmp_path / "left.pcap"
    path.write_bytes(
        tcp_pcap(
            [(True, heartbeat(decoder)), (False, heartbeat(decoder))], ending=[(True, RST | dpkt.tcp.TH_ACK)]
        )
    )
    stats, tracker = read(path, decoder)
    assert stats.lives[1].end == RESET
    assert found(tracker) == [
        (
            "warn",
            "abrupt_close",
            6,
            "the client reset the connection (RST at packet 6) without Close, 1.0 ms after the broker's "
            "Heartbeat at packet 5",
        )
    ]


def test_close_before_the_fin_is_an_orderly_end(tmp_path: Path, decoder: Decoder) -> None:
    close = decoder.encode(
        "Close", "request", {"correlation_id": 1, "closing_code": 1, "closing_reason": "OK"}
    )
    answer = decoder.encode("Close", "response", {"correlation_id": 1, "response_code": 1})
    path = tmp_path / "orderly.pcap"
    path.write_bytes(tcp_pcap([(True, close), (False, answer)], ending=[(False, FIN_ACK), (True, FIN_ACK)]))
    stats, tracker = read(path, decoder)
    assert stats.lives[1].end == CLOSED
    assert found(tracker) == []


def test_a_protocol_without_a_close_command_ends_with_tcp(tmp_path: Path) -> None:
    nats = Decoder(default_registry().get("nats"))
    path = tmp_path / "nats.pcap"
    path.write_bytes(
        tcp_pcap(
            [(False, b'INFO {"server_id":"x"}\r\n'), (True, b"PING\r\n"), (False, b"PONG\r\n")],
            server=("127.0.0.1", 4222),
            ending=[(True, FIN_ACK), (False, FIN_ACK)],
        )
    )
    stats, tracker = read(path, nats)
    assert stats.lives[1].end == CLOSED
    assert found(tracker) == []


def test_follow_shows_the_end_as_rows() -> None:
    result = CliRunner().invoke(app, ["follow", str(CAPTURES / "client_crash.pcap"), "--connection", "5"])
    assert result.exit_code == 0, result.output
    last = result.stdout.rstrip().splitlines()[-1].split()
    assert last[0] == "187" and last[-1] == "[RST]"
    session = CliRunner().invoke(app, ["follow", str(CAPTURES / "session.pcap")]).stdout.splitlines()
    assert [line.split()[0] for line in session if "[FIN]" in line] == ["69", "72"]


def test_stats_say_how_each_connection_ended() -> None:
    result = CliRunner().invoke(app, ["stats", str(CAPTURES / "client_crash.pcap"), "--format", "json"])
    ended = {c["connection"]: c["ended"] for c in json.loads(result.stdout)["connections"]}
    assert ended[5]["how"] == "reset by the client (RST at packet 187)"
    assert {n: e["closed_by"] for n, e in ended.items()} == dict.fromkeys(range(1, 6), "client")
    result = CliRunner().invoke(app, ["stats", str(CAPTURES / "heartbeat_timeout.pcap"), "--format", "json"])
    assert (
        json.loads(result.stdout)["connections"][0]["ended"]["how"]
        == "closed by the broker first (FIN at packet 25)"
    )
    text = CliRunner().invoke(app, ["stats", str(CAPTURES / "heartbeat_timeout.pcap")]).stdout
    assert re.search(r"127\.0\.0\.1:5552 .* 3\.0067 +closed, 2 warn", text)


def test_the_first_flag_names_the_closer() -> None:
    life = Life(1, "p", Endpoint("a", 1), Endpoint("b", 2), Mark(1, 0.0, True))
    life.saw(dpkt.tcp.TH_SYN, True, 1, 0.0)
    life.saw(dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK, False, 2, 0.1)
    life.saw(FIN_ACK, False, 9, 1.0)
    life.saw(FIN_ACK, True, 10, 1.1)
    life.saw(FIN_ACK, True, 11, 1.2)  # a retransmitted FIN changes nothing
    life.finish(CLOSED, 10, 1.1)
    assert life.closer == (Mark(9, 1.0, False), "FIN")
    assert life.fins[True].number == 10 and life.duration == pytest.approx(1.1)
    assert life.ended_by("broker") == "the broker closed the connection"


def test_id_runs_show_the_gaps() -> None:
    assert id_runs([1, 2, 3, 5, 7, 8]) == "1..3, 5, 7..8"
    assert id_runs(list(range(0, 40, 2))) == "0, 2, 4, 6, 8, 10, 12, 14 and 12 more runs"


def test_the_ending_section_names_commands_of_the_spec() -> None:
    text = (Path(__file__).parent.parent / "dissectors" / "rabbitmq_stream" / "spec.yaml").read_text()
    broken = text.replace("    close: Close\n    hints:", "    close: Goodbye\n    hints:")
    with pytest.raises(SpecError, match="Goodbye"):
        load_spec(Path("spec.yaml"), broken, package="streamdump.dissectors.rabbitmq_stream")


def test_connections_ended_at_the_same_instant_are_told_together() -> None:
    """Ends with equal timestamps (a capture's microseconds) go by connection, not by comparing
    the connections' records, which have no order (before, that raised a TypeError)."""
    from streamdump.analysis.endings import ended_together

    lives = {}
    for number in (1, 2, 3):
        life = Life(
            number, "p", Endpoint("10.0.0.1", 40000 + number), Endpoint("b", 2), Mark(number, 0.0, True)
        )
        life.saw(RST, True, 10 + number, 5.0)
        life.finish(RESET, 10 + number, 5.0)
        lives[number] = life
    ((conn, found),) = ended_together(lives, {1, 2, 3})
    assert conn == 1 and found.kind == "ended_together"
    assert "ended 3 connections within 0.0 ms" in found.message


@pytest.mark.parametrize("end", [CLOSED, RESET, REFUSED, None])
@pytest.mark.parametrize("cut", [{}, {True: 7}])
@pytest.mark.parametrize("close", [None, "Close"])
@pytest.mark.parametrize("fins", [(), (True,), (False, True)])
@pytest.mark.parametrize("last", [None, False, True])
def test_a_silent_ending_is_one_endings_finds_nothing_in(
    end: str | None, cut: dict[bool, int], close: str | None, fins: tuple[bool, ...], last: bool | None
) -> None:
    """The tracker skips endings for a connection `silent` names (most of a capture's): there,
    whatever the connection carried and whoever closed it, endings finds nothing."""
    from streamdump.analysis.endings import Words, endings, silent
    from streamdump.analysis.state import ConnState, Seen

    client, server = Endpoint("10.0.0.1", 40000), Endpoint("10.0.0.2", 5552)
    life = Life(1, "rabbitmq_stream", client, server, Mark(1, 0.0, True), syn=Mark(1, 0.0, True))
    life.syn_ack = Mark(2, 0.0, False)
    for n, from_client in enumerate(fins, 10):
        life.fins[from_client] = Mark(n, n / 10, from_client)
    if end in (RESET, REFUSED):
        life.reset = Mark(20, 2.0, False)
    life.cut = dict(cut)
    life.end = end
    words = Words("broker", close, {})
    conns: list[ConnState | None] = [None, ConnState(1)]
    if last is not None:
        conns.append(ConnState(1, last=Seen(5, 0.5, "Deliver", 8, 1, 100, last)))
    found = [list(endings(life, conn, words)) for conn in conns]
    if silent(life, words):
        assert found == [[] for _ in conns]
    else:
        assert end not in (CLOSED, RESET) or cut or close is not None
