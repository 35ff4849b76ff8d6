"""A TCP connection's life as its packets show it: the handshake, each side's FIN, a reset.

The reader marks each connection's SYN, SYN-ACK, first FIN per side and first RST, and, when
the connection ends, how many bytes of an unfinished frame each direction held. The
conversation tracker reads these at the end of a read to say how a connection ended and
whether that was the protocol's own close: a client that vanished after a delivery, a reset
in the middle of a frame, a refused connection, a half-closed one left at the capture's end.
Only flags and packet numbers are kept, never bytes, so a Life costs the same for every
connection whatever it carried.
"""

from __future__ import annotations

from msgspec import Struct, field

from streamdump.wire.frame import Endpoint
from streamdump.wire.reassembly import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN

# How a connection ended; None while it is open (and when the capture ended first).
CLOSED = "closed"  # both sides sent FIN
RESET = "reset"
REFUSED = "refused"  # the client's SYN was answered by a reset
REUSED = "reused"  # a new SYN on the same ports began another connection


# Not frozen: several are made per connection (see wire/framing.py's Piece).
class Mark(Struct):
    """One flag seen: which packet, when, and who sent it."""

    number: int
    ts: float
    from_client: bool


class Life(Struct):
    """What the capture shows of one connection's opening and ending."""

    conn: int
    protocol: str
    client: Endpoint
    server: Endpoint
    first: Mark  # the connection's first packet
    last_ts: float = 0.0
    syn: Mark | None = None  # the client's SYN
    syn_ack: Mark | None = None
    fins: dict[bool, Mark] = field(default_factory=dict)  # from client? -> its first FIN
    reset: Mark | None = None  # the first RST
    end: str | None = None  # CLOSED, RESET, REFUSED, REUSED; None: open when the capture ended
    ended: Mark | None = None  # the packet that ended it
    # Bytes of a frame not yet whole that each direction (from client?) held when it ended.
    cut: dict[bool, int] = field(default_factory=dict)

    def saw(self, flags: int, from_client: bool, number: int, ts: float) -> None:
        """Note one segment's flags."""
        self.last_ts = ts
        if flags & TCP_SYN:
            if not flags & TCP_ACK and from_client and self.syn is None:
                self.syn = Mark(number, ts, True)
            elif flags & TCP_ACK and not from_client and self.syn_ack is None:
                self.syn_ack = Mark(number, ts, False)
        if flags & TCP_FIN and from_client not in self.fins:
            self.fins[from_client] = Mark(number, ts, from_client)
        if flags & TCP_RST and self.reset is None:
            self.reset = Mark(number, ts, from_client)

    def finish(self, end: str | None, number: int, ts: float) -> None:
        """The connection ended (end None: the capture did)."""
        if end == RESET and self.syn is not None and self.syn_ack is None and self.reset is not None:
            end = REFUSED if not self.reset.from_client else RESET
        self.end = end
        if end is not None:
            closer = self.closer
            self.ended = Mark(number, ts, closer[0].from_client if closer is not None else True)

    @property
    def closer(self) -> tuple[Mark, str] | None:
        """Who ended the connection first, and how ("FIN" or "RST")."""
        found: tuple[Mark, str] | None = None
        for mark in self.fins.values():  # at most two: the first of them, without a sort
            if found is None or mark.number < found[0].number:
                found = (mark, "FIN")
        if self.reset is not None and (found is None or self.reset.number < found[0].number):
            found = (self.reset, "RST")
        return found

    @property
    def half_closed(self) -> Mark | None:
        """The FIN of the one side that closed, when the other had not by the capture's end."""
        if self.end is not None or self.reset is not None or len(self.fins) != 1:
            return None
        return next(iter(self.fins.values()))

    @property
    def duration(self) -> float:
        return (self.ended.ts if self.ended is not None else self.last_ts) - self.first.ts

    def ended_by(self, server: str = "server") -> str:
        """Who ended it and how, as a clause: "the client reset the connection"."""
        if self.end == REFUSED:
            return "the connection was refused"
        if self.end == REUSED:
            return "a new connection reused its ports"
        closer = self.closer
        if closer is None:
            return "the connection ended"
        who = "client" if closer[0].from_client else server
        return f"the {who} {'reset' if self.end == RESET else 'closed'} the connection"

    def how(self, server: str = "server") -> str:
        """How it ended, in a few words: "the client reset it", "closed by the server first"."""
        if self.end == REFUSED:
            return f"refused: the {server} answered the SYN with a reset"
        if self.end == REUSED:
            return "ended by a new connection on the same ports"
        closer = self.closer
        if closer is None:
            return "open when the capture ended"
        mark, flag = closer
        who = "client" if mark.from_client else server
        if self.half_closed is not None:
            return f"half-closed by the {who} ({flag} at packet {mark.number}) when the capture ended"
        if flag == "RST":
            return f"reset by the {who} (RST at packet {mark.number})"
        then = ""
        if self.reset is not None:  # a FIN first, a reset after it
            resetter = "client" if self.reset.from_client else server
            then = f", then reset by the {resetter} (RST at packet {self.reset.number})"
        return f"closed by the {who} first (FIN at packet {mark.number}){then}"

    def as_dict(self, server: str = "server") -> dict[str, object]:
        closer = self.closer
        return {
            "end": self.end or "open",
            "how": self.how(server),
            "closed_by": None if closer is None else ("client" if closer[0].from_client else "server"),
            "close_flag": None if closer is None else closer[1],
            "close_packet": None if closer is None else closer[0].number,
            "handshake": self.syn is not None,
        }
