"""Messages counted by the values of a message field: `stats --by NAME` (content_type, say).

A name is any filter name the protocol has (AMQP properties, application property keys or
values, RocketMQ or NATS headers...). Counting needs each message's decoded values, so the
frames that carry messages are expanded; without --by, stats read headers only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from streamdump.analysis.fieldnames import Names, field_types, names_of, value_items
from streamdump.analysis.filter import FilterError, compile_filter, is_field_name
from streamdump.codecs.values import to_json
from streamdump.spec.decoder import Decoder
from streamdump.spec.dissector import MessageRow, MessageRules
from streamdump.wire.frame import Frame

NONE = "(none)"  # what a message without the field is counted under


class UnknownName(ValueError):
    """A --by or --column name no protocol of the read has; str() is one line."""


def check_names(decoders: Iterable[Decoder], names: Iterable[str], option: str) -> tuple[str, ...]:
    """The flat names asked for (a protocol's prefix dropped, as message values carry none),
    each once; a name no protocol has is refused with the filter's own "did you mean"."""
    decoders = list(decoders)
    out: dict[str, None] = {}
    for name in names:
        if not is_field_name(name):
            raise UnknownName(f"{option} {name}: give a field name, not an expression")
        errors: list[FilterError] = []
        for decoder in decoders:
            types = field_types(decoder.protocol)
            bare = name.removeprefix(f"{decoder.protocol.name}.")
            if bare in types:
                out[bare] = None
                break
            try:
                compile_filter(name, types, decoder.protocol.name)
            except FilterError as exc:
                errors.append(exc)
        else:
            best = next((e for e in errors if e.suggestions), errors[0])
            hint = f" (did you mean {', '.join(best.suggestions)}?)" if best.suggestions else ""
            raise UnknownName(f"{option} {name}: no field of that name{hint}")
    return tuple(out)


def row_values(row: MessageRow, name: str, names: Names) -> list[Any]:
    """The values a message has for a flat name, in wire order."""
    if row.record is None:
        return []
    return [value for key, value in _record_items(row.record, names) if key == name]


def _record_items(record: Any, names: Names) -> Iterator[tuple[str, Any]]:
    if isinstance(record, dict):
        for key, value in record.items():
            yield from value_items(key, value, names)


def value_text(value: Any) -> str:
    """A value as one cell, as the JSON output writes it: text as it is, bytes as hex, true..."""
    value = to_json(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Grouping:
    """Per protocol: messages and bytes by (field, subject, direction, value)."""

    def __init__(self, decoder: Decoder, rules: MessageRules, fields: tuple[str, ...]) -> None:
        self.decoder = decoder
        self.rules = rules
        self.fields = fields
        self.names = names_of(decoder.protocol)
        self.counts: dict[tuple[str, str, str, str], list[int]] = {}

    def add(self, frame: Frame) -> None:
        if not self.rules.carries(frame):
            return
        moved = self.rules.volume(frame)  # its direction, from the headers
        direction = moved.direction if moved is not None else "?"
        self.decoder.expand(frame)
        for row in self.rules.rows(frame):
            if row.size is None:
                continue  # a note on what could not be shown, not a message
            for name in self.fields:
                texts = {value_text(v) for v in row_values(row, name, self.names) if v is not None}
                for text in sorted(texts) or [NONE]:
                    count = self.counts.setdefault((name, row.subject, direction, text), [0, 0])
                    count[0] += 1
                    count[1] += row.size
