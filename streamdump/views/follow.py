"""`streamdump follow`: one connection's whole dialogue, requests and their responses side by side.

The client's frames take the left column and the server's the right. A response sits on
its request's row, with its own packet number and the time it took; everything else
(publishes, deliveries, confirms, heartbeats, requests never answered) has a row of its
own. Rows are in the order their first frame crossed the wire, each with its time since
the capture's first packet (Wireshark's time) and how long after the previous row it came.
Only the text of each frame is kept, escaped for the terminal, not the frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from streamdump.analysis.state import ConnState
from streamdump.views.safe import escape, quoted
from streamdump.wire.frame import Frame
from streamdump.wire.lifecycle import Life

if TYPE_CHECKING:
    from streamdump.analysis.session import Session
    from streamdump.views.output import Views

MAX_COLUMN = 64


class Row(Struct):
    number: int
    ts: float
    client: str = ""
    server: str = ""
    answer: str = ""  # "packet N, 0.123 ms" of the response on this row


class Dialogue(Struct):
    """The rows of one connection, built frame by frame in capture order."""

    number: int
    correlation: str | None = None  # the spec's correlation field: two requests can share a packet
    rows: list[Row] = field(default_factory=list)
    # (request packet, correlation id) -> rows waiting for their response
    by_request: dict[tuple[int, Any], list[Row]] = field(default_factory=dict)
    tls: str | None = None  # the TLS layer the frames were decrypted from

    def add(self, frame: Frame, text: str) -> None:
        if frame.tls is not None and self.tls is None:
            self.tls = frame.tls.summary()
        links = frame.links or {}
        request_in = links.get("request_in")
        corr = frame.fields.get(self.correlation) if self.correlation else None
        key = (request_in, corr if isinstance(corr, int | str) else None)
        waiting = self.by_request.get(key) if isinstance(request_in, int) else None
        row = None
        if waiting:
            row = waiting.pop(0)
            if not waiting:
                del self.by_request[key]
            taken = links.get("response_time")
            took = f", {taken * 1000:.3f} ms" if isinstance(taken, float | int) else ""
            row.answer = f"← {frame.number}{took}"
        else:
            row = Row(frame.number, frame.ts)
            self.rows.append(row)
            if frame.kind == "request":
                self.by_request.setdefault((frame.number, key[1]), []).append(row)
            row.answer = _acknowledges(links)
        text = escape(text)
        if frame.from_client is not False:
            row.client = _join(row.client, text)
        else:
            row.server = _join(row.server, text)

    def end(self, life: Life | None) -> None:
        """Rows for the TCP end: each side's FIN and a reset, in the sender's column."""
        if life is None:
            return
        marks = [(mark, "[FIN]") for mark in life.fins.values()]
        if life.reset is not None:
            marks.append((life.reset, "[RST]"))
        for mark, text in sorted(marks, key=lambda m: m[0].number):
            row = Row(mark.number, mark.ts, answer="")
            if mark.from_client:
                row.client = text
            else:
                row.server = text
            self.rows.append(row)
        self.rows.sort(key=lambda r: r.number)

    def lines(self, conn: ConnState | None, server: str = "server", t0: float | None = None) -> Iterator[str]:
        """The dialogue's lines; server is what the server is called (a broker, a name server),
        t0 what times count from (the capture's first packet; else the dialogue's first row)."""
        yield escape(_heading(self.number, conn))
        if self.tls is not None:
            yield escape(f"  decrypted from TLS: {self.tls}")
        if not self.rows:
            yield "  (no frames)"
            return
        t0 = self.rows[0].ts if t0 is None else t0
        to_server, to_client = f"client → {server}", f"{server} → client"
        left = min(MAX_COLUMN, max(len(to_server), *(len(r.client) for r in self.rows)))
        right = min(MAX_COLUMN, max(len(to_client), *(len(r.server) for r in self.rows)))
        columns = f"{to_server:<{left}}  {to_client:<{right}}"
        yield f"  {'packet':>7} {'time':>11} {'+delta':>10}  {columns}"
        previous = self.rows[0].ts
        for row in self.rows:
            delta = row.ts - previous
            previous = row.ts
            text = (
                f"  {row.number:>7} {row.ts - t0:>11.6f} {delta:>+10.6f}  "
                f"{_fit(row.client, left):<{left}}  {_fit(row.server, right):<{right}}  {row.answer}"
            )
            yield text.rstrip()


def _acknowledges(links: dict) -> str:
    """For a confirm: which packets it confirms and the longest wait, like a response's time."""
    sent = sorted({n for n in links.get("publish_in") or [] if n is not None})
    if not sent:
        return ""
    waits = [w for w in links.get("confirm_time") or [] if w is not None]
    shown = ", ".join(map(str, sent[:4])) + (", …" if len(sent) > 4 else "")
    longest = f", up to {max(waits) * 1000:.3f} ms" if waits else ""
    return f"→ {shown}{longest}"


def _join(before: str, text: str) -> str:
    return f"{before} + {text}" if before else text


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _heading(number: int, conn: ConnState | None) -> str:
    if conn is None or conn.client is None:
        return f"Connection {number}"
    client = conn.client_side.properties or {}
    server = conn.server_side.properties or {}
    who = " ".join(str(client[k]) for k in ("product", "version") if k in client)
    name = client.get("connection_name")
    broker = " ".join(str(server[k]) for k in ("product", "version") if k in server)
    left = f"{conn.client}" + (f" ({who}" + (f", {quoted(str(name))}" if name else "") + ")" if who else "")
    right = f"{conn.server}" + (f" ({broker})" if broker else "")
    return f"Connection {number}: {left} ⇄ {right}"


def write_dialogues(
    frames: Iterable[Frame], views: Views, session: Session, connection: int | None = None
) -> list[list[str]]:
    """The dialogue of each connection the frames belong to (of connection, when given), in
    connection order, with how each ended: their lines, escaped, times since the capture's first packet."""
    dialogues: dict[int, Dialogue] = {}
    for frame in frames:
        dialogue = dialogues.get(frame.conn)
        renderer = views[frame]
        if dialogue is None:
            correlation = renderer.protocol.conversation.correlation
            dialogue = dialogues[frame.conn] = Dialogue(frame.conn, correlation)
        dialogue.add(frame, f"{frame.name} {renderer.info(frame)}".rstrip())
    shown = session.setup.selection is None
    for number, life in sorted(session.lives.items()):
        # Without a filter, a connection that carried no frame (a refused one) has its dialogue too.
        if (connection is None or number == connection) and (shown or number in dialogues):
            dialogues.setdefault(number, Dialogue(number)).end(life)
    connections = session.tracker.connections
    out = []
    for number, dialogue in sorted(dialogues.items()):
        conn = connections.get(number)
        server = session.server_name(number) if conn is not None else "server"
        out.append(list(dialogue.lines(conn, server, session.first_ts)))
    return out
