"""Hooks: what a declarative spec cannot say. The base class, and how a spec finds its hooks.

A spec names a hook on a field (`hook: osiris_chunk` on a raw field, or `type: hook`
for a field whose extent only code can find) and declares under `hooks:` what the hook
adds to the decoded frame, so field names stay registry-derived. Hooks live in their
protocol's package (dissectors/<name>/), each with a Lua twin in the generated plugin.

A hook works in three steps, cheapest first: `read` finds a `type: hook` field's extent
and value on every decode; `check` runs on every decode for checks worth their cost
(a CRC); `expand` runs only when a view needs what lies below (records, sections).

A hook on a sized raw field may also take the field cut by a gap (`cuts`): its check
and expand then get a Cut, the bytes present before the gap, and its `tail` looks for
whole items in the bytes present after each gap (Deliver's records behind a gap).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from streamdump.spec.dissector import dissector_of
from streamdump.spec.registry import Protocol, SpecError
from streamdump.wire.wildcards import captures

if TYPE_CHECKING:
    import struct

    from streamdump.spec.layout import Ctx
    from streamdump.wire.frame import Node


class Cut(Struct):
    """A hooked raw field that a gap cut: what its check and expand get instead of its bytes.

    head: the field's bytes present before the first gap; size: what its size field says
    (-1 when the frame's start was lost, and with it the field's start); pos: where it
    starts in the frame. tail: what the hook's `tail` found after the gaps, in the hook's
    own terms; found: how many messages the head and tail hold, for counts that must not
    wait for an expand; notes: what the tail could not decide (two readings of the bytes),
    which the reader adds to the frame's notes.
    """

    head: memoryview | bytes
    size: int
    pos: int
    tail: list[Any] = field(default_factory=list)
    found: int = 0
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> str:
        """Unexpanded, it stands for the bytes present, as a raw field's bytes would."""
        return bytes(self.head).hex()


class Around(Struct, frozen=True):
    """What a hook's tail knows beyond its field's own bytes.

    islands: the runs of bytes present after each gap, in order; anchored: the last run
    ends where the frame does; span: the frame's whole length (-1 when unknown).
    before, after: the values beside the field (its siblings) in the frame of the same
    layout and session just before the loss and just after it, in this direction, when
    the capture has them; one_session: every such frame so far belonged to one session,
    so the frame the loss hit is the one between them.
    """

    islands: tuple[bytes, ...]
    anchored: bool
    span: int = -1
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    one_session: bool = False


class Hook:
    """Base class: a hook that neither reads nor checks nor expands anything."""

    name = ""
    min_size = 0
    # The value `read` returns knows where it was read (a `pos` attribute), and `expand` needs
    # only that value and its siblings: Decoder.expand then works on the values a decode
    # already gave instead of decoding the frame again. Such a hook's `check` notes are malformed.
    expands_in_place = False
    # On a sized raw field: a partial decode that the frame's end cuts inside the field gives
    # check and expand a Cut instead of raising past the hook.
    cuts = False
    # What `tail` finds, as notes name them.
    items = "items"

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        spec = protocol.hooks.get(self.name)
        self.names_spec = spec.names if spec is not None else None

    def names(self, text: Any) -> dict[str, str]:
        """What text (the spec's `names.by` field, or another text a hook reads as one) names,
        by the hook's `names` patterns: the first that matches gives its fields; none: {}."""
        if self.names_spec is None or not isinstance(text, str):
            return {}
        for pattern, fixed in self.names_spec[1]:
            found = captures(pattern, text)
            if found is not None:
                return {**dict(fixed), **found}
        return {}

    def read(
        self, mv: memoryview, pos: int, end: int, ctx: Ctx, node: Node | None, name: str
    ) -> tuple[Any, int]:
        raise NotImplementedError(f"hook {self.name} does not read fields of type hook")

    def write(self, buf: bytearray, value: Any) -> None:
        raise NotImplementedError(f"hook {self.name} does not write fields of type hook")

    def skip(self, data: bytes, pos: int, end: int) -> int | None:
        """Where the value read at pos would end, from its size alone, or None where it could
        not be read (read says why); the same end read gives whenever read succeeds. Recovery
        behind a gap steps over candidates with it before decoding any. None: no such step."""
        return None

    def check(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx) -> None:
        """Cheap checks on every decode; problems go to ctx.expert."""

    def expand(self, value: Any, siblings: dict[str, Any], pos: int, ctx: Ctx, node: Node | None) -> None:
        """Add the declared fields to siblings (and nodes under node) when a view needs them."""

    def tail(self, cut: Cut, siblings: dict[str, Any], around: Around) -> tuple[int, int]:
        """Whole items in the bytes after the gaps that cut this field, kept in cut.tail for
        expand: how many messages they hold, and how many bytes of the islands they cover.
        siblings has what the frame's bytes before the gap gave (empty when its start was
        lost). Only for `cuts` hooks."""
        return 0, 0

    def read_items(
        self,
        mv: memoryview,
        pos: int,
        end: int,
        count: int,
        head: struct.Struct,
        names: tuple[str, ...],
        name: str,
    ) -> tuple[list[dict[str, Any]], int] | None:
        """count elements of an array from pos, each the integers head unpacks (named names) and
        then this hook's value (under name), in one call: the dicts, and where they end, equal to
        what reading them one by one gives. None where an element is not of the form the hook
        takes at once: the caller then reads them one by one. The base takes none."""
        return None

    def expand_run(self, holders: list[Any], start: int, name: str, ctx: Ctx) -> int:
        """expand, without a tree, for the run of holders from start (each holding this hook's
        value under name) that the hook can take at once, cheaper than one by one: where the
        run ends. It takes only values expand could not fail on. The base takes none."""
        return start


def build_hooks(protocol: Protocol) -> dict[str, Hook]:
    """One instance of every hook the protocol declares; a declared hook without code is a spec error."""
    known: Mapping[str, type[Hook]] = {cls.name: cls for cls in dissector_of(protocol).hooks}
    hooks: dict[str, Hook] = {}
    for name in protocol.hooks:
        cls = known.get(name)
        if cls is None:
            where = protocol.package or "the protocol package"
            raise SpecError(f"{protocol.source}: hooks.{name}: no hook of that name in {where}")
        hooks[name] = cls(protocol)
    for spec in protocol.all_fields():
        if spec.type == "hook" and spec.hook is not None and type(hooks[spec.hook]).read is Hook.read:
            raise SpecError(
                f"{protocol.source}: field {spec.name}: hook {spec.hook} cannot read a field of type hook"
            )
    return hooks
