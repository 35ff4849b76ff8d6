"""The values a field path (`messages.publishing_id`, `brokers.host`) names in a decoded frame."""

from __future__ import annotations

from typing import Any


def path_values(fields: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    """Every value the path names, stepping through lists (array elements) and dicts.

    Breadth first, one step of the path at a time: a Publish frame's hundreds of ids cost one
    pass over its messages, not a generator per message, and a step with no list among its
    values (the types they have say so) no loop of Python's.
    """
    level: list[Any] = [fields]
    for step in path:
        values = [holder.get(step) for holder in level if isinstance(holder, dict)]
        kinds = set(map(type, values))
        if not any(issubclass(kind, list) for kind in kinds):
            # The commonest step: no lists to step into (a message's id), decided per type.
            level = [v for v in values if v is not None] if type(None) in kinds else values
            continue
        found: list[Any] = []
        for value in values:
            if isinstance(value, list):
                found.extend(value)
            elif value is not None:
                found.append(value)
        level = found
    return level


def int_values(fields: dict[str, Any], path: tuple[str, ...]) -> list[int]:
    """Every integer a path names."""
    values = path_values(fields, path)
    if set(map(type, values)) <= {int}:  # the commonest: ids, nothing to leave out
        return values
    return [v for v in values if isinstance(v, int)]
