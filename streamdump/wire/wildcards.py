"""Dot-separated names matched against patterns with wildcards: `*` stands for one token, a last
`>` for one or more (as message brokers name subjects and topics). Where a carried protocol
may be found is said with such patterns (a spec's `wiring.carried_by.where`). What a name says
is read with patterns whose tokens name fields (a hook's `names`): `{field}` takes one token,
a last `{field>}` the rest."""

from __future__ import annotations

from collections.abc import Iterable


def matches(pattern: str, name: str) -> bool:
    """Whether name is one of the names pattern stands for."""
    want, have = pattern.split("."), name.split(".")
    for index, token in enumerate(want):
        if token == ">" and index == len(want) - 1:
            return len(have) > index
        if index >= len(have) or (token != "*" and token != have[index]):
            return False
    return len(have) == len(want)


def matches_any(patterns: Iterable[str], name: str) -> bool:
    return any(matches(pattern, name) for pattern in patterns)


def captures(pattern: str, name: str) -> dict[str, str] | None:
    """The fields pattern's `{field}` tokens take from name (a last `{field>}` takes the rest,
    one token or more), when name is one of the names pattern stands for; else None."""
    want, have = pattern.split("."), name.split(".")
    out: dict[str, str] = {}
    for index, token in enumerate(want):
        last = index == len(want) - 1
        if token.startswith("{") and token.endswith(">}") and last:
            if len(have) <= index:
                return None
            out[token[1:-2]] = ".".join(have[index:])
            return out
        if index >= len(have):
            return None
        if token.startswith("{") and token.endswith("}"):
            if not have[index]:
                return None
            out[token[1:-1]] = have[index]
        elif token != "*" and token != have[index]:
            return None
    return out if len(have) == len(want) else None
