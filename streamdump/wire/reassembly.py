"""One direction of a TCP connection turned back into its byte stream.

Segments may come duplicated, overlapping, out of order, cut by the snap length or
not at all. A Stream hands on each byte once, in order, and says exactly where bytes
are missing. Sequence numbers are unwrapped into positions that only grow, so no
arithmetic below has to care about the 2**32 wrap.

Policy, chosen to match what the bytes can prove:
- the first copy of a byte wins; a later copy that differs is reported (Wireshark's
  "overlap conflict"), except for keep-alives, whose one byte is garbage by design;
- a segment ahead of the next expected byte waits in a bounded buffer until the bytes
  before it arrive;
- bytes are declared missing (a Gap) as soon as that is certain: the receiver's ACK
  covers them, the capture cut them (snap length), the connection ended, or the
  reorder buffer is full.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from msgspec import Struct

TCP_FIN = 0x01
TCP_SYN = 0x02
TCP_RST = 0x04
TCP_ACK = 0x10
SEQ_MOD = 1 << 32
HALF = 1 << 31

REORDER_FULL = "reorder buffer full"  # a gap's cause when the reorder limit was hit
BUFFERED_FULL = "too much held across connections"  # when the buffered limit was
DEFAULT_REORDER_CAP = 4 << 20  # bytes waiting for earlier bytes, per direction
DEFAULT_HISTORY = 256 << 10  # delivered bytes kept to check retransmissions against


class Gap(Struct, frozen=True):
    """Bytes of the stream the capture does not have: positions [start, end)."""

    start: int
    end: int
    number: int  # packet at which the loss became certain
    cause: str  # "not captured", "snap length", "reorder buffer full", "capture ended"

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def seq_range(self) -> tuple[int, int]:
        """As TCP sequence numbers (what Wireshark and the capture show)."""
        return self.start % SEQ_MOD, self.end % SEQ_MOD


class Conflict(Struct, frozen=True):
    """A retransmitted copy that disagrees with the copy already used."""

    start: int
    end: int
    number: int


Event = tuple[int, bytes] | Gap  # (position, in-order bytes) or a gap


class Stream:
    __slots__ = (
        "closed",
        "fin",
        "history",
        "history_bytes",
        "history_cap",
        "lost",
        "next",
        "on_conflict",
        "on_late",
        "pending",
        "pending_bytes",
        "pending_heap",
        "recent_gaps",
        "reorder_cap",
        "syn_seen",
    )
    reorder_cap: int
    history_cap: int
    on_conflict: Callable[[Conflict], None] | None
    on_late: Callable[[Gap, int], None] | None  # (gap it falls into, packet number)
    next: int | None  # position of the next byte to hand on
    syn_seen: bool
    fin: int | None  # position of the FIN, once seen
    closed: bool  # every byte before the FIN has been handed on
    pending: dict[int, bytes]
    pending_heap: list[int]
    pending_bytes: int
    lost: list[tuple[int, int]]  # cut by snaplen, ahead of next
    history: deque[tuple[int, bytes]]
    history_bytes: int
    # deque((), n), not deque(maxlen=n): keyword arguments make a deque several times slower to
    # make, and two are made per direction of every connection.
    recent_gaps: deque[Gap]

    # Written out, not generated: a generated __init__ calls a factory per container, and two
    # streams are made per connection (a capture of short connections makes them by the million).
    def __init__(
        self,
        reorder_cap: int = DEFAULT_REORDER_CAP,
        history_cap: int = DEFAULT_HISTORY,
        on_conflict: Callable[[Conflict], None] | None = None,
        on_late: Callable[[Gap, int], None] | None = None,
    ) -> None:
        self.reorder_cap = reorder_cap
        self.history_cap = history_cap
        self.on_conflict = on_conflict
        self.on_late = on_late
        self.next = None
        self.syn_seen = False
        self.fin = None
        self.closed = False
        self.pending = {}
        self.pending_heap = []
        self.pending_bytes = 0
        self.lost = []
        self.history = deque()
        self.history_bytes = 0
        self.recent_gaps = deque((), 16)  # noqa: RUF037

    def position(self, seq: int) -> int:
        """The position of a sequence number near the current one."""
        assert self.next is not None
        return self.next + ((seq - self.next + HALF) % SEQ_MOD) - HALF

    def accept(self, seq: int, flags: int, payload: bytes, wire_len: int, number: int) -> list[Event]:
        """The in-order bytes and gaps this segment makes known."""
        nxt = self.next
        if (
            nxt is not None
            and not flags & (TCP_RST | TCP_SYN | TCP_FIN)
            and not self.pending_heap
            and not self.lost
            and wire_len == len(payload)
            and nxt + ((seq - nxt + HALF) % SEQ_MOD) - HALF == nxt
        ):
            # The commonest segment by far: the next bytes, in order, nothing waiting, nothing
            # cut. What _take and _settle would do for it, without their calls.
            if not payload:
                if self.fin == nxt:
                    self.closed = True
                return []
            self.next = end = nxt + len(payload)
            if self.fin == end:
                self.closed = True
            self._remember(nxt, payload)
            return [(nxt, payload)]
        if flags & TCP_RST:
            return []  # a reset's sequence number says nothing about the byte stream
        if not payload and not wire_len:
            # A bare SYN opening the stream, or a bare FIN where the bytes end: a connection of
            # a few frames has four of them, so they skip position and _settle too.
            if nxt is None and flags & (TCP_SYN | TCP_FIN) == TCP_SYN:
                self.next = (seq + 1) % SEQ_MOD
                self.syn_seen = True
                return []
            if (
                nxt is not None
                and flags & (TCP_SYN | TCP_FIN) == TCP_FIN
                and (seq - nxt) % SEQ_MOD == 0  # position(seq) == nxt
            ):
                self.fin = nxt
                self.closed = True
                return []
        return self._accept(seq, flags, payload, wire_len, number)

    def _accept(self, seq: int, flags: int, payload: bytes, wire_len: int, number: int) -> list[Event]:
        """accept for any segment, without its shortcuts (the reference they are tested against)."""
        if flags & TCP_RST:
            return []
        events: list[Event] = []
        if flags & TCP_SYN:
            if self.next is not None and self.syn_seen and self.position(seq) + 1 == self.next:
                return []  # a retransmitted SYN
            self.next = (seq + 1) % SEQ_MOD if self.next is None else self.position(seq) + 1
            self.syn_seen = True
            seq = (seq + 1) % SEQ_MOD  # data on a SYN (TCP Fast Open) follows the ISN
        elif self.next is None:
            self.next = seq  # mid-stream start: the first byte seen is where the stream begins
        pos = self.position(seq)
        if wire_len > len(payload):
            self._add_lost(pos + len(payload), pos + wire_len)
        if flags & TCP_FIN:
            self.fin = pos + wire_len
        if payload:
            self._take(pos, payload, number, events)
        self._settle(number, events)
        return events

    def acked(self, ack: int, number: int) -> list[Event]:
        """The peer acknowledged up to ack: bytes before it that never came are not in the capture."""
        nxt = self.next
        if nxt is None or self.closed:
            return []
        upto = nxt + ((ack - nxt + HALF) % SEQ_MOD) - HALF  # position(ack), asked per segment
        if self.fin is not None and upto > self.fin:
            upto = self.fin  # the FIN's own sequence number is not a byte
        if upto <= self.next:
            return []
        events: list[Event] = []
        while self.next < upto:
            first = self.pending_heap[0] if self.pending_heap else upto
            if first > self.next:
                events.append(self._gap(min(first, upto), number, "not captured"))
            self._settle(number, events)
        return events

    def release(self, number: int, cause: str) -> list[Event]:
        """Hand on everything waiting now, the holes before it declared gaps: the stream goes on."""
        events: list[Event] = []
        while self.pending_heap:
            first = self.pending_heap[0]
            if first > self.next:  # type: ignore[operator]
                events.append(self._gap(first, number, cause))
            self._settle(number, events)
        return events

    def finish(self, number: int, cause: str = "not captured") -> list[Event]:
        """Everything still waiting, with the holes between it reported; called at the end."""
        if not self.pending_heap and (self.fin is None or self.next is None or self.next >= self.fin):
            return []  # nothing waits and nothing is missing: the commonest end
        events = self.release(number, cause)
        if self.fin is not None and self.next is not None and self.next < self.fin:
            events.append(self._gap(self.fin, number, cause))  # the bytes before a FIN we saw
        return events

    # ------------------------------------------------------------------ internals

    def _take(self, pos: int, data: bytes, number: int, events: list[Event]) -> None:
        nxt = self.next
        assert nxt is not None
        end = pos + len(data)
        if pos < nxt:
            self._late(pos, min(end, nxt), number)
        if end <= nxt:
            # Old bytes. A keep-alive repeats the last byte (or none) with garbage in it.
            if not (pos == nxt - 1 and len(data) == 1):
                self._check(pos, data, number)
            return
        if pos < nxt:
            self._check(pos, data[: nxt - pos], number)
            data = data[nxt - pos :]
            pos = nxt
        if pos == nxt:
            events.append((pos, data))
            self.next = end
            self._remember(pos, data)
            return
        old = self.pending.get(pos)
        if old is not None:
            if len(old) >= len(data):
                if old[: len(data)] != data:
                    self._conflict(pos, end, number)
                return
            if data[: len(old)] != old:
                self._conflict(pos, pos + len(old), number)
                data = old + data[len(old) :]
            self.pending_bytes -= len(old)
        else:
            heapq.heappush(self.pending_heap, pos)
        self.pending[pos] = data
        self.pending_bytes += len(data)
        if self.pending_bytes > self.reorder_cap:
            events.append(self._gap(self.pending_heap[0], number, REORDER_FULL))

    def _settle(self, number: int, events: list[Event]) -> None:
        """Hand on waiting segments that have become in-order; declare snap-length holes."""
        while True:
            heap = self.pending_heap
            if heap and heap[0] <= self.next:  # type: ignore[operator]
                pos = heapq.heappop(heap)
                data = self.pending.pop(pos)
                self.pending_bytes -= len(data)
                self._take(pos, data, number, events)
                continue
            if self.lost and self.lost[0][0] <= self.next:  # type: ignore[operator]
                _start, end = self.lost.pop(0)
                if end > self.next:  # type: ignore[operator]
                    events.append(self._gap(end, number, "snap length"))
                continue
            break
        if self.fin is not None and self.next == self.fin:
            self.closed = True

    def _gap(self, end: int, number: int, cause: str) -> Gap:
        gap = Gap(self.next, end, number, cause)  # type: ignore[arg-type]
        self.next = end
        self.recent_gaps.append(gap)
        return gap

    def _add_lost(self, start: int, end: int) -> None:
        self.lost.append((start, end))
        self.lost.sort()

    def _remember(self, pos: int, data: bytes) -> None:
        self.history.append((pos, data))
        self.history_bytes += len(data)
        while self.history_bytes > self.history_cap and len(self.history) > 1:
            self.history_bytes -= len(self.history.popleft()[1])

    def _check(self, pos: int, data: bytes, number: int) -> None:
        """Compare a retransmitted copy with what was handed on, where the history still has it."""
        end = pos + len(data)
        for hpos, hdata in reversed(self.history):
            hend = hpos + len(hdata)
            if hend <= pos:
                break
            lo, hi = max(pos, hpos), min(end, hend)
            mine, theirs = data[lo - pos : hi - pos], hdata[lo - hpos : hi - hpos]
            if lo < hi and mine != theirs:
                differ = [i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b]
                self._conflict(lo + differ[0], lo + differ[-1] + 1, number)
                return

    def _late(self, start: int, end: int, number: int) -> None:
        # Bytes arriving after they were declared missing (e.g. a segment captured after its ACK).
        if self.on_late is None:
            return
        for gap in self.recent_gaps:
            if gap.start < end and start < gap.end:
                self.on_late(gap, number)
                return

    def _conflict(self, start: int, end: int, number: int) -> None:
        if self.on_conflict is not None:
            self.on_conflict(Conflict(start, end, number))
