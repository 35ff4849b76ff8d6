"""Turns one complete frame (size prefix included) into a Frame, and builds frames back.

A Decoder holds only what it compiled from one protocol's registry entry; decoding
keeps no state between frames, so the same object serves files, live capture and
Spark tasks. Nothing raises out of decode(): problems become expert notes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from streamdump.core.frame import Expert, Frame, Node
from streamdump.spec.hooks import build_hooks
from streamdump.spec.layout import BadValue, Ctx, Op, Short, compile_fields, decode_ops, encode_ops, title
from streamdump.spec.registry import INT_TYPES, FieldSpec, Layout, Protocol
from streamdump.spec.specialise import Fallback, Specialised, specialise


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


def _merge_notes(decoded: list[Expert], before: list[Expert]) -> list[Expert]:
    """A fresh decode's notes plus what others (the conversation tracker) added to the frame."""
    return decoded + [e for e in before if e.group != "malformed"]


class EncodeError(ValueError):
    """The values given cannot be encoded with the named layout."""


class Decoder:
    def __init__(self, protocol: Protocol, *, fast: bool = True) -> None:
        self.protocol = protocol
        self.size_st = struct.Struct(">" + INT_TYPES[protocol.wiring.size_type][0])
        self.hooks = build_hooks(protocol)
        self.header_ops = compile_fields(protocol.header, 1)
        self.header_size = sum(op.min_size for op in self.header_ops)
        key_spec = next(f for f in protocol.header if f.name == "key")
        if protocol.header[0] is not key_spec:
            raise ValueError(f"{protocol.source}: the header must start with its key")
        self.key_struct = struct.Struct(">" + INT_TYPES[key_spec.type][0])
        # (wire key, version) -> (layout, ops); every version of every layout, compiled once.
        self.compiled: dict[tuple[int, int], tuple[Layout, tuple[Op, ...]]] = {}
        for command in protocol.commands.values():
            for layout in command.layouts.values():
                for version in command.versions:
                    self.compiled[layout.key, version] = (
                        layout,
                        compile_fields(layout.fields, version, self.hooks),
                    )
        # The generated fast path of every layout; fast=False keeps only the general ops
        # (the tests decode with both and compare).
        self.fast: dict[tuple[int, int], Specialised] = (
            {
                (key, version): specialise(ops, f"{layout.command} {layout.kind} v{version}")
                for (key, version), (layout, ops) in self.compiled.items()
            }
            if fast
            else {}
        )
        # Wire keys with a hooked field in some version: only their frames need expanding. By key,
        # not version, so a frame of a version the registry lacks (decoded as a known one) counts.
        self.hooked = {
            key for (key, version), (layout, _) in self.compiled.items() if _has_hook(layout.fields, version)
        }

    def plausible(self, data: bytes) -> bool:
        """Whether data starts like a frame: sane size, a key with a layout, a known version."""
        size_len = self.size_st.size
        if len(data) < size_len + self.header_size:
            return False
        (size,) = self.size_st.unpack_from(data, 0)
        if not self.header_size <= size <= self.protocol.wiring.max_size:
            return False
        header: dict[str, Any] = {}
        decode_ops(self.header_ops, memoryview(data), size_len, len(data), header, Ctx([]))
        return (header["key"], header["version"]) in self.compiled

    # ------------------------------------------------------------------ decode

    def decode(
        self, data: bytes, *, nodes: list[Node] | None = None, partial: bool = False, expand: bool = False
    ) -> Frame:
        """Decode one frame. With a nodes list, also fill it with the detail tree.

        partial: data is the captured start of a longer frame; decode what is there
        without complaining that the size field promises more.
        expand: also run the hooks' expand step (records, message sections); a tree implies it.
        """
        mv = memoryview(data)
        expert: list[Expert] = []
        ctx = Ctx(expert, nodes, expand=expand)
        size_len = self.size_st.size
        fields: dict[str, Any] = {}
        if len(data) < size_len + self.header_size:
            expert.append(Expert("error", f"frame too short for a header: {len(data)} bytes", 0))
            return self._frame(0, "unknown", None, 0, len(data), fields, expert, data)
        (size,) = self.size_st.unpack_from(mv, 0)
        if partial:
            ctx.declared_end = size_len + size
        end = len(data)
        if size + size_len != end:
            if size + size_len < end:
                expert.append(
                    Expert("warn", f"{end - size - size_len} bytes beyond the frame size {size}", 0)
                )
                end = size + size_len
            elif not partial:
                expert.append(
                    Expert("error", f"frame size says {size} bytes but only {end - size_len} present", 0)
                )
        if nodes is not None:
            nodes.append(Node(None, "Size", 0, size_len, size))
        header: dict[str, Any] = {}
        try:
            pos = decode_ops(self.header_ops, mv, size_len, end, header, ctx)
        except Short as exc:
            expert.append(Expert("error", f"frame too short for a header: {exc.message()}", exc.offset))
            return self._frame(header.get("key", 0), "unknown", None, 0, size, fields, expert, data)
        wire_key, version = header["key"], header["version"]
        proto = self.protocol
        key = wire_key & ~proto.response_bit
        command = proto.by_key.get(key)
        layout = proto.layout_for(wire_key)
        if layout is None:
            kind = "response" if wire_key & proto.response_bit else "unknown"
            if command is None:
                expert.append(Expert("warn", f"unknown command key 0x{key:04x}", size_len))
            else:
                expert.append(
                    Expert("warn", f"{command.name} has no {kind} layout (key 0x{wire_key:04x})", size_len)
                )
            self._trailing(mv, pos, end, fields, expert, nodes, "payload")
            return self._frame(
                wire_key, kind, command.name if command else None, version, size, fields, expert, data
            )
        assert command is not None
        layout_version = version
        if version not in command.versions:
            layout_version = max((v for v in command.versions if v <= version), default=command.versions[0])
            known = ", ".join(map(str, command.versions))
            expert.append(
                Expert(
                    "warn",
                    f"{command.name} version {version} is not in the registry (known: {known}); "
                    f"decoded as version {layout_version}",
                    size_len + 2,
                )
            )
        _, ops = self.compiled[wire_key, layout_version]
        fast = self.fast.get((wire_key, layout_version)) if nodes is None and not partial else None
        if fast is not None:
            mark = len(expert)
            try:
                pos = fast(mv, pos, end, fields, ctx)
                self._trailing(mv, pos, end, fields, expert, nodes, "trailing")
                return self._frame(wire_key, layout.kind, command.name, version, size, fields, expert, data)
            except (Fallback, Short, BadValue, struct.error):
                # Start again with the general ops, which keep partial values and explain.
                del expert[mark:]
                fields.clear()
                ctx.budget = None
        try:
            pos = decode_ops(ops, mv, pos, end, fields, ctx)
        except Short as exc:
            expert.append(Expert("error", exc.message(), exc.offset, cut=partial))
            pos = end
        except BadValue as exc:
            expert.append(Expert("error", exc.text, exc.offset))
            pos = end
        self._trailing(mv, pos, end, fields, expert, nodes, "trailing")
        return self._frame(wire_key, layout.kind, command.name, version, size, fields, expert, data)

    def expand(self, frame: Frame) -> Frame:
        """The frame with everything below its headers decoded (records, sections), in place.

        Decoding is pure, so decoding again with the expand step on gives the same
        fields plus what the hooks add, and the same expert notes plus theirs.
        """
        if frame.expanded:
            return frame
        if frame.wire_key not in self.hooked:
            frame.expanded = True  # nothing below its headers: decoding again would add nothing
            return frame
        if frame.incomplete is None:
            full = self.decode(frame.data, expand=True)
            frame.fields, frame.expert = full.fields, _merge_notes(full.expert, frame.expert)
            frame.expanded = True
            return frame
        # An incomplete frame may hold elements recovered after a gap, which decoding its
        # bytes again would not find: expand the values it has instead.
        layout = self.protocol.layout_for(frame.wire_key)
        if layout is not None:
            self._expand_values(layout.fields, frame.fields, Ctx(frame.expert, expand=True))
        frame.expanded = True
        return frame

    def _expand_values(self, specs: tuple[FieldSpec, ...], values: dict[str, Any], ctx: Ctx) -> None:
        for spec in specs:
            value = values.get(spec.name)
            if value is None:
                continue
            if spec.hook is not None:
                self.hooks[spec.hook].expand(value, values, getattr(value, "pos", 0), ctx, None)
            elif spec.type == "struct" and isinstance(value, dict):
                self._expand_values(spec.fields, value, ctx)
            elif spec.of is not None and spec.of.type == "struct" and isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        self._expand_values(spec.of.fields, item, ctx)

    def tree(self, frame: Frame) -> list[Node]:
        """The detail tree of a frame, built on demand by decoding it again with nodes on.

        A tree runs the expand step, so a complete frame comes out expanded too, without a
        second decode for it.
        """
        nodes: list[Node] = []
        full = self.decode(frame.data, nodes=nodes, partial=frame.incomplete is not None)
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
        wire_key: int,
        kind: str,
        command: str | None,
        version: int,
        size: int,
        fields: dict[str, Any],
        expert: list[Expert],
        data: bytes,
    ) -> Frame:
        return Frame(
            protocol=self.protocol.name,
            wire_key=wire_key,
            key=wire_key & ~self.protocol.response_bit,
            kind=kind,
            command=command,
            version=version,
            size=size,
            fields=fields,
            expert=expert,
            data=data,
        )

    # ------------------------------------------------------------------ encode

    def encode(self, command: str, kind: str, fields: Mapping[str, Any], version: int = 1) -> bytes:
        """Build a whole frame (size prefix included) from a command name and field values."""
        cmd = self.protocol.commands.get(command)
        if cmd is None:
            raise EncodeError(f"unknown command {command!r}")
        layout = cmd.layouts.get(kind)
        if layout is None:
            raise EncodeError(f"{command} has no {kind} layout (has: {', '.join(cmd.layouts)})")
        if version not in cmd.versions:
            raise EncodeError(f"{command} has no version {version}")
        body = bytearray()
        encode_ops(self.header_ops, body, {"key": layout.key, "version": version})
        try:
            encode_ops(self.compiled[layout.key, version][1], body, dict(fields))
        except (KeyError, TypeError, struct.error, AttributeError) as exc:
            raise EncodeError(f"{command} {kind}: cannot encode: {exc}") from None
        return self.size_st.pack(len(body)) + bytes(body)
