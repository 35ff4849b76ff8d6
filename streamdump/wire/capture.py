"""Reads capture files and yields the TCP segments in them.

pcap files are walked here with precompiled structs, pcapng files by
`streamdump.wire.pcapng` (dpkt's reader keeps one interface per file), either of them
optionally gzip-, zstd-, xz- or bzip2-compressed. Headers are parsed by
`streamdump.wire.packet`. Every failure becomes a CaptureError with a one-line message;
packets read before a failure are already yielded, so nothing decoded is lost.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from msgspec import Struct, field

from streamdump.wire.packet import Segment, Skip, parse
from streamdump.wire.pcapng import PcapngError, Section
from streamdump.wire.pcapng import read_packets as read_pcapng

__all__ = ["CaptureError", "Segment", "Skip", "Tally", "read_records", "read_segments", "segment_of"]

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
XZ_MAGIC = b"\xfd7zXZ"
BZIP2_MAGIC = b"BZh"

# The pcap file header: magic, version (major, minor), time zone, accuracy, snap length, link type.
_FILE_HEADER_LE = struct.Struct("<IHHiIII")
_FILE_HEADER_BE = struct.Struct(">IHHiIII")
# pcap record headers: seconds, micro- or nanoseconds, captured length, length on the wire.
_RECORD_LE = struct.Struct("<IIII")
_RECORD_BE = struct.Struct(">IIII")
_RECORD_SIZE = _RECORD_LE.size
READ_SIZE = 1 << 20
# The path that names standard input, and how messages call it.
STDIN = "-"
STDIN_NAME = "standard input"
# No link layer captures more in one packet (TSO segments reach 256 KiB); beyond, the file is damaged.
MAX_RECORD = 64 << 20
# Decompressed input is read this much at a time: a damaged stream loses at most this.
COMPRESSED_PIECE = 4 << 10

# What decompressors raise on damaged input.
_DAMAGE = (
    ValueError,
    EOFError,
    OSError,
    zlib.error,
    lzma.LZMAError,
    struct.error,
    PcapngError,
)


class CaptureError(Exception):
    """The capture cannot be read (further); str() is a one-line explanation."""


class Tally(Struct):
    """Counts every packet read, TCP or not, and the ones that yielded no segment, for reports."""

    packets: int = 0
    compression: str | None = None
    skipped: Counter[Skip] = field(default_factory=Counter)
    first_skipped: dict[Skip, int] = field(default_factory=dict)
    # Packets of link types there is no parser for, by link type: named in the report.
    unknown_links: Counter[int] = field(default_factory=Counter)
    # How far into the file (compressed bytes, for compressed input) reading has come.
    position: Callable[[], int] | None = None
    # The time of the capture's first packet, which every view counts from (as Wireshark does).
    first_ts: float | None = None
    # Stop after this many packets (tshark's -c); None reads them all.
    stop_after: int | None = None
    # The comments of a pcapng file's section headers.
    comments: list[str] = field(default_factory=list)
    # The TLS key logs of a pcapng file's Decryption Secrets Blocks, as read.
    secrets: list[bytes] = field(default_factory=list)
    # Shown every packet as read, (number, time, link type, bytes): a copy kept of a pipe.
    on_record: Callable[[int, float, int, bytes | memoryview], None] | None = None


class _Exact:
    """File wrapper whose read(n) returns n bytes unless the input ends, noting when it ended early.

    Decompressor streams may return fewer bytes than asked before their end; a cut-off
    last packet is noted, not yielded silently.
    """

    def __init__(self, fh: BinaryIO, name: str) -> None:
        self.fh = fh
        self.name = name
        self.short = False
        self.consumed = 0
        self.failure: BaseException | None = None
        self.piece: int | None = None  # largest single read, for compressed input
        # A stream being written (a pipe): read what each record needs, not ahead of it.
        self.streaming = False

    def read(self, size: int = -1) -> bytes:
        data = self.read_upto(size)
        if size > 0 and 0 < len(data) < size:
            self.short = True
        return data

    def read_upto(self, size: int) -> bytes:
        """size bytes, or fewer only when the input ends; an ending is not an error here.

        A decompressor that fails part way raises, and whatever it decompressed in that
        call is gone; so compressed input is read in small pieces, the bytes before a
        failure are returned, and the failure is raised by the next read.
        """
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        piece = size if self.piece is None else min(size, self.piece)
        parts: list[bytes] = []
        got = 0
        try:
            while got < size:
                more = self.fh.read(min(piece, size - got))
                if not more:
                    break
                parts.append(more)
                got += len(more)
        except _DAMAGE as exc:
            if not parts:
                raise
            self.failure = exc
        data = b"".join(parts)
        self.consumed += len(data)
        return data


def _decompressed(fh: BinaryIO, head: bytes) -> tuple[BinaryIO, str | None]:
    if head.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=fh), "gzip"  # type: ignore[return-value]
    if head.startswith(ZSTD_MAGIC):
        # Loaded for a zstd capture only (11 million instructions of every start otherwise). The
        # `except _DAMAGE` clauses read the name when they catch, so its error joins them here.
        import zstandard

        global _DAMAGE
        if zstandard.ZstdError not in _DAMAGE:
            _DAMAGE = (*_DAMAGE, zstandard.ZstdError)
        return zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True), "zstd"  # type: ignore[return-value]
    if head.startswith(XZ_MAGIC):
        return lzma.LZMAFile(fh), "xz"  # type: ignore[return-value]
    if head.startswith(BZIP2_MAGIC):
        return bz2.BZ2File(fh), "bzip2"  # type: ignore[return-value]
    return fh, None


def _packets(src: _Exact, name: str, tally: Tally) -> Iterator[tuple[float, int, bytes | memoryview]]:
    """The packets of a pcap or pcapng file: its reader itself, not a generator around it (a
    layer less per packet); the file's first bytes are read now."""
    head = src.read(4)
    if not head:
        raise CaptureError(f"{name}: empty file, not a capture")
    if head == PCAPNG_MAGIC:
        section = Section()
        section.comments = tally.comments  # the section headers' comments land in the tally
        section.secrets = tally.secrets  # and so do the key logs of its secrets blocks
        return read_pcapng(_Prefixed(head, src), section)  # type: ignore[arg-type]
    if head not in PCAP_MAGICS:
        raise CaptureError(f"{name}: not a pcap or pcapng file (starts with {head.hex()})")
    return _pcap_records(head + src.read(_FILE_HEADER_LE.size - 4), src, name)


def _pcap_records(header: bytes, src: _Exact, name: str) -> Iterator[tuple[float, int, memoryview]]:
    """The records of a classic pcap file, as views into large reads.

    dpkt's reader makes a header object and two reads per packet; on a capture of small
    segments that costs more than everything else reading does, so the records are
    walked here with one precompiled struct over buffers of READ_SIZE bytes. The file
    header is one struct too: importing dpkt loads every protocol module it has, which
    costs a small capture's read a fifth of tshark's whole time on it.
    """
    little = header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    if len(header) < _FILE_HEADER_LE.size:
        raise CaptureError(f"{name}: damaged capture header: {len(header)} of {_FILE_HEADER_LE.size} bytes")
    *_, linktype = (_FILE_HEADER_LE if little else _FILE_HEADER_BE).unpack_from(header)
    nano = header[:4] in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    record = _RECORD_LE if little else _RECORD_BE
    buf = b""
    view = memoryview(buf)
    pos = 0
    count = 0
    while True:
        if len(buf) - pos < _RECORD_SIZE:
            ahead = _RECORD_SIZE if src.streaming else max(READ_SIZE, _RECORD_SIZE)
            buf, pos = buf[pos:] + src.read_upto(ahead - (len(buf) - pos) if src.streaming else ahead), 0
            view = memoryview(buf)
            if len(buf) < _RECORD_SIZE:
                if buf:
                    raise CaptureError(f"{name}: capture is cut short after packet {count}")
                return
        sec, frac, caplen, _wire = record.unpack_from(buf, pos)
        if caplen > MAX_RECORD:
            raise CaptureError(
                f"{name}: capture is damaged after packet {count}: the next record claims {caplen} bytes"
            )
        end = pos + _RECORD_SIZE + caplen
        if end > len(buf):
            missing = end - len(buf)
            buf, pos = buf[pos:] + src.read_upto(missing if src.streaming else max(READ_SIZE, missing)), 0
            view = memoryview(buf)
            end = _RECORD_SIZE + caplen
            if end > len(buf):
                raise CaptureError(f"{name}: capture is cut short in the middle of packet {count + 1}")
        count += 1
        # The same arithmetic as dpkt's, so timestamps come out bit for bit as they always did.
        ts = (sec * 1_000_000_000 + frac) / 1_000_000_000 if nano else sec + frac / 1e6
        yield ts, linktype, view[pos + _RECORD_SIZE : end]
        pos = end


class _Prefixed:
    """Puts already-read bytes back in front of a stream (compressed input cannot seek)."""

    def __init__(self, prefix: bytes, fh: _Exact) -> None:
        self.prefix = prefix
        self.fh = fh
        self.name = getattr(fh, "name", "")  # a stream made in memory has none

    def read(self, size: int = -1) -> bytes:
        if not self.prefix:
            return self.fh.read(size)
        if size < 0:
            data, self.prefix = self.prefix + self.fh.read(), b""
            return data
        data, self.prefix = self.prefix[:size], self.prefix[size:]
        if len(data) < size:
            data += self.fh.read(size - len(data))
        return data


def read_segments(path: Path | str, tally: Tally | None = None) -> Iterator[Segment]:
    """Every TCP segment of a capture file, in file order, numbered like Wireshark's frames.

    path "-" is standard input: a capture being written (`tcpdump -w - | ...`), read record by
    record so that each packet is handed on as soon as it has arrived.
    """
    # The reading generator itself, not one around it: a layer less per packet.
    if str(path) == STDIN:
        return read_stream(sys.stdin.buffer, STDIN_NAME, tally)
    return _read(path, tally, None)


def read_stream(fh: BinaryIO, name: str, tally: Tally | None = None) -> Iterator[Segment]:
    """Every TCP segment of a capture arriving on a stream that cannot seek (a pipe): each
    packet is handed on as soon as its record has arrived."""
    return _read(name, tally, fh)


def _read(path: Path | str, tally: Tally | None, stream: BinaryIO | None) -> Iterator[Segment]:
    return _records(path, tally if tally is not None else Tally(), stream, segments=True)  # type: ignore[return-value]


def read_records(
    path: Path | str, tally: Tally | None = None, stream: BinaryIO | None = None
) -> Iterator[tuple[int, float, int, bytes | memoryview]]:
    """Every packet of a capture as it is in the file: (number, time, link type, bytes), numbered
    as read_segments numbers them (what `read -w` copies the packets it keeps from)."""
    return _records(path, tally if tally is not None else Tally(), stream)


def _records(
    path: Path | str, tally: Tally, stream: BinaryIO | None, segments: bool = False
) -> Iterator[tuple[int, float, int, bytes | memoryview]] | Iterator[Segment]:
    """The packets, or with segments their TCP segments (a packet without one counted in the
    tally): in this one loop rather than a generator around it, a layer less per packet."""
    keep = tally.on_record if segments else None
    streaming = stream is not None
    path = Path(path)
    try:
        raw: BinaryIO = stream if stream is not None else path.open("rb")
    except OSError as exc:
        raise CaptureError(f"{path}: cannot open: {exc.strerror}") from None
    with raw:
        head = raw.read(6)
        if streaming:
            raw = _Prefixed(head, raw)  # type: ignore[arg-type,assignment]  # a pipe cannot seek back
        else:
            tally.position = raw.tell
            raw.seek(0)
        fh, tally.compression = _decompressed(raw, head)
        src = _Exact(fh, str(path))
        src.streaming = streaming
        if tally.compression is not None:
            src.piece = COMPRESSED_PIECE
        number = 0
        what = f"{tally.compression} stream" if tally.compression else "capture"
        try:
            step = _packets(src, str(path), tally).__next__
        except _DAMAGE as exc:
            raise CaptureError(
                f"{path}: {what} is cut short or damaged after packet 0 ({_reason(exc)})"
            ) from None
        while True:
            if tally.stop_after is not None and number >= tally.stop_after:
                return
            try:
                ts, linktype, buf = step()
            except StopIteration:
                if src.short:
                    raise CaptureError(f"{path}: capture is cut short after packet {number}") from None
                return
            except _DAMAGE as exc:
                raise CaptureError(
                    f"{path}: {what} is cut short or damaged after packet {number} ({_reason(exc)})"
                ) from None
            if src.short:
                raise CaptureError(f"{path}: capture is cut short in the middle of packet {number + 1}")
            number += 1
            tally.packets = number
            if number == 1:
                tally.first_ts = ts
            if not segments:
                yield number, ts, linktype, buf
                continue
            if keep is not None:
                keep(number, ts, linktype, buf)
            got = parse(linktype, buf, number, ts)  # type: ignore[arg-type]
            if type(got) is Segment:  # segment_of's test, without its call: once per packet
                yield got
            else:
                _skipped(got, linktype, number, tally)  # type: ignore[arg-type]


def segment_of(
    linktype: int, buf: bytes | memoryview, number: int, ts: float, tally: Tally
) -> Segment | None:
    """The packet's TCP segment; a packet with none is counted in the tally instead, by why."""
    got = parse(linktype, buf, number, ts)  # type: ignore[arg-type]
    if isinstance(got, Skip):
        _skipped(got, linktype, number, tally)
        return None
    return got


def _skipped(skip: Skip, linktype: int, number: int, tally: Tally) -> None:
    tally.skipped[skip] += 1
    tally.first_skipped.setdefault(skip, number)
    if skip is Skip.UNKNOWN_LINK:
        tally.unknown_links[linktype] += 1


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
