"""JSON as servers really write it: the standard library's parser, plus bare object keys.

Some Java servers serialise maps with integer keys unquoted (`{0:"127.0.0.1:10911"}`),
which is not JSON; their clients parse it anyway, so a decoder must too. Text that the
standard parser refuses is read again with such keys quoted; what still fails is an
error with its byte offset. Writing is plain JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BARE = frozenset("0123456789-+.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
# What the character loops below need to look at, found at C speed: a string literal (to the end
# of the text when it is not closed), the brackets outside them, and a place where a bare key could
# start (after "{" or ",", past characters that leave a key expected). Text without the last is
# returned by _quote_bare_keys unchanged, so it is refused without that loop.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)
_BRACKETS = re.compile(r"[\[\]{}]")
# A string (to the end of the text when it is not closed), one bracket or separator, a run of
# characters a bare key is made of, or a run of anything else.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\],:]|[0-9A-Za-z_$+.\-]+|[^"{}\[\],:0-9A-Za-z_$+.\-]+', re.S)
_MAYBE_BARE = re.compile(r'[{,][^"{}\[\],:0-9A-Za-z_$+.\-]*[0-9A-Za-z_$+.\-]')


class JsonError(ValueError):
    """Text that is not JSON, even leniently read; `pos` is the character offset."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


# Deeper JSON is refused, by both twins alike (the plugin's Lua would overflow its stack).
MAX_DEPTH = 200


def too_deep(text: str) -> bool:
    """Whether arrays and objects nest deeper than MAX_DEPTH (outside strings)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for bracket in _BRACKETS.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


def loads(text: str) -> tuple[Any, bool]:
    """The value, and whether it needed bare keys quoted to read."""
    if too_deep(text):
        raise JsonError("nested too deeply", 0)
    try:
        return _strict(text), False
    except json.JSONDecodeError as strict:
        # The parser stops at the first fault, and everything before it is JSON, so no bare key
        # lies before it: quoting keys helps only when the fault is a key that is not a string.
        bare = strict.msg.startswith("Expecting property name") and _MAYBE_BARE.search(text)
        fixed = _quote_bare_keys(text) if bare else text
        if fixed == text:
            raise JsonError(strict.msg, strict.pos) from None
        try:
            return _strict(fixed), True
        except json.JSONDecodeError:
            raise JsonError(strict.msg, strict.pos) from None
    except RecursionError:
        raise JsonError("nested too deeply", 0) from None


def _strict(text: str) -> Any:
    """JSON as its standard has it: NaN and Infinity are not numbers a JSON writer sends."""
    return _DECODER.decode(text)


def _not_json(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


# Made once: json.loads with an option makes a new decoder at every call.
_DECODER = json.JSONDecoder(parse_constant=_not_json)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _quote_bare_keys(text: str) -> str:
    """The text with unquoted object keys quoted; strings and everything else untouched.

    Read token by token (a string, a bracket or separator, a run of key characters, a run of
    anything else), so a long string or value costs one step, not one per character."""
    out: list[str] = []
    stack: list[str] = []  # "{" or "[" of the containers we are in
    at_key = False  # inside an object, where a key must come next
    for match in _TOKENS.finditer(text):
        token = match.group()
        c = token[0]
        if c == '"':
            out.append(token)
            at_key = False
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
        elif at_key and c in _BARE:
            out.append('"' + token + '"')
            at_key = False
            continue
        out.append(token)
    return "".join(out)
