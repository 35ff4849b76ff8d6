"""What a decoded frame is: the Frame record, its expert notes and its lazily built field tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

if TYPE_CHECKING:
    from streamdump.spec.registry import FieldSpec

# Wireshark's expert severities, lowest first.
SEVERITIES = ("chat", "note", "warn", "error")


class Expert(Struct, frozen=True):
    severity: str
    message: str
    offset: int | None = None  # byte offset in the frame (size prefix included)
    cut: bool = False  # a partial frame's bytes ran out here, as expected of an incomplete frame
    # Wireshark's expert groups: malformed (the bytes), or what the conversation tracker finds
    # (response_code, sequence, protocol); only the decoder's own notes are malformed.
    group: str = "malformed"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"severity": self.severity, "group": self.group, "message": self.message}
        if self.offset is not None:
            out["offset"] = self.offset
        return out


class Node(Struct):
    """One field in the detail tree, with its position in the frame."""

    spec: FieldSpec | None
    label: str
    offset: int
    length: int
    value: Any = None
    children: list[Node] = field(default_factory=list)


class Endpoint:
    """One end of a connection; equal to another with the same address and port."""

    __slots__ = ("ip", "port", "text")

    def __init__(self, ip: str, port: int) -> None:
        self.ip = ip
        self.port = port
        # Its text, made the first time it is shown: a connection's endpoints are shown on every line.
        self.text: str | None = None

    def __str__(self) -> str:
        text = self.text
        if text is None:
            text = self.text = f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"
        return text

    def __repr__(self) -> str:
        return f"Endpoint(ip={self.ip!r}, port={self.port!r})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Endpoint:
            return NotImplemented
        return self.ip == other.ip and self.port == other.port  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable (its text is cached), as before


class Frame(Struct):
    """One protocol frame, decoded. Capture context (number, ts, src, dst) is set by the reader."""

    protocol: str
    wire_key: Any  # the key field's value as on the wire (a response bit included), None if absent
    key: Any  # the command key (int or str), None when the frame does not say and nothing told us
    kind: str  # request, response, command (or "unknown")
    command: str | None
    version: int
    size: int
    fields: dict[str, Any]
    expert: list[Expert]
    data: bytes  # the whole frame, size prefix included
    number: int = 0  # packet number where the frame completed (1-based)
    ts: float = 0.0
    src: Endpoint | None = None
    dst: Endpoint | None = None
    seq: int | None = None  # TCP sequence number of the frame's first byte
    incomplete: str | None = None  # why bytes of this frame are missing; data holds those present
    expanded: bool = False  # fields hold what the hooks add below the headers (Decoder.expand)
    conn: int = 0  # the TCP connection, numbered from 1 in the order they appear
    from_client: bool | None = None
    # What the conversation tracker links to this frame (request_in, stream, ...): the names
    # under the spec's conversation.links plus the kept session fields.
    links: dict[str, Any] | None = None
    key_text: str = "?"  # the key as the protocol writes it (0x0006, 310)
    # The packets whose TCP payload held bytes of this frame, in stream order (-x, -w).
    packets: tuple[int, ...] = ()
    # The TLS layer the frame came through (streamdump.wire.tls.connection.TlsInfo), if any.
    tls: Any = None

    @property
    def name(self) -> str:
        return self.command or f"Unknown({self.key_text})"

    @property
    def worst_severity(self) -> str | None:
        if not self.expert:
            return None
        return max((e.severity for e in self.expert), key=SEVERITIES.index)


def links_of(frame: Frame) -> dict[str, Any]:
    """The frame's links, made on first use."""
    if frame.links is None:
        frame.links = {}
    return frame.links
