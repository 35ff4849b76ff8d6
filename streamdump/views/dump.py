"""`-x`: a frame's bytes as hex and ASCII, the way `tshark -x` prints them, after its line or
tree: the whole PDU as reassembled, headed by the packets it came from. `streamdump decode`
reads this form back."""

from __future__ import annotations

from collections.abc import Iterable

BYTES_PER_LINE = 16
_ASCII = bytes(b if 0x20 <= b < 0x7F else 0x2E for b in range(256))


def hex_lines(data: bytes) -> list[str]:
    """tshark's hex dump: offset, sixteen bytes in hex, then the same as ASCII ('.' for the rest)."""
    view = bytes(data)
    digits = 4 if len(view) <= 0x10000 else 8
    out = []
    for offset in range(0, len(view), BYTES_PER_LINE):
        chunk = view[offset : offset + BYTES_PER_LINE]
        out.append(f"{offset:0{digits}x}  {chunk.hex(' '):<47}   {chunk.translate(_ASCII).decode('ascii')}")
    return out


def runs(numbers: Iterable[int]) -> str:
    """Packet numbers as runs: 4, 6-9, 12."""
    ordered = sorted(set(numbers))
    parts: list[str] = []
    start = prev = None
    for n in ordered:
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


def heading(short: str, data: bytes, packets: Iterable[int], incomplete: bool) -> str:
    """What the dump below is: whose PDU, how many bytes, from which packets."""
    numbers = sorted(set(packets))
    size = f"{len(data)} bytes" + (" present, incomplete" if incomplete else "")
    where = f" from packet{'s' * (len(numbers) != 1)} {runs(numbers)}" if numbers else ""
    return f"{short} PDU ({size}){where}:"
