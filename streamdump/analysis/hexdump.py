"""Frames given as hex, as pasted from logs, tshark or Wireshark: the bytes, the PDUs in them,
and the protocol that reads them best (`streamdump decode`).

Two forms are read. Plain hex, with or without spaces, colons, commas, dashes and 0x. And hex
dumps, as `tshark -x`, Wireshark's "Copy as Hex Dump", `xxd` and `hexdump -C` print them: an
offset, the bytes, then their ASCII, line after line. A dump's sections (tshark's "Frame (74
bytes):" and "Reassembled TCP (90 bytes):", streamdump -x's "RMQS PDU (13 bytes) ...:") and its
packets (a blank line after each) are pieces of their own; of a packet's sections the reassembled
ones are taken, and a piece that is a whole Ethernet or IP packet gives its TCP payload.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Mapping

from msgspec import Struct, field

from streamdump.analysis.pipeline import framing_rule
from streamdump.spec.decoder import Decoder
from streamdump.wire.frame import Frame
from streamdump.wire.packet import Segment, parse


class HexError(ValueError):
    """Text that is not hex bytes; str() is the one-line message."""


_HEX_NOISE = re.compile(r"0x|[\s:,\-]", re.IGNORECASE)
# A dump line: an offset (4 to 8 hex digits) then ':' (xxd) or two spaces or more (tshark,
# Wireshark, hexdump -C), then the bytes and their ASCII.
_DUMP_LINE = re.compile(r"\s*([0-9a-fA-F]{4,8})(?::\s*|\s{2,})(\S.*)?")
_OFFSET_ONLY = re.compile(r"\s*[0-9a-fA-F]{4,8}\s*")  # hexdump -C's last line: where the bytes end
_HEX_TOKEN = re.compile(r"(?:[0-9a-fA-F]{2})+")
_ASCII = bytes(b if 0x20 <= b < 0x7F else 0x2E for b in range(256))


class Dump(Struct):
    """The bytes of pasted hex: the pieces to decode one by one, and what reading them assumed."""

    pieces: list[bytes] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def data(self) -> bytes:
        return b"".join(self.pieces)


def parse_hex(text: str) -> bytes:
    """Plain hex: the digits, whatever separates them."""
    cleaned = _HEX_NOISE.sub("", text)
    if not cleaned:
        raise HexError("no hex digits given")
    bad = re.search(r"[^0-9a-fA-F]", cleaned)
    if bad:
        raise HexError(
            f"not hex: {bad.group()!r} at position {bad.start()} of the digits given "
            "(a dump needs its offsets, as tshark -x, Wireshark and xxd print them)"
        )
    if len(cleaned) % 2:
        raise HexError(f"odd number of hex digits ({len(cleaned)})")
    return bytes.fromhex(cleaned)


def parse_dump(text: str) -> Dump:
    """The pieces of pasted hex: a dump's sections and packets, or plain hex as one piece."""
    lines = text.splitlines()
    first = next((line for line in lines if _DUMP_LINE.fullmatch(line)), None)
    if first is None or int(_DUMP_LINE.fullmatch(first).group(1), 16) != 0:  # type: ignore[union-attr]
        return Dump([parse_hex(text)])
    dump = Dump()
    for group in _groups(lines):
        reassembled = [data for heading, data in group if heading.lower().startswith("reassembled")]
        if reassembled:
            sizes = ", ".join(str(len(d)) for d in reassembled)
            dump.notes.append(f"took the reassembled bytes of a packet ({sizes} bytes)")
        chosen = reassembled or [group[0][1]]
        for data in chosen:
            payload = tcp_payload(data)
            if payload is not None:
                dump.notes.append(
                    f"the dump is of a packet: decoded its TCP payload ({len(payload)} of {len(data)} bytes)"
                )
                data = payload
            if data:
                dump.pieces.append(data)
    if not dump.pieces:
        raise HexError("the dump holds no bytes to decode")
    return dump


def _groups(lines: list[str]) -> Iterator[list[tuple[str, bytes]]]:
    """A dump's packets (blank lines between them), each a list of its sections (heading, bytes);
    a new offset 0 also starts a section."""
    group: list[tuple[str, bytes]] = []
    heading = ""
    rows: list[tuple[int, str]] = []

    def close() -> None:
        nonlocal rows
        if rows:
            group.append((heading, _section(rows)))
        rows = []

    for line in [*lines, ""]:
        if not line.strip():
            close()
            if group:
                yield group
            group, heading = [], ""
            continue
        found = _DUMP_LINE.fullmatch(line)
        if found is None:
            if _OFFSET_ONLY.fullmatch(line):
                continue
            close()
            heading = line.strip()
            continue
        offset = int(found.group(1), 16)
        if offset == 0 and rows:
            close()
            heading = ""
        rows.append((offset, found.group(2) or ""))


def _section(rows: list[tuple[int, str]]) -> bytes:
    """The bytes of a section's lines: each line's count is where the next line starts; the last
    line's hex is told from its ASCII column by the ASCII it must show."""
    out = bytearray()
    for n, (offset, rest) in enumerate(rows):
        if offset != len(out):
            raise HexError(
                f"the dump line at offset {offset:04x} does not follow the bytes before it ({len(out):04x})"
            )
        expected = rows[n + 1][0] - offset if n + 1 < len(rows) else None
        out += _line_bytes(rest, expected, offset)
    return bytes(out)


def _line_bytes(rest: str, expected: int | None, offset: int) -> bytes:
    ascii_part = rest.split("|", 1)
    if len(ascii_part) == 2:  # hexdump -C puts the ASCII between bars
        rest = ascii_part[0]
    tokens = [(m.start(), m.group()) for m in re.finditer(r"\S+", rest)]
    taken = bytearray()
    if expected is not None:
        for _, token in tokens:
            if len(taken) >= expected:
                break
            if not _HEX_TOKEN.fullmatch(token):
                break
            taken += bytes.fromhex(token)
        if len(taken) != expected:
            raise HexError(f"the dump line at offset {offset:04x} holds {len(taken)} bytes, not {expected}")
        return bytes(taken)
    # The last line: the fewest bytes whose ASCII is the rest of the line (spaces aside), else
    # every hex token (a dump without its ASCII column).
    hex_run = []
    for start, token in tokens:
        if not _HEX_TOKEN.fullmatch(token):
            break
        hex_run.append((start, token))
    shown = ""
    data = b""
    for k, (_, token) in enumerate(hex_run, start=1):
        data += bytes.fromhex(token)
        shown = "".join(data.translate(_ASCII).decode("ascii").split())
        after = rest[tokens[k][0] :] if k < len(tokens) else ""
        if after and "".join(after.split()) == shown:
            return data
    return b"".join(bytes.fromhex(t) for _, t in hex_run)


def tcp_payload(data: bytes) -> bytes | None:
    """The TCP payload of data when data is a whole Ethernet or IP packet (its IP length says it
    is all there); None when it is not one."""
    for linktype, start in ((1, 14), (101, 0)):
        got = parse(linktype, data, 0, 0.0)
        if not isinstance(got, Segment) or len(data) < start + 20:
            continue
        ip = data[start:]
        version = ip[0] >> 4
        if version == 4:
            whole = int.from_bytes(ip[2:4], "big")
        elif version == 6 and len(ip) >= 40:
            whole = 40 + int.from_bytes(ip[4:6], "big")
        else:
            continue
        if whole == len(ip) or (linktype == 1 and len(data) == 60 and whole < len(ip)):
            return bytes(got.payload)
    return None


def decodable(frames: list[Frame]) -> bool:
    """Whether a protocol read the bytes: a frame with a known command and no warning or error."""
    return any(f.command is not None and f.worst_severity not in ("warn", "error") for f in frames)


def split_frames(data: bytes, decoder: Decoder) -> Iterator[tuple[bytes, str | None]]:
    """Frames in a hex dump: frames back to back, or one frame without its length field."""
    pos = 0
    # A protocol its package frames (no length field, or one with two meanings) is cut by its rule.
    rule = None if decoder.framed_by_length else framing_rule(decoder)
    while pos < len(data):
        rest = data[pos:]
        if rule is not None:
            total = rule.total(rest, 0)
            if total is None or total <= 0 or total > len(rest):
                yield rest, None
                return
            yield rest[:total], None
            pos += total
            continue
        total = decoder.frame_length(rest)
        if total is not None and decoder.header_size <= total <= len(rest):
            yield rest[:total], None
            pos += total
            continue
        framed = _with_length(rest, decoder)
        if pos == 0 and framed is not None and decoder.plausible(framed):
            yield framed, "input has no size prefix; decoded it as one frame starting at the key"
        else:
            yield rest, None
        return


def _with_length(rest: bytes, decoder: Decoder) -> bytes | None:
    """rest with the length field put in front, for protocols whose frames start with it."""
    wiring = decoder.protocol.wiring
    if wiring.length is None or decoder.length_at != 0:
        return None
    value = len(rest) + decoder.length_end - decoder.uncounted
    try:
        return decoder.length_st.pack(value) + rest
    except struct.error:
        return None


def decoded(data: bytes, decoder: Decoder) -> tuple[list[Frame], list[str]]:
    frames, notes = [], []
    for number, (raw, note) in enumerate(split_frames(data, decoder), start=1):
        if note:
            notes.append(note)
        frame = decoder.decode(raw)
        frame.number = number
        frames.append(frame)
    return frames, notes


def best(data: bytes, decoders: Mapping[str, Decoder]) -> tuple[list[Frame], list[str]]:
    """The decoding of data by the protocol that reads it best: most clean frames, then fewest notes."""
    scored = []
    for order, decoder in enumerate(decoders.values()):
        frames, notes = decoded(data, decoder)
        clean = sum(1 for f in frames if f.command is not None and f.worst_severity not in ("warn", "error"))
        worst = sum(1 for f in frames for e in f.expert if e.severity in ("warn", "error"))
        scored.append((-clean, worst, order, frames, notes))
    scored.sort(key=lambda s: s[:3])
    return scored[0][3], scored[0][4]
