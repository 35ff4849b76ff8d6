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

from streamdump.spec.layout import ArrayCodec, BadValue, Ctx, FieldOp, Short, StructCodec
from streamdump.spec.registry import FieldSpec


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


def recover(
    rule: TailRule,
    islands: tuple[bytes, ...],
    anchored: bool,
    before: list[Any],
    floor: int | None = None,
    span: int | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The whole elements in the runs of bytes after each gap, and how many bytes held none.

    The last run, when anchored, ends where the frame ends: its elements must chain to
    exactly there. Other runs end inside an element the next gap cut: their chain must
    run until too few bytes are left for one more element, and its values must lie
    between the elements before and after it. span (the frame's length) bounds how many
    elements can follow the floor, which serves as that upper bound when no later
    element is known; values that skip more than that are not recovered.
    """
    key = rule.increasing
    known = last_value(before, key)
    floor = known if known is not None else floor
    chains: list[list[dict[str, Any]]] = []
    unused = 0
    ceiling: int | None = None
    if floor is not None and span is not None:
        ceiling = floor + span // max(1, rule.element.min_size) + 1
    # From the last run backwards: the anchored run's chain is the strongest evidence, and its
    # first value bounds the runs before it from above, as the elements before the gap do from below.
    for i in reversed(range(len(islands))):
        island = islands[i]
        exact = anchored and i == len(islands) - 1
        chain: list[dict[str, Any]] = []
        used = 0
        if exact or (floor is not None and ceiling is not None):
            chain, used = _island(rule, island, floor, ceiling, exact_end=exact)
        chains.append(chain)
        unused += len(island) - used
        if chain:
            ceiling = chain[0][key]
    return [item for chain in reversed(chains) for item in chain], unused


def _island(
    rule: TailRule, data: bytes, floor: int | None, ceiling: int | None, *, exact_end: bool
) -> tuple[list[dict[str, Any]], int]:
    """The first chain of elements in data that passes the checks, and the bytes it covers."""
    n = len(data)
    mv = memoryview(data)
    ctx = Ctx([])
    ends: dict[int, tuple[dict[str, Any], int]] = {}
    cut_here: set[int] = set()  # starts where only the end of the bytes stopped an element
    for start in range(n + 1):
        try:
            value, end = rule.element.read(mv, start, n, ctx, None, rule.array)
        except Short:
            cut_here.add(start)
            continue
        except BadValue:
            continue
        if end > start:
            ends[start] = (value, end)
    finish = {n} if exact_end else cut_here
    reaches = set(finish)
    for start in sorted(ends, reverse=True):
        if ends[start][1] in reaches:
            reaches.add(start)
    key = rule.increasing
    for start in sorted(reaches - finish):
        chain: list[dict[str, Any]] = []
        pos = start
        while pos in ends:
            value, pos = ends[pos]
            chain.append(value)
        values = [item.get(key) for item in chain]
        grows = all(isinstance(v, int) for v in values) and all(a < b for a, b in pairwise(values))
        if (
            chain
            and grows
            and (floor is None or values[0] > floor)
            and (ceiling is None or values[-1] < ceiling)
        ):
            return chain, pos - start
    return [], 0


def last_value(items: list[Any], key: str) -> int | None:
    for item in reversed(items):
        if isinstance(item, dict) and isinstance(item.get(key), int):
            return item[key]
    return None
