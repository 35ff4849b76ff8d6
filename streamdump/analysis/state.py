"""What the conversation tracker remembers of a connection, and the findings it files.

The engine's own memory of each connection (its ends, what each side sent last and
announced, requests waiting for their response, sessions open and ended, what the server
refused or closed with) is a ConnState; each rule a protocol package adds keeps its own
state beside it, in `rules`, and what a summary of the connection tells that only a rule
knows (the user, the negotiated frame size and heartbeat) in `facts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Struct, field

from streamdump.wire.findings import FINDINGS
from streamdump.wire.frame import Endpoint, Frame

# What a connection's summary says of it, whichever rule learned it: who authenticated, the
# frame size and heartbeat the peers negotiated, the command versions the server announced.
FACTS = ("user", "frame_max", "heartbeat_s", "versions")


class Diagnosis(Struct, frozen=True):
    """One finding about the conversation, as a user should read it."""

    severity: str
    kind: str  # what was found: error_response, auth_failure, unanswered, server_close, ...
    summary: str  # the same text for every occurrence of one problem (the expert summary's row)
    message: str  # one line with the whole story, naming packets
    number: int  # the packet it names first
    conn: int

    @property
    def group(self) -> str:
        """Wireshark's expert group of its kind: response_code, sequence, protocol."""
        return FINDINGS[self.kind].group

    def as_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "group": self.group,
            "kind": self.kind,
            "summary": self.summary,
            "message": self.message,
            "packet": self.number,
            "connection": self.conn,
        }


# Not frozen: one is made per frame (see wire/framing.py's Piece).
class Seen(Struct):
    """What the tracker remembers of a connection's latest frame: enough to name it, not its bytes."""

    number: int
    ts: float
    name: str
    wire_key: Any
    version: int
    length: int
    from_client: bool | None
    whole: bool = True  # False: an incomplete frame, bytes of it missing
    # Messages it carried, from its headers: kept for a server's frames where a connection's end
    # may name them (protocols with an orderly close); None elsewhere or when it carries none.
    records: int | None = None


def seen(frame: Frame, length: int | None = None) -> Seen:
    """A frame as the tracker remembers it: its packet, time, name, key, version and size."""
    size = len(frame.data) if length is None else length
    return Seen(frame.number, frame.ts, frame.name, frame.wire_key, frame.version, size, frame.from_client)


class Request(Struct):
    frame: Frame
    corr: int | str


class Session(Struct):
    name: str
    id: int | str
    opened_in: int
    values: dict[str, Any]
    uses: int = 0
    limit: int | None = None  # uses after which it ends (a close that waits: UNSUB sid max)


def session_name(kind: str, sid: int | str, session: Session | None) -> str:
    """A session for a user: its kind and id, and what its first kept value names (its stream)."""
    if session is None or not session.values:
        return f"{kind} {sid}"
    name, value = next(iter(session.values.items()))
    return f"{kind} {sid}" + (f" ({name} {value!r})" if value else "")


class SideState(Struct):
    """What one side of a connection sent and announced."""

    last: Seen | None = None
    properties: dict[str, Any] | None = None
    lowest_corr: int | None = None


class ConnState(Struct):
    number: int
    protocol: str = ""
    client: Endpoint | None = None
    server: Endpoint | None = None
    first_ts: float | None = None
    last: Seen | None = None
    client_side: SideState = field(default_factory=SideState)
    server_side: SideState = field(default_factory=SideState)
    pending: dict[tuple[bool, int | str], Request] = field(default_factory=dict)
    # A gap can hold one direction back, so a response may come out before its request: it
    # waits here for it, and only the end calls it an orphan.
    early: dict[tuple[bool, int | str], Frame] = field(default_factory=dict)
    lossy: bool = False  # some frame of the connection is incomplete: bytes are missing
    sessions: dict[tuple[str, int | str], Session] = field(default_factory=dict)
    # Sessions ended: (session, id) -> the packet that ended them.
    ended: dict[tuple[str, int | str], int] = field(default_factory=dict)
    closed_by_server: Frame | None = None
    close_seen: int | None = None  # packet of the protocol's own close, from either side
    refused: Seen | None = None  # a setup request the server refused (Open, authentication)
    # The client's latest frame a server's close may be about: "unknown" (a command or version
    # not in the registry) and "oversized" (over the negotiated frame size).
    suspects: dict[str, Seen] = field(default_factory=dict)
    # The capture holds the connection's setup (so every session it opened is in it).
    setup_seen: bool = False
    # What the protocol's own rules keep of the connection, by the rule's key.
    rules: dict[str, Any] = field(default_factory=dict)
    # What a summary of the connection says that a rule learned (FACTS).
    facts: dict[str, Any] = field(default_factory=dict)
    # Findings about it that bytes the capture lost may explain (made notes if it turns out lossy).
    doubtable: int = 0

    def side(self, from_client: bool | None) -> SideState:
        return self.client_side if from_client is not False else self.server_side

    @property
    def heartbeat(self) -> float:
        """The heartbeat interval the peers negotiated, in seconds (0: none)."""
        return self.facts.get("heartbeat_s") or 0


def named(enum: Mapping[int, str], code: int, codes: str = "hex") -> str:
    """A code as its enum's name and its value: "OK (0x01)", or "code 0x42" when unnamed."""
    text = f"0x{code:02x}" if codes == "hex" else str(code)
    name = enum.get(code)
    return f"{name} ({text})" if name else f"code {text}"


# Runs an id list names one by one before it gives up and names the rest by count.
MAX_RUNS = 8


def id_runs(ids: list[int]) -> str:
    """Sorted ids as their runs: "1..5, 8, 10..12" (a range would hide the gaps)."""
    runs: list[tuple[int, int]] = []
    for value in ids:
        if runs and value == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    text = ", ".join(f"{a}..{b}" if b > a else str(a) for a, b in runs[:MAX_RUNS])
    more = len(runs) - MAX_RUNS
    return text + (f" and {more} more run{'s' * (more != 1)}" if more > 0 else "")
