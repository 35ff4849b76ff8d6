"""Framing rules that decode: how long the next PDU is, from a spec's length field, and whether
bytes at a candidate start decode cleanly.

The framer (wire/framing.py) cuts a byte stream into PDUs and hunts for a start after a loss;
what it asks of the protocol is a FramingRule. `LengthRule` serves every protocol whose
spec names a length field in a fixed place of its header (with an optional magic before
it); a protocol package whose PDUs are not so delimited (text lines, a length with two
meanings) subclasses it or writes its own, and names it in its DISSECTOR.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from streamdump.spec.registry import INT_TYPES
from streamdump.wire.framing import BAD, FramingRule
from streamdump.wire.limits import hint

if TYPE_CHECKING:
    from streamdump.spec.decoder import Decoder


class DecodedRule(FramingRule):
    """A rule whose clean checks decode with the protocol's decoder."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder

    def clean(self, data: bytes) -> bool:
        frame = self.decoder.decode(data)
        return frame.command is not None and frame.worst_severity not in ("warn", "error")

    def clean_prefix(self, data: bytes, from_client: bool | None = None) -> bool:
        frame = self.decoder.decode(data, partial=True)
        return (
            frame.command is not None
            and self._sent_by(frame.command, frame.kind, from_client)
            and all(e.cut or e.severity not in ("warn", "error") for e in frame.expert)
        )

    def _sent_by(self, command_name: str, kind: str, from_client: bool | None) -> bool:
        """Whether this side may send the command in this kind (the spec's `from`): a client's
        request in the server's bytes is a guess gone wrong."""
        command = self.decoder.protocol.commands.get(command_name)
        if from_client is None or command is None or command.sender == "both":
            return True
        return ((command.sender == "client") != (kind == "response")) == from_client

    def plausible(self, data: bytes) -> bool:
        return self.decoder.plausible(data)


class WholeRule(DecodedRule):
    """PDUs handed over whole: a carried protocol's frame is all of its carrier's field."""

    def total(self, buf: bytes | bytearray, start: int) -> int | None:
        return len(buf) - start if len(buf) > start else None


class LengthRule(DecodedRule):
    """PDUs delimited by a length field at a fixed offset of the header (the spec's wiring)."""

    def __init__(self, decoder: Decoder) -> None:
        super().__init__(decoder)
        wiring = decoder.protocol.wiring
        self.frame_length = decoder.frame_length
        self.length_st = decoder.length_st
        self.length_at = decoder.length_at
        self.header_len = decoder.header_size
        self.min_total = decoder.header_size
        self.max_frame = decoder.max_frame  # as the size field counts, and as the user sets it
        self.limit = decoder.max_frame + wiring.uncounted
        self.pattern = self._pattern(decoder)

    def total(self, buf: bytes | bytearray, start: int) -> int | None:
        total = self.frame_length(buf, start)
        if total is None:
            return None
        return total if self.min_total <= total <= self.limit else BAD

    def impossible(self, buf: bytes | bytearray, start: int, seq: int) -> str:
        (value,) = self.length_st.unpack_from(buf, start + self.length_at)
        if value > self.limit:  # larger than allowed, rather than smaller than any header
            return f"after a frame size of {value} at seq {seq}, over {hint('frame', self.max_frame)}"
        return f"after a frame size of {value} at seq {seq}, which is impossible"

    def candidates(self, buf: bytearray, start: int) -> Iterable[int]:
        if self.pattern is None:
            yield from super().candidates(buf, start)
            return
        # The bytes a start shows at its offset, found one search at a time (each search holds
        # buf only while it runs), from where a start at `start` would show them.
        pattern, offset = self.pattern
        at = start + offset
        while (found := pattern.search(buf, at)) is not None:
            yield found.start() - offset
            at = found.start() + 1

    @staticmethod
    def _pattern(decoder: Decoder) -> tuple[re.Pattern[bytes], int] | None:
        """What a PDU start shows at a fixed offset: its magic, or one of the known command keys;
        and that offset.

        One regex keeps hunting at C speed even through megabytes of unsynced bytes.
        """
        protocol = decoder.protocol
        wiring = protocol.wiring
        if wiring.magic is not None:
            return re.compile(re.escape(wiring.magic)), wiring.magic_offset
        offset = 0
        for spec in protocol.header:
            if spec.name == protocol.frame.key:
                break
            width = INT_TYPES[spec.type][1] if spec.type in INT_TYPES else None
            if width is None:
                return None
            offset += width
        else:
            return None
        if spec.type not in INT_TYPES:
            return None
        key_st = decoder.key_struct
        keys: set[int] = set()
        for key, response, _version in decoder.compiled:
            if isinstance(key, int):
                keys.add(decoder.wire_key(key, response))
        if not keys:
            return None
        alternatives = b"|".join(re.escape(key_st.pack(k)) for k in sorted(keys))
        return re.compile(alternatives), offset
