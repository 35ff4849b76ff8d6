"""Whole array elements found in the tail of a frame that a gap cut in two.

When a gap removes bytes from the middle of a frame whose start survived, the frame's
size still says where it ends, so the bytes between the gap and that end are its
tail. If the layout ends with an array of self-sized elements (Publish's messages),
the tail holds whole elements behind the remains of the one the gap cut. Their start
is found by chaining element sizes so they end exactly at the frame's end; a field
the spec marks `increasing` must grow along the chain and continue the elements
before the gap, which rules out chains that start in the cut element's bytes. Without
such a field nothing is recovered: a guess would be decoding garbage.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from streamdump.layout import ArrayCodec, BadValue, Ctx, FieldOp, Short, StructCodec
from streamdump.registry import FieldSpec


@dataclass(frozen=True, slots=True)
class TailRule:
    array: str  # name of the frame's last field, an array
    element: StructCodec
    increasing: str  # the element field that must grow


def tail_rule(ops: tuple[Any, ...]) -> TailRule | None:
    """How to recover a layout's tail, when its last field is an array of structs with an increasing field."""
    if not ops or not isinstance(ops[-1], FieldOp):
        return None
    last = ops[-1]
    codec = last.codec
    if not isinstance(codec, ArrayCodec) or not isinstance(codec.element, StructCodec):
        return None
    element_spec: FieldSpec = codec.element_spec
    increasing = next((f.name for f in element_spec.fields if f.increasing), None)
    if increasing is None:
        return None
    return TailRule(last.spec.name, codec.element, increasing)


def recover(rule: TailRule, tail: bytes, before: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """The elements at the end of tail, and how many bytes before them belong to the cut element."""
    n = len(tail)
    mv = memoryview(tail)
    ctx = Ctx([])
    ends: dict[int, tuple[dict[str, Any], int]] = {}
    for start in range(n):
        try:
            value, end = rule.element.read(mv, start, n, ctx, None, rule.array)
        except (Short, BadValue):
            continue
        if end > start:
            ends[start] = (value, end)
    reaches_end = {n}
    for start in sorted(ends, reverse=True):
        if ends[start][1] in reaches_end:
            reaches_end.add(start)
    floor = _last_value(before, rule.increasing)
    key = rule.increasing
    for start in sorted(reaches_end - {n}):
        chain: list[dict[str, Any]] = []
        pos = start
        while pos != n:
            value, pos = ends[pos]
            chain.append(value)
        values = [item.get(key) for item in chain]
        grows = all(isinstance(v, int) for v in values) and all(a < b for a, b in pairwise(values))
        if grows and (floor is None or values[0] > floor):
            return chain, start
    return [], n


def _last_value(items: list[Any], key: str) -> int | None:
    for item in reversed(items):
        if isinstance(item, dict) and isinstance(item.get(key), int):
            return item[key]
    return None
