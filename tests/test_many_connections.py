"""Many connections: each kept whole whatever its ports, and what an ended one leaves behind bounded.

A client's port can be another protocol's server port (ephemeral ports are anything behind
NAT): the connection the SYN opened is found in either direction before any port is looked
at, and the side that sent the SYN is the client. Captures built with dpkt (tests/pcap_writer).
"""

from __future__ import annotations

import gc
import io
import json
import os
import socket
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import dpkt
import pytest
from pcap_writer import tcp_pcap
from streamdump.dissectors.eventmesh.framing import MAGIC

from streamdump.analysis import pipeline
from streamdump.analysis import rows as rows_module
from streamdump.analysis.session import CaptureFile, Options
from streamdump.analysis.statistics import document
from streamdump.views.safe import write_json

FIN_ACK = dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK
INFO = b'INFO {"server_id":"T","version":"2.9.10","max_payload":1048576} \r\n'
CONNECT = b'CONNECT {"verbose":false,"lang":"python3","version":"2.6.0"} \r\n'


def eventmesh(header: dict, body: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">ii", 13 + len(text) + len(body), len(text)) + text + body


def streamdump(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamdump", *args], capture_output=True, text=True, check=True
    )


def read(path: Path) -> tuple[list, object]:
    session = Options().prepare().session(statistics=True)
    frames = list(session.frames(CaptureFile(path)))
    return frames, session


def test_a_nats_client_on_eventmeshs_port_is_one_nats_connection(tmp_path: Path) -> None:
    """The server's INFO and PONG to the client's port 10000 (EventMesh's) stay in the NATS
    connection the SYN opened: nothing passed over, no EventMesh connection."""
    path = tmp_path / "nats-from-10000.pcap"
    frames = [(False, INFO), (True, CONNECT), (True, b"PING\r\n"), (False, b"PONG\r\n")]
    path.write_bytes(
        tcp_pcap(
            frames,
            server=("10.0.0.1", 4222),
            client=("10.0.0.2", 10000),
            ending=[(True, FIN_ACK), (False, FIN_ACK)],
        )
    )
    got, session = read(path)
    assert [(f.protocol, f.name, f.from_client) for f in got] == [
        ("nats", "Info", False),
        ("nats", "Connect", True),
        ("nats", "Ping", True),
        ("nats", "Pong", False),
    ]
    assert session.stats.connections == 1 and session.stats.skipped_bytes == 0
    assert [
        (c["client"], c["server"], c["ended"]["end"]) for c in session.partials()["nats"].connections
    ] == [("10.0.0.2:10000", "10.0.0.1:4222", "closed")]
    assert not session.partials()["eventmesh"].connections
    assert got[3].links and got[3].links.get("request_in") == got[2].number  # the PONG answers the PING


def test_an_eventmesh_client_on_natss_port_is_one_eventmesh_connection(tmp_path: Path) -> None:
    """The reverse: an EventMesh client whose port is 4222 (NATS's); the server's answers to
    it are EventMesh's, not a NATS connection the other way round."""
    path = tmp_path / "eventmesh-from-4222.pcap"
    frames = [
        (True, eventmesh({"cmd": "HEARTBEAT_REQUEST", "seq": "1"})),
        (False, eventmesh({"cmd": "HEARTBEAT_RESPONSE", "seq": "1", "code": 0, "desc": "success"})),
    ]
    path.write_bytes(
        tcp_pcap(
            frames,
            server=("10.0.0.1", 10000),
            client=("10.0.0.2", 4222),
            ending=[(False, FIN_ACK), (True, FIN_ACK)],
        )
    )
    got, session = read(path)
    assert [(f.protocol, f.from_client, str(f.src)) for f in got] == [
        ("eventmesh", True, "10.0.0.2:4222"),
        ("eventmesh", False, "10.0.0.1:10000"),
    ]
    assert session.stats.connections == 1 and session.stats.skipped_bytes == 0
    assert not [n for n in session.take_notices() if n.severity != "note"]
    assert [(c["client"], c["ended"]["end"]) for c in session.partials()["eventmesh"].connections] == [
        ("10.0.0.2:4222", "closed")
    ]
    assert not session.partials()["nats"].connections


def test_the_syn_sender_is_the_client_whatever_its_port(tmp_path: Path) -> None:
    """A client on port 4222 (NATS's) to a server on a port no protocol names is no NATS server:
    its handshake says who is who, so none of its segments is decoded as NATS. On port 10000
    (EventMesh's), EventMesh's magic finds the protocol on any port, with the SYN's sender as
    the client."""
    path = tmp_path / "other.pcap"
    frames = [(True, b"PING\r\n"), (False, b"PONG\r\n")]
    path.write_bytes(tcp_pcap(frames, server=("10.0.0.1", 7777), client=("10.0.0.2", 4222)))
    got, session = read(path)
    assert got == [] and session.stats.connections == 0
    frames = [(True, eventmesh({"cmd": "HEARTBEAT_REQUEST", "seq": "1"}))]
    path.write_bytes(tcp_pcap(frames, server=("10.0.0.1", 7777), client=("10.0.0.2", 10000)))
    got, session = read(path)
    assert [(f.protocol, f.kind, f.from_client, str(f.dst)) for f in got] == [
        ("eventmesh", "request", True, "10.0.0.1:7777")
    ]


def sessions(path: Path, count: int, big: int = -1) -> None:
    """count short NATS connections, each a client of its own (INFO, CONNECT, PUB, PING, PONG,
    FINs); the one numbered big publishes 1000 bytes more than the others."""
    with path.open("wb") as out:
        writer = dpkt.pcap.Writer(out)
        ts = 1_800_000_000.0
        for n in range(count):
            client, server = (
                (socket.inet_aton(f"10.1.{n >> 8}.{n & 255}"), 40000 + n),
                (socket.inet_aton("10.0.0.1"), 4222),
            )
            seq = {True: 1000, False: 5000}
            body = b"x" * (1000 if n == big else 10)
            packets = [
                (True, dpkt.tcp.TH_SYN, b""),
                (False, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK, b""),
                (True, dpkt.tcp.TH_ACK, b""),
                (False, dpkt.tcp.TH_ACK, INFO),
                (True, dpkt.tcp.TH_ACK, CONNECT),
                (True, dpkt.tcp.TH_ACK, b"PUB a.b %d\r\n%s\r\n" % (len(body), body)),
                (True, dpkt.tcp.TH_ACK, b"PING\r\n"),
                (False, dpkt.tcp.TH_ACK, b"PONG\r\n"),
                (True, FIN_ACK, b""),
                (False, FIN_ACK, b""),
            ]
            for from_client, flags, payload in packets:
                (src, sport), (dst, dport) = (client, server) if from_client else (server, client)
                tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq[from_client], ack=seq[not from_client],
                                   flags=flags, win=65535, data=payload)  # fmt: skip
                ip = dpkt.ip.IP(src=src, dst=dst, p=dpkt.ip.IP_PROTO_TCP, data=tcp)
                ip.len = 20 + len(bytes(tcp))
                writer.writepkt(bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip)), ts=ts)
                ts += 0.0001
                seq[from_client] += len(payload) + (1 if flags & (dpkt.tcp.TH_SYN | dpkt.tcp.TH_FIN) else 0)


def test_stats_list_the_top_connections_by_bytes_and_total_the_rest(tmp_path: Path) -> None:
    """One line per connection as tshark's conv,tcp: the most bytes first, --top of them, the
    others totalled on one line; JSON lists every connection, in their order."""
    path = tmp_path / "many.pcap"
    sessions(path, 30, big=17)
    out = streamdump("stats", str(path), "--top", "5").stdout
    rows = [line.split() for line in out.splitlines()[2:8]]
    assert out.splitlines()[0].startswith("Connections (30; the 5 that moved the most bytes)")
    assert rows[0][:4] == ["18", "10.1.0.17:40017", "<->", "10.0.0.1:4222"]  # the big one first
    assert [r[0] for r in rows[1:5]] == ["1", "2", "3", "4"]  # equal bytes: the earliest first
    each = [int(v) for v in rows[1][4:10]]
    assert each[0] == 3 and each[2] == 2 and each[4] == 5 and each[5] == each[1] + each[3]
    assert rows[5][:3] == ["25", "more", "connections"]
    assert [int(v) for v in rows[5][3:]] == [25 * v for v in each]  # the others, totalled
    assert rows[1][10] == "0.000000" and rows[1][11] == "0.0009" and rows[1][12] == "closed"
    every = json.loads(streamdump("stats", str(path), "-T", "json").stdout)["connections"]
    assert [c["connection"] for c in every] == list(range(1, 31))
    assert every[17]["client_bytes"] == each[1] + 990 + 2  # 990 bytes more, its size two digits longer


def test_an_ended_connection_leaves_only_its_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a session keeps of connections that ended does not grow with their number: no
    tracker state, no Life, no counters; summaries beyond a few are written out. Writing them
    as JSON holds a few at a time (a million connections' JSON once held a counter each)."""
    monkeypatch.setattr(pipeline, "CLOSED_MEMORY", 50)
    held, writing = [], []
    for count in (150, 600):
        path = tmp_path / f"many{count}.pcap"
        sessions(path, count)
        monkeypatch.setattr(rows_module, "RUN", 50)
        gc.collect()
        tracemalloc.start()
        session = Options().prepare().session(statistics=True)
        for _ in session.frames(CaptureFile(path)):
            pass
        gc.collect()
        held.append(tracemalloc.get_traced_memory()[0])
        tracemalloc.stop()
        assert not session.tracker.connections and not session.stats.lives and not session.reader.connections
        assert all(not s.sides for s in session.statistics.values())
        assert len(session.partials()["nats"].connections) == count
        # The summaries all in memory (one run, nothing read back): what writing adds is its own.
        monkeypatch.setattr(rows_module, "RUN", 100_000)
        session = Options().prepare().session(statistics=True)
        for _ in session.frames(CaptureFile(path)):
            pass
        partials = session.partials()
        tracemalloc.start()
        with open(os.devnull, "w") as out:
            write_json(document(partials, stream=True), out)
        writing.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        del session, partials
    assert (held[1] - held[0]) / 450 < 100, held  # bytes per connection that ended
    assert (writing[1] - writing[0]) / 450 < 70, (
        writing
    )  # the sorted list, a little more (a counter each: 96)


def test_an_ended_connection_is_freed_without_the_collector(tmp_path: Path) -> None:
    """Nothing of an ended connection is left in a reference cycle: with the collector off, its
    sides are gone as soon as the read drops it (a cycle per connection once made the collector
    walk every ended connection again, a tenth of a read of short connections)."""
    path = tmp_path / "few.pcap"
    sessions(path, 3)
    session = Options().prepare().session()

    def sides() -> int:
        return sum(isinstance(o, pipeline.Side) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        frames = session.frames(CaptureFile(path))
        first = next(frames)
        assert first.protocol == "nats" and sides() == 2  # the first connection, open
        assert len(list(frames)) == 14
        assert sides() == 0
    finally:
        gc.enable()


def test_stats_json_is_written_as_it_goes_and_as_json_dumps_writes_it(tmp_path: Path) -> None:
    """write_json streams the connections one at a time, and what it writes is exactly
    json.dumps(document, indent=1) of the same document held whole."""
    path = tmp_path / "some.pcap"
    sessions(path, 7)
    session = Options().prepare().session(statistics=True)
    for _ in session.frames(CaptureFile(path)):
        pass
    partials = session.partials()

    def held(value: object) -> object:
        if isinstance(value, dict):
            return {key: held(item) for key, item in value.items()}
        if isinstance(value, list) or hasattr(value, "__next__"):
            return [held(item) for item in value]
        return value

    streamed = document(partials, stream=True)
    assert hasattr(streamed["connections"], "__next__")  # the connections come one at a time
    out = io.StringIO()
    write_json(streamed, out)
    expected = json.dumps(held(document(partials, stream=True)), indent=1, ensure_ascii=False)
    assert out.getvalue() == expected
    connections = json.loads(out.getvalue())["connections"]
    assert len(connections) == 7 and all(isinstance(c, dict) and c for c in connections)
    # Nested iterators are streamed too, at any depth, in the same layout.
    nested = {"a": {"b": iter([{"c": 1}, {"d": {"e": [2]}}]), "f": {}}, "g": iter([])}
    out = io.StringIO()
    write_json(nested, out)
    assert out.getvalue() == json.dumps(
        {"a": {"b": [{"c": 1}, {"d": {"e": [2]}}], "f": {}}, "g": []}, indent=1, ensure_ascii=False
    )
