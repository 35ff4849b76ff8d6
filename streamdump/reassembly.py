"""In-order TCP reassembly per connection and direction, and size-prefixed framing.

Retransmitted bytes (already seen) are dropped; a hole in the sequence space
(bytes the capture lacks) discards the partial frame and waits for a segment
that starts with a plausible frame header before decoding again. Every such
event becomes a Notice, so the user learns what could not be decoded and why.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

TCP_FIN = 0x01
TCP_SYN = 0x02
TCP_RST = 0x04
SEQ_MOD = 1 << 32


@dataclass(frozen=True, slots=True)
class Notice:
    """Something about the capture (not a single frame) the user should know."""

    severity: str
    message: str
    number: int  # packet number it relates to


@dataclass(slots=True)
class Framer:
    """Cuts one direction's byte stream into whole frames."""

    size_st: struct.Struct
    max_size: int
    plausible: Callable[[bytes], bool]
    buf: bytearray = field(default_factory=bytearray)
    synced: bool = False

    def feed(self, data: bytes, number: int, notices: list[Notice], where: str) -> Iterator[bytes]:
        if not self.synced:
            # Only start where a frame header is believable: mid-stream starts and
            # post-gap segments rarely begin on a frame boundary.
            if not self.plausible(data):
                return
            self.synced = True
        self.buf += data
        size_len = self.size_st.size
        buf = self.buf
        start = 0
        while len(buf) - start >= size_len:
            (size,) = self.size_st.unpack_from(buf, start)
            if size > self.max_size:
                notices.append(
                    Notice("error", f"{where}: frame size {size} exceeds {self.max_size}; lost sync", number)
                )
                self.reset()
                return
            total = size_len + size
            if len(buf) - start < total:
                break
            yield bytes(buf[start : start + total])
            start += total
        if start:
            del buf[:start]

    def reset(self) -> None:
        self.buf.clear()
        self.synced = False


@dataclass(slots=True)
class Direction:
    framer: Framer
    next_seq: int | None = None
    # Sequence ranges skipped after a gap: a segment arriving late into one of them
    # carries bytes we never decoded, which the user must hear about.
    holes: list[tuple[int, int]] = field(default_factory=list)
    late: bool = False  # set by accept() when it dropped such bytes

    def accept(self, seq: int, flags: int, payload: bytes) -> bytes | None:
        """The new in-order bytes of a segment, or None when it leaves a hole."""
        self.late = False
        if flags & TCP_SYN:
            self.next_seq = (seq + 1) % SEQ_MOD
            self.framer.reset()
            self.framer.synced = True
            return b""
        if flags & TCP_RST:
            return b""  # a reset's sequence number says nothing about the byte stream
        if self.next_seq is None:
            self.next_seq = seq
        # FIN occupies one sequence number after the segment's payload.
        fin = 1 if flags & TCP_FIN else 0
        delta = (seq - self.next_seq) % SEQ_MOD
        if delta == 0:
            self.next_seq = (seq + len(payload) + fin) % SEQ_MOD
            return payload
        if delta < SEQ_MOD // 2:
            return None  # ahead of what we have: bytes are missing
        behind = SEQ_MOD - delta  # retransmission, possibly with new bytes at its end
        if payload and self._in_hole(seq):
            self.late = True
        if behind >= len(payload) + fin:
            return b""
        self.next_seq = (seq + len(payload) + fin) % SEQ_MOD
        return payload[behind:]

    def skip_gap(self, seq: int) -> None:
        """Give up on the bytes before seq: remember the hole and wait for a frame start."""
        if self.next_seq is not None:
            self.holes = [*self.holes[-15:], (self.next_seq, seq)]
        self.framer.reset()
        self.next_seq = None

    def _in_hole(self, seq: int) -> bool:
        return any((seq - start) % SEQ_MOD < (end - start) % SEQ_MOD for start, end in self.holes)
