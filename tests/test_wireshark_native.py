"""The plugin as Wireshark's own dissectors behave: ports as a preference, Decode As, in tshark
4.0 and 4.4 with the plugin installed in the personal plugins folder."""

from __future__ import annotations

from pathlib import Path

import dpkt
import pytest

from tests.conftest import CAPTURES
from tests.test_wireshark import FLAVOURS, LUA_ERRORS, PLUGIN, tshark_run

# A RabbitMQ Streams capture on its usual port, 5552, and the same bytes moved to another.
CAPTURE = CAPTURES / "auth_failure.pcap"
MOVED_TO = 15552


def moved(path: Path, out: Path, old: int, new: int) -> Path:
    """The capture with every TCP port `old` made `new` (checksums left unset: tshark checks none)."""
    with path.open("rb") as source, out.open("wb") as sink:
        reader = dpkt.pcap.Reader(source)
        writer = dpkt.pcap.Writer(sink, linktype=reader.datalink())
        for ts, buf in reader:
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                tcp = ip.data
                tcp.sport = new if tcp.sport == old else tcp.sport
                tcp.dport = new if tcp.dport == old else tcp.dport
                tcp.sum = ip.sum = 0
                buf = bytes(eth)
            writer.writepkt(buf, ts)
    return out


def summary(flavour: str, capture: Path, tmp: Path, *extra: str) -> list[str]:
    """tshark's Info of every frame the plugin dissected (its Protocol column is RMQS)."""
    result = tshark_run(
        flavour,
        [PLUGIN, capture],
        lambda p: ["-r", p[-1], "-T", "fields", "-e", "_ws.col.Protocol", "-e", "_ws.col.Info", *extra],
        tmp,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text = (result.stdout + result.stderr).lower()
    assert not any(marker in text for marker in LUA_ERRORS), result.stderr[-2000:]
    return [line.split("\t", 1)[1] for line in result.stdout.splitlines() if line.startswith("RMQS\t")]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_ports_preference_and_decode_as(flavour: str, tmp_path: Path) -> None:
    """On another port the protocol is found when its ports preference names that port, or when
    Decode As (-d) says so; a preference moved off the usual port takes the protocol off it."""
    usual = summary(flavour, CAPTURE, tmp_path)
    assert len(usual) > 5 and usual[0].startswith("PeerProperties request corr=1")
    elsewhere = moved(CAPTURE, tmp_path / "moved.pcap", 5552, MOVED_TO)
    assert summary(flavour, elsewhere, tmp_path) == []
    assert summary(flavour, elsewhere, tmp_path, "-o", f"rabbitmq_stream.ports:{MOVED_TO}") == usual
    assert summary(flavour, elsewhere, tmp_path, "-d", f"tcp.port=={MOVED_TO},rabbitmq_stream") == usual
    assert summary(flavour, CAPTURE, tmp_path, "-o", f"rabbitmq_stream.ports:{MOVED_TO}") == []
