"""Cuts one direction's byte stream into frames, and finds frames again after a loss.

While in sync, the protocol's framing rule says how long each frame is (its size
prefix plus that many bytes, for most). When bytes go missing
(a Gap), the frame they cut is handed on as incomplete with the bytes present, and
framing goes on at once if that frame's size says where the next one starts beyond
the gap. Otherwise the framer hunts: it looks for an offset where a plausible header
starts a frame that decodes cleanly and is followed by another plausible header (or
by the clean end of the connection), and resumes there. Bytes passed over are
reported, never decoded from garbage. Buffered bytes are bounded by the frame limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec import Struct

from streamdump.wire.reassembly import Gap

# total() for bytes that cannot start a PDU (an impossible length, a wrong magic).
BAD = -1


class FramingRule:
    """The protocol knowledge framing and hunting need."""

    # Bytes a candidate start must show before plausible() can judge it.
    header_len = 1
    # The largest PDU, whole, that is accepted.
    limit = 64 << 20

    def total(self, buf: bytes | bytearray, start: int) -> int | None:
        """The whole length of the PDU at start: None while the bytes do not say, BAD if none starts there."""
        raise NotImplementedError

    def total_at_end(self, buf: bytes | bytearray, start: int) -> int | None:
        """total() when the stream has ended and no byte will follow buf: a rule that waits for
        the next PDU to decide where this one ends decides with what it has."""
        return self.total(buf, start)

    def impossible(self, buf: bytes | bytearray, start: int, seq: int) -> str:
        """Why no PDU starts at start (seq is its TCP sequence number), for the notice."""
        return f"no frame starts at seq {seq}"

    def candidates(self, buf: bytearray, start: int) -> Iterable[int]:
        """Offsets from start where a PDU may begin, in order. Taken lazily: a hunt usually
        decides within the first few, and buf may be megabytes. (An iterator must hold no
        export of buf between its steps: the framer cuts buf once it has found a start.)"""
        return range(start, len(buf))

    def plausible(self, data: bytes) -> bool:
        """Whether the first header_len bytes of data look like a PDU's header."""
        return True

    def clean(self, data: bytes) -> bool:
        """Whether data is one whole PDU that decodes without warnings or errors."""
        raise NotImplementedError

    def clean_prefix(self, data: bytes, from_client: bool | None = None) -> bool:
        """Whether the start of a PDU (the rest cut off) decodes without errors up to its end;
        from_client: which side sent the bytes, when known, to refuse a command that side never sends."""
        raise NotImplementedError


# Hunting keeps at most this much unsynced data that holds no candidate start.
HUNT_WINDOW = 64 << 10
# A frame start found just before a gap must show this many bytes past its header, so that a
# clean partial decode means something. (32 let the damage property find control frames made of
# other frames' bytes; Publish and Deliver frames cut by gaps show far more, and the flood
# recovery check recovers as many messages with 128.)
MIN_CUT_PREFIX = 128


# Not frozen: one is made per frame, and a frozen dataclass's __init__ costs several times a plain one's.
class Piece(Struct):
    """What the framer found: a frame, an incomplete frame, or bytes it had to pass over."""

    kind: str  # "frame", "incomplete" or "skipped"
    pos: int  # stream position of the first byte
    data: bytes  # the frame (size prefix included), or the part present of an incomplete one
    length: int  # whole frame length for frames (-1 when unknown), byte count for skipped
    reason: str = ""
    # Incomplete frames: the runs of bytes present after each gap inside the frame, and whether
    # the last run reaches the frame's end (its size says where that is). Skipped bytes that end
    # where a frame was found: the runs since hunting began, the last one ending at that frame
    # (the tail of a frame whose start a gap took).
    islands: tuple[bytes, ...] = ()
    anchored: bool = False


class Framer:
    # Two framers are made per connection (a capture of short connections makes them by the
    # million): slots, not a dict per framer.
    __slots__ = (
        "buf",
        "cut",
        "from_client",
        "guess",
        "hunt_reason",
        "islands",
        "limit",
        "need",
        "orphan",
        "passed",
        "passed_from",
        "pos",
        "rule",
        "runs",
        "scan",
        "skip_until",
        "synced",
    )

    def __init__(self, rule: FramingRule, *, synced: bool = False, from_client: bool | None = None) -> None:
        self.rule = rule
        self.from_client = from_client  # which side's bytes these are, when the connection says
        # The protocol's sanity cap, not a negotiated maximum: peers exceed those, and the
        # conversation tracker says so.
        self.limit = rule.limit
        self.synced = synced
        self.buf = bytearray()
        self.pos: int | None = None  # stream position of buf[0]
        self.skip_until: int | None = None  # in sync: bytes before this belong to a reported frame
        self.scan = 0  # hunting: offset in buf where the search resumes
        self.passed = 0  # hunting: bytes passed over so far and already dropped from buf
        self.passed_from: int | None = None
        # Hunting: the bytes passed over since the last gap, while they are one run that a found
        # frame start could close (bounded by the frame limit); None once that cannot hold.
        self.orphan: bytearray | None = bytearray()
        self.runs: list[bytes] = []  # hunting: earlier runs, each ended by a gap (bounded by the limit)
        self.hunt_reason = ""
        self.need = 0  # in sync: bytes buf must hold before the next frame can be cut
        # In sync, a frame cut by a gap waits here until its end: (start, bytes before the gap,
        # length, reason); the bytes after each later gap collect in islands.
        self.cut: tuple[int, bytes, int, str] | None = None
        self.islands: list[bytearray] = []
        # Hunting: a frame start found just before a gap, whose size no next header confirmed.
        # It waits (start, bytes before the gap, length, reason) until the hunt finds a frame:
        # one starting exactly where its size says it ends confirms it, and the bytes passed
        # over are its tail; any other outcome hands it on without them.
        self.guess: tuple[int, bytes, int, str] | None = None

    def start_hunting(self, reason: str) -> None:
        self.synced = False
        self.hunt_reason = reason
        self.orphan = bytearray()
        self.runs = []

    # ------------------------------------------------------------------ input

    def feed(self, pos: int, data: bytes) -> list[Piece]:
        out: list[Piece] = []
        if self.pos is None or not self.buf:
            self.pos = pos
        if self.skip_until is not None:
            n = min(len(data), self.skip_until - pos)
            if self.cut is not None:
                self.islands[-1] += data[:n]
            data = data[n:]
            pos += n
            self.pos = pos
            if pos < self.skip_until:
                return out
            self.skip_until = None
            self._release_cut(out, anchored=True)
        if not data:
            return out
        if not self.synced:
            self.buf += data
            self._hunt(out, at_end=False)
        elif not self.buf:
            self._cut(data, pos, out)  # the common case: whole frames straight from the segment
        else:
            self.buf += data
            if len(self.buf) >= self.need:  # a frame spread over many segments is joined once
                buf, self.buf = bytes(self.buf), bytearray()
                self._cut(buf, self.pos, out)  # type: ignore[arg-type]
        return out

    def gap(self, gap: Gap) -> list[Piece]:
        out: list[Piece] = []
        guessed = False  # a frame start found just before this gap, no next header to confirm it
        if not self.synced and self.buf:
            # A frame that ends exactly where the bytes stop is still found, and so is one that
            # this gap cuts, when the part present decodes cleanly.
            self._hunt(out, at_end=True)
            if not self.synced:
                self._hunt_cut(out)
                guessed = self.synced
        missing = f"{gap.length} bytes missing at seq {gap.seq_range[0]}"
        if not self.synced:
            if self.guess is not None:
                start, head, total, reason = self.guess
                self.guess = (start, head, total, f"{reason}; {missing}")
            self.passed += len(self.buf)
            if self.passed_from is None and self.buf:
                self.passed_from = self.pos
            if self.orphan is not None and (self.orphan or self.buf):
                self.runs.append(bytes(self.orphan + self.buf))
                while sum(map(len, self.runs)) > self.limit:
                    self.runs.pop(0)
            self.buf.clear()
            self.pos = gap.end
            self.scan = 0
            self.orphan = bytearray()  # what comes after this gap is a new run
            return out
        if self.skip_until is not None:
            if self.skip_until > gap.end:
                self.pos = gap.end
                if self.cut is not None:
                    start, head, total, reason = self.cut
                    self.cut = (start, head, total, f"{reason}; {missing}")
                    self.islands.append(bytearray())
                return out
            self._release_cut(out, anchored=False)
            if self.skip_until == gap.end:
                self.skip_until = None
                self.pos = gap.end
                return out
            self.skip_until = None
        elif self.buf:
            total = self.rule.total(self.buf, 0)
            if total is not None and total > 0:
                end = self.pos + total  # type: ignore[operator]
                head = bytes(self.buf)
                self.buf.clear()
                # A head too short to say which command it is cannot use its tail: hunting
                # passes over it, and the tail is then recovered as a frame whose start was lost.
                whole_header = len(head) >= self.rule.header_len
                if end > gap.end and not guessed and whole_header:
                    # The frame's own size says where the next one starts: no hunting needed,
                    # and the bytes up to there are the frame's tail. (Not a guessed frame's: a
                    # size no next header confirmed could pass over the frames behind the gap.)
                    self.cut = (self.pos, head, total, f"cut by a gap: {missing}")  # type: ignore[assignment]
                    self.islands = [bytearray()]
                    self.pos = gap.end
                    self.skip_until = end
                    return out
                if end > gap.end and whole_header:
                    self.guess = (self.pos, head, total, f"cut by a gap: {missing}")  # type: ignore[assignment]
                    self.pos = gap.end
                    self.start_hunting(f"after the gap at seq {gap.seq_range[0]}")
                    return out
                out.append(Piece("incomplete", self.pos, head, total, f"cut by a gap: {missing}"))  # type: ignore[arg-type]
                if end == gap.end:
                    self.pos = gap.end
                    return out
            else:
                out.append(Piece("incomplete", self.pos, bytes(self.buf), -1, f"cut by a gap: {missing}"))  # type: ignore[arg-type]
                self.buf.clear()
        self.pos = gap.end
        self.start_hunting(f"after the gap at seq {gap.seq_range[0]}")
        return out

    def unfinished(self) -> int:
        """Bytes of a frame whose start is known that is not yet whole (0 while hunting: the
        bytes held then belong to no frame found)."""
        if not self.synced:
            return 0
        if self.cut is not None:
            return len(self.cut[1]) + sum(map(len, self.islands))
        return len(self.buf)

    def held(self) -> int:
        """Bytes this framer holds: a frame not yet whole, or bytes it hunts in."""
        held = len(self.buf) + sum(map(len, self.runs)) + len(self.orphan or b"")
        if self.cut is not None:
            held += len(self.cut[1]) + sum(map(len, self.islands))
        if self.guess is not None:
            held += len(self.guess[1])
        return held

    def release(self, reason: str) -> list[Piece]:
        """Hand on what is held, as at the end of the stream, then go on hunting: the bytes that
        come next may be the rest of the frame handed on."""
        out = self.finish(reason)
        self.scan = 0
        self.passed, self.passed_from = 0, None
        self.skip_until = None
        self.start_hunting(f"after letting go of what was held ({reason})")
        return out

    def finish(self, reason: str) -> list[Piece]:
        """What is left when the stream ends: an unfinished frame or unsynced bytes."""
        if not self.buf and self.cut is None and (self.synced or (self.guess is None and not self.passed)):
            # Every frame was whole (the commonest end), or no byte came at all (a health
            # check's connection): nothing to hunt in.
            return []
        out: list[Piece] = []
        self._release_cut(out, anchored=False)
        if self.synced:
            while self.buf:
                total = self.rule.total_at_end(self.buf, 0)
                if total is not None and 0 < total <= len(self.buf):
                    # A rule that waited for what follows decides now that nothing will.
                    out.append(Piece("frame", self.pos, bytes(self.buf[:total]), total))  # type: ignore[arg-type]
                    del self.buf[:total]
                    self.pos += total  # type: ignore[operator]
                    continue
                if total is None or total <= 0:
                    total = -1
                out.append(Piece("incomplete", self.pos, bytes(self.buf), total, reason))  # type: ignore[arg-type]
                self.buf.clear()
            return out
        # The last frame found may confirm a guess (its size says it ends there): only then is
        # a guess still waiting handed on without its tail.
        self._hunt(out, at_end=True)
        if not self.synced:
            self._hunt_cut(out)  # a frame the end of the bytes cuts, as a gap would
        self._release_guess(out)
        if self.synced:
            out.extend(self.finish(reason))
        elif self.buf or self.passed:
            # The bytes since the last gap may end inside a frame: a run, but not one that ends
            # where a frame does.
            run = bytes(self.orphan + self.buf) if self.orphan is not None else b""
            why = f"no frame boundary found before the stream ended ({reason})"
            why += f", hunting {self.hunt_reason}" if self.hunt_reason else ""
            self._pass_over(len(self.buf), out, why, run, anchored=False)
        return out

    # ------------------------------------------------------------------ in sync

    def _release_cut(self, out: list[Piece], *, anchored: bool) -> None:
        if self.cut is None:
            return
        start, head, total, reason = self.cut
        islands = tuple(bytes(i) for i in self.islands if i)
        anchored = anchored and bool(self.islands and self.islands[-1])
        out.append(Piece("incomplete", start, head, total, reason, islands, anchored))
        self.cut = None
        self.islands = []

    def _cut(self, data: bytes, pos: int, out: list[Piece]) -> None:
        rule = self.rule
        n = len(data)
        start = 0
        total = None
        while start < n:
            total = rule.total(data, start)
            if total is None:
                break
            if total == BAD:
                self.buf = bytearray(data[start:])
                self.pos = pos + start
                self.start_hunting(rule.impossible(data, start, (pos + start) % (1 << 32)))
                self._hunt(out, at_end=False)
                return
            if n - start < total:
                break
            out.append(Piece("frame", pos + start, data[start : start + total], total))
            start += total
            total = None
        if start < n:  # else buf stays empty, as every caller hands it over (a new one costs)
            self.buf = bytearray(data[start:])
        self.pos = pos + start
        # What the buffer must hold before the next frame can be cut: its length once known,
        # else a byte more than now (the rule could not tell yet).
        self.need = total if total is not None else max(rule.header_len, n - start + 1)

    # ------------------------------------------------------------------ hunting

    def _hunt(self, out: list[Piece], *, at_end: bool) -> None:
        check = self.rule
        buf = self.buf
        for o in check.candidates(buf, self.scan):
            if len(buf) - o < check.header_len:
                break
            total = check.total(buf, o)
            if total is None or total <= 0 or total > self.limit:
                continue
            end = o + total
            if len(buf) < end + check.header_len:
                # At the end of the bytes there is no next header to confirm a candidate; a clean
                # decode of a whole frame (known key, every field consumed exactly) has to do.
                if at_end and len(buf) >= end and check.clean(bytes(buf[o:end])):
                    self._sync_at(o, out)
                    return
                if at_end or len(buf) - o > self.limit + check.header_len:
                    continue
                self.scan = o  # wait for the bytes that decide this candidate
                return
            if not check.clean(bytes(buf[o:end])):
                continue
            if not check.plausible(bytes(buf[end : end + check.header_len])):
                continue
            self._sync_at(o, out)
            return
        # No start in what we have; keep only the tail a header could still begin in. (At the
        # end of the bytes the caller still needs them all, to look for a frame the end cuts.)
        self.scan = max(0, len(buf) - check.header_len + 1)
        if self.scan > HUNT_WINDOW and not at_end:
            if self.orphan is not None:
                self.orphan += buf[: self.scan]
                if len(self.orphan) > self.limit:
                    self.orphan = None
            self.passed += self.scan
            if self.passed_from is None:
                self.passed_from = self.pos
            del buf[: self.scan]
            self.pos += self.scan  # type: ignore[operator]
            self.scan = 0

    def _hunt_cut(self, out: list[Piece]) -> None:
        """Find a frame start whose frame runs past the end of the bytes (a gap follows)."""
        check = self.rule
        buf = self.buf
        for o in check.candidates(buf, 0):
            if len(buf) - o < check.header_len + MIN_CUT_PREFIX:
                break
            total = check.total(buf, o)
            if total is None or total <= 0 or total > self.limit or o + total <= len(buf):
                continue
            if check.plausible(bytes(buf[o : o + check.header_len])) and check.clean_prefix(
                bytes(buf[o:]), self.from_client
            ):
                self._sync_at(o, out)
                return

    def _release_guess(self, out: list[Piece]) -> None:
        if self.guess is not None:
            start, head, total, reason = self.guess
            out.append(Piece("incomplete", start, head, total, reason))
            self.guess = None

    def _sync_at(self, o: int, out: list[Piece]) -> None:
        guess = self.guess
        if guess is not None and self.orphan is not None and self.pos + o == guess[0] + guess[2]:  # type: ignore[operator]
            # The frame found starts where the guessed one's size said it ends: the guess holds,
            # and every byte since is its tail.
            start, head, total, reason = guess
            out.append(
                Piece(
                    "incomplete",
                    start,
                    head,
                    total,
                    reason,
                    (*self.runs, bytes(self.orphan + self.buf[:o])),
                    True,
                )
            )
            self.guess = None
            del self.buf[:o]
            self.pos += o  # type: ignore[operator]
            self.passed = 0
            self.passed_from = None
            self.orphan = bytearray()
            o = 0
        self._release_guess(out)
        if o or self.passed:
            # The bytes before the frame found end where it starts: a frame's tail, perhaps.
            run = bytes(self.orphan + self.buf[:o]) if self.orphan is not None else b""
            self._pass_over(o, out, f"no frame boundary {self.hunt_reason}".rstrip(), run)
        self.runs = []
        rest = bytes(self.buf)
        self.buf = bytearray()
        self.synced = True
        self.scan = 0
        self._cut(rest, self.pos, out)  # type: ignore[arg-type]

    def _pass_over(
        self, n: int, out: list[Piece], reason: str, run: bytes = b"", anchored: bool = True
    ) -> None:
        start = self.passed_from if self.passed_from is not None else self.pos
        total = self.passed + n
        # Earlier runs ride along as islands: their whole elements may be recovered too. (With no
        # run of its own, as when the frame found starts right where a gap ends, the last of them
        # ends at that gap, not at a frame.)
        islands = (*self.runs, run) if run else tuple(self.runs)
        out.append(Piece("skipped", start, b"", total, reason, islands, anchored and bool(run)))  # type: ignore[arg-type]
        self.orphan = bytearray()
        del self.buf[:n]
        self.pos += n  # type: ignore[operator]
        self.passed = 0
        self.passed_from = None
