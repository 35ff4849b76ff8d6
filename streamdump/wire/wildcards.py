"""Dot-separated names matched against patterns with wildcards: `*` stands for one token, a last
`>` for one or more (as message brokers name subjects and topics). Where a carried protocol
may be found is said with such patterns (a spec's `wiring.carried_by.where`)."""

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
