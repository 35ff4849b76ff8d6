"""The loss checks in bench/ (recovery_check's dropped ranges, byte_walk's bytes present) count a
dropped segment's bytes as streamdump's reassembler does, retransmissions included.

The reassembler declares bytes missing once the peer acknowledges past them, and a copy that
comes after that is late: not decoded. So a dropped first copy is made good by a retransmission
that comes before the acknowledgement, and not by a spurious one that comes after it (the
intermittent failure of the live flood check: its recording had such retransmissions).

The traffic is crafted: one connection whose server sends heartbeat frames in 96-byte segments,
some retransmitted in time and some after the client's ACK, and the client some requests; the
sequence numbers wrap. Any drop the harness draws must give exactly the gaps streamdump reports.
"""

from __future__ import annotations

import random
import socket
import sys
from pathlib import Path

import dpkt
import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdump.analysis.pipeline import ReadStats, read_frames
from streamdump.spec.decoder import Decoder
from streamdump.wire.reassembly import TCP_ACK, TCP_FIN, TCP_SYN

sys.path.insert(0, str(ROOT / "bench"))
import byte_walk
import recovery_check

CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", byte_walk.PORT)
HEARTBEAT = b"\x00\x00\x00\x04\x00\x17\x00\x01"  # a whole frame: size 4, key 0x0017, version 1
SEGMENT = HEARTBEAT * 12
MOD = 1 << 32
SERVER_ISN = MOD - 700  # the server's sequence numbers wrap a few segments in
CLIENT_ISN = 5000

Packet = tuple[bool, int, int, int, bytes]  # (from server, seq, ack, flags, payload)


def conversation(segments: int, retransmit: dict[int, str]) -> list[Packet]:
    """The packets in capture order. retransmit maps a server segment's index to "in time" (its
    copy follows at once, before any ACK) or "late" (its copy follows the ACK that covers it)."""
    s_next, c_next = (SERVER_ISN + 1) % MOD, CLIENT_ISN + 1
    out: list[Packet] = [
        (False, CLIENT_ISN, 0, TCP_SYN, b""),
        (True, SERVER_ISN, c_next, TCP_SYN | TCP_ACK, b""),
        (False, c_next, s_next, TCP_ACK, b""),
    ]
    late: list[Packet] = []
    for i in range(segments):
        if i % 3 == 0:  # a client request now and then: the client's side has data to drop too
            out.append((False, c_next, s_next, TCP_ACK, HEARTBEAT))
            c_next += len(HEARTBEAT)
        packet = (True, s_next, c_next, TCP_ACK, SEGMENT)
        out.append(packet)
        if retransmit.get(i) == "in time":
            out.append(packet)
        elif retransmit.get(i) == "late":
            late.append(packet)
        s_next = (s_next + len(SEGMENT)) % MOD
        if i % 2 == 1:
            out.append((False, c_next, s_next, TCP_ACK, b""))
            out.extend(late)
            late.clear()
    out.append((False, c_next, s_next, TCP_ACK, b""))
    out.extend(late)
    out.append((True, s_next, c_next, TCP_FIN | TCP_ACK, b""))
    out.append((False, c_next, (s_next + 1) % MOD, TCP_FIN | TCP_ACK, b""))
    out.append((True, (s_next + 1) % MOD, c_next + 1, TCP_ACK, b""))
    return out


def write(path: Path, packets: list[Packet]) -> None:
    """A little-endian microsecond Ethernet pcap, as tcpdump writes and the bench scripts read."""
    with path.open("wb") as fh:
        writer = dpkt.pcap.Writer(fh)
        for n, (from_server, seq, ack, flags, payload) in enumerate(packets):
            (src, sport), (dst, dport) = (SERVER, CLIENT) if from_server else (CLIENT, SERVER)
            tcp = dpkt.tcp.TCP(
                sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, win=65535, data=payload
            )
            ip = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=dpkt.ip.IP_PROTO_TCP)
            ip.data = tcp
            ip.len = 20 + len(bytes(tcp))
            eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP)
            eth.data = ip
            writer.writepkt(bytes(eth), ts=1_800_000_000 + n / 1000)


def relative(ranges: list[tuple[int, int]], isn: int) -> list[tuple[int, int]]:
    """Ranges of sequence numbers as positions from the first byte after the ISN, joined."""
    out = []
    for start, end in ranges:
        rel = (start - isn - 1) % MOD
        out.append((rel, rel + (end - start) % MOD))
    return recovery_check.merged(out)


def reported(path: Path, decoder: Decoder) -> dict[str, list[tuple[int, int]]]:
    stats = ReadStats()
    for _frame in read_frames(path, decoder, [byte_walk.PORT], stats):
        pass
    return recovery_check.gap_holes(stats)


DIRECTIONS = {
    f"{SERVER[0]}:{SERVER[1]}->{CLIENT[0]}:{CLIENT[1]}": SERVER_ISN,
    f"{CLIENT[0]}:{CLIENT[1]}->{SERVER[0]}:{SERVER[1]}": CLIENT_ISN,
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    retransmit=st.dictionaries(st.integers(0, 19), st.sampled_from(["in time", "late"]), max_size=8),
    seed=st.integers(0, 1000),
    rate=st.sampled_from([0.1, 0.3, 0.6]),
)
def test_the_harness_counts_lost_bytes_as_the_reassembler_does(
    tmp_path_factory: pytest.TempPathFactory,
    decoder: Decoder,
    retransmit: dict[int, str],
    seed: int,
    rate: float,
) -> None:
    tmp = tmp_path_factory.mktemp("loss")
    clean, lossy = tmp / "clean.pcap", tmp / "lossy.pcap"
    write(clean, conversation(20, retransmit))
    holes = recovery_check.drop_segments(clean, lossy, rate, seed)
    gaps = reported(lossy, decoder)
    for key, isn in DIRECTIONS.items():
        assert relative(holes.get(key, []), isn) == relative(gaps.get(key, []), isn), key
    # byte_walk: the server's bytes it counts present are exactly those outside the gaps.
    (present,) = byte_walk.present(lossy).values()
    total = 20 * len(SEGMENT)
    server = next(iter(DIRECTIONS))
    assert recovery_check.without([(0, total)], present) == relative(gaps.get(server, []), SERVER_ISN)


def server_segments_lost(packets: list[Packet], rate: float, seed: int, late: bool) -> list[tuple[int, int]]:
    """The harness's draws replayed: each server segment has two copies; with late copies only
    a dropped first copy counts (its second comes after the ACK), in time only both dropped."""
    rng = random.Random(seed)
    drawn: dict[int, list[bool]] = {}
    for from_server, seq, _ack, _flags, payload in packets:
        if payload:
            gone = rng.random() < rate
            if from_server:
                drawn.setdefault(seq, []).append(gone)
    lost = [seq for seq, copies in drawn.items() if (copies[0] if late else all(copies))]
    starts = [(seq - SERVER_ISN - 1) % MOD for seq in lost]
    return recovery_check.merged([(start, start + len(SEGMENT)) for start in starts])


@pytest.mark.parametrize("when", ["late", "in time"])
def test_a_copy_after_the_ack_does_not_make_good_a_dropped_one_and_one_before_does(
    tmp_path: Path, decoder: Decoder, when: str
) -> None:
    """The case the flood recording hit, pinned: every server segment retransmitted, after the
    ACK that covers it or at once; the later copies restore nothing, the timely ones all."""
    clean, lossy = tmp_path / "clean.pcap", tmp_path / "lossy.pcap"
    packets = conversation(20, dict.fromkeys(range(20), when))
    write(clean, packets)
    holes = recovery_check.drop_segments(clean, lossy, 0.3, 7)
    server = next(iter(DIRECTIONS))
    expected = server_segments_lost(packets, 0.3, 7, late=when == "late")
    assert len(expected) >= (3 if when == "late" else 1)  # the seed drops enough to tell
    assert relative(holes.get(server, []), SERVER_ISN) == expected
    assert relative(reported(lossy, decoder).get(server, []), SERVER_ISN) == expected
