"""The conversation tracker engine: what the frames of one connection mean together.

Driven by the spec's `conversation:` section, it pairs responses with requests by
correlation id (per requester, since either side may ask), reads their status codes, follows
the ids requests open (publishers, subscriptions, NATS sids) so every later frame learns what
it belongs to, names the server's closes and judges how each connection ended. What only one
protocol does is a Rule of its package (analysis/rules.py), called at fixed points of each
frame and of the end.

What it finds goes two ways: onto the frame (`frame.links`, and expert notes of the groups
response_code, sequence and protocol), and into `Tracker.diagnoses`, one line each, for the
end of a read and the expert summary of `stats`. Problems only the end can show (requests
never answered, how a connection ended) are found by `finish()`. The tracker holds state
passed in explicitly and prints nothing, so files, the live sniffer and Spark tasks all use
it the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from msgspec.structs import replace

from streamdump.analysis.endings import Ending, Words, endings, silent
from streamdump.analysis.rules import Rule, rule_classes
from streamdump.analysis.sessions import Sessions
from streamdump.analysis.state import ConnState, Diagnosis, Request, Seen, SideState, named, seen
from streamdump.spec.dissector import MessageRules, dissector_of
from streamdump.spec.registry import CloseSpec, FieldSpec, Protocol, flat_fields
from streamdump.wire.findings import FINDINGS
from streamdump.wire.frame import SEVERITIES, Expert, Frame, links_of
from streamdump.wire.lifecycle import Life

# Requests waiting for their answer (and answers waiting for their request) remembered per
# connection; beyond this they are only counted.
MAX_IN_FLIGHT = 100_000
# Findings kept whole (with their messages); further ones are counted by kind and connection.
MAX_DIAGNOSES = 10_000
# A capture that stops less than this after a request or publish may simply have cut its answer.
ANSWER_GRACE_S = 1.0
# Why a frame is incomplete when the connection ended in the middle of it: no bytes were lost.
ENDED_MID_FRAME = frozenset({"the connection closed", "the connection was reset"})
# Findings past MAX_DIAGNOSES, counted: (severity, group, kind, summary, conn) -> (count, first packet).
Untold = dict[tuple[str, str, str, str, int], tuple[int, int]]


class Tracker:
    """Follows every connection of one protocol in one capture, frame by frame, in capture order."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.spec = conv = protocol.conversation
        self.key_text = protocol.key_formatter()
        self.by_request = protocol.frame.response_key == "request"
        self._identities(protocol)
        # Every connection's opening and ending, from the reader, given at the end of a read.
        self.lives: dict[int, Life] = {}
        # What diagnoses call the correlation field ("correlation id", "opaque").
        self.corr_name = (conv.correlation or "correlation id").replace("_", " ")
        self.connections: dict[int, ConnState] = {}
        self.diagnoses: list[Diagnosis] = []
        self.untold: Untold = {}
        self.first_ts: float | None = None  # of the capture's first frame: time zero of every view
        # A first pass of two: rules keep what frames after a frame tell it (its confirms).
        self.backlinks = False
        self.closes = {close.command: close for close in conv.closes}
        self._statuses(protocol)
        self.roles = protocol.wiring.roles
        self.versioned = protocol.versioned  # asked per frame: the registry's walk made once
        self.close_enums = {
            close.command: dict(protocol.enums.get(close.enum or "", {})) for close in conv.closes
        }
        # What counts as a message: for the records a server's last frame carried, which a
        # connection's end without the protocol's close names (only protocols that have one).
        self.message_rules: MessageRules | None = (
            dissector_of(protocol).messages(protocol) if conv.ending is not None else None
        )
        # The command whose items a rule confirms one by one (the statistics' latency table).
        self.confirms: str | None = None
        self.sessions = Sessions(self)
        self.rules: tuple[Rule, ...] = tuple(
            cls(self, conv.rules[cls.key])
            for cls in rule_classes(dissector_of(protocol))
            if cls.key in conv.rules
        )
        ending = conv.ending
        self.words = Words(
            conv.server,
            ending.close if ending is not None else None,
            dict(ending.hints) if ending is not None else {},
        )
        # Each hook is called only on the rules that have it (the base's does nothing), and
        # `before` only for the commands a rule names (before_on), every frame for the others.
        before = tuple(r for r in self.rules if type(r).before is not Rule.before)
        self.rules_before = tuple(r for r in before if r.before_on is None)
        self.rules_before_for = {
            command: tuple(r for r in before if r.before_on is None or command in r.before_on)
            for command in {c for r in before if r.before_on is not None for c in r.before_on}
        }
        # The rules each command's frames are fed to, in the package's order.
        feeding = tuple(r for r in self.rules if type(r).feed is not Rule.feed)
        every = tuple(r for r in feeding if r.commands is None)
        named = {c for r in feeding if r.commands is not None for c in r.commands}
        self.rules_every = every
        self.rules_for = {
            command: tuple(r for r in feeding if r.commands is None or command in r.commands)
            for command in named
        }
        self.rules_finish = tuple(r for r in self.rules if type(r).finish is not Rule.finish)

    def _identities(self, protocol: Protocol) -> None:
        """Who each peer is: from fields every frame carries (property, field, value names), and
        from the fields of a request that introduces the peer (command -> [(property, field)])."""
        self.identity: list[tuple[str, str, dict[int, str]]] = []
        self.introduced: dict[str, list[tuple[str, str]]] = {}
        for prop, refs in self.spec.identity.items():
            name = refs[0]
            if "." in name:
                for ref in refs:
                    command, _, field_name = ref.partition(".")
                    self.introduced.setdefault(command, []).append((prop, field_name))
                continue
            spec = protocol.header_field(name)
            names = (
                dict(protocol.enums[spec.enum]) if spec is not None and spec.enum in protocol.enums else {}
            )
            self.identity.append((prop, name, names))

    def _statuses(self, protocol: Protocol) -> None:
        """The names of a response's status codes, by (command key, response?), and the request
        strings worth naming in a finding: those the one-line view shows."""
        conv = self.spec
        reasons = {name for close in conv.closes for name in close.reason}
        self.named: dict[tuple[Any, bool], tuple[FieldSpec, ...]] = {}
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

    def rule(self, key: str) -> Rule | None:
        """The package's rule of that key, when the spec uses it."""
        return next((r for r in self.rules if r.key == key), None)

    # ------------------------------------------------------------------ frames

    def feed(self, frame: Frame) -> None:
        """Link one frame to what came before it; add what it reveals to its notes."""
        if self.first_ts is None:
            self.first_ts = frame.ts
        from_client = frame.from_client
        conn = self.connections.get(frame.conn)
        if conn is None:
            conn = self.connections[frame.conn] = ConnState(frame.conn, self.protocol.name, first_ts=frame.ts)
        if conn.client is None and frame.src is not None:
            conn.client, conn.server = (
                (frame.src, frame.dst) if from_client is not False else (frame.dst, frame.src)
            )
        side = conn.client_side if from_client is not False else conn.server_side
        if self.identity and side.properties is None:
            side.properties = self._identity(frame)
        incomplete = frame.incomplete
        if incomplete is not None and incomplete not in ENDED_MID_FRAME:
            conn.lossy = True  # the capture lost bytes (a frame the connection's end cut lost none)
        command = frame.command
        for rule in self.rules_before_for.get(command, self.rules_before):  # type: ignore[arg-type]
            rule.before(conn, side, frame)
        if command in self.spec.setup:
            conn.setup_seen = True
        kind = frame.kind
        # A response whose command is its request's is tracked even when the request is missing.
        if (command is not None or (kind == "response" and self.by_request)) and kind != "unknown":
            self._correlate(conn, frame)
            self._negotiation(conn, side, frame)
            if command in self.sessions.commands:
                self.sessions.feed(conn, frame)
            for rule in self.rules_for.get(command, self.rules_every):  # type: ignore[arg-type]
                rule.feed(conn, frame)
        last = Seen(
            frame.number,
            frame.ts,
            command or f"Unknown({frame.key_text})",  # frame.name, without the property's call
            frame.wire_key,
            frame.version,
            len(frame.data),
            from_client,
            incomplete is None,
            self._records(frame) if self.message_rules is not None and from_client is False else None,
        )
        side.last = last
        if from_client is not False and self._unregistered(frame):
            conn.suspects["unknown"] = last
        conn.last = last

    def _unregistered(self, frame: Frame) -> bool:
        """A frame of a command, or a version of it, the registry does not know."""
        if frame.command is None:
            return frame.kind != "response"  # a response's command may only be unknown to us
        command = self.protocol.commands.get(frame.command)
        return command is not None and self.versioned and frame.version not in command.versions

    def _identity(self, frame: Frame) -> dict[str, Any] | None:
        """A peer's product and version, from a frame's header fields (its language, its version)."""
        props: dict[str, Any] = {}
        for prop, name, names in self.identity:
            value = frame.version if name == "version" else frame.fields.get(name)
            if value is not None:
                props[prop] = names.get(value, value) if isinstance(value, int) else value
        return props or None

    def _records(self, frame: Frame) -> int | None:
        assert self.message_rules is not None
        moved = self.message_rules.volume(frame)
        return moved.messages if moved is not None else None

    # ------------------------------------------------------------------ two passes

    def awaits_later(self, frame: Frame) -> bool:
        """Whether frames after this one may link back to it: a request its response, and what
        the rules keep (a publish its confirms)."""
        return frame.kind == "request" or any(r.awaits_later(frame) for r in self.rules)

    def later(self, frame: Frame) -> dict[str, Any] | None:
        """What a frame kept by awaits_later learned from the frames after it, once they went by."""
        for rule in self.rules:
            if rule.awaits_later(frame):
                return rule.later(frame)
        if frame.links and "response_in" in frame.links:
            return {"response_in": frame.links["response_in"]}
        return None

    # ------------------------------------------------------------------ the end

    def finish(self, lossy: Collection[int] = (), lives: Mapping[int, Life] | None = None) -> None:
        """What only the end shows: unanswered requests, what the rules find at the end, and how
        each connection ended.

        lossy: connections the capture lost bytes of; what is missing there may be in them,
        so it is told as a note, not a warning. lives: every connection's SYN, FINs and reset
        (the reader's), so an answer after the end is not waited for and the ending is judged.
        """
        self.lives = {n: life for n, life in (lives or {}).items() if life.protocol == self.protocol.name}
        lossy_now = {conn.number for conn in self.connections.values() if conn.lossy or conn.number in lossy}
        self._doubted(lossy_now)
        for conn in self.connections.values():
            conn.lossy = conn.number in lossy_now
            self._conclude(conn)
        self._endings()

    def retire(self, life: Life, lossy: bool = False) -> ConnState | None:
        """A connection that ended before the read did: what only its end shows (requests never
        answered, the rules' last word, how it ended) is found now, and the tracker lets go of
        it, so that a read of any number of connections keeps only the open ones. Its state is
        handed back for a summary of it (None: it carried no frame of this protocol)."""
        number = life.conn
        conn = self.connections.pop(number, None)
        if conn is not None:
            lossy = lossy or conn.lossy
            conn.lossy = lossy
        if lossy and conn is not None and conn.doubtable:
            self._doubted({number})
        self.lives[number] = life
        try:
            if conn is not None:
                self._conclude(conn)
            self._ending(number, life, conn)
        finally:
            del self.lives[number]
        return conn

    def _conclude(self, conn: ConnState) -> None:
        """What the end of a connection (or of the read) shows of it: unanswered requests,
        responses whose request never came, what the rules find."""
        told = len(self.diagnoses)
        if conn.pending:
            for request in sorted(conn.pending.values(), key=lambda r: r.frame.number):
                self._unanswered(conn, request)
            conn.pending.clear()
        if conn.early:
            for (_, corr), frame in sorted(conn.early.items(), key=lambda item: item[1].number):
                self._orphan(conn, frame, corr)
            conn.early.clear()
        for rule in self.rules_finish:
            rule.finish(conn)
        # What the end found of one connection comes in the order of the packets it names.
        if len(self.diagnoses) > told + 1:
            self.diagnoses[told:] = sorted(self.diagnoses[told:], key=lambda d: d.number)

    def _doubted(self, lossy: Collection[int]) -> None:
        """Findings told as the frames went by that bytes the capture lost may explain (a
        silence): only notes on connections that lost bytes."""

        def doubted(kind: str, conn: int, severity: str) -> bool:
            return FINDINGS[kind].doubted_by_loss and conn in lossy and severity != "note"

        self.diagnoses = [
            replace(d, severity="note", message=f"{d.message}; the capture lost bytes of this connection")
            if doubted(d.kind, d.conn, d.severity)
            else d
            for d in self.diagnoses
        ]
        untold: Untold = {}
        for (severity, group, kind, summary, conn_number), (count, first) in self.untold.items():
            if doubted(kind, conn_number, severity):
                severity = "note"
            key = (severity, group, kind, summary, conn_number)
            before, earliest = untold.get(key, (0, first))
            untold[key] = (before + count, min(earliest, first))
        self.untold = untold

    def summary(self) -> list[dict[str, Any]]:
        """The expert summary: one row per kind of finding, worst first."""
        return summarise(self.diagnoses, self.untold)

    def ended(self, conn: ConnState) -> tuple[int, float, str] | None:
        """Where and how the connection ended before the capture did: (packet, time, words)."""
        life = self.lives.get(conn.number)
        if life is None or life.end is None or life.ended is None:
            return None
        return life.ended.number, life.ended.ts, life.ended_by(self.server(conn))

    def ended_soon(self, conn: ConnState, ts: float) -> str | None:
        """Whether the capture stopped so soon after ts that an answer had no time to come."""
        if conn.last is None or conn.closed_by_server is not None or self.ended(conn) is not None:
            return None
        waited = conn.last.ts - ts
        if waited >= ANSWER_GRACE_S:
            return None
        return f"; the capture ended {waited * 1000:.3f} ms after it"

    def _endings(self) -> None:
        for number, life in sorted(self.lives.items()):
            self._ending(number, life, self.connections.get(number))

    def _ending(self, number: int, life: Life, conn: ConnState | None) -> None:
        words = self.words
        if silent(life, words):
            return
        if conn is not None and (server := self.server(conn)) != words.server:
            words = replace(words, server=server)
        for e in endings(life, conn, words):
            self._add(Diagnosis(e.severity, e.kind, e.summary, e.message, e.number, number))

    def add_ending(self, conn: int, found: Ending) -> None:
        """A finding about a connection's end made from more than this tracker's connections."""
        self._add(Diagnosis(found.severity, found.kind, found.summary, found.message, found.number, conn))

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
                self.note(
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
                self.pair(frame, early)
                return
            if len(conn.pending) < MAX_IN_FLIGHT:  # a capture of one direction only never answers
                conn.pending[asker, corr] = Request(frame, corr)
            return
        if frame.kind != "response":
            return
        request = conn.pending.get((asker, corr))
        if request is not None and request.frame.command != frame.command:
            self.note(
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
        self.pair(request.frame, frame)
        self._status(conn, frame, request.frame)

    def pair(self, request: Frame, response: Frame) -> None:
        """Link a response and its request, both ways, with the time between."""
        links = links_of(response)
        links["request_in"] = request.number
        # A request held back by a gap comes out late, with a later time than its response.
        if response.ts >= request.ts:
            links["response_time"] = round(response.ts - request.ts, 6)
        links_of(request)["response_in"] = response.number

    def _orphan(self, conn: ConnState, frame: Frame, corr: int | str) -> None:
        lowest = conn.side(not frame.from_client).lowest_corr
        began = isinstance(corr, int) and lowest is not None and lowest <= corr and not conn.lossy
        self.note(
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
        for rule in self.rules:
            if rule.status(conn, frame, request, code, what):
                return
        if code in spec.routine:
            self.note(
                conn,
                frame,
                "note",
                "routine_response",
                f"{frame.command}: {what}",
                f"{self.asked(request, frame)} answered {what} (a routine answer)",
            )
            return
        setup = frame.command in spec.setup
        if setup:
            conn.refused = conn.refused or seen(frame, 0)
        said = frame.fields.get(spec.status_text or "")
        said = f" {said.strip()!r}" if isinstance(said, str) and said.strip() else ""
        more = "".join(rule.explain(conn, frame, request, code) for rule in self.rules)
        self.note(
            conn,
            frame,
            "error" if setup else "warn",
            "setup_refused" if setup else "error_response",
            f"{frame.name}: {what}",
            f"{self.asked(request, frame)} failed: {what}{said}{more}",
        )

    def asked(self, request: Frame | None, response: Frame) -> str:
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
        return named(names, code, self.spec.codes)

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
        ended_at = self.ended(conn)
        if not after and ended_at is not None and ended_at[0] >= frame.number:
            number, ts, how = ended_at
            after = f"; {how} at packet {number}, {ts - frame.ts:.3f} s after it"
        if conn.lossy and not after:
            after = "; the capture lost bytes of this connection, maybe the answer"
        ended = self.ended_soon(conn, frame.ts) if not after else None
        if ended:
            after = ended
        # A request the server may hold (a long poll) is not late until its time is up.
        held = next((h for rule in self.rules if (h := rule.holds(frame)) is not None), None)
        end_ts = ended_at[1] if ended_at is not None else conn.last.ts if conn.last is not None else frame.ts
        waiting = held is not None and end_ts - frame.ts < held
        if waiting:
            after += f"; the {self.server(conn)} may hold it up to {held:.3f} s (a long poll)"
        self.diagnose(
            conn,
            frame,
            "note" if conn.lossy or ended or waiting else "warn",
            "unanswered",
            f"{frame.command} request never answered",
            f"{self.asked(frame, frame)} with {self.corr_name} {request.corr} was never answered{after}",
        )

    # ------------------------------------------------------------------ what the peers said

    def _negotiation(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        spec = self.spec
        fields = frame.fields
        if spec.peer_properties is not None and frame.command == spec.peer_properties.command:
            props = fields.get(spec.peer_properties.path[0])
            if isinstance(props, dict):
                side.properties = props
        introduced = self.introduced.get(frame.command or "")
        if introduced and frame.kind != "response":  # a request, or a command (NATS's CONNECT, INFO)
            props = {prop: fields[name] for prop, name in introduced if fields.get(name) not in (None, "")}
            side.properties = props or side.properties
        if spec.ending is not None and frame.command == spec.ending.close:
            conn.close_seen = conn.close_seen or frame.number
        close = self.closes.get(frame.command or "")
        if close is not None and frame.kind != "response":
            self._closing(conn, frame, close)

    def _closing(self, conn: ConnState, frame: Frame, close: CloseSpec) -> None:
        code = frame.fields.get(close.code) if close.code else None
        if frame.from_client is not False or (close.code and not isinstance(code, int)):
            return  # a client closing, with whatever code, is the client's own decision
        conn.closed_by_server = frame
        what = (
            f": {named(self.close_enums[close.command], code, self.spec.codes)}"
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
            named_it = (
                f"the client's frame it is about was {self._named_frame(suspect)}, "
                f"before its last (packet {last.number})"
            )
        elif before is not None:
            named_it = f"the client's last frame before it was {self._named_frame(before)}"
        else:
            named_it = ""
        last_text = f"; {named_it}" + (f": {hint}" if hint else "") if named_it else ""
        ok = code is None or code in self.spec.ok
        self.note(
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

    # ------------------------------------------------------------------ findings

    def note(
        self, conn: ConnState, frame: Frame, severity: str, kind: str, summary: str, message: str
    ) -> None:
        """A finding about this frame: on the frame itself, and in the diagnoses."""
        frame.expert.append(Expert(severity, message, None, group=FINDINGS[kind].group))
        self.diagnose(conn, frame, severity, kind, summary, message)

    def diagnose(
        self, conn: ConnState, frame: Frame | Seen, severity: str, kind: str, summary: str, message: str
    ) -> None:
        """A finding about this frame, told only in the diagnoses (the end found it)."""
        self.diagnose_at(conn, frame.number, severity, kind, summary, message)

    def diagnose_at(
        self, conn: ConnState, number: int, severity: str, kind: str, summary: str, message: str
    ) -> None:
        self._add(Diagnosis(severity, kind, summary, message, number, conn.number))

    def _add(self, diagnosis: Diagnosis) -> None:
        """Keep the finding, or past MAX_DIAGNOSES only count it: a capture of any length fits."""
        if FINDINGS[diagnosis.kind].doubted_by_loss and diagnosis.severity != "note":
            conn = self.connections.get(diagnosis.conn)
            if conn is not None:
                conn.doubtable += 1  # its end looks for it only if the capture lost bytes of it
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
