"""Whole array elements found in the tail of a frame that a gap cut in two.

When a gap removes bytes from the middle of a frame whose start survived, the frame's
size still says where it ends, so the bytes between the gap and that end are its
tail. If the layout ends with an array of self-sized elements (Publish's messages),
the tail holds whole elements behind the remains of the one the gap cut. Their start
is found by chaining element sizes so they end exactly at the frame's end; a field
the spec marks `increasing` must grow along the chain and continue the elements
before the gap, which rules out chains that start in the cut element's bytes. Without
such a field nothing is recovered: a guess would be decoding garbage.

A layout that ends with a sized raw field whose hook takes cuts (Deliver's chunk data)
leaves the search to the hook, which knows what its items look like (HookTail).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any

from msgspec import Struct

from streamdump.spec.hooks import Hook
from streamdump.spec.layout import ArrayCodec, BadValue, Ctx, FieldOp, FixedRun, RawCodec, Short, StructCodec
from streamdump.spec.registry import FieldSpec


class TailRule(Struct, frozen=True):
    array: str  # name of the frame's last field, an array
    element: StructCodec
    increasing: str  # the element field that must grow
    # Where the increasing field lies when the element opens with a fixed run holding it: the
    # run's struct, the field's place in it, and its byte offset, width and byte order, for a
    # check before any decode.
    probe: tuple[struct.Struct, int, int, int, str] | None = None
    # The element's size step by step without a decode, when each of its fields has one: a
    # fixed run's width, or a hook's skip. None: elements are only ever decoded.
    steps: tuple[int | Callable[[bytes, int, int], int | None], ...] | None = None


class HookTail(Struct, frozen=True):
    """A layout whose last field (optional ones after it aside) is a raw field with a hook
    that takes cuts: the hook finds the items behind a gap."""

    path: tuple[str, ...]  # the structs that hold the field, then the field
    hook: Hook


def hook_tail(ops: tuple[Any, ...], path: tuple[str, ...] = ()) -> HookTail | None:
    """The layout's last required field, through the structs that end it, when its hook takes cuts."""
    required = [op for op in ops if not (isinstance(op, FieldOp) and (op.optional or op.when is not None))]
    last = required[-1] if required else None
    if not isinstance(last, FieldOp):
        return None
    if isinstance(last.codec, StructCodec) and last.hook is None:
        return hook_tail(last.codec.ops, (*path, last.name))
    if isinstance(last.codec, RawCodec) and last.hook is not None and last.hook.cuts:
        return HookTail((*path, last.name), last.hook)
    return None


def tail_rule(ops: tuple[Any, ...]) -> TailRule | HookTail | None:
    """How to recover a layout's tail: its last field is an array of structs with an increasing
    field, or a hooked field whose hook takes cuts."""
    if not ops or not isinstance(ops[-1], FieldOp):
        return hook_tail(ops)
    last = ops[-1]
    codec = last.codec
    if not isinstance(codec, ArrayCodec) or not isinstance(codec.element, StructCodec):
        return hook_tail(ops)
    element_spec: FieldSpec = codec.element_spec
    increasing = next((f.name for f in element_spec.fields if f.increasing), None)
    if increasing is None:
        return None
    first = codec.element.ops[0] if codec.element.ops else None
    probe = None
    if isinstance(first, FixedRun) and increasing in first.names and not first.checks:
        i = first.names.index(increasing)
        order = "little" if first.st.format[:1] == "<" else "big"
        probe = (first.st, i, first.offsets[i], first.widths[i], order)
    steps: list[int | Callable[[bytes, int, int], int | None]] = []
    for op in codec.element.ops:
        if isinstance(op, FixedRun) and not op.checks:
            steps.append(op.min_size)
        elif (
            isinstance(op, FieldOp)
            and op.hook is not None
            and op.codec is op.hook
            and op.when is None
            and not op.optional
            and type(op.hook).skip is not Hook.skip
        ):
            steps.append(op.hook.skip)
        else:
            steps = []
            break
    return TailRule(last.spec.name, codec.element, increasing, probe, tuple(steps) or None)


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

    decoded: set[int] = set()

    def read(start: int) -> None:
        decoded.add(start)
        try:
            value, end = rule.element.read(mv, start, n, ctx, None, rule.array)
        except Short:
            cut_here.add(start)
            return
        except BadValue:
            return
        if end > start:
            ends[start] = (value, end)

    # An accepted chain's values all lie between floor and ceiling (they grow from above the one
    # and end below the other), so a start whose increasing field lies outside is never one of its
    # elements and is not decoded: only starts that pass a cheap look at that field are. Where a
    # start matters only as an end (a chain stopping where the bytes cut an element), it is
    # decoded below, once a chain is found to end there.
    starts: Iterable[int] = _starts(rule, mv, data, floor, ceiling)
    if exact_end and rule.steps is not None:
        # Only a chain that ends exactly at the end of the bytes counts: stepping over each
        # candidate by its sizes alone finds the starts that can be on one; only those are decoded.
        starts = _reaching(rule.steps, data, starts)
    for start in starts:
        read(start)
    for end in sorted({end for _, end in ends.values()} - decoded):
        read(end)
    finish = {n} if exact_end else cut_here
    reaches = _chained_to({start: end for start, (_, end) in ends.items()}, finish)
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


def _starts(
    rule: TailRule, mv: memoryview, data: bytes, floor: int | None, ceiling: int | None
) -> Iterator[int]:
    """The starts in data worth a decode, in order: those whose increasing field lies between
    floor and ceiling, where the field can be read; every start, without a probe or a bound."""
    n = len(data)
    probe = rule.probe
    if probe is None or (floor is None and ceiling is None):
        yield from range(n + 1)
        return
    st, index, offset, width, order = probe
    readable = n - st.size + 1  # starts from here on cannot hold the run: decoded, to say why
    lo, hi = (floor + 1 if floor is not None else None), (ceiling - 1 if ceiling is not None else None)
    common = _common_bytes(lo, hi, width, order)
    if common:
        # Every value between the bounds shows these bytes at a fixed place: found at C speed.
        at = offset + (0 if order == "big" else width - len(common))
        found = data.find(common, at)
        while found >= 0 and found - at < readable:
            start = found - at
            value = st.unpack_from(mv, start)[index]
            if lo <= value <= hi:  # type: ignore[operator]
                yield start
            found = data.find(common, found + 1)
    else:
        for start in range(max(readable, 0)):
            value = st.unpack_from(mv, start)[index]
            if (lo is None or value >= lo) and (hi is None or value <= hi):
                yield start
    yield from range(max(readable, 0), n + 1)


def _reaching(
    steps: tuple[int | Callable[[bytes, int, int], int | None], ...], data: bytes, starts: Iterable[int]
) -> list[int]:
    """The starts whose elements, stepped over by size, chain to exactly the end of data."""
    n = len(data)
    after: dict[int, int] = {}
    if len(steps) == 2 and isinstance(steps[0], int) and not isinstance(steps[1], int):
        # The commonest element, a fixed run then a hooked value (a Publish message), in one step.
        width, skip = steps
        for start in starts:
            if n - start >= width and (end := skip(data, start + width, n)) is not None:
                after[start] = end
    else:
        for start in starts:
            end = _stepped(steps, data, start)
            if end is not None and end > start:
                after[start] = end
    return sorted(_chained_to(after, {n}) & after.keys())


def _stepped(
    steps: tuple[int | Callable[[bytes, int, int], int | None], ...], data: bytes, start: int
) -> int | None:
    """Where the element at start ends, stepped over field by field; None where one does not fit."""
    n = len(data)
    pos = start
    for step in steps:
        if isinstance(step, int):
            if n - pos < step:
                return None
            pos += step
        elif (found := step(data, pos, n)) is None:
            return None
        else:
            pos = found
    return pos


def _chained_to(after: dict[int, int], finish: set[int]) -> set[int]:
    """finish, and every start whose element's end (after[start]) chains to one of them."""
    reaches = set(finish)
    for start in sorted(after, reverse=True):
        if after[start] in reaches:
            reaches.add(start)
    return reaches


def _common_bytes(lo: int | None, hi: int | None, width: int, order: str) -> bytes:
    """The bytes all values from lo to hi share in their encoding (the leading ones in big
    endian, the trailing ones in little), when both bounds are known and not negative."""
    if lo is None or hi is None or lo < 0 or hi < lo or hi >= 1 << (8 * width):
        return b""
    a, b = lo.to_bytes(width, order), hi.to_bytes(width, order)  # type: ignore[arg-type]
    if order == "little":
        a, b = a[::-1], b[::-1]
    same = 0
    while same < width and a[same] == b[same]:
        same += 1
    common = a[:same]
    return common if order == "big" else common[::-1]


def last_value(items: list[Any], key: str) -> int | None:
    for item in reversed(items):
        if isinstance(item, dict) and isinstance(item.get(key), int):
            return item[key]
    return None
