"""Flow-control credit: the spec's `conversation.credit`, a rule of the tracker (Lua twin: credit.lua).

A consumer grants its subscription credit (Subscribe's initial credit, then Credit frames);
each Deliver spends one. The rule follows what is left (credit_left on each Deliver), tells
deliveries the credit did not allow, stalls where deliveries stopped with the credit at zero
for a second or more until the client granted more, and a subscription left at zero at the
end. The broker answers a Credit only to refuse it: that answer is linked to its grant.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, session_name
from streamdump.spec.registry import Protocol, Ref
from streamdump.wire.frame import Frame, links_of

# Credit at zero for less than this is the normal rhythm of a consumer granting as it goes.
CREDIT_STALL_S = 1.0


class CreditSpec(Struct, frozen=True):
    session: str
    grant: tuple[Ref, ...]
    spend: str
    refusal: str | None


class Credit(Struct):
    left: int
    zero: tuple[int, float] | None = None  # (packet, ts) where it reached zero
    stall: tuple[int, float, int, float] | None = None  # zero packet/ts, grant packet/ts


class Credits(Struct):
    """One connection's subscriptions' credit."""

    left: dict[int, Credit] = field(default_factory=dict)
    last_grant: dict[int, Frame] = field(default_factory=dict)
    beyond: dict[int, tuple[Frame, int]] = field(default_factory=dict)  # sid -> first, count


class Flow(Rule):
    """Credit granted and spent per subscription."""

    key = "credit"
    links = ("credit_left",)

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> CreditSpec:
        at = "conversation.credit"
        if not isinstance(raw, dict) or not {"session", "grant", "spend"} <= set(raw):
            raise check.fail(at, "needs session, grant and spend")
        unknown = set(raw) - {"session", "grant", "spend", "refusal"}
        if unknown:
            raise check.fail(at, f"unknown key {sorted(unknown)[0]!r}")
        if raw["session"] not in check.sessions():
            raise check.fail(at, f"unknown session {raw['session']!r}")
        grants = tuple(check.ref(g, f"{at}.grant", int_only=True) for g in raw["grant"])
        check.command(raw["spend"], f"{at}.spend")
        if raw.get("refusal") is not None:
            check.command(raw["refusal"], f"{at}.refusal")
        return CreditSpec(raw["session"], grants, raw["spend"], raw.get("refusal"))

    @classmethod
    def lua(cls, spec: CreditSpec, protocol: Protocol) -> dict[str, Any]:
        return {
            "session": spec.session,
            "grant": [{"command": r.command, "path": list(r.path)} for r in spec.grant],
            "spend": spec.spend,
            "refusal": spec.refusal,
        }

    def __init__(self, tracker: Any, spec: CreditSpec) -> None:
        super().__init__(tracker, spec)
        session = tracker.spec.sessions[spec.session]
        self.id, self.open, self.close = session.id, session.open, session.close
        self.grants = {ref.command: ref for ref in spec.grant}
        self.commands = frozenset((*self.grants, spec.spend, *([session.close] if session.close else [])))

    def feed(self, conn: ConnState, frame: Frame) -> None:
        sid = frame.fields.get(self.id)
        if not isinstance(sid, int):
            return
        credits: Credits = self.state(conn, Credits)
        command = frame.command or ""
        if command in self.grants and frame.kind != "response":
            amount = frame.fields.get(self.grants[command].path[0])
            if not isinstance(amount, int):
                return
            credits.last_grant[sid] = frame
            credit = credits.left.get(sid)
            if command == self.open:
                credits.left[sid] = Credit(amount)
            elif credit is not None:
                if credit.zero is not None:
                    credit.stall = (*credit.zero, frame.number, frame.ts)
                    credit.zero = None
                credit.left += amount
        elif command == self.spec.spend:
            credit = credits.left.get(sid)
            if credit is None:
                return
            if credit.stall is not None:
                self._stalled(conn, sid, credit, resumed=frame)
            if credit.left == 0:
                first, count = credits.beyond.get(sid, (frame, 0))
                credits.beyond[sid] = (first, count + 1)
                return
            credit.left -= 1
            links_of(frame)["credit_left"] = credit.left
            if credit.left == 0:
                credit.zero = (frame.number, frame.ts)
        elif command == self.close and frame.kind == "request":
            credit = credits.left.pop(sid, None)
            if credit is not None and credit.stall is not None:
                self._stalled(conn, sid, credit, resumed=None)

    def status(self, conn: ConnState, frame: Frame, request: Frame | None, code: int, what: str) -> bool:
        """A refusal of a grant (it answers only to refuse): linked to the grant it answers."""
        if request is not None or frame.command != self.spec.refusal:
            return False
        sid = frame.fields.get(self.id)
        credits: Credits = self.state(conn, Credits)
        grant = credits.last_grant.get(sid) if isinstance(sid, int) else None
        if grant is not None:
            self.tracker.pair(grant, frame)
            links_of(frame)["response_time"] = round(frame.ts - grant.ts, 6)
        asked = f" (packet {grant.number})" if grant is not None else ""
        self.tracker.note(
            conn,
            frame,
            "warn",
            "error_response",
            f"{frame.command}: {what}",
            f"{frame.command} for subscription {sid}{asked} refused: {what}",
        )
        return True

    def _where(self, conn: ConnState, sid: int) -> str:
        return session_name("subscription", sid, conn.sessions.get((self.spec.session, sid)))

    def _stalled(self, conn: ConnState, sid: int, credit: Credit, resumed: Frame | None) -> None:
        assert credit.stall is not None
        zero_at, zero_ts, grant_at, grant_ts = credit.stall
        credit.stall = None
        if grant_ts - zero_ts < CREDIT_STALL_S:
            return
        then = (
            f"; deliveries resumed at packet {resumed.number}"
            if resumed is not None
            else "; no delivery followed the grant"
        )
        self.tracker.diagnose_at(
            conn,
            zero_at,
            "warn" if resumed is not None else "note",
            "credit_exhausted",
            "deliveries stopped with credit exhausted",
            f"{self._where(conn, sid)} ran out of credit at packet {zero_at}; no delivery could follow for "
            f"{grant_ts - zero_ts:.3f} s until the client granted more at packet {grant_at}{then}",
        )

    def finish(self, conn: ConnState) -> None:
        credits: Credits | None = conn.rules.get(self.key)
        if credits is None:
            return
        spend = self.spec.spend
        for sid, (first, count) in credits.beyond.items():
            lost = "; the capture lost bytes of this connection, maybe a grant" if conn.lossy else ""
            self.tracker.note(
                conn,
                first,
                "note" if conn.lossy else "warn",
                "beyond_credit",
                f"{spend} beyond the granted credit",
                f"{count} {spend} frame{'s' * (count != 1)} to subscription {sid} while it had no credit "
                f"left (first at packet {first.number}){lost}",
            )
        for sid, credit in credits.left.items():
            self._end(conn, sid, credit)

    def _end(self, conn: ConnState, sid: int, credit: Credit) -> None:
        if credit.stall is not None:
            self._stalled(conn, sid, credit, resumed=None)
        if credit.zero is None or conn.last is None:
            return
        zero_at, zero_ts = credit.zero
        quiet = conn.last.ts - zero_ts
        if quiet < CREDIT_STALL_S:
            return
        self.tracker.diagnose_at(
            conn,
            zero_at,
            "note",
            "credit_exhausted",
            "credit exhausted and never granted again",
            f"{self._where(conn, sid)} ran out of credit at packet {zero_at} and was never granted more "
            f"({quiet:.3f} s until the connection's last frame)",
        )

    def awaits_later(self, frame: Frame) -> bool:
        return frame.command in self.grants  # the refusal that answers it

    def later(self, frame: Frame) -> dict[str, Any] | None:
        if frame.links and "response_in" in frame.links:
            return {"response_in": frame.links["response_in"]}
        return None
