"""The conversation tracker: what the frames of one connection mean together.

Driven by the spec's `conversation:` section, it pairs responses with requests by
correlation id (per requester, since either side may ask), follows the ids requests open
(publishers, subscriptions) so every later frame learns its stream, matches acknowledged
items (publishing ids) with their confirms, counts flow-control credit, and remembers
what each connection negotiated (Tune, command versions, peer properties).

What it finds goes two ways: onto the frame (`frame.links`, and expert notes of the
groups response_code, sequence and protocol), and into `Tracker.diagnoses`, one line
each, for the end of a read and the expert summary of `stats`. Problems only the end
can show (requests never answered, publishes never confirmed, silence, stalled credit)
are found by `finish()`. The tracker holds state passed in explicitly and prints nothing,
so files, the live sniffer and Spark tasks all use it the same way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from streamdump.analysis.endings import HEARTBEAT_SLACK, Ending, Words, ended_together, endings
from streamdump.spec.dissector import MessageRules, dissector_of
from streamdump.spec.registry import AckSpec, CloseSpec, FieldSpec, Protocol, Ref, flat_fields
from streamdump.wire.findings import FINDINGS
from streamdump.wire.frame import SEVERITIES, Endpoint, Expert, Frame
from streamdump.wire.lifecycle import Life
from streamdump.wire.paths import path_values

# Credit at zero for less than this is the normal rhythm of a consumer granting as it goes.
CREDIT_STALL_S = 1.0
# Unconfirmed items (and answers waiting for their request) remembered per publisher or
# connection; beyond this they are only counted.
MAX_IN_FLIGHT = 100_000
# Findings kept whole (with their messages); further ones are counted by kind and connection.
MAX_DIAGNOSES = 10_000
# Places a connection's sent ids went out of order that are kept to be told.
MAX_DISORDER = 100
# Messages of a sender without a message id after which its ids are no longer looked for.
ID_PATIENCE = 1000
# Seconds of traffic after an unanswered keepalive that make its silence a warning.
PING_PATIENCE = 5.0
# A capture that stops less than this after a request or publish may simply have cut its answer.
ANSWER_GRACE_S = 1.0
# Why a frame is incomplete when the connection ended in the middle of it: no bytes were lost.
ENDED_MID_FRAME = frozenset({"the connection closed", "the connection was reset"})


@dataclass(frozen=True, slots=True)
class Diagnosis:
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


@dataclass(frozen=True, slots=True)
class Seen:
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


@dataclass(slots=True)
class Request:
    frame: Frame
    corr: int | str


@dataclass(slots=True)
class Beats:
    """One side's heartbeat requests: how many, the last, and the gaps between them."""

    count: int
    last: int  # packet
    last_ts: float
    gaps: list[float] = field(default_factory=list)


# Gaps between heartbeats kept per side to find their rhythm (the median of these).
MAX_BEAT_GAPS = 1000


@dataclass(slots=True)
class Session:
    name: str
    id: int | str
    opened_in: int
    values: dict[str, Any]
    uses: int = 0
    limit: int | None = None  # uses after which it ends (a close that waits: UNSUB sid max)


@dataclass(slots=True)
class SentContent:
    """What one sender's messages said so far (for the content notes): the format of its first,
    and the message ids seen, with the item id and packet of each (the oldest forgotten first)."""

    format: str | None
    first: int  # packet of its first message
    mixed: bool = False  # a message of another format was told
    ids: OrderedDict[Any, tuple[int, int]] = field(default_factory=OrderedDict)
    without: int = 0  # messages without a message id before the first with one
    watching: bool = True  # ids are looked at (not once many messages came without any)
    reused_at: int = 0  # the packet of the first reuse, told as it came (0: none yet)
    reused: int = 0  # reuses after that first one, counted and told when the session ends


@dataclass(slots=True)
class Credit:
    left: int
    zero: tuple[int, float] | None = None  # (packet, ts) where it reached zero
    stall: tuple[int, float, int, float] | None = None  # zero packet/ts, grant packet/ts


@dataclass(slots=True)
class SideState:
    """What one side of a connection sent and announced."""

    last: Seen | None = None
    tune: tuple[int, int] | None = None  # (frame_max, heartbeat)
    properties: dict[str, Any] | None = None
    versions: dict[int, tuple[int, int]] | None = None
    lowest_corr: int | None = None


@dataclass(slots=True)
class ConnState:
    number: int
    protocol: str = ""
    client: Endpoint | None = None
    server: Endpoint | None = None
    first_ts: float | None = None
    last: Seen | None = None
    client_side: SideState = field(default_factory=SideState)
    server_side: SideState = field(default_factory=SideState)
    pending: dict[tuple[bool, int | str], Request] = field(default_factory=dict)
    # A gap can hold one direction back, so a response may come out before its request and a
    # confirm before its publish: they wait here for it, and only the end calls them orphans.
    early: dict[tuple[bool, int | str], Frame] = field(default_factory=dict)
    early_acks: dict[tuple[str, int], dict[int, tuple[Frame, int, int]]] = field(default_factory=dict)
    lossy: bool = False  # some frame of the connection is incomplete: bytes are missing
    beyond: dict[int, tuple[Frame, int]] = field(default_factory=dict)  # sid -> first, count
    sessions: dict[tuple[str, int], Session] = field(default_factory=dict)
    credits: dict[int, Credit] = field(default_factory=dict)
    last_grant: dict[int, Frame] = field(default_factory=dict)
    # (ack name, session id) -> item id -> (packet, ts)
    in_flight: dict[tuple[str, int], dict[int, tuple[int, float]]] = field(default_factory=dict)
    untracked: dict[tuple[str, int], int] = field(default_factory=dict)
    announced: dict[str, tuple[int, str]] = field(default_factory=dict)  # subject -> (packet, what)
    # (ack name, session id) -> the last item id sent and its packet (acks whose ids rise one by one)
    last_sent: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # (ack name, session id) -> what that sender's messages said (their format, message ids).
    content: dict[tuple[str, int], SentContent] = field(default_factory=dict)
    # Where those ids went back or skipped: (packet, summary, message, ids skipped or < 0).
    disorder: list[tuple[int, str, str, int]] = field(default_factory=list)
    negotiated: tuple[int, int] | None = None  # (frame_max, heartbeat) once the client answered
    negotiated_in: int = 0
    closed_by_server: Frame | None = None
    close_seen: int | None = None  # packet of the protocol's own close, from either side
    refused: Seen | None = None  # a setup request the server refused (Open, authentication)
    # The client's latest frame a server's close may be about: "unknown" (a command or version
    # not in the registry) and "oversized" (over the negotiated frame_max).
    suspects: dict[str, Seen] = field(default_factory=dict)
    user: str | None = None
    # Heartbeat requests each side sent: client? -> their rhythm.
    beats: dict[bool, Beats] = field(default_factory=dict)
    # The capture holds the connection's setup (so every session it opened is in it).
    setup_seen: bool = False
    # Sessions ended: (session, id) -> the packet that ended them.
    ended: dict[tuple[str, int | str], int] = field(default_factory=dict)
    # Requests naming where to answer: (asker is the client?, reply subject) -> the request.
    asked: dict[tuple[bool | None, str], Frame] = field(default_factory=dict)
    # Keepalives each side sent, oldest first, not yet answered.
    pings: dict[bool | None, list[Frame]] = field(default_factory=dict)
    # Announced bounds: the bounded fields (the first a frame has counts) -> (value, packet, announced field).
    limits: dict[tuple[str, ...], tuple[int, int, str]] = field(default_factory=dict)

    def side(self, from_client: bool | None) -> SideState:
        return self.client_side if from_client is not False else self.server_side


class Tracker:
    """Follows every connection of one capture, frame by frame, in capture order."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.spec = protocol.conversation
        self.size_len = protocol.wiring.uncounted  # what a frame's size leaves out
        self.key_text = protocol.key_formatter()
        self.user_of = dissector_of(protocol).user
        self.span_of = dissector_of(protocol).span
        self.content_of = dissector_of(protocol).content
        self.by_request = protocol.frame.response_key == "request"
        # Who each peer is, from fields every frame carries: (property, field, value names).
        self.identity: list[tuple[str, str, dict[int, str]]] = []
        # ... and from the fields of a request that introduces the peer: command -> [(property, field)].
        self.introduced: dict[str, list[tuple[str, str]]] = {}
        for prop, name in self.spec.identity.items():
            if "." in name:
                command, _, field_name = name.partition(".")
                self.introduced.setdefault(command, []).append((prop, field_name))
                continue
            spec = protocol.header_field(name)
            names = (
                dict(protocol.enums[spec.enum]) if spec is not None and spec.enum in protocol.enums else {}
            )
            self.identity.append((prop, name, names))
        # Every connection's opening and ending, from the reader, given at the end of a read.
        self.lives: dict[int, Life] = {}
        # What diagnoses call the correlation field ("correlation id", "opaque").
        self.corr_name = (self.spec.correlation or "correlation id").replace("_", " ")
        self.connections: dict[int, ConnState] = {}
        self.diagnoses: list[Diagnosis] = []
        # Findings past MAX_DIAGNOSES, counted:
        # (severity, group, kind, summary, conn) -> (count, first packet).
        self.untold: dict[tuple[str, str, str, str, int], tuple[int, int]] = {}
        self.first_ts: float | None = None  # of the capture's first frame: time zero of every view
        # A first pass (two passes): the confirms of each sending frame, by (connection, packet).
        self.confirmed: dict[tuple[int, int], list[int]] | None = None
        conv = self.spec
        self.session_of: dict[str, list[tuple[str, str]]] = {}  # command -> [(session, role)]
        for session in conv.sessions.values():
            self.session_of.setdefault(session.open, []).append((session.name, "open"))
            if session.close:
                self.session_of.setdefault(session.close, []).append((session.name, "close"))
            for user in session.used_by:
                self.session_of.setdefault(user, []).append((session.name, "use"))
        self.acks_sent = {ack.send.command: ack for ack in conv.acks.values()}
        self.acks_confirmed = {ack.confirm.command: ack for ack in conv.acks.values()}
        self.acks_failed = {ack.fail.command: ack for ack in conv.acks.values() if ack.fail}
        self.grants = {ref.command: ref for ref in conv.credit.grant} if conv.credit else {}
        self.closes = {close.command: close for close in conv.closes}
        reasons = {name for close in conv.closes for name in close.reason}
        # Request strings worth naming in a diagnosis: those the one-line view shows.
        self.named: dict[tuple[Any, bool], tuple[FieldSpec, ...]] = {}
        # The names of a response's status codes, by (command key, response?).
        self.status_enum: dict[tuple[Any, bool], dict[int, str]] = {}
        header_status = protocol.header_field(conv.status) if conv.status else None
        for command in protocol.commands.values():
            for layout in command.layouts.values():
                ident = (layout.key, layout.kind == "response")
                self.named[ident] = tuple(
                    f
                    for f in flat_fields(layout.fields)
                    if f.type == "string" and f.info and f.name not in reasons
                )
                status = next((f for f in layout.fields if f.name == conv.status), header_status)
                enum = (status.response_enum or status.enum) if status is not None else None
                if enum is not None and enum in protocol.enums:
                    self.status_enum[ident] = dict(protocol.enums[enum])
        # A status from the header names its codes for every response, known command or not.
        self.any_status: dict[int, str] = {}
        if header_status is not None and header_status.response_enum:
            self.any_status = dict(protocol.enums[header_status.response_enum])
        self.roles = protocol.wiring.roles
        self.close_enums = {
            close.command: dict(protocol.enums.get(close.enum or "", {})) for close in conv.closes
        }
        self.announce_enum = self._enum(conv.announcement)
        # Announcements that bound the other side's fields: command -> [(announced field, bounded fields)].
        self.limits: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for ref, bounds in conv.limits:
            self.limits.setdefault(ref.command, []).append((ref.path[0], bounds))
        self.bounded = frozenset(bounds for _, bounds in conv.limits)
        self.fail_enums = {ack.name: self._enum(ack.fail_code) for ack in conv.acks.values()}
        # What counts as a message: for the records a server's last frame carried, which a
        # connection's end without the protocol's close names (only protocols that have one).
        self.message_rules: MessageRules | None = (
            dissector_of(protocol).messages(protocol) if self.spec.ending is not None else None
        )

    def _enum(self, ref: Ref | None) -> dict[int, str]:
        spec = self.protocol.field_at(ref) if ref is not None else None
        return dict(self.protocol.enums[spec.enum]) if spec is not None and spec.enum else {}

    # ------------------------------------------------------------------ frames

    def feed(self, frame: Frame) -> None:
        """Link one frame to what came before it; add what it reveals to its notes."""
        if self.first_ts is None:
            self.first_ts = frame.ts
        conn = self.connections.get(frame.conn)
        if conn is None:
            conn = self.connections[frame.conn] = ConnState(frame.conn, self.protocol.name, first_ts=frame.ts)
        if conn.client is None and frame.src is not None:
            conn.client, conn.server = (
                (frame.src, frame.dst) if frame.from_client is not False else (frame.dst, frame.src)
            )
        side = conn.side(frame.from_client)
        if self.identity and side.properties is None:
            side.properties = self._identity(frame)
        if frame.incomplete is not None and frame.incomplete not in ENDED_MID_FRAME:
            conn.lossy = True  # the capture lost bytes (a frame the connection's end cut lost none)
        self._silence(conn, side, frame)
        self._frame_max(conn, frame)
        command = frame.command
        if command in self.spec.setup:
            conn.setup_seen = True
        if conn.limits:
            self._limits(conn, frame)
        if command in self.limits and frame.from_client is False:
            for announced, bounds in self.limits[command]:
                value = frame.fields.get(announced)
                if isinstance(value, int) and not isinstance(value, bool):
                    conn.limits[bounds] = (value, frame.number, announced)
        if self.spec.replies is not None and command is not None:
            self._reply(conn, frame)
        if self.spec.pings is not None and command in self.spec.pings:
            self._ping(conn, frame)
        # A response whose command is its request's is tracked even when the request is missing.
        orphan = frame.kind == "response" and self.by_request
        if (command is not None or orphan) and frame.kind != "unknown":
            self._correlate(conn, frame)
            self._negotiation(conn, side, frame)
            if command in self.session_of:
                self._sessions(conn, frame)
            if command in self.acks_sent or command in self.acks_confirmed or command in self.acks_failed:
                self._acks(conn, frame)
            if self.spec.credit is not None:
                self._credit(conn, frame)
            if self.spec.announcement is not None and command == self.spec.announcement.command:
                self._announcement(conn, frame)
            beat = self.spec.heartbeat
            if beat is not None and command == beat.command and frame.kind == "request":
                self._beat(conn, frame)
        length = len(frame.data)
        seen = Seen(
            frame.number,
            frame.ts,
            frame.name,
            frame.wire_key,
            frame.version,
            length,
            frame.from_client,
            frame.incomplete is None,
            self._records(frame) if self.message_rules is not None and frame.from_client is False else None,
        )
        side.last = seen
        if frame.from_client is not False and self._unregistered(frame):
            conn.suspects["unknown"] = seen
        conn.last = seen

    # ------------------------------------------------------------------ two passes

    def awaits_later(self, frame: Frame) -> bool:
        """Whether frames after this one may link back to it: a request its response, a credit
        grant the refusal that answers it, a frame that sent items the frames confirming them."""
        if frame.kind == "request" or frame.command in self.grants:
            return True
        return frame.command in self.acks_sent and frame.kind != "response"

    def later(self, frame: Frame) -> dict[str, Any] | None:
        """What a frame kept by awaits_later learned from the frames after it, once they went by."""
        if frame.command in self.acks_sent and frame.kind != "response":
            confirms = (self.confirmed or {}).get((frame.conn, frame.number))
            return {"confirm_in": list(dict.fromkeys(confirms))} if confirms else None
        if frame.links and "response_in" in frame.links:
            return {"response_in": frame.links["response_in"]}
        return None

    def _unregistered(self, frame: Frame) -> bool:
        """A frame of a command, or a version of it, the registry does not know."""
        if frame.command is None:
            return frame.kind != "response"  # a response's command may only be unknown to us
        command = self.protocol.commands.get(frame.command)
        return command is not None and self.protocol.versioned and frame.version not in command.versions

    def _identity(self, frame: Frame) -> dict[str, Any] | None:
        """A peer's product and version, from a frame's header fields (its language, its version)."""
        props: dict[str, Any] = {}
        for prop, name, names in self.identity:
            value = frame.version if name == "version" else frame.fields.get(name)
            if value is not None:
                props[prop] = names.get(value, value) if isinstance(value, int) else value
        return props or None

    def finish(self, lossy: Collection[int] = (), lives: Mapping[int, Life] | None = None) -> None:
        """What only the end shows: unanswered requests, unconfirmed items, silence, stalls,
        and how each connection ended.

        lossy: connections the capture lost bytes of; what is missing there may be in them,
        so it is told as a note, not a warning. lives: every connection's SYN, FINs and reset
        (the reader's), so an answer after the end is not waited for and the ending is judged.
        """
        self.lives = {n: life for n, life in (lives or {}).items() if life.protocol == self.protocol.name}
        lossy_now = {conn.number for conn in self.connections.values() if conn.lossy or conn.number in lossy}
        # Silence told while the frames went by may be bytes the capture lost: only a note then.
        self.diagnoses = [
            replace(d, severity="note", message=f"{d.message}; the capture lost bytes of this connection")
            if d.kind == "heartbeat" and d.conn in lossy_now and d.severity != "note"
            else d
            for d in self.diagnoses
        ]
        untold: dict[tuple[str, str, str, str, int], tuple[int, int]] = {}
        for (severity, group, kind, summary, conn_number), (count, first) in self.untold.items():
            if kind == "heartbeat" and conn_number in lossy_now:
                severity = "note"
            key = (severity, group, kind, summary, conn_number)
            before, earliest = untold.get(key, (0, first))
            untold[key] = (before + count, min(earliest, first))
        self.untold = untold
        for conn in self.connections.values():
            conn.lossy = conn.number in lossy_now
            for sid, (first, count) in conn.beyond.items():
                self._beyond_credit(conn, sid, first, count)
            for request in sorted(conn.pending.values(), key=lambda r: r.frame.number):
                self._unanswered(conn, request)
            conn.pending.clear()
            for (asker, _), frame in sorted(conn.asked.items(), key=lambda item: item[1].number):
                if asker is not False:
                    self._no_reply(conn, frame)
            conn.asked.clear()
            for pings in conn.pings.values():
                for ping in pings:
                    self._unanswered_ping(conn, ping)
            conn.pings.clear()
            for (_, corr), frame in sorted(conn.early.items(), key=lambda item: item[1].number):
                self._orphan(conn, frame, corr)
            conn.early.clear()
            conn.early_acks.clear()
            for (ack, sid), items in conn.in_flight.items():
                extra = conn.untracked.get((ack, sid), 0)
                if items or extra:
                    self._unconfirmed(conn, ack, sid, items, extra)
            conn.in_flight.clear()
            for sub, credit in conn.credits.items():
                self._credit_end(conn, sub, credit)
            for (ack_name, sid), seen in conn.content.items():
                self._reuses_told(conn, ack_name, sid, seen)
            conn.content.clear()
            for number, summary, message, skipped in conn.disorder:
                if skipped < 0 or not conn.lossy:  # ids lost with bytes are no client's doing
                    self._diagnose_at(conn, number, "note", "item_order", summary, message)
            conn.disorder.clear()
            if conn.last is not None:
                for side in (conn.client_side, conn.server_side):
                    if side.last is not None and side.last is not conn.last:
                        self._gap(conn, side.last, conn.last, until_end=True)
                for from_client, beats in conn.beats.items():
                    self._beats_stopped(conn, from_client, beats)
        self._endings()

    def summary(self) -> list[dict[str, Any]]:
        """The expert summary: one row per kind of finding, worst first."""
        return summarise(self.diagnoses, self.untold)

    def _ended(self, conn: ConnState) -> tuple[int, float, str] | None:
        """Where and how the connection ended before the capture did: (packet, time, words)."""
        life = self.lives.get(conn.number)
        if life is None or life.end is None or life.ended is None:
            return None
        return life.ended.number, life.ended.ts, life.ended_by(self.server(conn))

    def _endings(self) -> None:
        ending = self.spec.ending
        words = Words(
            self.spec.server,
            ending.close if ending is not None else None,
            dict(ending.hints) if ending is not None else {},
        )
        for number, life in sorted(self.lives.items()):
            conn = self.connections.get(number)
            if conn is not None:
                words = replace(words, server=self.server(conn))
            for e in endings(life, conn, words):
                self._add(Diagnosis(e.severity, e.kind, e.summary, e.message, e.number, number))

    def add_ending(self, conn: int, found: Ending) -> None:
        """A finding about a connection's end made from more than this tracker's connections."""
        self._add(Diagnosis(found.severity, found.kind, found.summary, found.message, found.number, conn))

    def _records(self, frame: Frame) -> int | None:
        assert self.message_rules is not None
        moved = self.message_rules.volume(frame)
        return moved.messages if moved is not None else None

    # ------------------------------------------------------------------ requests and responses

    def _correlate(self, conn: ConnState, frame: Frame) -> None:
        name = self.spec.correlation
        if name is None:
            return
        corr = frame.fields.get(name)
        if not isinstance(corr, int | str) or isinstance(corr, bool) or corr == "":
            if frame.kind == "response":
                self._status(conn, frame, None)
            return
        asker = frame.from_client if frame.kind == "request" else not frame.from_client
        if frame.kind == "request":
            side = conn.side(frame.from_client)
            # Numeric ids that grow tell a response to a request before the capture from an orphan.
            if isinstance(corr, int) and (side.lowest_corr is None or corr < side.lowest_corr):
                side.lowest_corr = corr
            earlier = conn.pending.get((asker, corr))
            if earlier is not None:
                self._note(
                    conn,
                    frame,
                    "warn",
                    "duplicate_correlation",
                    f"{self.corr_name} reused while a request with it is unanswered",
                    f"{frame.command} request reuses {self.corr_name} {corr} while the "
                    f"{earlier.frame.command} request of packet {earlier.frame.number} is still unanswered",
                )
            early = conn.early.pop((asker, corr), None)
            if early is not None and early.command == frame.command:
                self._pair(conn, frame, early)
                return
            if len(conn.pending) < MAX_IN_FLIGHT:  # a capture of one direction only never answers
                conn.pending[asker, corr] = Request(frame, corr)
            return
        if frame.kind != "response":
            return
        request = conn.pending.get((asker, corr))
        if request is not None and request.frame.command != frame.command:
            self._note(
                conn,
                frame,
                "warn",
                "mismatched_response",
                "response to a request of another command",
                f"{frame.command} response with {self.corr_name} {corr} answers a "
                f"{request.frame.command} request (packet {request.frame.number})",
            )
            request = None
        if request is None:
            if len(conn.early) < MAX_IN_FLIGHT:
                conn.early[asker, corr] = frame
            self._status(conn, frame, None)
            return
        del conn.pending[asker, corr]
        self._pair(conn, request.frame, frame)
        self._status(conn, frame, request.frame)

    # ------------------------------------------------------------------ replies, pings, limits

    def _reply(self, conn: ConnState, frame: Frame) -> None:
        """A frame sent where an earlier request of the other side asked to be answered is its
        answer; a frame naming where to answer is a request."""
        spec = self.spec.replies
        assert spec is not None
        to = frame.fields.get(spec.answer)
        if isinstance(to, str):
            request = conn.asked.pop((not frame.from_client, to), None)
            if request is not None:
                self._pair(conn, request, frame)
                if spec.keep:
                    links = _links(frame)
                    for link, name in spec.keep.items():
                        if request.fields.get(name) is not None:
                            links[link] = request.fields[name]
                status = frame.fields.get(spec.status) if spec.status else None
                meaning = spec.statuses.get(status) if isinstance(status, int) else None
                if meaning is not None:
                    self._note(
                        conn,
                        frame,
                        "warn",
                        "reply_status",
                        f"request answered with status {status}",
                        f"the {self.server(conn)} answered the {request.name} to "
                        f"{request.fields.get(spec.answer)} (packet {request.number}) with status "
                        f"{status}: {meaning}",
                    )
        ask = frame.fields.get(spec.ask)
        if isinstance(ask, str) and ask and len(conn.asked) < MAX_IN_FLIGHT:
            conn.asked[frame.from_client, ask] = frame

    def _no_reply(self, conn: ConnState, frame: Frame) -> None:
        spec = self.spec.replies
        assert spec is not None
        ended = self._ended_soon(conn, frame.ts)
        lost = "; the capture lost bytes of this connection, maybe the answer" if conn.lossy else ""
        to = frame.fields.get(spec.answer)
        self._diagnose(
            conn,
            frame,
            "note",
            "no_reply",
            f"{frame.name} asked for a reply that never came",
            f"{frame.name}{f' to {to}' if to else ''} (packet {frame.number}) asked for a reply on "
            f"{frame.fields.get(spec.ask)}; none came in the capture{ended or lost}",
        )

    def _ping(self, conn: ConnState, frame: Frame) -> None:
        assert self.spec.pings is not None
        if frame.command == self.spec.pings[0]:
            pings = conn.pings.setdefault(frame.from_client, [])
            if len(pings) < MAX_IN_FLIGHT:
                pings.append(frame)
            return
        waiting = conn.pings.get(not frame.from_client)
        if waiting:
            self._pair(conn, waiting.pop(0), frame)

    def _unanswered_ping(self, conn: ConnState, ping: Frame) -> None:
        assert self.spec.pings is not None
        ask, answer = self.spec.pings
        who = "client" if ping.from_client is not False else self.server(conn)
        ended_at = self._ended(conn)
        if ended_at is not None and ended_at[0] >= ping.number:
            number, ts, how = ended_at
            after = f": {how} at packet {number}, {ts - ping.ts:.3f} s later"
        else:
            after = self._ended_soon(conn, ping.ts) or ""
        late = conn.last is not None and conn.last.ts - ping.ts > PING_PATIENCE and not after
        self._diagnose(
            conn,
            ping,
            "warn" if late and not conn.lossy else "note",
            "unanswered_ping",
            f"{ask} never answered",
            f"the {who}'s {ask} (packet {ping.number}) got no {answer}{after}"
            + (f" in the {conn.last.ts - ping.ts:.3f} s the capture went on" if late else ""),  # type: ignore[union-attr]
        )

    def _limits(self, conn: ConnState, frame: Frame) -> None:
        for choices in self.bounded:
            bounds = next((name for name in choices if name in frame.fields), choices[0])
            value = frame.fields.get(bounds)
            found = conn.limits.get(choices)
            if found is None or not isinstance(value, int) or frame.from_client is False:
                continue
            limit, number, announced = found
            if value > limit:
                self._note(
                    conn,
                    frame,
                    "error",
                    "over_limit",
                    f"{bounds} over the {announced} the {self.server(conn)} announced",
                    f"{frame.name} {bounds} {value} exceeds the {announced} of {limit} the "
                    f"{self.server(conn)} announced at packet {number}",
                )

    def _pair(self, conn: ConnState, request: Frame, response: Frame) -> None:
        links = _links(response)
        links["request_in"] = request.number
        # A request held back by a gap comes out late, with a later time than its response.
        if response.ts >= request.ts:
            links["response_time"] = round(response.ts - request.ts, 6)
        _links(request)["response_in"] = response.number

    def _orphan(self, conn: ConnState, frame: Frame, corr: int | str) -> None:
        lowest = conn.side(not frame.from_client).lowest_corr
        began = isinstance(corr, int) and lowest is not None and lowest <= corr and not conn.lossy
        self._note(
            conn,
            frame,
            "warn" if began else "note",
            "orphan_response",
            "response without a request",
            f"{frame.name} response with {self.corr_name} {corr} answers no request in the capture"
            + ("" if began else " (the request may be before the capture started or in bytes it lost)"),
        )

    def _status(self, conn: ConnState, frame: Frame, request: Frame | None) -> None:
        spec = self.spec
        if spec.status is None:
            return
        code = frame.fields.get(spec.status)
        if not isinstance(code, int) or code in spec.ok:
            return
        what = self.code_name(frame, code)
        if request is None and spec.credit is not None and frame.command == spec.credit.refusal:
            self._credit_refused(conn, frame, code, what)
            return
        if code in spec.routine:
            self._note(
                conn,
                frame,
                "note",
                "routine_response",
                f"{frame.command}: {what}",
                f"{self._asked(request, frame)} answered {what} (a routine answer)",
            )
            return
        if frame.command == spec.authenticate or frame.command in spec.setup:
            conn.refused = conn.refused or Seen(
                frame.number, frame.ts, frame.name, frame.wire_key, frame.version, 0, frame.from_client
            )
        if frame.command == spec.authenticate:
            user = f", user {conn.user!r}" if conn.user else ""
            mechanism = request.fields.get("mechanism") if request is not None else None
            how = f" ({mechanism}{user}, packet {request.number})" if request is not None else ""
            self._note(
                conn,
                frame,
                "error",
                "auth_failure",
                f"authentication failed: {what}",
                f"authentication failed: the {self.server(conn)} answered {frame.command}{how} with {what}",
            )
            return
        setup = frame.command in spec.setup
        gone = self._announced(conn, request)
        said = frame.fields.get(spec.status_text or "")
        said = f" {said.strip()!r}" if isinstance(said, str) and said.strip() else ""
        hint = spec.hints.get(frame.command or "", {}).get(code)
        hint = f": {hint}" if hint else ""
        self._note(
            conn,
            frame,
            "error" if setup else "warn",
            "setup_refused" if setup else "error_response",
            f"{frame.name}: {what}",
            f"{self._asked(request, frame)} failed: {what}{said}{hint}{gone}",
        )

    def _announced(self, conn: ConnState, about: Frame | Session | None) -> str:
        """What the broker said earlier about the stream a failed request or session concerns."""
        name = self.spec.announcement_about
        if about is None or name is None:
            return ""
        values = about.values if isinstance(about, Session) else about.fields
        subject = values.get(name)
        said = conn.announced.get(subject) if isinstance(subject, str) else None
        if said is None:
            return ""
        return f"; at packet {said[0]} the {self.server(conn)} had announced {name} {subject!r}: {said[1]}"

    def _announcement(self, conn: ConnState, frame: Frame) -> None:
        spec = self.spec
        assert spec.announcement is not None
        code = frame.fields.get(spec.announcement.path[0])
        subject = frame.fields.get(spec.announcement_about or "")
        if not isinstance(code, int) or not isinstance(subject, str) or code in spec.ok:
            return
        what = _named(self.announce_enum, code)
        conn.announced[subject] = (frame.number, what)
        self._note(
            conn,
            frame,
            "note",
            "announcement",
            f"{frame.command}: {what}",
            f"the {self.server(conn)} announced {spec.announcement_about} {subject!r}: {what}",
        )

    def _asked(self, request: Frame | None, response: Frame) -> str:
        """The request named for a user: command, what it was about, and where it is."""
        if request is None:
            return f"{response.name} (response at packet {response.number})"
        about = [
            f"{spec.name.replace('_', ' ')} {request.fields[spec.name]!r}"
            for spec in self.named.get((request.key, False), ())
            if isinstance(request.fields.get(spec.name), str)
        ]
        detail = f" for {', '.join(about)}" if about else ""
        return f"{request.command}{detail} (packet {request.number})"

    def code_name(self, frame: Frame, code: int) -> str:
        """A response's status code as its enum name and value, e.g. "OK (0x01)" or "SUCCESS (0)"."""
        names = self.status_enum.get((frame.key, frame.kind == "response"), self.any_status)
        return _named(names, code, self.spec.codes)

    def server(self, conn: ConnState) -> str:
        """What the server is called: by its port's role (a name server), else the spec's word."""
        role = self.roles.get(conn.server.port) if conn.server is not None else None
        return role or self.spec.server

    def _unanswered(self, conn: ConnState, request: Request) -> None:
        frame = request.frame
        closed = conn.closed_by_server
        after = (
            f"; the {self.server(conn)} closed the connection at packet {closed.number}"
            if closed is not None and closed.number >= frame.number
            else ""
        )
        ended_at = self._ended(conn)
        if not after and ended_at is not None and ended_at[0] >= frame.number:
            number, ts, how = ended_at
            after = f"; {how} at packet {number}, {ts - frame.ts:.3f} s after it"
        if conn.lossy and not after:
            after = "; the capture lost bytes of this connection, maybe the answer"
        ended = self._ended_soon(conn, frame.ts) if not after else None
        if ended:
            after = ended
        # A request the server may hold (a long poll) is not late until its time is up.
        held = self._patience(frame)
        end_ts = ended_at[1] if ended_at is not None else conn.last.ts if conn.last is not None else frame.ts
        waiting = held is not None and end_ts - frame.ts < held
        if waiting:
            after += f"; the {self.server(conn)} may hold it up to {held:.3f} s (a long poll)"
        self._diagnose(
            conn,
            frame,
            "note" if conn.lossy or ended or waiting else "warn",
            "unanswered",
            f"{frame.command} request never answered",
            f"{self._asked(frame, frame)} with {self.corr_name} {request.corr} was never answered{after}",
        )

    # ------------------------------------------------------------------ negotiation

    def _negotiation(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        spec = self.spec
        fields = frame.fields
        if spec.tune is not None and frame.command == spec.tune.command:
            frame_max, heartbeat = fields.get(spec.tune.path[0]), fields.get(spec.tune_heartbeat or "")
            if isinstance(frame_max, int) and isinstance(heartbeat, int):
                side.tune = (frame_max, heartbeat)
                if frame.from_client is not False:
                    conn.negotiated, conn.negotiated_in = side.tune, frame.number
        if spec.peer_properties is not None and frame.command == spec.peer_properties.command:
            props = fields.get(spec.peer_properties.path[0])
            if isinstance(props, dict):
                side.properties = props
        if spec.versions is not None and frame.command == spec.versions.command:
            items = fields.get(spec.versions.path[0])
            if isinstance(items, list):
                side.versions = {
                    item["command_key"]: (item["min_version"], item["max_version"])
                    for item in items
                    if isinstance(item, dict) and {"command_key", "min_version", "max_version"} <= set(item)
                }
        if frame.command == spec.authenticate and frame.kind == "request" and self.user_of is not None:
            conn.user = self.user_of(fields)
        introduced = self.introduced.get(frame.command or "")
        if introduced and frame.kind == "request":
            props = {prop: fields[name] for prop, name in introduced if fields.get(name) not in (None, "")}
            side.properties = props or side.properties
        if self.spec.ending is not None and frame.command == self.spec.ending.close:
            conn.close_seen = conn.close_seen or frame.number
        close = self.closes.get(frame.command or "")
        if close is not None and frame.kind != "response":
            self._closing(conn, frame, close)
        theirs = conn.side(not frame.from_client).versions
        if theirs and frame.key in theirs:
            low, high = theirs[frame.key]
            if not low <= frame.version <= high:
                self._note(
                    conn,
                    frame,
                    "warn",
                    "version",
                    f"{frame.command} in a version the peer does not support",
                    f"{frame.command} version {frame.version} is outside the versions the peer "
                    f"announced ({low}..{high})",
                )

    def _closing(self, conn: ConnState, frame: Frame, close: CloseSpec) -> None:
        code = frame.fields.get(close.code) if close.code else None
        if frame.from_client is not False or (close.code and not isinstance(code, int)):
            return  # a client closing, with whatever code, is the client's own decision
        conn.closed_by_server = frame
        what = (
            f": {_named(self.close_enums[close.command], code, self.spec.codes)}"
            if isinstance(code, int)
            else ""
        )
        parts = [frame.fields.get(name) for name in close.reason]
        reason = ":".join(str(p) for p in parts if p is not None and p != "")
        said = f" {reason!r}" if reason else ""
        last = conn.client_side.last
        hint = self.spec.close_hints.get(code) if isinstance(code, int) else None
        about = self.spec.close_about.get(code) if isinstance(code, int) else None
        # The frame the code is about, when the client sent others after it.
        suspect = conn.suspects.get(about) if about else None
        before = suspect if suspect is not None else last
        if suspect is not None and last is not None and suspect.number != last.number:
            named = (
                f"the client's frame it is about was {self._named_frame(suspect)}, "
                f"before its last (packet {last.number})"
            )
        elif before is not None:
            named = f"the client's last frame before it was {self._named_frame(before)}"
        else:
            named = ""
        last_text = f"; {named}" + (f": {hint}" if hint else "") if named else ""
        ok = code is None or code in self.spec.ok
        self._note(
            conn,
            frame,
            close.severity if code is None else "note" if ok else "error",
            "server_close",
            f"the {self.server(conn)} {close.says}{what}",
            f"the {self.server(conn)} {close.says}{what}{said}{last_text}",
        )

    def _named_frame(self, seen: Seen) -> str:
        """A frame as a close names it: command, key, version, size and packet."""
        version = f", version {seen.version}" if self.protocol.versioned else ""
        key = self.key_text(seen.wire_key)
        return f"{seen.name} (key {key}{version}, {seen.length} bytes, packet {seen.number})"

    def _frame_max(self, conn: ConnState, frame: Frame) -> None:
        if conn.negotiated is None or conn.negotiated[0] <= 0:
            return
        limit = conn.negotiated[0]
        length = frame.size + self.size_len if frame.size else len(frame.data)
        if length > limit and frame.from_client is not False:
            conn.suspects["oversized"] = Seen(
                frame.number, frame.ts, frame.name, frame.wire_key, frame.version, length, frame.from_client
            )
        if length > limit:
            self._note(
                conn,
                frame,
                "error",
                "frame_max",
                "frame larger than the negotiated frame_max",
                f"{frame.name} frame of {length} bytes exceeds the frame_max of {limit} bytes "
                f"negotiated at packet {conn.negotiated_in}",
            )

    def _silence(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        if side.last is not None:
            self._gap(conn, side.last, frame, until_end=False)

    def _gap(self, conn: ConnState, last: Seen, now: Frame | Seen, *, until_end: bool) -> None:
        if conn.negotiated is None or conn.negotiated[1] <= 0 or last.number < conn.negotiated_in:
            return
        heartbeat = conn.negotiated[1]
        quiet = now.ts - last.ts
        if quiet <= heartbeat * HEARTBEAT_SLACK:
            return
        who = "the client" if last.from_client is not False else f"the {self.server(conn)}"
        until = (
            f"until the connection's last frame (packet {now.number})"
            if until_end
            else f"(packets {last.number} to {now.number})"
        )
        self._diagnose(
            conn,
            last,
            "warn",
            "heartbeat",
            "silence longer than the heartbeat interval",
            f"no frame from {who} for {quiet:.3f} s {until}, while the negotiated heartbeat is {heartbeat} s",
        )

    def _beat(self, conn: ConnState, frame: Frame) -> None:
        from_client = frame.from_client is not False
        beats = conn.beats.get(from_client)
        if beats is None:
            conn.beats[from_client] = Beats(1, frame.number, frame.ts)
            return
        if len(beats.gaps) < MAX_BEAT_GAPS:
            beats.gaps.append(frame.ts - beats.last_ts)
        beats.count += 1
        beats.last, beats.last_ts = frame.number, frame.ts

    def _beats_stopped(self, conn: ConnState, from_client: bool, beats: Beats) -> None:
        """Heartbeats that stopped while the connection went on: quiet for longer than their rhythm allows."""
        spec = self.spec.heartbeat
        assert spec is not None and conn.last is not None
        gaps = sorted(beats.gaps)
        rhythm = gaps[len(gaps) // 2] if gaps else spec.every
        ended = self._ended(conn)
        end_number, end_ts = (ended[0], ended[1]) if ended is not None else (conn.last.number, conn.last.ts)
        quiet = end_ts - beats.last_ts
        if quiet <= rhythm * HEARTBEAT_SLACK or end_number <= beats.last:
            return
        who = "the client" if from_client else f"the {self.server(conn)}"
        pace = f"about one every {rhythm:.3f} s" if gaps else f"{spec.every:g} s apart is the usual pace"
        until = (
            f"the connection ended (packet {end_number})"
            if ended is not None
            else (f"the connection's last frame (packet {end_number})")
        )
        hint = f"; {spec.hint}" if spec.hint else ""
        self._diagnose_at(
            conn,
            beats.last,
            "note" if conn.lossy else "warn",
            "heartbeat_stopped",
            f"{spec.command} requests stopped",
            f"{who} stopped sending {spec.command} requests: {beats.count} sent ({pace}), the last at packet "
            f"{beats.last}, then none for {quiet:.3f} s until {until}{hint}",
        )

    # ------------------------------------------------------------------ sessions and acks

    def _sessions(self, conn: ConnState, frame: Frame) -> None:
        for name, role in self.session_of[frame.command or ""]:
            spec = self.spec.sessions[name]
            sid = frame.fields.get(spec.id)
            if not isinstance(sid, int | str) or isinstance(sid, bool):
                continue
            if role in ("open", "close") and frame.kind == "request" and isinstance(sid, int):
                self._flush_acks(conn, name, sid)
            if role == "open" and frame.kind != "response":
                values = {
                    k: frame.fields[f]
                    for k, f in zip(spec.keep_as, spec.keep, strict=True)
                    if f in frame.fields
                }
                conn.sessions[name, sid] = Session(name, sid, frame.number, values)  # type: ignore[index]
                conn.ended.pop((name, sid), None)
            elif role == "close" and frame.kind != "response":
                session = conn.sessions.get((name, sid))  # type: ignore[arg-type]
                after = frame.fields.get(spec.close_after) if spec.close_after else None
                if session is not None and isinstance(after, int) and session.uses < after:
                    session.limit = after  # it ends after that many uses in all
                else:
                    conn.sessions.pop((name, sid), None)  # type: ignore[arg-type]
                    conn.ended[name, sid] = frame.number
            elif role == "use":
                session = conn.sessions.get((name, sid))  # type: ignore[arg-type]
                if session is not None:
                    links = _links(frame)
                    links["opened_in"] = session.opened_in
                    links.update(session.values)
                    session.uses += 1
                    if session.limit is not None and session.uses >= session.limit:
                        conn.sessions.pop((name, sid), None)  # type: ignore[arg-type]
                        conn.ended[name, sid] = frame.number
                elif spec.unknown and conn.setup_seen:
                    self._unknown_session(conn, frame, spec, sid)

    def _unknown_session(self, conn: ConnState, frame: Frame, spec: Any, sid: int | str) -> None:
        ended = conn.ended.get((spec.name, sid))
        if ended is not None:
            self._note(
                conn,
                frame,
                "note",
                "ended_session",
                f"{frame.name} for a {spec.name} already ended",
                f"{frame.name} for {spec.name} {spec.id} {sid} after packet {ended} ended it "
                f"(sent before the {self.server(conn)} read the {spec.close})",
            )
            return
        self._note(
            conn,
            frame,
            "warn",
            "unknown_session",
            f"{frame.name} for a {spec.name} never opened",
            f"{frame.name} for {spec.name} {spec.id} {sid}, which no {spec.open} in the capture opened",
        )

    def _acks(self, conn: ConnState, frame: Frame) -> None:
        command = frame.command or ""
        if command in self.acks_sent and frame.kind != "response":
            ack = self.acks_sent[command]
            sid = frame.fields.get(self.spec.sessions[ack.session].id)
            if not isinstance(sid, int):
                return
            flight = conn.in_flight.setdefault((ack.name, sid), {})
            early = conn.early_acks.get((ack.name, sid))
            items = _values(frame.fields, ack.send.path)
            sent = (frame.number, frame.ts)
            if ack.ordered and items:
                self._order(conn, frame, ack, sid, items)
            if self.content_of is not None and items:
                self._content(conn, frame, ack, sid, items)
            if not early and len(flight) + len(items) <= MAX_IN_FLIGHT:
                flight.update(dict.fromkeys(items, sent))  # the common case, in one step
                return
            for item in items:
                answer = early.pop(item, None) if early else None
                if answer is not None:
                    confirm, index, count = answer
                    links = _links(confirm)
                    if "publish_in" not in links:
                        links["publish_in"], links["confirm_time"] = [None] * count, [None] * count
                    links["publish_in"][index] = frame.number
                    continue
                if len(flight) >= MAX_IN_FLIGHT:
                    conn.untracked[ack.name, sid] = conn.untracked.get((ack.name, sid), 0) + 1
                else:
                    flight[item] = sent
            return
        failing = command in self.acks_failed
        if not failing and command not in self.acks_confirmed:
            return  # e.g. a response to a command that sends items, which has no layout
        ack = self.acks_failed[command] if failing else self.acks_confirmed[command]
        sid = frame.fields.get(self.spec.sessions[ack.session].id)
        if not isinstance(sid, int):
            return
        ref = ack.fail if failing else ack.confirm
        assert ref is not None
        ids = _values(frame.fields, ref.path)
        flight = conn.in_flight.get((ack.name, sid), {})
        early = conn.early_acks.setdefault((ack.name, sid), {})
        sents = [flight.pop(item, None) for item in ids]
        sent_in: list[int | None]
        waited: list[float | None]
        # Ids confirmed together were mostly sent together: one subtraction per sending frame.
        waits = {sent: round(frame.ts - sent[1], 6) for sent in dict.fromkeys(sents) if sent is not None}
        if None in sents:
            sent_in = [None if sent is None else sent[0] for sent in sents]
            waited = [None if sent is None else waits[sent] for sent in sents]
            for index, item in enumerate(ids):
                if sents[index] is not None:
                    continue
                if conn.untracked.get((ack.name, sid)):
                    conn.untracked[ack.name, sid] -= 1  # one of those too many to remember
                elif len(early) < MAX_IN_FLIGHT:
                    early[item] = (frame, index, len(ids))
        else:  # the commonest: every id was seen sent
            sent_in = [sent[0] for sent in sents]
            waited = [waits[sent] for sent in sents]
        if waits:
            links = _links(frame)
            links["publish_in"] = sent_in
            links["confirm_time"] = waited
            if self.confirmed is not None:  # a first pass: the sending frames learn their confirms
                for packet in dict.fromkeys(sent_in):
                    if packet is not None:
                        self.confirmed.setdefault((conn.number, packet), []).append(frame.number)
        if failing and ack.fail_code is not None:
            codes: dict[int, int] = {}
            for code in _values(frame.fields, ack.fail_code.path):
                codes[code] = codes.get(code, 0) + 1
            session = conn.sessions.get((ack.session, sid))
            where = _session_name(ack.session, sid, session)
            gone = self._announced(conn, session)
            for code, count in sorted(codes.items()):
                what = _named(self.fail_enums.get(ack.name, {}), code)
                self._note(
                    conn,
                    frame,
                    "warn",
                    "refused_items",
                    f"{command}: {what}",
                    f"{count} {ack.noun}{'s' * (count != 1)} of {where} refused: {what}{gone}",
                )

    def _order(self, conn: ConnState, frame: Frame, ack: AckSpec, sid: int, items: list[int]) -> None:
        """A sender numbering its items one by one: the first place in a frame where its ids go
        back or skip (a client's counter reset or shared between threads looks so). Told at the
        end, where a connection that lost bytes is known: its lost frames would look like skips."""
        key = (ack.name, sid)
        last = conn.last_sent.get(key)
        before, packet = last if last is not None else (items[0] - 1, 0)
        conn.last_sent[key] = (items[-1], frame.number)
        first = before + 1
        if items[0] == first and items == list(range(first, first + len(items))):
            return  # the commonest: each id one above the one before
        spans = self._spans(frame, ack, len(items))
        for index, item in enumerate(items):
            # One above the id before, or, for a batch of n records, n above (rstream gives a
            # sub-batch the id of its last record).
            if item != before + 1 and (spans is None or item != before + spans[index]):
                break
            before, packet = item, frame.number
        else:
            return
        name = ack.send.path[-1].replace("_", " ")
        where = self._sender(conn, ack, sid)
        earlier = f" (packet {packet})" if packet != frame.number else ""
        skipped = item - before - 1
        how = "the ids went back" if skipped < 0 else f"{skipped} id{'s' * (skipped != 1)} skipped"
        if len(conn.disorder) < MAX_DISORDER:
            conn.disorder.append(
                (
                    frame.number,
                    f"{name}s out of order",
                    f"{where}: {name} {item} follows {before}{earlier}: {how}",
                    skipped,
                )
            )

    def _content(self, conn: ConnState, frame: Frame, ack: AckSpec, sid: int, items: list[int]) -> None:
        """A sender's messages of another format than its first, and message ids it used before:
        client bugs the broker takes without a word (a consumer then fails on the odd one out,
        or a deduplicating reader drops the second)."""
        assert self.content_of is not None
        elements = path_values(frame.fields, ack.send.path[:-1])
        if len(elements) != len(items):
            return
        key = (ack.name, sid)
        seen = conn.content.get(key)
        if seen is not None and not seen.watching:
            # Past the first ID_PATIENCE messages, all of one format and none with an id: only
            # each frame's first message is looked at (every message would cost a fifth of a read).
            every = self.content_of(elements[:1], False)
            if every[0] is None or every[0][0] == seen.format or seen.mixed:
                return
            items = items[:1]
        else:
            every = self.content_of(elements, True)
        name = ack.send.path[-1].replace("_", " ")
        for facts, item in zip(every, items, strict=True):
            if facts is None:
                continue
            kind, message_id = facts
            if seen is None:
                seen = conn.content[key] = SentContent(kind, frame.number)
            elif kind != seen.format and not seen.mixed:
                seen.mixed = True
                now = kind or f"not {seen.format}"
                then = seen.format or f"not {kind}"
                self._diagnose(
                    conn,
                    frame,
                    "note",
                    "mixed_formats",
                    f"a {ack.noun} of another format than the {ack.noun}s before it",
                    f"{self._sender(conn, ack, sid)}: the {ack.noun} with {name} {item} "
                    f"(packet {frame.number}) is {now}, while its first {ack.noun} (packet {seen.first}) "
                    f"was {then}",
                )
            if not seen.watching:
                continue
            if message_id is None:
                seen.without += 1
                seen.watching = bool(seen.ids) or seen.without < ID_PATIENCE
                continue
            before = seen.ids.get(message_id)
            if before is None:
                seen.ids[message_id] = (item, frame.number)
                if len(seen.ids) > MAX_IN_FLIGHT:
                    seen.ids.popitem(last=False)
            elif seen.reused_at:
                seen.reused += 1
            else:
                seen.reused_at = frame.number
                self._diagnose(
                    conn,
                    frame,
                    "note",
                    "reused_message_id",
                    f"message id reused by one {ack.session}",
                    f"{self._sender(conn, ack, sid)}: message id {message_id!r} of {name} {item} (packet "
                    f"{frame.number}) is that of {name} {before[0]} (packet {before[1]}) too",
                )

    def _reuses_told(self, conn: ConnState, ack_name: str, sid: int, seen: SentContent | None) -> None:
        """A sender's message id reuses past the first, counted: told when its session ends."""
        if seen is None or not seen.reused:
            return
        spec = self.spec.acks[ack_name]
        self._diagnose_at(
            conn,
            seen.reused_at,
            "note",
            "reused_message_id",
            f"message id reused by one {spec.session}",
            f"{self._sender(conn, spec, sid)}: {seen.reused} more {spec.noun}"
            f"{'s' * (seen.reused != 1)} reused an earlier message id",
        )

    def _sender(self, conn: ConnState, ack: AckSpec, sid: int) -> str:
        return _session_name(ack.session, sid, conn.sessions.get((ack.session, sid)))

    def _spans(self, frame: Frame, ack: AckSpec, count: int) -> list[int] | None:
        """How many ids each sent element may use, when the package says and any uses more than one."""
        if self.span_of is None:
            return None
        elements = path_values(frame.fields, ack.send.path[:-1])
        if len(elements) != count:
            return None
        spans = [self.span_of(e) if isinstance(e, dict) else 1 for e in elements]
        return spans if any(s != 1 for s in spans) else None

    def _patience(self, request: Frame) -> float | None:
        """How long the server may hold this request before answering, in seconds (a long poll)."""
        name = self.spec.patience.get(request.command or "")
        value = request.fields.get(name) if name else None
        return value / 1000 if isinstance(value, int) and value > 0 else None

    def _ended_soon(self, conn: ConnState, ts: float) -> str | None:
        """Whether the capture stopped so soon after ts that an answer had no time to come."""
        if conn.last is None or conn.closed_by_server is not None or self._ended(conn) is not None:
            return None
        waited = conn.last.ts - ts
        if waited >= ANSWER_GRACE_S:
            return None
        return f"; the capture ended {waited * 1000:.3f} ms after it"

    def _flush_acks(self, conn: ConnState, session: str, sid: int) -> None:
        """A session id reopened or closed: what its old self left unconfirmed is told now."""
        for ack in self.spec.acks.values():
            if ack.session != session:
                continue
            key = (ack.name, sid)
            items, extra = conn.in_flight.pop(key, {}), conn.untracked.pop(key, 0)
            if items or extra:
                self._unconfirmed(conn, ack.name, sid, items, extra)
            conn.early_acks.pop(key, None)
            conn.last_sent.pop(key, None)
            self._reuses_told(conn, ack.name, sid, conn.content.pop(key, None))

    def _unconfirmed(
        self, conn: ConnState, ack: str, sid: int, items: dict[int, tuple[int, float]], extra: int
    ) -> None:
        spec = self.spec.acks[ack]
        session = conn.sessions.get((spec.session, sid))
        where = _session_name(spec.session, sid, session)
        count = len(items) + extra
        ids = sorted(items)
        lost = "; the capture lost bytes of this connection, maybe the confirms" if conn.lossy else ""
        last_sent = max((ts for _, ts in items.values()), default=None)
        ended = self._ended_soon(conn, last_sent) if last_sent is not None and not lost else None
        closed = self._ended(conn)
        if closed is not None and last_sent is not None and not lost and not ended:
            ended = (
                f"; {closed[2]} at packet {closed[0]}, {closed[1] - last_sent:.3f} s after the last was sent"
            )
        first = min(items.values(), default=(0, 0.0))[0]
        span = f"ids {id_runs(ids)}" if len(ids) > 1 else f"id {ids[0]}" if ids else "ids not kept"
        self._diagnose_at(
            conn,
            first,
            "note" if conn.lossy or ended else "warn",
            "unconfirmed",
            f"{spec.noun}s never confirmed",
            f"{count} {spec.noun}{'s' * (count != 1)} of {where} never confirmed "
            f"({span}; first sent in packet {first}){lost}{ended or ''}",
        )

    # ------------------------------------------------------------------ credit

    def _credit(self, conn: ConnState, frame: Frame) -> None:
        spec = self.spec.credit
        assert spec is not None
        command = frame.command or ""
        id_name = self.spec.sessions[spec.session].id
        sid = frame.fields.get(id_name)
        if not isinstance(sid, int):
            return
        if command in self.grants and frame.kind != "response":
            amount = frame.fields.get(self.grants[command].path[0])
            if not isinstance(amount, int):
                return
            conn.last_grant[sid] = frame
            credit = conn.credits.get(sid)
            if command == self.spec.sessions[spec.session].open:
                conn.credits[sid] = Credit(amount)
            elif credit is not None:
                if credit.zero is not None:
                    credit.stall = (*credit.zero, frame.number, frame.ts)
                    credit.zero = None
                credit.left += amount
        elif command == spec.spend:
            credit = conn.credits.get(sid)
            if credit is None:
                return
            if credit.stall is not None:
                self._stalled(conn, sid, credit, resumed=frame)
            if credit.left == 0:
                first, count = conn.beyond.get(sid, (frame, 0))
                conn.beyond[sid] = (first, count + 1)
                return
            credit.left -= 1
            _links(frame)["credit_left"] = credit.left
            if credit.left == 0:
                credit.zero = (frame.number, frame.ts)
        elif command == self.spec.sessions[spec.session].close and frame.kind == "request":
            credit = conn.credits.pop(sid, None)
            if credit is not None and credit.stall is not None:
                self._stalled(conn, sid, credit, resumed=None)

    def _beyond_credit(self, conn: ConnState, sid: int, first: Frame, count: int) -> None:
        assert self.spec.credit is not None
        spend = self.spec.credit.spend
        lost = "; the capture lost bytes of this connection, maybe a grant" if conn.lossy else ""
        self._note(
            conn,
            first,
            "note" if conn.lossy else "warn",
            "beyond_credit",
            f"{spend} beyond the granted credit",
            f"{count} {spend} frame{'s' * (count != 1)} to subscription {sid} while it had no credit "
            f"left (first at packet {first.number}){lost}",
        )

    def _stalled(self, conn: ConnState, sid: int, credit: Credit, resumed: Frame | None) -> None:
        assert credit.stall is not None
        zero_at, zero_ts, grant_at, grant_ts = credit.stall
        credit.stall = None
        if grant_ts - zero_ts < CREDIT_STALL_S:
            return
        session = conn.sessions.get((self.spec.credit.session, sid)) if self.spec.credit else None
        where = _session_name("subscription", sid, session)
        then = (
            f"; deliveries resumed at packet {resumed.number}"
            if resumed is not None
            else "; no delivery followed the grant"
        )
        self._diagnose_at(
            conn,
            zero_at,
            "warn" if resumed is not None else "note",
            "credit_exhausted",
            "deliveries stopped with credit exhausted",
            f"{where} ran out of credit at packet {zero_at}; no delivery could follow for "
            f"{grant_ts - zero_ts:.3f} s until the client granted more at packet {grant_at}{then}",
        )

    def _credit_end(self, conn: ConnState, sid: int, credit: Credit) -> None:
        if credit.stall is not None:
            self._stalled(conn, sid, credit, resumed=None)
        if credit.zero is None or conn.last is None:
            return
        zero_at, zero_ts = credit.zero
        quiet = conn.last.ts - zero_ts
        if quiet < CREDIT_STALL_S:
            return
        session = conn.sessions.get((self.spec.credit.session, sid)) if self.spec.credit else None
        where = _session_name("subscription", sid, session)
        self._diagnose_at(
            conn,
            zero_at,
            "note",
            "credit_exhausted",
            "credit exhausted and never granted again",
            f"{where} ran out of credit at packet {zero_at} and was never granted more "
            f"({quiet:.3f} s until the connection's last frame)",
        )

    def _credit_refused(self, conn: ConnState, frame: Frame, code: int, what: str) -> None:
        assert self.spec.credit is not None
        sid = frame.fields.get(self.spec.sessions[self.spec.credit.session].id)
        grant = conn.last_grant.get(sid) if isinstance(sid, int) else None
        if grant is not None:
            links = _links(frame)
            links["request_in"] = grant.number
            links["response_time"] = round(frame.ts - grant.ts, 6)
            _links(grant)["response_in"] = frame.number
        asked = f" (packet {grant.number})" if grant is not None else ""
        self._note(
            conn,
            frame,
            "warn",
            "error_response",
            f"{frame.command}: {what}",
            f"{frame.command} for subscription {sid}{asked} refused: {what}",
        )

    # ------------------------------------------------------------------ reporting

    def _note(
        self, conn: ConnState, frame: Frame, severity: str, kind: str, summary: str, message: str
    ) -> None:
        """A finding about this frame: on the frame itself, and in the diagnoses."""
        frame.expert.append(Expert(severity, message, None, group=FINDINGS[kind].group))
        self._diagnose(conn, frame, severity, kind, summary, message)

    def _diagnose(
        self, conn: ConnState, frame: Frame | Seen, severity: str, kind: str, summary: str, message: str
    ) -> None:
        self._diagnose_at(conn, frame.number, severity, kind, summary, message)

    def _diagnose_at(
        self, conn: ConnState, number: int, severity: str, kind: str, summary: str, message: str
    ) -> None:
        self._add(Diagnosis(severity, kind, summary, message, number, conn.number))

    def _add(self, diagnosis: Diagnosis) -> None:
        """Keep the finding, or past MAX_DIAGNOSES only count it: a capture of any length fits."""
        if len(self.diagnoses) < MAX_DIAGNOSES:
            self.diagnoses.append(diagnosis)
            return
        d = diagnosis
        key = (d.severity, d.group, d.kind, d.summary, d.conn)
        count, first = self.untold.get(key, (0, d.number))
        self.untold[key] = (count + 1, min(first, d.number))


def summarise(
    diagnoses: Iterable[Diagnosis], untold: Mapping[tuple[str, str, str, str, int], tuple[int, int]]
) -> list[dict[str, Any]]:
    """The expert summary of findings: one row per kind, worst first."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for d in diagnoses:
        row = rows.get((d.severity, d.group, d.summary))
        if row is None:
            rows[d.severity, d.group, d.summary] = {
                "severity": d.severity,
                "group": d.group,
                "summary": d.summary,
                "count": 1,
                "first_packet": d.number,
            }
        else:
            row["count"] += 1
    for (severity, group, _kind, summary, _conn), (count, first) in untold.items():
        row = rows.setdefault(
            (severity, group, summary),
            {"severity": severity, "group": group, "summary": summary, "count": 0, "first_packet": first},
        )
        row["count"] += count
        row["first_packet"] = min(row["first_packet"], first)
    return sorted(rows.values(), key=lambda r: (-SEVERITIES.index(r["severity"]), r["first_packet"]))


class Conversations:
    """The trackers of every protocol a read decodes, seen as one: one time zero, all findings.

    Each protocol's tracker keeps its own connections and findings (stats are per protocol);
    here they are merged in capture order, so a read of one protocol is its tracker's alone.
    """

    def __init__(self, protocols: Iterable[Protocol]) -> None:
        self.trackers = {protocol.name: Tracker(protocol) for protocol in protocols}
        self.first_ts: float | None = None

    def feed(self, frame: Frame) -> None:
        if self.first_ts is None:
            self.first_ts = frame.ts
        self.trackers[frame.protocol].feed(frame)

    def first_pass(self) -> None:
        """Remember what a second pass gives frames that frames after them link back to."""
        for tracker in self.trackers.values():
            tracker.confirmed = {}

    def awaits_later(self, frame: Frame) -> bool:
        return self.trackers[frame.protocol].awaits_later(frame)

    def later(self, frame: Frame) -> dict[str, Any] | None:
        return self.trackers[frame.protocol].later(frame)

    def finish(
        self, lossy: Collection[int] = (), lives: Mapping[int, Life] | None = None, whole: bool = True
    ) -> None:
        """whole: these are all the read's connections (a Spark task's are not: its driver tells
        what spans connections, the hosts that ended several at once)."""
        for tracker in self.trackers.values():
            tracker.finish(lossy, lives)
        if not whole:
            return
        for conn, found in ended_together(lives or {}, abruptly_left(self.diagnoses)):
            tracker = self.trackers[(lives or {})[conn].protocol]
            tracker.add_ending(conn, found)

    @property
    def diagnoses(self) -> list[Diagnosis]:
        lists = [t.diagnoses for t in self.trackers.values() if t.diagnoses]
        if len(lists) == 1:
            return lists[0]
        return sorted((d for found in lists for d in found), key=lambda d: d.number)

    @property
    def untold(self) -> dict[tuple[str, str, str, str, int], tuple[int, int]]:
        return {key: value for t in self.trackers.values() for key, value in t.untold.items()}

    @property
    def connections(self) -> dict[int, ConnState]:
        merged = {n: c for t in self.trackers.values() for n, c in t.connections.items()}
        return dict(sorted(merged.items()))

    def summary(self) -> list[dict[str, Any]]:
        return summarise(self.diagnoses, self.untold)

    def code_name(self, frame: Frame, code: int) -> str:
        return self.trackers[frame.protocol].code_name(frame, code)


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


def abruptly_left(diagnoses: Iterable[Diagnosis]) -> set[int]:
    """The connections a client left without the protocol's close, by their findings."""
    return {d.conn for d in diagnoses if d.kind == "abrupt_close" and d.message.startswith("the client ")}


def _links(frame: Frame) -> dict[str, Any]:
    if frame.links is None:
        frame.links = {}
    return frame.links


def _values(fields: dict[str, Any], path: tuple[str, ...]) -> list[int]:
    """Every integer a path names."""
    values = path_values(fields, path)
    if set(map(type, values)) <= {int}:  # the commonest: ids, nothing to leave out
        return values
    return [v for v in values if isinstance(v, int)]


def _named(enum: dict[int, str], code: int, codes: str = "hex") -> str:
    text = f"0x{code:02x}" if codes == "hex" else str(code)
    name = enum.get(code)
    return f"{name} ({text})" if name else f"code {text}"


def _session_name(kind: str, sid: int, session: Session | None) -> str:
    """A session for a user: its kind and id, and what its first kept value names (its stream)."""
    if session is None or not session.values:
        return f"{kind} {sid}"
    name, value = next(iter(session.values.items()))
    return f"{kind} {sid}" + (f" ({name} {value!r})" if value else "")
