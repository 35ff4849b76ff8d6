"""The reader's recovery of what a gap cut: whole elements in the tail of a frame whose middle
a gap took, and in bytes passed over that end where a found frame starts (the tail of a frame
whose start was lost). What each layout's tail allows is analysis/tail.py's; here is what
the reader remembers per direction to use it (the last increasing value, the values beside a
hooked field) and how it adds what it finds to a frame, or makes a frame of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamdump.analysis.tail import HookTail, last_value, recover
from streamdump.spec.hooks import Around, Cut
from streamdump.wire.frame import Expert, Frame
from streamdump.wire.reassembly import SEQ_MOD

if TYPE_CHECKING:
    from streamdump.analysis.pipeline import Runtime, Side
    from streamdump.wire.framing import Piece


def _holder(fields: dict[str, Any], path: tuple[str, ...], make: bool = False) -> dict[str, Any]:
    """The dict at path in a frame's fields (the struct holding a field); {} where there is
    none, or, with make, a new one put there."""
    for name in path:
        inner = fields.get(name)
        if not isinstance(inner, dict):
            if not make:
                return {}
            inner = fields[name] = {}
        fields = inner
    return fields


class Recovering:
    """What the Reader does with the tails of frames a gap cut (its state is in each Side)."""

    @staticmethod
    def _layout(frame: Frame) -> tuple[Any, bool, int]:
        return (frame.key, frame.kind == "response", frame.version)

    def _note_floor(self, side: Side, frame: Frame, runtime: Runtime) -> None:
        """Remember, per layout with a tail rule, what the last frame in this direction ended
        with: its last increasing value (e.g. publishing id), or the values beside a hooked
        field (a chunk's header) with the session they belong to."""
        if not runtime.tail_rules:
            return
        ident = self._layout(frame)
        rule = runtime.tail_rules.get(ident)
        if rule is None:
            return
        if isinstance(rule, HookTail):
            # A copy: views expand the frame before the next one comes, replacing the field.
            holder = dict(_holder(frame.fields, rule.path[:-1]))
            if holder:
                session = frame.fields.get(runtime.sessions.get(frame.command, ""))
                seen = side.beside.get(ident)
                if seen is not None and seen[0] != session:
                    side.mixed.add(ident)
                side.beside[ident] = (session, holder)
            return
        items = frame.fields.get(rule.array)
        value = last_value(items, rule.increasing) if isinstance(items, list) else None
        if value is not None:
            side.floors[ident] = value

    def _orphan(self, side: Side, piece: Piece, runtime: Runtime, after: Frame | None) -> Frame | None:
        """Whole elements in bytes that end where a found frame starts: the tail of a frame whose
        start a gap took. Tried only for layouts seen before in this direction: an array's last
        value bounds the chain from below; a hook is told what the frames on either side held.
        The command is inferred, and the frame says so."""
        decoder = runtime.decoder
        for ident, rule in runtime.tail_rules.items():
            if isinstance(rule, HookTail):
                seen = side.beside.get(ident)
                if seen is None:
                    continue
                beside = None
                if after is not None and self._layout(after) == ident:
                    beside = _holder(after.fields, rule.path[:-1])
                    session = after.fields.get(runtime.sessions.get(after.command, ""))
                    one = ident not in side.mixed and session == seen[0]
                else:
                    one = False
                cut = Cut(b"", -1, -1)
                around = Around(piece.islands, piece.anchored, -1, seen[1], beside, one)
                count, used = rule.hook.tail(cut, {}, around)
                if not count and not cut.notes:
                    continue
                fields: dict[str, Any] = {}
                _holder(fields, rule.path[:-1], make=True)[rule.path[-1]] = cut
                what, undecided = rule.hook.items, cut.notes
            else:
                floor = side.floors.get(ident)
                if floor is None:
                    continue
                items, unused = recover(rule, piece.islands, piece.anchored, [], floor)
                if not items:
                    continue
                fields, count, what = {rule.array: items}, len(items), rule.array
                undecided = []
                used = sum(map(len, piece.islands)) - unused
            key, response, version = ident
            layout = decoder.compiled[ident][0]
            command = decoder.protocol.commands[layout.command]
            wire_key = decoder.wire_key(key, response)
            present = sum(map(len, piece.islands))
            return Frame(
                protocol=decoder.protocol.name,
                wire_key=wire_key,
                key=command.key,
                kind=layout.kind,
                command=command.name,
                version=version,
                size=0,
                fields=fields,
                expert=[
                    Expert(
                        "error",
                        "incomplete frame: its start was lost in a gap; the command is "
                        f"inferred from the {what} chained to "
                        f"{'the next frame' if piece.anchored else 'the end of the bytes'}",
                        0,
                    ),
                    Expert(
                        "note",
                        f"{count} whole {what} recovered from {present} "
                        f"bytes ({present - used} bytes belong to elements a gap cut)",
                        0,
                    ),
                    *(Expert("note", text, 0) for text in undecided),
                ],
                data=b"",
                src=side.src,
                dst=side.dst,
                seq=piece.pos % SEQ_MOD,
                incomplete="start lost in a gap",
                key_text=decoder.key_text(command.key),
            )
        return None

    def _recover_tail(self, side: Side, frame: Frame, piece: Piece, runtime: Runtime) -> None:
        """Add the whole elements found after the gap to the frame's last array (or its hooked
        field's Cut), and say so."""
        rule = runtime.tail_rules.get(self._layout(frame))
        if rule is None:
            return
        present = sum(map(len, piece.islands))
        if isinstance(rule, HookTail):
            holder = _holder(frame.fields, rule.path[:-1], make=True)
            cut = holder.get(rule.path[-1])
            if type(cut) is not Cut:
                if cut is not None:
                    return  # the field is whole: the gap cut what follows it
                cut = holder[rule.path[-1]] = Cut(b"", -1, -1)  # the gap took the field's start
            seen = side.beside.get(self._layout(frame))
            around = Around(piece.islands, piece.anchored, piece.length, seen[1] if seen else None)
            count, used = rule.hook.tail(cut, holder, around)
            unused, what = present - used, rule.hook.items
            frame.expert += [Expert("note", text, 0) for text in cut.notes]
        else:
            before = frame.fields.get(rule.array)
            if not isinstance(before, list):
                return
            items, unused = recover(rule, piece.islands, piece.anchored, before, span=piece.length)
            before.extend(items)
            count, what = len(items), rule.array
        if count:
            frame.expert.insert(
                1,
                Expert(
                    "note",
                    f"{count} whole {what} recovered from the {present} bytes present after "
                    f"the gap ({unused} bytes belong to elements the gap cut)",
                    0,
                ),
            )
