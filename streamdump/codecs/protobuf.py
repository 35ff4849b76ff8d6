"""Protocol Buffers through Google's library: message classes built from a spec's structs.

A spec describes a protobuf message as a struct whose members carry their field numbers
(`tag:`); this module turns those structs into descriptors once, so the library parses and
writes the bytes, and gives back plain values by member name. Fields the struct does not
name (a newer peer's, or every field of a message decoded without a schema) come back by
number, with their wire type's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import Message


class Member(Protocol):
    """A struct member as this module reads it (the spec's Member has these, and more)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def tag(self) -> int | None: ...
    @property
    def of(self) -> Member | None: ...
    @property
    def key(self) -> Member | None: ...
    @property
    def value(self) -> Member | None: ...
    @property
    def struct(self) -> str | None: ...
    @property
    def rest(self) -> bool: ...


# A spec's scalar types by their names in FieldDescriptorProto (read when a schema is made:
# google.protobuf loads only when a protocol that has protobuf messages decodes one).
SCALARS = {
    "string": "TYPE_STRING",
    "bytes": "TYPE_BYTES",
    "raw": "TYPE_BYTES",
    "bool": "TYPE_BOOL",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
}
# How unknown fields' wire types read.
WIRE_TYPES = {0: "varint", 1: "fixed64", 2: "bytes", 3: "group", 5: "fixed32"}


class ProtobufError(ValueError):
    """Bytes that are not a message of the declared type (truncated, a bad tag or length)."""


class Schema:
    """The message classes of one spec's protobuf structs (name -> class)."""

    def __init__(self, package: str, structs: Mapping[str, tuple[Member, ...]]) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        self._F = descriptor_pb2.FieldDescriptorProto
        self.package = package
        self.structs = structs
        proto = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
        for name, members in structs.items():
            self._message(proto.message_type.add(), name, members)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        self.classes: dict[str, type[Message]] = {
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in structs
        }

    def _message(self, msg: descriptor_pb2.DescriptorProto, name: str, members: tuple[Member, ...]) -> None:
        _F = self._F
        msg.name = name
        for spec in members:
            if spec.tag is None:
                continue  # a member that gathers the fields no other names
            field = msg.field.add(name=spec.name, number=spec.tag, label=_F.LABEL_OPTIONAL)
            element = spec.of if spec.type == "array" and spec.of is not None else spec
            if spec.type == "array":
                field.label = _F.LABEL_REPEATED
            if spec.type == "map":
                entry = msg.nested_type.add(name=_entry_name(spec.name))
                entry.options.map_entry = True
                for number, part in ((1, spec.key), (2, spec.value)):
                    assert part is not None
                    entry.field.add(
                        name=part.name,
                        number=number,
                        label=_F.LABEL_OPTIONAL,
                        type=getattr(_F, SCALARS[part.type]),
                    )
                field.label = _F.LABEL_REPEATED
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{self.package}.{name}.{_entry_name(spec.name)}"
            elif element.type == "struct":
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{self.package}.{element.struct}"
            else:
                field.type = getattr(_F, SCALARS[element.type])

    def decode(self, name: str, data: bytes) -> dict[str, Any]:
        """The message's members that are present, by name; the fields it does not name in the
        member with `rest: true` (by number), if it has one. Raises ProtobufError."""
        from google.protobuf.message import DecodeError

        msg = self.classes[name]()
        try:
            msg.ParseFromString(data)
        except DecodeError:
            # The library says only that parsing failed (and, in some versions, the type).
            raise ProtobufError("truncated or corrupt") from None
        return self._values(name, msg)

    def _values(self, name: str, msg: Message) -> dict[str, Any]:
        members = self.structs[name]
        by_name = {spec.name: spec for spec in members}
        out: dict[str, Any] = {}
        for field, value in msg.ListFields():
            spec = by_name[field.name]
            element = spec.of if spec.type == "array" and spec.of is not None else spec
            if spec.type == "map":
                # The library keeps no wire order for maps: sorted by key, as its writer sends them.
                out[spec.name] = dict(sorted(value.items()))
            elif element.type == "struct":
                assert element.struct is not None
                if spec.type == "array":
                    out[spec.name] = [self._values(element.struct, item) for item in value]
                else:
                    out[spec.name] = self._values(element.struct, value)
            elif spec.type == "array":
                out[spec.name] = list(value)
            else:
                out[spec.name] = value
        rest = next((spec for spec in members if spec.rest), None)
        from google.protobuf.unknown_fields import UnknownFieldSet

        unknown = UnknownFieldSet(msg)
        if rest is not None and len(unknown):
            out[rest.name] = {str(f.field_number): _unknown_value(f) for f in unknown}
        return out

    def encode(self, name: str, values: Mapping[str, Any]) -> bytes:
        return self._build(name, values).SerializeToString(deterministic=True)

    def _build(self, name: str, values: Mapping[str, Any]) -> Message:
        msg = self.classes[name]()
        for spec in self.structs[name]:
            value = values.get(spec.name)
            if value is None or spec.tag is None:
                continue
            element = spec.of if spec.type == "array" and spec.of is not None else spec
            if spec.type == "map":
                getattr(msg, spec.name).update(
                    {k: bytes(v) if isinstance(v, memoryview) else v for k, v in value.items()}
                )
            elif element.type == "struct":
                assert element.struct is not None
                if spec.type == "array":
                    getattr(msg, spec.name).extend(self._build(element.struct, item) for item in value)
                else:
                    getattr(msg, spec.name).CopyFrom(self._build(element.struct, value))
            elif spec.type == "array":
                getattr(msg, spec.name).extend(value)
            else:
                setattr(msg, spec.name, bytes(value) if isinstance(value, memoryview) else value)
        return msg


def _entry_name(field: str) -> str:
    return "".join(part.capitalize() for part in field.split("_")) + "Entry"


def _unknown_value(field: Any) -> str:
    """An unnamed field's value as text: a number, or a length-delimited field's bytes in hex."""
    wire = WIRE_TYPES.get(field.wire_type, str(field.wire_type))
    data = field.data
    if isinstance(data, bytes | bytearray):
        return f"{wire}: {bytes(data).hex()}"
    if isinstance(data, int):
        return f"{wire}: {data}"
    return f"{wire}: ({len(data)} fields)"
