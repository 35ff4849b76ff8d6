"""Packets of a pcapng file, each with its own interface's link type and time resolution.

dpkt's pcapng reader takes the link type and time resolution of the first interface
for every packet and skips later section headers, so captures from several
interfaces (`dumpcap -i eth0 -i lo`) or of several sections (files joined with
`mergecap -a` or `cat`, possibly of different byte orders) come out wrong. This
block reader keeps one interface table per section instead.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO

from msgspec import Struct, field

SHB = 0x0A0D0D0A
IDB = 0x00000001
PB = 0x00000002  # obsolete Packet Block, still written by old tools
SPB = 0x00000003
EPB = 0x00000006
DSB = 0x0000000A  # Decryption Secrets Block
SECRETS_TLS_KEYLOG = 0x544C534B  # "TLSK": the secrets are an NSS key log
BYTE_ORDER_MAGIC = 0x1A2B3C4D

OPT_END = 0
OPT_COMMENT = 1
OPT_IF_TSRESOL = 9
OPT_IF_TSOFFSET = 14

MAX_BLOCK = 256 * 1024 * 1024  # a block this large is damage, not a packet
# A section header's byte-order magic, as it reads in each order.
BYTE_ORDERS = {b"\x1a\x2b\x3c\x4d": ">", b"\x4d\x3c\x2b\x1a": "<"}


class PcapngError(Exception):
    """The file stops being valid pcapng; str() says where and why."""


class Interface(Struct):
    linktype: int
    snaplen: int
    units_per_second: int = 1_000_000
    offset_s: int = 0


def _read(fh: BinaryIO, size: int, what: str) -> bytes:
    data = fh.read(size)
    if len(data) != size:
        raise PcapngError(f"file ends inside {what}")
    return data


def _options(body: bytes, pos: int, order: str) -> Iterator[tuple[int, bytes]]:
    opt = struct.Struct(order + "HH")
    while pos + 4 <= len(body):
        code, length = opt.unpack_from(body, pos)
        if code == OPT_END:
            return
        yield code, body[pos + 4 : pos + 4 + length]
        pos += 4 + length + (-length % 4)


def _interface(body: bytes, order: str) -> Interface:
    linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", body, 0)
    iface = Interface(linktype, snaplen)
    for code, value in _options(body, 8, order):
        if code == OPT_IF_TSRESOL and value:
            exp = value[0] & 0x7F
            iface.units_per_second = 2**exp if value[0] & 0x80 else 10**exp
        elif code == OPT_IF_TSOFFSET and len(value) == 8:
            (iface.offset_s,) = struct.unpack(order + "q", value)
    return iface


class Section(Struct):
    """What a reader knows at a block boundary: the byte order and interfaces of the section."""

    order: str = "<"
    interfaces: list[Interface] = field(default_factory=list)
    started: bool = False  # a section header has been read
    # The comments of the section headers read so far (what wrote the file may say how to read it).
    comments: list[str] = field(default_factory=list)
    # The TLS key logs of Decryption Secrets Blocks read so far (editcap --inject-secrets).
    secrets: list[bytes] = field(default_factory=list)

    def copy(self) -> Section:
        """A section a reader may advance without changing this one."""
        return Section(
            self.order, list(self.interfaces), self.started, list(self.comments), list(self.secrets)
        )


# Blocks that describe a section rather than carry packets; a reader starting mid-file needs them.
DESCRIBING = frozenset({SHB, IDB, DSB})


def read_packets(
    fh: BinaryIO,
    section: Section | None = None,
    start: int = 0,
    end: int | None = None,
    described: Callable[[int, bytes], None] | None = None,
) -> Iterator[tuple[float, int, bytes]]:
    """(timestamp, link type, packet bytes) for every packet block, in file order.

    A reader of part of a file (a Spark task's byte range) starts at a block boundary with
    the section as it stands there (section, start: fh's offset in the file) and stops
    before the first block at or past end; described(offset, block) sees each section
    header and interface block, so later readers can be given the section they start in.
    """
    section = section if section is not None else Section()
    pos = start
    while end is None or pos < end:
        head = fh.read(8)
        if not head:
            return
        if len(head) < 8:
            raise PcapngError("file ends inside a block header")
        if head[:4] == b"\x0a\x0d\x0d\x0a":
            # A section header sets the byte order of everything up to the next one.
            magic = _read(fh, 4, "a section header")
            found = BYTE_ORDERS.get(magic)
            if found is None:
                raise PcapngError(f"section header with a bad byte-order magic {magic.hex()}")
            order = found
            (length,) = struct.unpack(order + "I", head[4:])
            _check_length(length)
            rest = _read(fh, length - 12, "a section header")
            section.order, section.interfaces, section.started = order, [], True
            # After the magic: major and minor version (2 bytes each), the section's length (8).
            for code, value in _options(rest[:-4], 12, order):
                if code == OPT_COMMENT:
                    section.comments.append(value.decode("utf-8", "replace"))
            if described is not None:
                described(pos, head + magic + rest)
            pos += length
            continue
        if not section.started:
            raise PcapngError("does not start with a section header")
        order = section.order
        btype, length = struct.unpack(order + "II", head)
        _check_length(length)
        block = _read(fh, length - 8, f"a block of type 0x{btype:x}")
        body = block[:-4]
        if btype == IDB:
            section.interfaces.append(_interface(body, order))
            if described is not None:
                described(pos, head + block)
        elif btype == DSB and len(body) >= 8:
            kind, size = struct.unpack_from(order + "II", body, 0)
            if kind == SECRETS_TLS_KEYLOG:
                section.secrets.append(body[8 : 8 + size])
            if described is not None:
                described(pos, head + block)
        elif btype == EPB:
            iface_id, ts_hi, ts_lo, caplen, _origlen = struct.unpack_from(order + "IIIII", body, 0)
            iface = _lookup(section.interfaces, iface_id)
            yield _time(iface, ts_hi, ts_lo), iface.linktype, body[20 : 20 + caplen]
        elif btype == SPB:
            iface = _lookup(section.interfaces, 0)
            (origlen,) = struct.unpack_from(order + "I", body, 0)
            caplen = min(origlen, len(body) - 4, iface.snaplen or origlen)
            yield 0.0, iface.linktype, body[4 : 4 + caplen]
        elif btype == PB:
            iface_id, _drops, ts_hi, ts_lo, caplen, _origlen = struct.unpack_from(order + "HHIIII", body, 0)
            iface = _lookup(section.interfaces, iface_id)
            yield _time(iface, ts_hi, ts_lo), iface.linktype, body[20 : 20 + caplen]
        # Name resolution, statistics and custom blocks carry no packets.
        pos += length


def plausible_length(length: int) -> bool:
    """Whether a block could be this long: a header and trailer, whole words, not absurd."""
    return 12 <= length <= MAX_BLOCK and length % 4 == 0


def _check_length(length: int) -> None:
    if not plausible_length(length):
        raise PcapngError(f"block length {length} is impossible")


def _lookup(interfaces: list[Interface], iface_id: int) -> Interface:
    if iface_id >= len(interfaces):
        raise PcapngError(f"packet names interface {iface_id}, but the section describes {len(interfaces)}")
    return interfaces[iface_id]


def _time(iface: Interface, hi: int, lo: int) -> float:
    return iface.offset_s + ((hi << 32) | lo) / iface.units_per_second
