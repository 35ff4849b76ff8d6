"""What a protocol package adds to the conversation tracker: rules of its own, as hooks.

The tracker engine (tracker.py) knows what any protocol of requests, responses and sessions
needs: pairing by correlation id, status codes, requests never answered, sessions, how the
server closes, how connections end. What only one protocol does (RabbitMQ Streams' credit
and publish confirms, NATS's reply subjects and PINGs, RocketMQ's held pulls, EventMesh's
heartbeats) is a Rule its package declares in its DISSECTOR, with its section of the spec's
`conversation:` (the rule's `key`) parsed by the rule itself, and a Lua twin beside it for
what the plugin tells on a frame.

A rule sees every frame through the hooks below, in the order the package lists its rules;
each hook has a default that does nothing, so a rule writes only what it needs. Per
connection it keeps its own state (`state(conn)`), and it files findings through the
tracker (`tracker.note`, `tracker.diagnose`), by the kinds of wire/findings.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from streamdump.analysis.state import ConnState, SideState
    from streamdump.analysis.tracker import Tracker
    from streamdump.spec.registry import Protocol, Ref
    from streamdump.wire.frame import Frame


class SpecCheck(Protocol):
    """What a rule's parse may ask of the registry about the spec it is in."""

    def fail(self, where: str, message: str) -> Exception: ...
    def command(self, name: Any, where: str) -> Any: ...
    def ref(self, text: Any, where: str, *, int_only: bool = False) -> Ref: ...
    def field_names(self) -> set[str]: ...
    def sessions(self) -> Mapping[str, Any]: ...


class Rule:
    """One protocol's own conversation rule."""

    # Its section under the spec's `conversation:`.
    key: ClassVar[str]
    # The links it sets on frames: the spec's conversation.links must declare them.
    links: ClassVar[tuple[str, ...]] = ()
    # The commands whose frames `feed` looks at (None: every frame the engine feeds it).
    commands: frozenset[str] | None = None
    # The commands whose frames `before` looks at (None: every frame).
    before_on: frozenset[str] | None = None

    def __init__(self, tracker: Tracker, spec: Any) -> None:
        self.tracker = tracker
        self.spec = spec

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> Any:
        """The rule's section, checked against the spec: a SpecError (check.fail) when wrong."""
        return raw

    @classmethod
    def lua(cls, spec: Any, protocol: Protocol) -> Any:
        """What the rule's Lua twin reads of its section (SPEC.conversation.rules[key]); None:
        the rule tells nothing on a frame, so the plugin has no twin of it."""
        return None

    def state(self, conn: ConnState, make: Callable[[], Any]) -> Any:
        """The rule's own state of a connection, made on first use."""
        found = conn.rules.get(self.key)
        if found is None:
            found = conn.rules[self.key] = make()
        return found

    # ------------------------------------------------------------------ frame by frame

    def before(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        """Every frame, before the engine pairs it (silence, limits, replies)."""

    def feed(self, conn: ConnState, frame: Frame) -> None:
        """A frame of a known command (or a response to one), after the engine paired it and
        followed its sessions."""

    def status(self, conn: ConnState, frame: Frame, request: Frame | None, code: int, what: str) -> bool:
        """A response's status is not OK: True when the rule told it (an authentication that
        failed, a refused credit grant), so the engine's own words are not added."""
        return False

    def explain(self, conn: ConnState, frame: Frame, request: Frame | None, code: int) -> str:
        """Words the rule adds to a failed request's finding (what the code means for it, what
        the server had said of its subject), each starting with "; " or ": "."""
        return ""

    def holds(self, request: Frame) -> float | None:
        """How long the server may hold this request before answering (a long poll), in seconds."""
        return None

    def session_ended(self, conn: ConnState, session: str, sid: int) -> None:
        """A session id was reopened or closed: what its old self left is told now."""

    # ------------------------------------------------------------------ the end

    def finish(self, conn: ConnState) -> None:
        """What only the end of the read shows about this connection."""

    # ------------------------------------------------------------------ two passes

    def awaits_later(self, frame: Frame) -> bool:
        """Whether frames after this one may link back to it (two passes keep it for that)."""
        return False

    def later(self, frame: Frame) -> dict[str, Any] | None:
        """What a frame this rule kept learned from the frames after it."""
        return None


def rule_classes(dissector: Any) -> Iterable[type[Rule]]:
    """The rules a protocol package declares, in order."""
    return tuple(getattr(dissector, "rules", ()) or ())
