"""How each connection ended, judged against what its frames said: the tracker's last word.

The reader's Life of a connection says which side sent the first FIN or RST and whether a
frame was left unfinished; the tracker's ConnState says whether the protocol's own close
came first, what each side sent last, and what was negotiated. Together they tell:

- a connection refused (its SYN answered by a reset);
- a reset or FIN in the middle of a frame;
- a connection closed without the protocol's close, with what the other side had sent just
  before (a client that dies while handling a delivery closes this way), and the client hosts
  that ended several connections so at once;
- the server dropping a client after a refused setup or after heartbeat silence;
- a connection half-closed when the capture ended.

Each finding comes back as an Ending; the tracker files it as a diagnosis.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import TYPE_CHECKING

from msgspec import Struct

from streamdump.wire.lifecycle import CLOSED, REFUSED, RESET, Life, Mark

if TYPE_CHECKING:
    from streamdump.analysis.state import ConnState, Seen

# A peer sends a heartbeat once the interval passes without it sending anything, so gaps of
# a little over the interval are normal; half an interval more means one was missed. (The
# tracker's silence findings use it too; a server that closes after more silence closed for it.)
HEARTBEAT_SLACK = 1.5
# A client process that dies ends all its connections at once: ends each this close to the one
# before are told together.
TOGETHER_S = 0.1


class Ending(Struct, frozen=True):
    severity: str
    kind: str
    summary: str
    message: str
    number: int


class Words(Struct, frozen=True):
    """What the protocol's spec calls things, for the messages."""

    server: str  # the broker, the server
    close: str | None  # the command an orderly end starts with (Close); None: TCP's end is the end
    hints: dict[str, str]  # command the other side sent last -> what an abrupt close after it suggests


def ended_together(lives: Mapping[int, Life], abrupt: Collection[int]) -> Iterator[tuple[int, Ending]]:
    """The client hosts that ended several connections without the protocol's close within
    TOGETHER_S of one another, each close no further from the one before: a process that died
    (its sockets all close when it does). One finding per group, for its first connection.
    abrupt: the connections whose client left without the close (the abrupt_close findings);
    every read's lives at once, so that Spark's driver tells the same as one process."""
    ends = sorted(
        (
            (closer[0].ts, life.client.ip, life, closer)
            for number in abrupt
            if (life := lives.get(number)) is not None and (closer := life.closer) and closer[0].from_client
        ),
        key=lambda end: (end[0], end[2].conn),  # a Life has no order: equal times go by connection
    )
    groups: dict[str, list[list[tuple[float, Life, tuple[Mark, str]]]]] = {}
    for ts, ip, life, closer in ends:
        runs = groups.setdefault(ip, [])
        if runs and ts - runs[-1][-1][0] <= TOGETHER_S:
            runs[-1].append((ts, life, closer))
        else:
            runs.append([(ts, life, closer)])
    for ip, runs in groups.items():
        for run in runs:
            if len(run) < 2:
                continue
            first = min(run, key=lambda item: item[2][0].number)
            named = ", ".join(
                f"{life.conn} ({flag} at packet {mark.number})" for _, life, (mark, flag) in run
            )
            yield (
                first[1].conn,
                Ending(
                    "note",
                    "ended_together",
                    "a client host ended several connections at once",
                    f"the client host {ip} ended {len(run)} connections within {_ms(run[-1][0] - run[0][0])} "
                    f"without the protocol's close: {named}; a client process ends all its connections at "
                    "once when it exits or crashes",
                    first[2][0].number,
                ),
            )


def silent(life: Life, words: Words) -> bool:
    """Whether endings finds nothing whatever the connection carried: it closed or was reset
    with no frame cut, and the protocol has no close of its own to miss (most connections)."""
    return not life.cut and words.close is None and life.end in (CLOSED, RESET)


def endings(life: Life, conn: ConnState | None, words: Words) -> Iterator[Ending]:
    """The findings about how one connection ended."""
    server = words.server
    if life.end == REFUSED:
        assert life.syn is not None and life.reset is not None
        yield Ending(
            "warn",
            "refused",
            "connection refused",
            f"the {server} {life.server} refused the connection from {life.client}: its SYN (packet "
            f"{life.syn.number}) was answered by a reset (packet {life.reset.number})",
            life.reset.number,
        )
        return
    closer = life.closer
    half = life.half_closed
    if half is not None and conn is not None:
        yield _half_closed(life, half, conn, server)
    if closer is None or life.end not in (CLOSED, RESET):
        return
    mark, flag = closer
    for from_client, held in sorted(life.cut.items()):
        yield _cut(life, mark, flag, from_client, held, conn, server)
    if conn is None or conn.last is None or words.close is None:
        return
    if conn.close_seen is not None and conn.close_seen < mark.number:
        return
    if mark.from_client in life.cut:
        return  # the closer's own frame was cut: the finding above says it all
    if mark.from_client:
        yield _client_left(mark, flag, conn, words)
    else:
        yield _server_left(mark, flag, conn, words)


def _who(from_client: bool, server: str) -> str:
    return "client" if from_client else server


def _seen(seen: Seen) -> str:
    records = seen.records
    many = f" ({records} record{'s' * (records != 1)})" if records else ""
    whole = "" if seen.whole else "incomplete "
    return f"{whole}{seen.name} at packet {seen.number}{many}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.3f} s"


def _cut(
    life: Life, mark: Mark, flag: str, from_client: bool, held: int, conn: ConnState | None, server: str
) -> Ending:
    who = _who(mark.from_client, server)
    sender = _who(from_client, server)
    verb = "reset" if flag == "RST" else "closed"
    last = conn.side(from_client).last if conn is not None else None
    partial = f" ({_seen(last)})" if last is not None and not last.whole else ""
    return Ending(
        "warn",
        "cut_frame",
        f"connection {verb} in the middle of a frame",
        f"the {who} {verb} the connection ({flag} at packet {mark.number}) in the middle of a frame "
        f"from the {sender}: {held} bytes of it had arrived{partial}",
        mark.number,
    )


def _client_left(mark: Mark, flag: str, conn: ConnState, words: Words) -> Ending:
    server = words.server
    last = conn.last
    assert last is not None
    verb = "reset" if flag == "RST" else "closed"
    close = f" without {words.close}"
    if last.from_client is False:
        before = f"the {server}'s {_seen(last)}"
        hint = words.hints.get(last.name)
    else:
        before = f"its own {_seen(last)}"
        hint = None
    return Ending(
        "warn",
        "abrupt_close",
        f"the client {verb} the connection{close}",
        f"the client {verb} the connection ({flag} at packet {mark.number}){close}, "
        f"{_ms(mark.ts - last.ts)} after {before}" + (f"; {hint}" if hint else ""),
        mark.number,
    )


def _server_left(mark: Mark, flag: str, conn: ConnState, words: Words) -> Ending:
    server = words.server
    verb = "reset" if flag == "RST" else "closed"
    close = f" without {words.close}"
    head = f"the {server} {verb} the connection ({flag} at packet {mark.number}){close}"
    refused = conn.refused
    if refused is not None and refused.number <= mark.number:
        return Ending(
            "note",
            "abrupt_close",
            f"the {server} {verb} the connection after refusing its setup",
            f"{head}, {_ms(mark.ts - refused.ts)} after refusing {refused.name} at packet {refused.number}",
            mark.number,
        )
    heard = conn.client_side.last
    since = heard.ts if heard is not None else conn.first_ts or mark.ts
    beat = conn.heartbeat
    quiet = mark.ts - since
    if beat > 0 and quiet > beat * HEARTBEAT_SLACK:
        last = f"since its {_seen(heard)}" if heard is not None else "at all"
        return Ending(
            "warn",
            "abrupt_close",
            f"the {server} dropped a silent client",
            f"{head}: the client had sent no frame for {quiet:.3f} s ({last}), while the negotiated "
            f"heartbeat is {beat} s",
            mark.number,
        )
    after = f", {_ms(quiet)} after the client's {_seen(heard)}" if heard is not None else ""
    return Ending(
        "warn", "abrupt_close", f"the {server} {verb} the connection{close}", f"{head}{after}", mark.number
    )


def _half_closed(life: Life, half: Mark, conn: ConnState, server: str) -> Ending:
    who, other = _who(half.from_client, server), _who(not half.from_client, server)
    later = conn.side(not half.from_client).last
    went_on = (
        f"; the {other} sent frames until packet {later.number}"
        if later and later.number > half.number
        else ""
    )
    return Ending(
        "note",
        "half_closed",
        "connection half-closed at the capture's end",
        f"the {who} closed its side (FIN at packet {half.number}) and the {other} had not closed its own "
        f"when the capture ended, {life.last_ts - half.ts:.3f} s later{went_on}",
        half.number,
    )
