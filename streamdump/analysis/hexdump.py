"""Frames given as hex, as pasted from logs or Wireshark: the bytes, the PDUs in them, and the
protocol that reads them best (`streamdump decode`)."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Mapping

from streamdump.analysis.pipeline import framing_rule
from streamdump.spec.decoder import Decoder
from streamdump.wire.frame import Frame


class HexError(ValueError):
    """Text that is not hex bytes; str() is the one-line message."""


_HEX_NOISE = re.compile(r"0x|[\s:,\-]", re.IGNORECASE)


def parse_hex(text: str) -> bytes:
    cleaned = _HEX_NOISE.sub("", text)
    if not cleaned:
        raise HexError("no hex digits given")
    bad = re.search(r"[^0-9a-fA-F]", cleaned)
    if bad:
        raise HexError(f"not hex: {bad.group()!r} at position {bad.start()} of the cleaned input")
    if len(cleaned) % 2:
        raise HexError(f"odd number of hex digits ({len(cleaned)})")
    return bytes.fromhex(cleaned)


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
