"""The values a field path (`messages.publishing_id`, `brokers.host`) names in a decoded frame."""

from __future__ import annotations

from itertools import repeat
from typing import Any


def path_values(fields: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    """Every value the path names, stepping through lists (array elements) and dicts.

    Breadth first, one step of the path at a time: a Publish frame's hundreds of ids cost one
    pass over its messages, not a generator per message, and a step with no list among its
    values (the types they have say so) no loop of Python's.
    """
    return _walk(fields, path)[0]


def _walk(fields: dict[str, Any], path: tuple[str, ...]) -> tuple[list[Any], set[type] | None]:
    """path_values' values, and the types among them (None's left out with the Nones); None
    where they were not looked at (the last step stepped into lists, or there was no step)."""
    level: list[Any] = [fields]
    kinds: set[type] | None = None
    for step in path:
        try:
            # Every holder a dict, the commonest (a frame's messages): dict.get mapped over
            # them, in C.
            values = list(map(dict.get, level, repeat(step)))
        except TypeError:  # not all dicts: the others have nothing to step into
            values = [holder.get(step) for holder in level if isinstance(holder, dict)]
        kinds = set(map(type, values))
        if not any(issubclass(kind, list) for kind in kinds):
            # The commonest step: no lists to step into (a message's id), decided per type.
            if _NONE in kinds:
                level = [v for v in values if v is not None]
                kinds.discard(_NONE)
            else:
                level = values
            continue
        found: list[Any] = []
        for value in values:
            if isinstance(value, list):
                found.extend(value)
            elif value is not None:
                found.append(value)
        level = found
        kinds = None
    return level, kinds


def int_values(fields: dict[str, Any], path: tuple[str, ...]) -> list[int]:
    """Every integer a path names."""
    values, kinds = _walk(fields, path)
    if kinds is None:
        kinds = set(map(type, values))
    if kinds <= _INTS:  # the commonest: ids, nothing to leave out
        return values
    return [v for v in values if isinstance(v, int)]


_INTS: set[type] = {int}
_NONE = type(None)
