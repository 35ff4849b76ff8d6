"""Publish confirms: the spec's `conversation.acks`, a rule of the tracker (Lua twin: confirms.lua).

A publisher's Publish frames send messages numbered by publishing id; PublishConfirm and
PublishError frames of the broker name those ids back. Each confirm links to the frames that
sent its ids (publish_in) with the time it took (confirm_time); ids never confirmed are told at
the end. A publisher that numbers its messages one by one (`ordered`) has the places its ids
go back or skip told, and what its messages say of their content is watched for client bugs
the broker takes without a word: a message of another format than its first, and a message id
used twice (a deduplicating consumer then drops the second).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import repeat
from operator import itemgetter
from typing import Any

from msgspec import Struct, field
from streamdump.dissectors.rabbitmq_stream.osiris import content_of, ids_of

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, id_runs, named, session_name
from streamdump.analysis.tracker import MAX_IN_FLIGHT
from streamdump.spec.registry import Protocol, Ref
from streamdump.wire.frame import Frame, links_of
from streamdump.wire.paths import int_values, path_values

_FIRST = itemgetter(0)  # a sending's packet number

# Places a connection's sent ids went out of order that are kept to be told.
MAX_DISORDER = 100
# Messages of a sender without a message id after which its ids are no longer looked for.
ID_PATIENCE = 1000


class AckSpec(Struct, frozen=True):
    """Items of one frame acknowledged one by one by later frames of the other side."""

    name: str
    session: str
    send: Ref
    confirm: Ref
    fail: Ref | None
    fail_code: Ref | None
    noun: str = "item"  # what one item is, for diagnoses ("3 messages never confirmed")
    # The sender numbers its items one by one, rising: ids that go back or skip are noted.
    ordered: bool = False


class SentContent(Struct):
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


class Sent(Struct):
    """One connection's items in flight, by (ack name, session id)."""

    # item id -> (packet, ts) of the frame that sent it
    in_flight: dict[tuple[str, int], dict[int, tuple[int, float]]] = field(default_factory=dict)
    untracked: dict[tuple[str, int], int] = field(default_factory=dict)
    # A gap can hold one direction back, so a confirm may come out before its publish.
    early: dict[tuple[str, int], dict[int, tuple[Frame, int, int]]] = field(default_factory=dict)
    # The last item id sent and its packet (acks whose ids rise one by one).
    last_sent: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    content: dict[tuple[str, int], SentContent] = field(default_factory=dict)
    # Where those ids went back or skipped: (packet, summary, message, ids skipped or < 0).
    disorder: list[tuple[int, str, str, int]] = field(default_factory=list)


class Confirms(Rule):
    """Published items and their confirms."""

    key = "acks"
    links = ("publish_in", "confirm_time")

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> dict[str, AckSpec]:
        acks: dict[str, AckSpec] = {}
        sessions = check.sessions()
        for name, body in (raw or {}).items():
            at = f"conversation.acks.{name}"
            if not isinstance(body, dict) or not {"session", "send", "confirm"} <= set(body):
                raise check.fail(at, "needs session, send and confirm")
            unknown = set(body) - {"session", "noun", "send", "confirm", "fail", "fail_code", "ordered"}
            if unknown:
                raise check.fail(at, f"unknown key {sorted(unknown)[0]!r}")
            if body["session"] not in sessions:
                raise check.fail(at, f"unknown session {body['session']!r}")
            refs = {
                key: check.ref(body[key], f"{at}.{key}", int_only=True) if body.get(key) else None
                for key in ("send", "confirm", "fail", "fail_code")
            }
            acks[name] = AckSpec(
                name,
                body["session"],
                **refs,  # type: ignore[arg-type]
                noun=str(body.get("noun", "item")),
                ordered=bool(body.get("ordered", False)),
            )
        return acks

    @classmethod
    def lua(cls, spec: dict[str, AckSpec], protocol: Protocol) -> dict[str, Any]:
        def ref(r: Ref | None) -> dict[str, Any] | None:
            return None if r is None else {"command": r.command, "path": list(r.path)}

        def enum(r: Ref | None) -> str | None:
            found = protocol.field_at(r) if r is not None else None
            return (found.of or found).enum if found is not None else None

        return {
            name: {
                "session": a.session,
                "noun": a.noun,
                "send": ref(a.send),
                "confirm": ref(a.confirm),
                "fail": ref(a.fail),
                "fail_code": ref(a.fail_code),
                "fail_enum": enum(a.fail_code),
            }
            for name, a in spec.items()
        }

    def __init__(self, tracker: Any, spec: dict[str, AckSpec]) -> None:
        super().__init__(tracker, spec)
        self.sent = {ack.send.command: ack for ack in spec.values()}
        self.confirmed = {ack.confirm.command: ack for ack in spec.values()}
        self.failed = {ack.fail.command: ack for ack in spec.values() if ack.fail}
        self.commands = frozenset((*self.sent, *self.confirmed, *self.failed))
        protocol = tracker.protocol
        self.fail_enums = {
            ack.name: dict(protocol.enums[found.enum])
            if ack.fail_code is not None and (found := protocol.field_at(ack.fail_code)) and found.enum
            else {}
            for ack in spec.values()
        }
        self.ids = {ack.name: tracker.spec.sessions[ack.session].id for ack in spec.values()}
        # A first pass of two: the confirms of each sending frame, by (connection, packet).
        self.backlinked: dict[tuple[int, int], list[int]] = {}
        # The command whose items are confirmed, as the statistics title their latency.
        tracker.confirms = next(iter(spec.values())).send.command if spec else None

    def _sent(self, conn: ConnState) -> Sent:
        return self.state(conn, Sent)  # type: ignore[no-any-return]

    def feed(self, conn: ConnState, frame: Frame) -> None:
        command = frame.command or ""
        if command in self.sent and frame.kind != "response":
            self._send(conn, frame, self.sent[command])
            return
        failing = command in self.failed
        if not failing and command not in self.confirmed:
            return  # e.g. a response to a command that sends items, which has no layout
        self._confirm(conn, frame, self.failed[command] if failing else self.confirmed[command], failing)

    def _send(self, conn: ConnState, frame: Frame, ack: AckSpec) -> None:
        sid = frame.fields.get(self.ids[ack.name])
        if not isinstance(sid, int):
            return
        sent = self._sent(conn)
        flight = sent.in_flight.setdefault((ack.name, sid), {})
        early = sent.early.get((ack.name, sid))
        items = int_values(frame.fields, ack.send.path)
        when = (frame.number, frame.ts)
        if ack.ordered and items:
            self._order(conn, sent, frame, ack, sid, items)
        if items:
            self._content(conn, sent, frame, ack, sid, items)
        if not early and len(flight) + len(items) <= MAX_IN_FLIGHT:
            flight.update(dict.fromkeys(items, when))  # the common case, in one step
            return
        for item in items:
            answer = early.pop(item, None) if early else None
            if answer is not None:
                confirm, index, count = answer
                links = links_of(confirm)
                if "publish_in" not in links:
                    links["publish_in"], links["confirm_time"] = [None] * count, [None] * count
                links["publish_in"][index] = frame.number
                continue
            if len(flight) >= MAX_IN_FLIGHT:
                sent.untracked[ack.name, sid] = sent.untracked.get((ack.name, sid), 0) + 1
            else:
                flight[item] = when

    def _confirm(self, conn: ConnState, frame: Frame, ack: AckSpec, failing: bool) -> None:
        sid = frame.fields.get(self.ids[ack.name])
        if not isinstance(sid, int):
            return
        sent = self._sent(conn)
        ref = ack.fail if failing else ack.confirm
        assert ref is not None
        ids = int_values(frame.fields, ref.path)
        flight = sent.in_flight.get((ack.name, sid), {})
        early = sent.early.setdefault((ack.name, sid), {})
        sents = list(map(flight.pop, ids, repeat(None)))  # each id's sending, in C
        sent_in: list[int | None]
        waited: list[float | None]
        waits: dict[Any, float]
        if None in sents:
            # Ids confirmed together were mostly sent together: one subtraction per sending frame.
            waits = {when: round(frame.ts - when[1], 6) for when in dict.fromkeys(sents) if when is not None}
            sent_in = [None if when is None else when[0] for when in sents]
            waited = [None if when is None else waits[when] for when in sents]
            for index, item in enumerate(ids):
                if sents[index] is not None:
                    continue
                if sent.untracked.get((ack.name, sid)):
                    sent.untracked[ack.name, sid] -= 1  # one of those too many to remember
                elif len(early) < MAX_IN_FLIGHT:
                    early[item] = (frame, index, len(ids))
        else:  # the commonest: every id was seen sent
            # Keyed by the sending packet's number, not by (number, time): hashing a time per
            # id cost more than the rest of the confirm's work on it.
            sent_in = list(map(_FIRST, sents))
            waits = {number: round(frame.ts - ts, 6) for number, ts in dict(sents).items()}
            waited = list(map(waits.__getitem__, sent_in))
        if waits:
            links = links_of(frame)
            links["publish_in"] = sent_in
            links["confirm_time"] = waited
            if self.tracker.backlinks:  # a first pass: the sending frames learn their confirms
                for packet in dict.fromkeys(sent_in):
                    if packet is not None:
                        self.backlinked.setdefault((conn.number, packet), []).append(frame.number)
        if failing and ack.fail_code is not None:
            codes: dict[int, int] = {}
            for code in int_values(frame.fields, ack.fail_code.path):
                codes[code] = codes.get(code, 0) + 1
            session = conn.sessions.get((ack.session, sid))
            where = session_name(ack.session, sid, session)
            announcements = self.tracker.rule("announcement")
            gone = announcements.said(conn, session.values if session else None) if announcements else ""  # type: ignore[attr-defined]
            for code, count in sorted(codes.items()):
                what = named(self.fail_enums.get(ack.name, {}), code)
                self.tracker.note(
                    conn,
                    frame,
                    "warn",
                    "refused_items",
                    f"{frame.command}: {what}",
                    f"{count} {ack.noun}{'s' * (count != 1)} of {where} refused: {what}{gone}",
                )

    def _order(
        self, conn: ConnState, sent: Sent, frame: Frame, ack: AckSpec, sid: int, items: list[int]
    ) -> None:
        """A sender numbering its items one by one: the first place in a frame where its ids go
        back or skip (a client's counter reset or shared between threads looks so). Told at the
        end, where a connection that lost bytes is known: its lost frames would look like skips."""
        key = (ack.name, sid)
        last = sent.last_sent.get(key)
        before, packet = last if last is not None else (items[0] - 1, 0)
        sent.last_sent[key] = (items[-1], frame.number)
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
        if len(sent.disorder) < MAX_DISORDER:
            sent.disorder.append(
                (
                    frame.number,
                    f"{name}s out of order",
                    f"{where}: {name} {item} follows {before}{earlier}: {how}",
                    skipped,
                )
            )

    @staticmethod
    def _spans(frame: Frame, ack: AckSpec, count: int) -> list[int] | None:
        """How many ids each sent message may use, when any uses more than one (a sub-batch)."""
        elements = path_values(frame.fields, ack.send.path[:-1])
        if len(elements) != count:
            return None
        spans = [ids_of(e) if isinstance(e, dict) else 1 for e in elements]
        return spans if any(s != 1 for s in spans) else None

    def _content(
        self, conn: ConnState, sent: Sent, frame: Frame, ack: AckSpec, sid: int, items: list[int]
    ) -> None:
        """A sender's messages of another format than its first, and message ids it used before:
        client bugs the broker takes without a word (a consumer then fails on the odd one out,
        or a deduplicating reader drops the second)."""
        elements = path_values(frame.fields, ack.send.path[:-1])
        if len(elements) != len(items):
            return
        key = (ack.name, sid)
        seen = sent.content.get(key)
        if seen is not None and not seen.watching:
            # Past the first ID_PATIENCE messages, all of one format and none with an id: only
            # each frame's first message is looked at (every message would cost a fifth of a read).
            every = content_of(elements[:1], False)
            if every[0] is None or every[0][0] == seen.format or seen.mixed:
                return
            items = items[:1]
        else:
            every = content_of(elements, True)
        name = ack.send.path[-1].replace("_", " ")
        for facts, item in zip(every, items, strict=True):
            if facts is None:
                continue
            kind, message_id = facts
            if seen is None:
                seen = sent.content[key] = SentContent(kind, frame.number)
            elif kind != seen.format and not seen.mixed:
                seen.mixed = True
                now = kind or f"not {seen.format}"
                then = seen.format or f"not {kind}"
                self.tracker.diagnose(
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
                self.tracker.diagnose(
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
        spec = self.spec[ack_name]
        self.tracker.diagnose_at(
            conn,
            seen.reused_at,
            "note",
            "reused_message_id",
            f"message id reused by one {spec.session}",
            f"{self._sender(conn, spec, sid)}: {seen.reused} more {spec.noun}"
            f"{'s' * (seen.reused != 1)} reused an earlier message id",
        )

    @staticmethod
    def _sender(conn: ConnState, ack: AckSpec, sid: int) -> str:
        return session_name(ack.session, sid, conn.sessions.get((ack.session, sid)))

    def session_ended(self, conn: ConnState, session: str, sid: int) -> None:
        """A publisher id reopened or deleted: what its old self left unconfirmed is told now."""
        sent = conn.rules.get(self.key)
        if sent is None:
            return
        for ack in self.spec.values():
            if ack.session != session:
                continue
            key = (ack.name, sid)
            items, extra = sent.in_flight.pop(key, {}), sent.untracked.pop(key, 0)
            if items or extra:
                self._unconfirmed(conn, ack.name, sid, items, extra)
            sent.early.pop(key, None)
            sent.last_sent.pop(key, None)
            self._reuses_told(conn, ack.name, sid, sent.content.pop(key, None))

    def _unconfirmed(
        self, conn: ConnState, ack: str, sid: int, items: dict[int, tuple[int, float]], extra: int
    ) -> None:
        spec = self.spec[ack]
        where = session_name(spec.session, sid, conn.sessions.get((spec.session, sid)))
        count = len(items) + extra
        ids = sorted(items)
        lost = "; the capture lost bytes of this connection, maybe the confirms" if conn.lossy else ""
        last_sent = max((ts for _, ts in items.values()), default=None)
        ended = self.tracker.ended_soon(conn, last_sent) if last_sent is not None and not lost else None
        closed = self.tracker.ended(conn)
        if closed is not None and last_sent is not None and not lost and not ended:
            ended = (
                f"; {closed[2]} at packet {closed[0]}, {closed[1] - last_sent:.3f} s after the last was sent"
            )
        first = min(items.values(), default=(0, 0.0))[0]
        span = f"ids {id_runs(ids)}" if len(ids) > 1 else f"id {ids[0]}" if ids else "ids not kept"
        self.tracker.diagnose_at(
            conn,
            first,
            "note" if conn.lossy or ended else "warn",
            "unconfirmed",
            f"{spec.noun}s never confirmed",
            f"{count} {spec.noun}{'s' * (count != 1)} of {where} never confirmed "
            f"({span}; first sent in packet {first}){lost}{ended or ''}",
        )

    def finish(self, conn: ConnState) -> None:
        sent = conn.rules.get(self.key)
        if sent is None:
            return
        for (ack, sid), items in sent.in_flight.items():
            extra = sent.untracked.get((ack, sid), 0)
            if items or extra:
                self._unconfirmed(conn, ack, sid, items, extra)
        sent.in_flight.clear()
        sent.early.clear()
        for (ack_name, sid), seen in sent.content.items():
            self._reuses_told(conn, ack_name, sid, seen)
        sent.content.clear()
        for number, summary, message, skipped in sent.disorder:
            if skipped < 0 or not conn.lossy:  # ids lost with bytes are no client's doing
                self.tracker.diagnose_at(conn, number, "note", "item_order", summary, message)
        sent.disorder.clear()

    def awaits_later(self, frame: Frame) -> bool:
        return frame.command in self.sent and frame.kind != "response"

    def later(self, frame: Frame) -> dict[str, Any] | None:
        confirms = self.backlinked.get((frame.conn, frame.number))
        return {"confirm_in": list(dict.fromkeys(confirms))} if confirms else None
