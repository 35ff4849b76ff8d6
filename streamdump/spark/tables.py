"""The Parquet tables' columns, derived from the registry, and their rows, built from frames.

Columns carry the JSON output's names. Beside the ones every frame has (frame, ts, src,
dst, protocol, key, kind, command, version, size, connection), each protocol adds what its
spec names: the correlation field its conversation pairs by (correlation_id, opaque, seq),
its status field (response_code, code) and what its messages are addressed to (stream,
topic, subject); message rows add the positions its MessageRules declare (publishing_id,
offset, queue_offset), and a column for each field the spec declares inside its messages
(AMQP properties and header fields; application properties and annotations as maps of
text). A field added to a spec under one of those roles gets its column with no change
here. Rows are built as Arrow batches, never one Python row at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from msgspec import Struct

from streamdump.analysis.fieldnames import Names, field_types, messages_declared, names_of, value_items
from streamdump.analysis.grouping import value_text
from streamdump.analysis.pipeline import Notice
from streamdump.spec.dissector import MessageRow, dissector_of
from streamdump.spec.registry import FieldSpec, Protocol
from streamdump.views.render import _json_default
from streamdump.wire.frame import Frame

INT64, STRING, BOOL = pa.int64(), pa.string(), pa.bool_()
TEXT_MAP = pa.map_(pa.string(), pa.string())
INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"})
DIRECTIONS = {True: "to_server", False: "to_client", None: None}

# Columns every frame row has, in order.
FRAME_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("capture", pa.string()),
    ("frame", pa.int64()),
    ("ts", pa.float64()),
    ("src", pa.string()),
    ("dst", pa.string()),
    ("connection", pa.int64()),
    ("direction", pa.string()),
    ("protocol", pa.string()),
    ("key", pa.string()),
    ("kind", pa.string()),
    ("command", pa.string()),
    ("version", pa.int64()),
    ("size", pa.int64()),
    ("incomplete", pa.string()),
    ("expert_notes", pa.int64()),
    ("expert_warnings", pa.int64()),
    ("expert_errors", pa.int64()),
    ("request_in", pa.int64()),
    ("response_time", pa.float64()),
    ("links", pa.string()),
)
MESSAGE_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("capture", pa.string()),
    ("frame", pa.int64()),
    ("ts", pa.float64()),
    ("connection", pa.int64()),
    ("direction", pa.string()),
    ("protocol", pa.string()),
    ("command", pa.string()),
    ("where", pa.string()),
    ("size", pa.int64()),
    ("text", pa.string()),
    ("incomplete", pa.string()),  # why bytes of the message's frame are missing, as the frame says
)
EXPERT_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("capture", pa.string()),
    ("frame", pa.int64()),
    ("connection", pa.int64()),
    ("protocol", pa.string()),
    ("command", pa.string()),
    ("source", pa.string()),  # frame (the decoder's and tracker's notes on it) or conversation
    ("severity", pa.string()),
    ("group", pa.string()),
    ("finding", pa.string()),  # a conversation finding's kind (unanswered, error_response, ...)
    ("summary", pa.string()),
    ("message", pa.string()),
    ("offset", pa.int64()),
)
GAP_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("capture", pa.string()),
    ("frame", pa.int64()),
    ("notice", pa.string()),  # gap, skipped, conflict, late, midstream, fragments, truncated
    ("severity", pa.string()),
    ("message", pa.string()),
    ("src", pa.string()),
    ("dst", pa.string()),
    ("start", pa.int64()),
    ("end", pa.int64()),
    ("length", pa.int64()),
)
EXCHANGE_COLUMNS = (
    "capture",
    "protocol",
    "connection",
    "command",
    "request_in",
    "frame",
    "response_time",
)


class Roles(Struct, frozen=True):
    """Per protocol: the names of its correlation, status and subject fields (None: it has none)."""

    correlation: str | None
    status: str | None
    subject: str
    positions: tuple[tuple[str, str], ...]


class Tables:
    """The tables' schemas for the protocols of a run, and the rows of decoded frames."""

    def __init__(self, protocols: Iterable[Protocol]) -> None:
        protocols = list(protocols)
        self.roles: dict[str, Roles] = {}
        self.versioned: dict[str, bool] = {}
        typed: dict[str, set[str]] = {}
        for protocol in protocols:
            self.versioned[protocol.name] = protocol.versioned
            rules_type = dissector_of(protocol).messages
            conv = protocol.conversation
            roles = Roles(conv.correlation, conv.status, rules_type.subject, rules_type.positions)
            self.roles[protocol.name] = roles
            for name in (roles.correlation, roles.status, roles.subject):
                if name is not None:
                    typed.setdefault(name, set()).add(_field_type(protocol, name))
        self.frame_extra = tuple((name, _arrow(kinds)) for name, kinds in sorted(typed.items()))
        subjects = sorted({r.subject for r in self.roles.values()})
        positions: dict[str, set[str]] = {}
        for roles in self.roles.values():
            for name, kind in roles.positions:
                positions.setdefault(name, set()).add("int64" if kind == "int" else "string")
        self.message_extra = tuple((name, pa.string()) for name in subjects) + tuple(
            (name, _arrow(kinds)) for name, kinds in sorted(positions.items()) if name not in subjects
        )
        # The fields declared inside each protocol's messages, by the kind of their values.
        declared: dict[str, dict[str, pa.DataType]] = {}
        merged: dict[str, set[pa.DataType]] = {}
        for protocol in protocols:
            declared[protocol.name] = message_columns(protocol)
            for name, kind in declared[protocol.name].items():
                merged.setdefault(name, set()).add(kind)
        taken = {name for name, _ in self.message_extra}
        self.message_extra += tuple(
            (name, kinds.pop() if len(kinds) == 1 else STRING)
            for name, kinds in sorted(merged.items())
            if name not in taken
        )
        # Per protocol, where its messages' extra values go: an empty row of them, the subject's
        # place, and each declared position's place and whether its column holds integers.
        columns = [column for column, _ in self.message_extra]
        self.message_slots: dict[str, tuple[list[Any], int, dict[str, tuple[int, bool]]]] = {}
        # Per protocol: its names, the record keys holding messages, and each declared field's
        # column and how its values are stored ("map", "int", "bool" or "text").
        self.message_fields: dict[str, tuple[Names, frozenset[str], dict[str, tuple[int, str]]]] = {}
        for name, roles in self.roles.items():
            places = {
                position: (columns.index(position), self.message_extra[columns.index(position)][1] == INT64)
                for position, _ in roles.positions
            }
            self.message_slots[name] = ([None] * len(columns), columns.index(roles.subject), places)
            fields = {
                field: (columns.index(field), _storage(self.message_extra[columns.index(field)][1]))
                for field in declared[name]
            }
            if fields:
                protocol = next(p for p in protocols if p.name == name)
                holders = frozenset(spec.name for spec in messages_declared(protocol))
                self.message_fields[name] = (names_of(protocol), holders, fields)
        self.schemas = {
            "frames": pa.schema([*FRAME_COLUMNS, *self.frame_extra]),
            "messages": pa.schema([*MESSAGE_COLUMNS, *self.message_extra]),
            "expert": pa.schema(EXPERT_COLUMNS),
            "gaps": pa.schema(GAP_COLUMNS),
        }

    # ------------------------------------------------------------------ rows
    # Rows are tuples in their schema's column order; batch() turns a list of them into columns.

    def frame_row(self, capture: str, frame: Frame) -> tuple[Any, ...]:
        links = frame.links or {}
        notes = warnings = errors = 0
        for e in frame.expert:
            if e.severity == "error":
                errors += 1
            elif e.severity == "warn":
                warnings += 1
            elif e.severity == "note":
                notes += 1
        response_time = links.get("response_time")
        request_in = links.get("request_in")
        fields = frame.fields
        roles = self.roles[frame.protocol]
        mine = (roles.correlation, roles.status, roles.subject)
        return (
            capture,
            frame.number,
            frame.ts,
            str(frame.src) if frame.src else None,
            str(frame.dst) if frame.dst else None,
            frame.conn or None,
            DIRECTIONS[frame.from_client],
            frame.protocol,
            None if frame.key is None else str(frame.key),
            frame.kind,
            frame.command,
            frame.version if self.versioned[frame.protocol] else None,
            frame.size,
            frame.incomplete,
            notes,
            warnings,
            errors,
            request_in if isinstance(request_in, int) else None,
            float(response_time) if isinstance(response_time, int | float) else None,
            _json(links) if links else None,
            *(
                _typed(fields.get(name, links.get(name)), kind) if name in mine else None
                for name, kind in self.frame_extra
            ),
        )

    def message_rows(
        self, out: list[tuple[Any, ...]], capture: str, frame: Frame, rows: Iterable[MessageRow]
    ) -> int:
        """Append a row per message; returns how many."""
        head = (
            capture,
            frame.number,
            frame.ts,
            frame.conn or None,
            DIRECTIONS[frame.from_client],
            frame.protocol,
            frame.command,
        )
        template, subject_at, positions = self.message_slots[frame.protocol]
        names, holders, fields = self.message_fields.get(frame.protocol, (None, None, None))
        incomplete = frame.incomplete
        count = 0
        for row in rows:
            extra = template.copy()
            extra[subject_at] = row.subject
            for name, value in row.at:
                slot = positions.get(name)
                if slot is not None and value is not None:
                    at, ints = slot
                    extra[at] = (value if type(value) is int else None) if ints else _typed(value, STRING)
            if fields and row.record is not None:
                _message_values(extra, row.record, names, holders, fields)  # type: ignore[arg-type]
            out.append((*head, row.where, row.size, row.text, incomplete if row.tag else None, *extra))
            count += 1
        return count

    @staticmethod
    def expert_rows(out: list[tuple[Any, ...]], capture: str, frame: Frame) -> None:
        for e in frame.expert:
            out.append(
                (
                    capture,
                    frame.number,
                    frame.conn or None,
                    frame.protocol,
                    frame.command,
                    "frame",
                    e.severity,
                    e.group,
                    None,
                    None,
                    e.message,
                    e.offset,
                )
            )

    @staticmethod
    def gap_row(capture: str, notice: Notice) -> tuple[Any, ...]:
        return (
            capture,
            notice.number,
            notice.kind,
            notice.severity,
            notice.message,
            str(notice.src) if notice.src else None,
            str(notice.dst) if notice.dst else None,
            notice.start,
            notice.end,
            notice.length,
        )


def message_columns(protocol: Protocol) -> dict[str, pa.DataType]:
    """The fields declared inside a protocol's messages that get columns: scalars by their
    kind, maps (application properties, annotations) as maps of text. The body (the
    message's own bytes and lists) stays out: the row's text previews it."""
    types = field_types(protocol)
    out: dict[str, pa.DataType] = {}

    def walk(specs: tuple[FieldSpec, ...], top: bool) -> None:
        for spec in specs:
            if spec.type == "map":
                out.setdefault(spec.name, TEXT_MAP)
            elif spec.fields:
                walk(spec.fields, False)
            elif spec.type != "array" and not (top and spec.type in ("bytes", "raw")):
                kind = types[spec.name].kind
                out.setdefault(spec.name, INT64 if kind == "int" else BOOL if kind == "bool" else STRING)

    for spec in messages_declared(protocol):
        walk(spec.fields, True)
    return out


def _storage(kind: pa.DataType) -> str:
    """How a column stores values, as a plain string (comparing Arrow types costs a call into C++)."""
    return "map" if kind == TEXT_MAP else "int" if kind == INT64 else "bool" if kind == BOOL else "text"


def _message_values(
    extra: list[Any],
    record: Any,
    names: Names,
    holders: frozenset[str],
    fields: dict[str, tuple[int, str]],
) -> None:
    """Fill a message row's declared fields from the messages its record holds: each field's
    first value."""
    seen: set[str] = set()
    for key, value in record.items():
        if key not in holders:
            continue
        for name, item in value_items(key, value, names):
            slot = fields.get(name)
            if slot is None or name in seen or item is None:
                continue
            seen.add(name)
            at, kind = slot
            if kind == "map":
                extra[at] = (
                    [(value_text(k), value_text(v)) for k, v in item.items()]
                    if isinstance(item, dict)
                    else None
                )
            elif kind == "int":
                extra[at] = item if isinstance(item, int) and not isinstance(item, bool) else None
            elif kind == "bool":
                extra[at] = item if isinstance(item, bool) else None
            else:
                extra[at] = value_text(item)


def batch(schema: pa.Schema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """Rows (tuples in the schema's order) as one Arrow batch."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.RecordBatch.from_arrays(
        [pa.array(column, f.type) for column, f in zip(columns, schema, strict=True)], schema=schema
    )


def _field_type(protocol: Protocol, name: str) -> str:
    """The registry's type of a field name, the header's first (a hook's additions are text)."""
    spec = protocol.header_field(name) or next((f for f in protocol.all_fields() if f.name == name), None)
    return "int64" if spec is not None and spec.type in INT_TYPES else "string"


def _arrow(kinds: set[str]) -> pa.DataType:
    return pa.int64() if kinds == {"int64"} else pa.string()


def _typed(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if kind == pa.int64():
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return _json(value) if isinstance(value, dict | list) else str(value)


def _json(value: Any) -> str:
    return json.dumps(value, default=_json_default, ensure_ascii=False, separators=(",", ":"))
