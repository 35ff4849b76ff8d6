"""Turns one complete frame (its header included) into a Frame, and builds frames back.

A Decoder holds only what it compiled from one protocol's registry entry. Decoding is a
pure function of the frame's bytes and, for protocols whose responses do not name their
command (the command is the request's, found by correlation id), of a DecodeState the
caller keeps per connection and passes in; so the same object serves files, live capture
and Spark tasks. Nothing raises out of decode(): problems become expert notes.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from streamdump.spec.hooks import Hook, build_hooks
from streamdump.spec.keyed import Keyed
from streamdump.spec.layout import (
    BadValue,
    Compiler,
    Ctx,
    EntryOp,
    Op,
    Short,
    decode_ops,
    encode_ops,
    part_of,
    title,
)
from streamdump.spec.registry import INT_TYPES, FieldSpec, Layout, Protocol, flat_fields
from streamdump.spec.specialise import Fallback, Specialised, specialise
from streamdump.wire.frame import Expert, Frame, Node
from streamdump.wire.limits import DEFAULT_LIMITS, Limits

# Header fields with these names are the frame's own (Frame.size, .key, .version), not fields.
FRAME_OWN = ("size", "key", "version")
# Requests a DecodeState remembers while their responses are outstanding; older ones go first.
MAX_OUTSTANDING = 100_000
_UNSET: Any = object()


def _has_hook(specs: tuple[FieldSpec, ...], version: int) -> bool:
    return any(
        s.since <= version
        and (
            s.hook is not None
            or _has_hook(s.fields, version)
            or (s.of is not None and _has_hook(s.of.fields, version))
        )
        for s in specs
    )


def _hooks_below(spec: FieldSpec) -> bool:
    """Whether a hook sits on the field or anywhere inside it (members, items, cases)."""
    inner = (spec.of, spec.key, spec.value, spec.default, *spec.cases.values())
    return (
        spec.hook is not None
        or any(_hooks_below(s) for s in spec.fields)
        or any(s is not None and _hooks_below(s) for s in inner)
    )


def _in_place(specs: tuple[FieldSpec, ...], hooks: Mapping[str, Hook]) -> bool:
    """Whether expanding decoded values gives what decoding again with expand on would.

    Every hook must expand in place and be the last of its fields (what it adds then lands
    where a decode puts it, so keys keep their order), reached through plain structs and
    arrays of structs only, as _expand_values walks them.
    """
    for index, spec in enumerate(specs):
        if spec.hook is not None:
            hook = hooks.get(spec.hook)
            if hook is None or not hook.expands_in_place or spec.inline or index != len(specs) - 1:
                return False
        elif not _hooks_below(spec):
            continue
        elif spec.type == "struct" and not spec.inline:
            if not _in_place(spec.fields, hooks):
                return False
        elif spec.type == "array" and spec.of is not None and spec.of.type == "struct":
            if spec.of.inline or spec.of.hook is not None or not _in_place(spec.of.fields, hooks):
                return False
        else:
            return False
    return True


class _Specialised(Mapping[tuple[Any, bool, int], Specialised]):
    """Every layout's fast path, generated the first time a frame of it is decoded: a
    registry has hundreds of layouts and a capture uses a few, and generating them all
    took a noticeable part of a short run."""

    def __init__(self, compiled: Mapping[tuple[Any, bool, int], tuple[Layout, tuple[Op, ...]]]) -> None:
        self.compiled = compiled
        self.made: dict[tuple[Any, bool, int], Specialised] = {}

    def __getitem__(self, ident: tuple[Any, bool, int]) -> Specialised:
        made = self.made.get(ident)
        if made is None:
            layout, ops = self.compiled[ident]
            made = self.made[ident] = specialise(ops, f"{layout.command} {layout.kind} v{ident[2]}")
        return made

    def get(self, ident: tuple[Any, bool, int], default: Any = None) -> Specialised | None:  # type: ignore[override]
        # Asked once per frame: the made function straight from its dict, without Mapping's
        # get and __getitem__ (two Python calls).
        made = self.made.get(ident)
        if made is not None:
            return made
        return self[ident] if ident in self.compiled else default

    def __iter__(self) -> Iterator[tuple[Any, bool, int]]:
        return iter(self.compiled)

    def __len__(self) -> int:
        return len(self.compiled)


class _KeyTexts(dict[Any, str]):
    """Command keys as a protocol writes them, each written once."""

    def __init__(self, write: Callable[[Any], str]) -> None:
        super().__init__()
        self.write = write

    def __missing__(self, key: Any) -> str:
        text = self[key] = self.write(key)
        return text


def _merge_notes(decoded: list[Expert], before: list[Expert]) -> list[Expert]:
    """A fresh decode's notes plus what others (the conversation tracker) added to the frame."""
    # A hook's note of another group (a status an answer carries) is the decoder's too: once.
    return decoded + [e for e in before if e.group != "malformed" and e not in decoded]


class EncodeError(ValueError):
    """The values given cannot be encoded with the named layout."""


class DecodeState:
    """What decoding one connection remembers: outstanding requests' commands, by requester and id.

    Only protocols whose responses carry a status where requests carry the command key need
    it; the pipeline keeps one per connection and passes it to every decode.
    """

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests: OrderedDict[tuple[bool | None, Any], Any] = OrderedDict()

    def ask(self, asker: bool | None, corr: Any, key: Any) -> None:
        self.requests[asker, corr] = key
        if len(self.requests) > MAX_OUTSTANDING:
            self.requests.popitem(last=False)

    def answer(self, asker: bool | None, corr: Any) -> Any:
        return self.requests.pop((asker, corr), None)


class Decoder:
    def __init__(self, protocol: Protocol, *, fast: bool = True, limits: Limits = DEFAULT_LIMITS) -> None:
        self.protocol = protocol
        self.name = protocol.name
        self.limits = limits
        # The largest frame this decoder takes: the spec's sanity cap, unless the user set one.
        self.max_frame = limits.frame_for(protocol.wiring.max_size)
        self.hooks = build_hooks(protocol)
        self.keyed = Keyed(protocol.enums)
        compiler = self.compiler = Compiler(protocol.order, self.hooks, self.keyed)
        self.header_ops = compiler.fields(protocol.header, 1)
        wiring = protocol.wiring
        length_type = wiring.length_type
        self.length_st = struct.Struct(protocol.order + INT_TYPES[length_type][0])
        self.length_at = wiring.length_offset
        # Without a length field (the package's framing rule cuts PDUs) a PDU is all it is given.
        self.framed_by_length = wiring.length is not None
        self.length_end = wiring.length_offset + self.length_st.size if self.framed_by_length else 0
        self.uncounted = wiring.uncounted  # what a frame's size leaves out
        # Bytes every frame's header has at least (the fixed fields before any variable one).
        self.header_size = sum(op.min_size for op in self.header_ops)
        frame = protocol.frame
        self.key_field = frame.key
        key_spec = protocol.header_field(frame.key)
        int_key = key_spec is not None and key_spec.type in INT_TYPES
        self.key_text = protocol.key_formatter()  # the key as the one-line view and notes write it
        self.key_struct = struct.Struct(protocol.order + INT_TYPES[key_spec.type][0]) if int_key else None  # type: ignore[union-attr]
        self.header_names = frozenset(s.name for s in flat_fields(protocol.header))
        # Header fields encoding computes: sizes other fields refer to, and words packed from parts.
        self.derived = frozenset(
            {s.size for s in protocol.header if isinstance(s.size, str) and s.size != "rest"}
            | {s.name for s in protocol.header if s.bits}
        )
        self.lifted = tuple(name for name in FRAME_OWN if name in self.header_names)
        # A header without a version field has one version of every layout: the first.
        self.default_version = 0 if protocol.versioned else 1
        self.response = frame.response
        self.oneway = frame.oneway
        self.response_in_key = frame.response is not None and frame.response[0] == frame.key
        # Responses with keys of their own: response key -> command key, and back.
        self.answers = protocol.answers
        self.answer_keys = {command: wire for wire, command in protocol.answers.items()}
        self.by_request = frame.response_key == "request"
        self.fold_key = frame.key_case == "any"
        self.correlation = protocol.conversation.correlation
        self.layout_versions = frame.layout_versions
        self.entries_name = frame.entries
        # (command key, response?) -> (its command, its layout), as the registry says: asked per frame.
        self._routes: dict[tuple[Any, bool], tuple[Any, Layout | None]] = {}
        self._key_texts = _KeyTexts(self.key_text)  # by key: asked per frame
        # (command key, response?, version) -> (layout, ops); every version of every layout, compiled once.
        self.compiled: dict[tuple[Any, bool, int], tuple[Layout, tuple[Op, ...]]] = {}
        for command in protocol.commands.values():
            for layout in command.layouts.values():
                for version in command.versions:
                    self.compiled[layout.key, layout.kind == "response", version] = (
                        layout,
                        compiler.fields(layout.fields, version, entries=frame.entries is not None),
                    )
        # The generated fast path of the header and of every layout; fast=False keeps only the
        # general ops (the tests decode with both and compare).
        self.header_fast: Specialised | None = specialise(self.header_ops, "header") if fast else None
        self.fast: Mapping[tuple[Any, bool, int], Specialised] = _Specialised(self.compiled) if fast else {}
        # Layouts with a hooked field in some version: only their frames need expanding. By key,
        # not version, so a frame of a version the registry lacks (decoded as a known one) counts.
        self.hooked = {
            (key, response)
            for (key, response, version), (layout, _) in self.compiled.items()
            if _has_hook(layout.fields, version)
        }
        self._hooked_specs: dict[int, tuple[tuple[FieldSpec, ...], tuple[FieldSpec, ...]]] = {}
        # Of those, the layouts whose hooks expand the values a decode gave (Publish's
        # entries): a complete frame of them is expanded without a second decode.
        self.in_place = {
            (layout.key, layout.kind == "response")
            for layout, _ in self.compiled.values()
            if (layout.key, layout.kind == "response") in self.hooked and _in_place(layout.fields, self.hooks)
        }

    # ------------------------------------------------------------------ framing helpers

    def frame_length(self, data: bytes | bytearray | memoryview, start: int = 0) -> int | None:
        """The whole length of the frame at start from its length field; None before that field."""
        if not self.framed_by_length:
            return len(data) - start
        if len(data) - start < self.length_end:
            return None
        (value,) = self.length_st.unpack_from(data, start + self.length_at)
        return value + self.uncounted  # type: ignore[no-any-return]

    def wire_text(self, frame: Frame) -> str:
        """The key as the one-line view shows it: as on the wire where it carries the response bit."""
        return self.key_text(frame.wire_key) if self.response_in_key or self.answers else frame.key_text

    def plausible(self, data: bytes) -> bool:
        """Whether data starts like a frame: sane length, a header that decodes, a known command."""
        if len(data) < self.header_size:
            return False
        total = self.frame_length(data)
        if total is None or not self.header_size <= total <= self.max_frame + self.uncounted:
            return False
        header: dict[str, Any] = {}
        ctx = Ctx([])
        try:
            decode_ops(self.header_ops, memoryview(data), 0, min(len(data), total), header, ctx)
        except (Short, BadValue):
            return False
        if any(e.severity == "error" for e in ctx.expert):
            return False
        response, _, key = self._direction(header)
        if response and self.by_request:
            return True  # its command is its request's: any status may follow
        version = header.get("version", 1) if self.protocol.frame.layout_versions else 1
        return (key, response, version) in self.compiled

    def wire_key(self, key: Any, response: bool) -> Any:
        """The key field's value on the wire: the command key, with the response bit where it carries one."""
        if response and self.response_in_key and isinstance(key, int):
            return key | self.response[1]  # type: ignore[index]
        if response:
            return self.answer_keys.get(key, key)
        return key

    def _direction(self, header: dict[str, Any]) -> tuple[bool, bool, Any]:
        """Whether a decoded header marks a response, or a one-way request, and its command key
        (without the response bit, where the key carries it)."""
        response = self._marked(header, self.response) if self.response is not None else False
        key = header.get(self.key_field)
        kind = type(key)
        if kind is str:  # asked per frame: the two usual types first, without isinstance's unions
            if self.key_struct is not None:
                key = None  # a keyed header's value that did not convert (an unknown name)
            elif self.fold_key:
                key = key.upper()
        elif kind is not int:
            if (
                not isinstance(key, int | str)
                or isinstance(key, bool)
                or (self.key_struct is not None and isinstance(key, str))
            ):
                key = None  # a keyed header's value that did not convert (a list)
            elif self.fold_key and isinstance(key, str):
                key = key.upper()
        if self.response_in_key and isinstance(key, int):
            key &= ~self.response[1]  # type: ignore[index]
        elif key in self.answers:
            return True, False, self.answers[key]
        oneway = self.oneway is not None and not response and self._marked(header, self.oneway)
        return response, oneway, key

    @staticmethod
    def _marked(header: dict[str, Any], mark: tuple[str, int] | None) -> bool:
        if mark is None:
            return False
        value = header.get(mark[0])
        return isinstance(value, int) and bool(value & mark[1])

    # ------------------------------------------------------------------ decode

    def decode(
        self,
        data: bytes,
        *,
        nodes: list[Node] | None = None,
        partial: bool = False,
        expand: bool = False,
        state: DecodeState | None = None,
        from_client: bool | None = None,
        key: Any = _UNSET,
    ) -> Frame:
        """Decode one frame. With a nodes list, also fill it with the detail tree.

        partial: data is the captured start of a longer frame; decode what is there
        without complaining that the length field promises more.
        expand: also run the hooks' expand step (records, message sections); a tree implies it.
        state, from_client: the connection's DecodeState and the frame's direction, for
        responses whose command is their request's. key: that command key, when a caller
        decodes a frame again (a tree, an expansion) and knows it already.
        """
        mv = memoryview(data)
        expert: list[Expert] = []
        ctx = Ctx(expert, nodes, expand=expand, partial=partial, limits=self.limits)
        fields: dict[str, Any] = {}
        have = len(data)
        total = self.frame_length(data) if self.framed_by_length else have
        if total is None or have < self.header_size:
            expert.append(Expert("error", f"frame too short for a header: {have} bytes", 0))
            return self._frame(None, None, "unknown", None, 0, 0, fields, expert, data)
        size = total - self.uncounted
        if partial:
            ctx.declared_end = total
        end = have
        if total != end:
            if total < end:
                expert.append(Expert("warn", f"{end - total} bytes beyond the frame size {size}", 0))
                end = total
            elif not partial:
                present = end - (total - size)
                expert.append(Expert("error", f"frame size says {size} bytes but only {present} present", 0))
        try:
            if self.header_fast is not None and nodes is None and not partial:
                mark = len(expert)
                try:
                    pos = self.header_fast(mv, 0, end, fields, ctx)
                except (Fallback, Short, BadValue, struct.error):
                    fields.clear()
                    del expert[mark:]
                    pos = decode_ops(self.header_ops, mv, 0, end, fields, ctx)
            else:
                pos = decode_ops(self.header_ops, mv, 0, end, fields, ctx)
        except (Short, BadValue) as exc:
            what = exc.detail() if isinstance(exc, Short) else exc.text
            expert.append(Expert("error", f"frame too short for a header: {what}", exc.offset))
            wire_key = fields.get(self.key_field)
            return self._frame(
                wire_key,
                wire_key,
                "unknown",
                None,
                fields.get("version", self.default_version),
                size,
                {},
                expert,
                data,
            )
        wire_key = fields.get(self.key_field)
        version = fields.get("version", self.default_version)
        response, oneway, command_key = self._direction(fields)
        for name in self.lifted:
            fields.pop(name, None)
        if self.by_request:
            corr = fields.get(self.correlation or "")
            if response:
                if key is not _UNSET:
                    command_key = key
                else:
                    command_key = state.answer(not from_client, corr) if state is not None else None
            elif state is not None and not oneway:
                state.ask(from_client, corr, command_key)
        proto = self.protocol
        route = self._routes.get((command_key, response))
        if route is None:
            route = self._routes[command_key, response] = (
                proto.by_key.get(command_key) if command_key is not None else None,
                proto.layout(command_key, response),
            )
        command, layout = route
        if layout is None:
            kind = "response" if response else "command" if oneway and command is not None else "unknown"
            if command_key is None and response:
                expert.append(
                    Expert(
                        "note",
                        "its command is its request's, which the capture does not show; body not decoded",
                        self.length_end,
                    )
                )
            elif command is None:
                shown = (
                    wire_key
                    if command_key is None and isinstance(wire_key, str)
                    else self.key_text(command_key)
                )
                expert.append(Expert("warn", f"unknown command key {shown}", self.length_end))
            else:
                expert.append(
                    Expert(
                        "warn",
                        f"{command.name} has no {kind} layout (key {self.key_text(wire_key)})",
                        self.length_end,
                    )
                )
            self._trailing(mv, pos, end, fields, expert, nodes, "payload")
            return self._frame(
                wire_key,
                command_key,
                kind,
                command.name if command else None,
                version,
                size,
                fields,
                expert,
                data,
            )
        assert command is not None
        kind = "command" if oneway and layout.kind == "request" else layout.kind
        layout_version = version
        if not self.layout_versions:
            layout_version = command.versions[0]
        elif version not in command.versions:
            layout_version = max((v for v in command.versions if v <= version), default=command.versions[0])
            known = ", ".join(map(str, command.versions))
            expert.append(
                Expert(
                    "warn",
                    f"{command.name} version {version} is not in the registry (known: {known}); "
                    f"decoded as version {layout_version}",
                    self.length_end + 2,
                )
            )
        ident = (command_key, response, layout_version)
        _, ops = self.compiled[ident]
        entries_name = self.entries_name
        if entries_name is not None:
            found = fields.get(entries_name)
            ctx.entries = dict(found) if isinstance(found, dict) else None
            ctx.entries_at = (self.length_end, pos - self.length_end)
        fast = self.fast.get(ident) if nodes is None and not partial else None
        if fast is not None:
            mark = len(expert)
            line_done = ctx.line_done  # where the header left a text line, for a second try
            try:
                after = fast(mv, pos, end, fields, ctx)
                if ctx.entries is not None:
                    self._entries_left(ctx, fields, nodes)
                if after < end:
                    self._trailing(mv, after, end, fields, expert, nodes, "trailing")
                return self._frame(
                    wire_key, command_key, kind, command.name, version, size, fields, expert, data
                )
            except (Fallback, Short, BadValue, struct.error):
                # Start again with the general ops, which keep partial values and explain.
                del expert[mark:]
                for name in list(fields):
                    if name not in self.header_names:
                        del fields[name]
                ctx.budget = None
                ctx.line_done = line_done
                if entries_name is not None:
                    found = fields.get(entries_name)
                    ctx.entries = dict(found) if isinstance(found, dict) else None
        try:
            pos = decode_ops(ops, mv, pos, end, fields, ctx)
        except Short as exc:
            expert.append(Expert("error", exc.message(), exc.offset, cut=partial))
            pos = end
        except BadValue as exc:
            expert.append(Expert("error", exc.text, exc.offset))
            pos = end
        self._entries_left(ctx, fields, nodes)
        self._trailing(mv, pos, end, fields, expert, nodes, "trailing")
        return self._frame(wire_key, command_key, kind, command.name, version, size, fields, expert, data)

    def _entries_left(self, ctx: Ctx, fields: dict[str, Any], nodes: list[Node] | None) -> None:
        """The header's entries map keeps only the entries no layout field took."""
        name = self.protocol.frame.entries
        if name is None or ctx.entries is None:
            return
        if ctx.entries:
            fields[name] = ctx.entries
        else:
            fields.pop(name, None)
        if nodes is not None:
            found = _find_node(nodes, name)
            if found is not None:
                siblings, node = found
                if ctx.entries:
                    left = set(map(str, ctx.entries))
                    node.children = [c for c in node.children if c.label in left]
                    node.value = ctx.entries
                else:
                    siblings.remove(node)

    def expand(self, frame: Frame) -> Frame:
        """The frame with everything below its headers decoded (records, sections), in place.

        Decoding is pure, so decoding again with the expand step on gives the same
        fields plus what the hooks add, and the same expert notes plus theirs. Where the
        hooks can expand the values the decode gave (Decoder.in_place), that gives the same
        without a second decode.
        """
        if frame.expanded:
            return frame
        if (frame.key, frame.kind == "response") not in self.hooked:
            frame.expanded = True  # nothing below its headers: decoding again would add nothing
            return frame
        layout = self.protocol.layout(frame.key, frame.kind == "response")
        # Notes the decode made would interleave with the hooks' in a second decode: only a
        # frame without them is expanded where it stands.
        if (
            frame.incomplete is None
            and layout is not None
            and (frame.key, frame.kind == "response") in self.in_place
            and not any(e.group == "malformed" for e in frame.expert)
        ):
            notes: list[Expert] = []
            self._expand_values(
                layout.fields, frame.fields, Ctx(notes, expand=True, limits=self.limits), guarded=True
            )
            frame.expert = _merge_notes(notes, frame.expert)
            frame.expanded = True
            return frame
        if frame.incomplete is None:
            full = self.decode(frame.data, expand=True, key=frame.key)
            frame.fields, frame.expert = full.fields, _merge_notes(full.expert, frame.expert)
            frame.expanded = True
            return frame
        # An incomplete frame may hold elements recovered after a gap, which decoding its
        # bytes again would not find: expand the values it has instead.
        if layout is not None:
            self._expand_values(
                layout.fields, frame.fields, Ctx(frame.expert, expand=True, limits=self.limits)
            )
        frame.expanded = True
        return frame

    def _with_hooks(self, specs: tuple[FieldSpec, ...]) -> tuple[FieldSpec, ...]:
        """Those of specs with a hook on or below them: all that expanding values visits."""
        found = self._hooked_specs.get(id(specs))
        if found is None:
            # Kept with the specs, so their id names them while the entry lives.
            found = self._hooked_specs[id(specs)] = (specs, tuple(s for s in specs if _hooks_below(s)))
        return found[1]

    def _expand_values(
        self, specs: tuple[FieldSpec, ...], values: dict[str, Any], ctx: Ctx, guarded: bool = False
    ) -> None:
        """The hooks' expand step on decoded values. guarded: a hook that raises becomes the
        note a decode would make of it (run_hook's), for a frame that must come out as a
        second decode would give it."""
        for spec in self._with_hooks(specs):
            value = values.get(spec.name)
            if value is None:
                continue
            if spec.hook is not None:
                self._expand_hooked(spec, [values], ctx, guarded)
            elif spec.type == "struct" and isinstance(value, dict):
                self._expand_values(spec.fields, value, ctx, guarded)
            elif spec.of is not None and spec.of.type == "struct" and isinstance(value, list):
                inner = self._with_hooks(spec.of.fields)
                if len(inner) == 1 and inner[0].hook is not None:
                    # Items whose one hooked member is the hook's own (a Publish frame's
                    # messages, hundreds of them): one loop, not a walk of each item.
                    self._expand_hooked(inner[0], value, ctx, guarded)
                    continue
                for item in value:
                    if isinstance(item, dict):
                        self._expand_values(spec.of.fields, item, ctx, guarded)

    def _expand_hooked(self, spec: FieldSpec, holders: list[Any], ctx: Ctx, guarded: bool) -> None:
        """The expand step of the hook on spec, for its value in each of holders (dicts)."""
        hook = self.hooks[spec.hook]  # type: ignore[index]
        name = spec.name
        index, count = 0, len(holders)
        while index < count:
            index = hook.expand_run(holders, index, name, ctx)  # most of them, at once
            if index >= count:
                break
            values = holders[index]
            index += 1
            value = values.get(name) if isinstance(values, dict) else None
            if value is None:
                continue
            pos = getattr(value, "pos", 0)
            if not guarded:
                hook.expand(value, values, pos, ctx, None)
                continue
            try:
                hook.expand(value, values, pos, ctx, None)
            except Exception as exc:  # as run_hook: decoding never raises
                ctx.expert.append(
                    Expert("error", f"hook {hook.name} failed: {type(exc).__name__}: {exc}", pos)
                )

    def tree(self, frame: Frame) -> list[Node]:
        """The detail tree of a frame, built on demand by decoding it again with nodes on.

        A tree runs the expand step, so a complete frame comes out expanded too, without a
        second decode for it.
        """
        nodes: list[Node] = []
        full = self.decode(frame.data, nodes=nodes, partial=frame.incomplete is not None, key=frame.key)
        if frame.incomplete is None and not frame.expanded:
            frame.fields, frame.expert = full.fields, _merge_notes(full.expert, frame.expert)
            frame.expanded = True
        return nodes

    def _trailing(
        self,
        mv: memoryview,
        pos: int,
        end: int,
        fields: dict[str, Any],
        expert: list[Expert],
        nodes: list[Node] | None,
        name: str,
    ) -> None:
        if pos >= end:
            return
        fields[name] = mv[pos:end]
        if name == "trailing":
            expert.append(Expert("warn", f"{end - pos} bytes after the last field", pos))
        if nodes is not None:
            nodes.append(Node(None, title(name), pos, end - pos, mv[pos:end]))

    def _frame(
        self,
        wire_key: Any,
        key: Any,
        kind: str,
        command: str | None,
        version: int,
        size: int,
        fields: dict[str, Any],
        expert: list[Expert],
        data: bytes,
    ) -> Frame:
        if key is None and isinstance(wire_key, str):
            text = wire_key
        else:
            text = self._key_texts[key] if type(key) is int or type(key) is str else self.key_text(key)
        # Positional, in Frame's order: a frame is made per frame the capture holds.
        return Frame(
            self.name, wire_key, key, kind, command, version, size, fields, expert, data, key_text=text
        )

    # ------------------------------------------------------------------ encode

    def encode_struct(self, name: str, values: Mapping[str, Any]) -> bytes:
        """One value of a named struct of the spec (a stored message, say), encoded alone."""
        codec = self.compiler.codec(_struct_spec(self.protocol, name), 1)
        buf = bytearray()
        try:
            codec.write(buf, dict(values))
        except (KeyError, TypeError, struct.error, AttributeError, ValueError) as exc:
            raise EncodeError(f"{name}: cannot encode: {exc}") from None
        return bytes(buf)

    def encode(self, command: str, kind: str, fields: Mapping[str, Any], version: int = 1) -> bytes:
        """Build a whole frame (header included) from a command name and field values.

        Header fields the frame section derives (the length, the key, the response and
        one-way marks) are filled in; others (a correlation id, a JSON header's language)
        come from fields. A response whose key field carries its status takes it from fields.
        """
        cmd = self.protocol.commands.get(command)
        if cmd is None:
            raise EncodeError(f"unknown command {command!r}")
        layout = cmd.layouts.get(kind)
        if layout is None:
            raise EncodeError(f"{command} has no {kind} layout (has: {', '.join(cmd.layouts)})")
        if version not in cmd.versions:
            raise EncodeError(f"{command} has no version {version}")
        response = kind == "response"
        ops = self.compiled[cmd.key, response, version][1]
        # What the header derives is derived again (a re-encoded JSON header has its own length).
        values: dict[str, Any] = {k: v for k, v in fields.items() if k not in self.derived}
        length_name = self.protocol.wiring.length
        if length_name is not None:
            values[length_name] = 0  # patched below, once the frame's length is known
        if "version" in self.lifted and (self.protocol.frame.layout_versions or "version" not in values):
            values["version"] = version  # else the header's version says who sent it, as given
        if not (response and self.by_request):
            values[self.key_field] = self.wire_key(cmd.key, response)
        elif self.key_field not in values:
            raise EncodeError(f"{command} response: its {self.key_field} carries the status; give it")
        for spec in (*self.protocol.header, *layout.fields):
            if spec.const is not None and spec.name not in values:
                values[spec.name] = spec.const
        for spec in self.protocol.header:
            # A packed word is built from its parts; a part not given is the given word's, else 0.
            word = fields.get(spec.name)
            for part in spec.bits:
                if part.name not in values and part.name not in self.derived:
                    values[part.name] = part_of(word, part.mask or 0) if isinstance(word, int) else 0
        for mark, wanted in ((self.response, response), (self.oneway, False)):
            if mark is None or mark[0] == self.key_field:
                continue
            name, mask = mark
            spec = self.protocol.header_field(name)
            # A mark inside a packed word is set in the parts it covers, which make the word.
            targets = (
                [(p.name, p.mask or 0) for p in spec.bits if (p.mask or 0) & mask]
                if spec is not None and spec.bits
                else [(name, -1)]
            )
            for target, part_mask in targets:
                bits = part_of(mask & part_mask, part_mask) if part_mask != -1 else mask
                flag = values.get(target, 0)
                values[target] = flag | bits if wanted else flag & ~bits if mark is self.response else flag
        entries_name = self.protocol.frame.entries
        if entries_name is not None:
            entries = dict(values.get(entries_name) or {})
            for op in ops:
                if isinstance(op, EntryOp) and values.get(op.name) is not None:
                    entries[op.wire] = self.keyed.wire(op.spec, values[op.name], text=True)
            values[entries_name] = entries or None
        try:
            body = bytearray()
            encode_ops(self.header_ops, body, values)
            header_end = len(body)
            encode_ops(ops, body, values)
            if len(body) == header_end and self.header_ops and _ends_word(self.header_ops[-1]):
                body[-1:] = b"\r\n"  # a text operation without words: its name ends its line
        except (KeyError, TypeError, struct.error, AttributeError, ValueError) as exc:
            raise EncodeError(f"{command} {kind}: cannot encode: {exc}") from None
        if length_name is not None:
            self.length_st.pack_into(body, self.length_at, len(body) - self.uncounted)
        return bytes(body)


def _ends_word(op: Op) -> bool:
    spec = getattr(op, "spec", None)
    return spec is not None and spec.size == "word"


def _struct_spec(protocol: Protocol, name: str) -> FieldSpec:
    if name not in protocol.structs:
        raise EncodeError(f"{protocol.name} has no struct {name!r}")
    return FieldSpec(name=name, type="struct", struct=name, fields=protocol.structs[name])


def _find_node(nodes: list[Node], name: str) -> tuple[list[Node], Node] | None:
    """The map node of that name in a tree, and the list holding it."""
    for node in nodes:
        if node.spec is not None and node.spec.name == name and node.spec.type == "map":
            return nodes, node
        found = _find_node(node.children, name)
        if found is not None:
            return found
    return None
