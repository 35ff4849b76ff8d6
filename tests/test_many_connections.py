"""Many connections: each kept whole whatever its ports, and what an ended one leaves behind bounded.

A client's port can be another protocol's server port (ephemeral ports are anything behind
NAT): the connection the SYN opened is found in either direction before any port is looked
at, and the side that sent the SYN is the client. Captures built with dpkt (tests/pcap_writer).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import dpkt
from pcap_writer import tcp_pcap
from streamdump.dissectors.eventmesh.framing import MAGIC

from streamdump.analysis.session import CaptureFile, Options

FIN_ACK = dpkt.tcp.TH_FIN | dpkt.tcp.TH_ACK
INFO = b'INFO {"server_id":"T","version":"2.9.10","max_payload":1048576} \r\n'
CONNECT = b'CONNECT {"verbose":false,"lang":"python3","version":"2.6.0"} \r\n'


def eventmesh(header: dict, body: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + struct.pack(">ii", 13 + len(text) + len(body), len(text)) + text + body


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
