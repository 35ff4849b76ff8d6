"""Capture files in the forms users have them: compressed, pcapng, and damaged ones."""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
from pathlib import Path

import pytest
import zstandard
from conftest import CAPTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import streamdump.wire.capture as capture_module
from streamdump.cli import app
from streamdump.wire.capture import CaptureError, Skip, Tally, read_segments
from streamdump.wire.packet import Segment, parse, parse_steps
from streamdump.wire.pcapng import PcapngError, read_packets

SESSION = CAPTURES / "session.pcap"
COMPRESSORS = {
    "gz": gzip.compress,
    "zst": lambda data: zstandard.ZstdCompressor().compress(data),
    "xz": lzma.compress,
    "bz2": bz2.compress,
}


def payloads(path: Path) -> list[tuple[int, bytes]]:
    return [(s.number, s.payload) for s in read_segments(path)]


@pytest.mark.parametrize("ext", sorted(COMPRESSORS))
def test_compressed_captures_read_directly(tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"session.pcap.{ext}"
    path.write_bytes(COMPRESSORS[ext](SESSION.read_bytes()))
    tally = Tally()
    assert list(read_segments(path, tally)) == list(read_segments(SESSION))
    assert tally.compression == {"gz": "gzip", "zst": "zstd", "xz": "xz", "bz2": "bzip2"}[ext]


def test_zstd_stream_of_several_frames(tmp_path: Path) -> None:
    # zstd files written in pieces (e.g. by a rotating logger) hold several frames.
    data = SESSION.read_bytes()
    cctx = zstandard.ZstdCompressor()
    path = tmp_path / "session.pcap.zst"
    path.write_bytes(cctx.compress(data[:5000]) + cctx.compress(data[5000:]))
    assert payloads(path) == payloads(SESSION)


@pytest.mark.parametrize("ext", ["gz", "zst"])
def test_cut_short_compressed_capture_keeps_what_was_read(tmp_path: Path, ext: str) -> None:
    # Large enough to span several zstd blocks: a decompressor yields nothing of a cut block.
    whole = COMPRESSORS[ext]((CAPTURES / "bulk.pcap").read_bytes())
    path = tmp_path / f"cut.pcap.{ext}"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    result = CliRunner().invoke(app, ["read", str(path)])
    assert result.exit_code == 1
    assert result.stdout.count("\n") > 10  # frames before the damage are printed
    (line,) = [ln for ln in result.stderr.splitlines() if "error" in ln]
    assert "cut short" in line and "Traceback" not in result.stderr


def test_pcap_cut_inside_a_record_header(tmp_path: Path) -> None:
    data = SESSION.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data + data[24:30])  # six bytes of a 16-byte record header
    with pytest.raises(CaptureError, match="cut short"):
        list(read_segments(path))


def pcapng_block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    length = 12 + len(body)
    return struct.pack(order + "II", btype, length) + body + struct.pack(order + "I", length)


def shb(order: str) -> bytes:
    body = struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1)
    length = 12 + len(body)
    return struct.pack(order + "II", 0x0A0D0D0A, length) + body + struct.pack(order + "I", length)


def test_pcapng_block_reader_rejects_damage(tmp_path: Path) -> None:
    good = shb("<") + pcapng_block("<", 1, struct.pack("<HHI", 1, 0, 65535))
    with pytest.raises(PcapngError, match="interface 3"):
        epb = struct.pack("<IIIII", 3, 0, 0, 4, 4) + b"abcd"
        list(read_packets(_stream(good + pcapng_block("<", 6, epb))))
    with pytest.raises(PcapngError, match="block length"):
        list(read_packets(_stream(good + struct.pack("<II", 6, 13))))
    with pytest.raises(PcapngError, match="ends inside"):
        list(read_packets(_stream(good + pcapng_block("<", 6, b"x" * 40)[:-6])))


def test_pcapng_time_resolution_and_sections() -> None:
    iface_ms = struct.pack("<HHI", 101, 0, 65535) + struct.pack("<HHB3x", 9, 1, 3) + b"\0" * 4
    epb = struct.pack("<IIIII", 0, 0, 1_500, 1, 1) + b"\x45"
    big_iface = struct.pack(">HHI", 1, 0, 65535)
    big_epb = struct.pack(">IIIII", 0, 0, 2_000_000, 1, 1) + b"\x60"
    data = shb("<") + pcapng_block("<", 1, iface_ms) + pcapng_block("<", 6, epb)
    data += shb(">") + pcapng_block(">", 1, big_iface) + pcapng_block(">", 6, big_epb)
    got = list(read_packets(_stream(data)))
    assert got == [(1.5, 101, b"\x45"), (2.0, 1, b"\x60")]


def _stream(data: bytes):  # type: ignore[no-untyped-def]
    import io

    return io.BytesIO(data)


def test_packet_parser_reports_why_a_packet_has_no_segment() -> None:
    ipv4_udp = bytes([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]) + bytes(8)
    frag = bytearray(ipv4_udp)
    frag[9] = 6
    frag[6] = 0x20  # more fragments
    assert parse(101, ipv4_udp, 1, 0.0) is Skip.NOT_TCP
    assert parse(101, bytes(frag), 1, 0.0) is Skip.FRAGMENT
    assert parse(101, bytes([0x45, 0, 0, 40]), 1, 0.0) is Skip.TRUNCATED
    assert parse(999, ipv4_udp, 1, 0.0) is Skip.UNKNOWN_LINK


def test_snaplen_cut_payload_keeps_its_wire_length() -> None:
    tcp = struct.pack("!HHIIBBHHH", 40000, 5552, 7, 9, 0x50, 0x18, 0, 0, 0)
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + 20 + 1000,
        0,
        0x4000,
        64,
        6,
        0,
        bytes([127, 0, 0, 1]),
        bytes([127, 0, 0, 1]),
    )
    seg = parse(101, ip + tcp + b"x" * 100, 5, 1.0)
    assert isinstance(seg, Segment)
    assert (seg.seq, seg.ack, len(seg.payload), seg.wire_len) == (7, 9, 100, 1000)


def _often(common: object, *others: object) -> st.SearchStrategy:
    """common three times in four, else one of others."""
    return st.sampled_from([common] * (3 * len(others)) + list(others))


@st.composite
def ethernet_packets(draw: st.DrawFn) -> bytes:
    """Ethernet frames near the commonest shape (IPv4 without options, then TCP): each field
    parse's one-step reading checks is usually that shape's and sometimes not, and the IP total
    length sits at its bounds as often as not; some frames are cut short."""
    payload = draw(st.binary(max_size=64))
    options = draw(st.binary(max_size=12))
    data_off = draw(_often(5, 0, 4, 6, 15))
    tcp = struct.pack("!HHIIBBHHH", 40000, 5552, 7, 9, data_off << 4, 0x18, 0, 0, 0)
    body = options[: max(0, data_off - 5) * 4] + tcp + payload
    total = draw(st.one_of(st.sampled_from([20 + len(body), 0, 19, 20, 21, 40]), st.integers(0, 2000)))
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        draw(_often(0x45, 0x46, 0x44, 0x65)),
        0,
        total,
        0,
        draw(_often(0x4000, 0, 0x2000, 0x0001, 0x1FFF)),
        64,
        draw(_often(6, 17)),
        0,
        b"\x7f\0\0\x01",
        b"\n\0\0\x02",
    )
    frame = bytes(12) + struct.pack("!H", draw(_often(0x0800, 0x86DD, 0x8100, 0x0806))) + ip + body
    return frame[: draw(st.integers(0, len(frame)))] if draw(_often(False, True)) else frame


@settings(max_examples=500)
@given(ethernet_packets())
def test_the_one_step_reading_of_the_commonest_packet_is_the_step_by_step_one(frame: bytes) -> None:
    assert parse(1, memoryview(frame), 3, 1.5) == parse_steps(1, memoryview(frame), 3, 1.5)


@pytest.mark.parametrize("read_size", [1, 17, 1500, 1 << 20])
def test_pcap_records_match_dpkt_whatever_the_read_size(
    monkeypatch: pytest.MonkeyPatch, read_size: int
) -> None:
    """The record walker over large reads gives dpkt's records: same timestamps, same bytes."""
    import dpkt

    import streamdump.wire.capture as capture

    monkeypatch.setattr(capture, "READ_SIZE", read_size)
    files = [CAPTURES / "bulk.pcap", CAPTURES / "session.pcap"]
    files += sorted((CAPTURES / "pathological").glob("*.pcap"))  # both byte orders, nanoseconds
    for path in files:
        with path.open("rb") as fh:
            expected = [(float(ts), bytes(buf)) for ts, buf in dpkt.pcap.Reader(fh)]
        with path.open("rb") as fh:
            src = capture._Exact(fh, str(path))
            got = [(ts, bytes(buf)) for ts, _link, buf in capture._packets(src, str(path), capture.Tally())]
        assert got == expected, path.name


def test_pcap_record_claiming_gigabytes_is_damage_not_an_allocation(tmp_path: Path) -> None:
    data = SESSION.read_bytes()
    bogus = struct.pack("<IIII", 0, 0, 0xFFFF0000, 0xFFFF0000)  # session.pcap is little-endian
    path = tmp_path / "bogus.pcap"
    path.write_bytes(data + bogus + b"\0" * 100)
    tally = Tally()
    with pytest.raises(CaptureError, match="claims 4294901760 bytes"):
        for _ in read_segments(path, tally):
            pass
    whole = Tally()
    list(read_segments(SESSION, whole))
    assert tally.packets == whole.packets  # every packet before the damage was read


def pcap_of(linktype: int, packets: list[bytes]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    for n, data in enumerate(packets):
        out += struct.pack("<IIII", n + 1, 0, len(data), len(data)) + data
    return out


@pytest.mark.parametrize("command", ["read", "stats", "follow"])
def test_a_link_type_not_read_is_named_in_one_line(tmp_path: Path, command: str) -> None:
    path = tmp_path / "user0.pcap"
    path.write_bytes(pcap_of(147, [b"\0" * 60, b"\1" * 60]))  # LINKTYPE_USER0
    result = CliRunner().invoke(app, [command, str(path)])
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("streamdump: error: link type 147 (2 packets): not a link type streamdump reads")
    assert "Ethernet" in line


def test_packets_of_a_link_type_not_read_are_named_beside_those_read(tmp_path: Path) -> None:
    # A pcapng whose first interface is USER0 and second the session's Ethernet: the session
    # decodes, and a warning says how many packets of which link type were left unread.
    session = [bytes(buf) for _, _, buf in capture_packets(SESSION)]
    data = shb("<") + pcapng_block("<", 1, struct.pack("<HHI", 147, 0, 65535))
    data += pcapng_block("<", 1, struct.pack("<HHI", 1, 0, 65535))
    data += pcapng_block("<", 6, struct.pack("<IIIII", 0, 0, 0, 3, 3) + b"abc")
    for n, buf in enumerate(session):
        data += pcapng_block("<", 6, struct.pack("<IIIII", 1, 0, n, len(buf), len(buf)) + buf)
    path = tmp_path / "mixed.pcapng"
    path.write_bytes(data)
    result = CliRunner().invoke(app, ["read", str(path)])
    assert result.exit_code == 0
    whole = CliRunner().invoke(app, ["read", str(SESSION)])
    assert len(result.stdout.splitlines()) == len(whole.stdout.splitlines())
    (line,) = [ln for ln in result.stderr.splitlines() if "link type" in ln]
    assert line == (
        "[warn] packet 1: link type 147 (1 packet) not read: streamdump reads "
        "Ethernet, Linux cooked (SLL and SLL2), raw IP, and BSD and OpenBSD loopback"
    )


def capture_packets(path: Path) -> list[tuple[float, int, bytes]]:
    with path.open("rb") as fh:
        src = capture_module._Exact(fh, str(path))
        return [
            (ts, link, bytes(buf))
            for ts, link, buf in capture_module._packets(src, str(path), capture_module.Tally())
        ]
