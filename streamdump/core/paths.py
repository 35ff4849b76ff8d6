"""The values a field path (`messages.publishing_id`, `brokers.host`) names in a decoded frame."""

from __future__ import annotations

from typing import Any


def path_values(fields: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    """Every value the path names, stepping through lists (array elements) and dicts.

    Breadth first, one step of the path at a time: a Publish frame's hundreds of ids cost one
    pass over its messages, not a generator per message.
    """
    level: list[Any] = [fields]
    for step in path:
        found: list[Any] = []
        for holder in level:
            if isinstance(holder, dict):
                value = holder.get(step)
                if isinstance(value, list):
                    found.extend(value)
                elif value is not None:
                    found.append(value)
        level = found
    return level
