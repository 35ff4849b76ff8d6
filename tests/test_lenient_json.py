"""Lenient JSON's quick looks (regular expressions) give what its character loops gave: the
depth check and the gate before quoting bare keys, against those loops kept here, on text made
of what matters to them (brackets, quotes, backslashes, keys, separators)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from streamdump.codecs import lenient_json
from streamdump.codecs.lenient_json import MAX_DEPTH, _quote_bare_keys

PIECES = st.lists(
    st.sampled_from(['"', "\\", "[", "]", "{", "}", ",", ":", " ", "a", "0", "#", "-", "x\n", '\\"']),
    max_size=400,
)


def deep_by_loop(text: str) -> bool:
    depth, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif c in "]}":
            depth -= 1
    return False


@settings(max_examples=400, deadline=None)
@given(PIECES, st.integers(0, 260))
def test_depth_is_what_the_loop_says(pieces: list[str], nesting: int) -> None:
    text = "[" * nesting + "".join(pieces) + "]" * nesting
    assert lenient_json.too_deep(text) == deep_by_loop(text)


@settings(max_examples=400, deadline=None)
@given(PIECES)
def test_text_the_gate_turns_away_has_no_bare_key(pieces: list[str]) -> None:
    text = "".join(pieces)
    if not lenient_json._MAYBE_BARE.search(text):
        assert _quote_bare_keys(text) == text


BARE = frozenset("0123456789-+.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")


def quoted_by_loop(text: str) -> str:
    out: list[str] = []
    stack: list[str] = []
    at_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            end = i + 1
            while end < n:
                if text[end] == "\\":
                    end += 2
                    continue
                if text[end] == '"':
                    end += 1
                    break
                end += 1
            end = min(end, n)
            out.append(text[i:end])
            i, at_key = end, False
            continue
        if c in "{[":
            stack.append(c)
            at_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
            at_key = False
        elif c == ",":
            at_key = bool(stack) and stack[-1] == "{"
        elif c == ":":
            at_key = False
        elif at_key and c in BARE:
            start = i
            while i < n and text[i] in BARE:
                i += 1
            out.append('"' + text[start:i] + '"')
            at_key = False
            continue
        out.append(c)
        i += 1
    return "".join(out)


@settings(max_examples=600, deadline=None)
@given(PIECES)
def test_keys_are_quoted_as_the_loop_quoted_them(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert _quote_bare_keys(text) == quoted_by_loop(text)


def test_bare_keys_are_still_read() -> None:
    assert lenient_json.loads('{0:"127.0.0.1:10911"}') == ({"0": "127.0.0.1:10911"}, True)
    assert lenient_json.loads('{"a":[1,2]}') == ({"a": [1, 2]}, False)


def loads_quoting_always(text: str) -> tuple[object, bool]:
    """loads as it was: the keys quoted whatever the strict parser's fault."""
    try:
        return json.loads(text), False
    except json.JSONDecodeError as strict:
        fixed = quoted_by_loop(text)
        if fixed == text:
            raise lenient_json.JsonError(strict.msg, strict.pos) from None
        try:
            return json.loads(fixed), True
        except json.JSONDecodeError:
            raise lenient_json.JsonError(strict.msg, strict.pos) from None


JSONISH = st.lists(
    st.sampled_from(['"', "[", "]", "{", "}", ",", ":", " ", "a", "0", "1.5", "true", '"k"', '"v"', "-"]),
    max_size=40,
)


@settings(max_examples=1500, deadline=None)
@given(JSONISH)
def test_quoting_only_at_a_key_fault_reads_what_quoting_always_read(pieces: list[str]) -> None:
    text = "".join(pieces)
    try:
        expected: object = loads_quoting_always(text)
    except (lenient_json.JsonError, RecursionError) as exc:
        expected = ("error", str(exc))
    try:
        got: object = lenient_json.loads(text)
    except lenient_json.JsonError as exc:
        got = ("error", str(exc))
    assert got == expected
