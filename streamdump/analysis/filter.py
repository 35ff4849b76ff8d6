"""The --filter display-filter language: tokenizer, parser and compiler to a frame predicate.

A small subset of Wireshark's display filters over flat field names. compile_filter checks a
filter once against the caller's field table (names, operators, literal types, enum names,
regular expressions) and returns a Filter whose evaluation only runs precomputed closures over
the values a lookup callable gives; evaluation never raises. Nothing here knows how frames are
decoded or where the field table comes from.
"""

from __future__ import annotations

import difflib
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple

from msgspec import Struct

Lookup = Callable[[str], Sequence[Any]]
Test = Callable[[Lookup], bool]
Pred = Callable[[Any], bool]

KINDS = frozenset({"int", "float", "str", "bytes", "bool", "any"})
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "contains", "matches")
OPS_BY_KIND: dict[str, frozenset[str]] = {
    "str": frozenset(COMPARISONS),
    "bytes": frozenset(COMPARISONS),
    "any": frozenset(COMPARISONS),
    "int": frozenset(COMPARISONS[:6]),
    "float": frozenset(COMPARISONS[:6]),
    "bool": frozenset(COMPARISONS[:2]),
}
# Beyond this many nested '(' and 'not', the recursive parser would near Python's stack limit.
MAX_DEPTH = 100

_SYMBOLS = {
    "==": "==",
    "!=": "!=",
    "<=": "<=",
    ">=": ">=",
    "&&": "and",
    "||": "or",
    "<": "<",
    ">": ">",
    "!": "not",
    "(": "(",
    ")": ")",
}
_KEYWORDS = {
    "and": "and",
    "or": "or",
    "not": "not",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "contains": "contains",
    "matches": "matches",
}
_STRAY = {"=": "use '==' to compare", "&": "use '&&' or 'and'", "|": "use '||' or 'or'"}
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
# ASCII only: int() and float() would also accept other scripts' digits and '_' separators.
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-+")
_INT = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|[0-9]+)")
_FLOAT = re.compile(r"-?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_INT = re.compile(r"0[xX]([0-9a-fA-F]+)")
_BYTE_STRING = re.compile(r"[0-9a-fA-F]{2}(?:[:.\-][0-9a-fA-F]{2})+")
_ONE_BYTE = re.compile(r"[0-9a-fA-F]{2}")
_BYTE_SEPARATORS = re.compile(r"[:.\-]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
# Everything str.splitlines() breaks on, so the error message stays one line.
_LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_NUMBERS = (int, float)
_BYTES_LIKE = (bytes, bytearray, memoryview)


class FieldType(Struct, frozen=True):
    """What a filter may compare a field with."""

    kind: str  # "int", "float", "str", "bytes", "bool", "any"
    enum: Mapping[int, str] | None = None  # for int fields: value -> name

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown field kind {self.kind!r} (one of: {', '.join(sorted(KINDS))})")


class FilterError(ValueError):
    """A filter that cannot compile; str() is one line naming the column (1-based) and what is wrong."""

    message: str
    position: int  # 0-based index into the filter text
    text: str  # the whole filter text
    suggestions: tuple[str, ...]  # for an unknown field: the known names closest to it

    def __init__(self, message: str, position: int, text: str, suggestions: tuple[str, ...] = ()) -> None:
        super().__init__(message, position, text)
        self.message = message
        self.position = position
        self.text = text
        self.suggestions = suggestions

    def __str__(self) -> str:
        line = f"column {self.position + 1}"
        if self.position >= len(self.text):
            line += " (end of filter)"
        line += f": {self.message}"
        if self.text.strip():
            line += f": {self.text}"
        return _LINE_BREAKS.sub(" ", line)


class Filter:
    """A compiled filter: call it with a frame's lookup to test that frame. Two filters are
    equal when their text, names and nativeness are (the compiled test is left out)."""

    __slots__ = ("_test", "names", "native", "text")

    def __init__(self, text: str, names: frozenset[str], test: Test, native: bool = True) -> None:
        self.text = text
        self.names = names  # canonical field names the filter refers to (prefix stripped)
        self._test = test
        # Whether it names anything of this protocol (a field, or the protocol), not only others'.
        self.native = native

    def __call__(self, lookup: Lookup) -> bool:
        return self._test(lookup)

    def _key(self) -> tuple[str, frozenset[str], bool]:
        return (self.text, self.names, self.native)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Filter) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Filter(text={self.text!r}, names={self.names!r}, native={self.native!r})"


def is_field_name(text: str) -> bool:
    """Whether text is a field name as filters spell it (not an expression)."""
    return _NAME.fullmatch(text) is not None


def nothing(text: str) -> Filter:
    """A filter that selects no frame (for a protocol the text cannot apply to)."""
    return Filter(text, frozenset(), _never, native=False)


def compile_filter(
    text: str,
    fields: Mapping[str, FieldType],
    prefix: str | None = None,
    foreign: Mapping[str, frozenset[str]] | None = None,
) -> Filter:
    """Parse and type-check a filter once; raises FilterError pointing at what is wrong.

    foreign: other protocols' names (protocol -> its field names). A filter naming one of
    them, or a field only they have, is valid here and finds nothing: it selects their frames.
    """
    parser = _Parser(text, fields, prefix or None, foreign or {})
    test = parser.parse()
    return Filter(text, frozenset(parser.names), test, parser.native)


class _Token(NamedTuple):
    kind: str  # "word", "string", "op" (symbols and keywords) or "end"
    text: str  # as written
    pos: int
    value: Any = None  # an op's canonical name, or a string's decoded text


def _tokens(text: str) -> Iterator[_Token]:
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch == '"':
            value, end = _read_string(text, i)
            yield _Token("string", text[i:end], i, value)
            i = end
        elif ch in _WORD_CHARS:
            end = i
            while end < n and text[end] in _WORD_CHARS:
                end += 1
            word = text[i:end]
            op = _KEYWORDS.get(word.lower())
            yield _Token("word" if op is None else "op", word, i, op)
            i = end
        else:
            sym = next((s for s in _SYMBOLS if text.startswith(s, i)), None)
            if sym is None:
                hint = _STRAY.get(ch)
                raise FilterError(f"unexpected character {ch!r}" + (f"; {hint}" if hint else ""), i, text)
            yield _Token("op", sym, i, _SYMBOLS[sym])
            i += len(sym)
    yield _Token("end", "", n)


def _read_string(text: str, start: int) -> tuple[str, int]:
    """The decoded string opened by the quote at start, and the index just past its closing quote."""
    out: list[str] = []
    i, n = start + 1, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = text[i + 1 : i + 2]
        if not esc:
            break
        if esc == "x":
            digits = text[i + 2 : i + 4]
            if len(digits) != 2 or not _HEX_DIGITS.issuperset(digits):
                raise FilterError("'\\x' needs two hex digits", i, text)
            out.append(chr(int(digits, 16)))
            i += 4
        elif esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
        else:
            raise FilterError(f"unknown escape '\\{esc}' (write '\\\\' for a backslash)", i, text)
    raise FilterError("unterminated string", start, text)


def _describe(tok: _Token) -> str:
    if tok.kind == "end":
        return "the end of the filter"
    if tok.kind == "string":
        return "a string"
    return f"'{tok.text}'"


def _enum_key(name: str) -> str:
    return " ".join(name.replace("_", " ").lower().split())


class _Parser:
    """Recursive descent over a lazily read token stream, so errors come in reading order."""

    def __init__(
        self,
        text: str,
        fields: Mapping[str, FieldType],
        prefix: str | None,
        foreign: Mapping[str, frozenset[str]],
    ) -> None:
        self.text = text
        self.fields = fields
        self.prefix = prefix
        self.foreign = foreign
        self.native = False
        self.names: set[str] = set()
        self.stream = _tokens(text)
        self.prev: _Token | None = None
        self.tok = next(self.stream)

    def error(self, message: str, position: int) -> FilterError:
        return FilterError(message, position, self.text)

    def advance(self) -> _Token:
        tok = self.prev = self.tok
        if tok.kind != "end":
            self.tok = next(self.stream)
        return tok

    def at(self, op: str) -> bool:
        return self.tok.kind == "op" and self.tok.value == op

    def parse(self) -> Test:
        if self.tok.kind == "end":
            raise self.error("empty filter", 0)
        test = self.parse_or(0)
        if self.at(")"):
            raise self.error("unmatched ')'", self.tok.pos)
        if self.tok.kind != "end":
            raise self.error(
                f"expected 'and', 'or' or the end of the filter, found {_describe(self.tok)}", self.tok.pos
            )
        return test

    def parse_or(self, depth: int) -> Test:
        tests = [self.parse_and(depth)]
        while self.at("or"):
            self.advance()
            tests.append(self.parse_and(depth))
        return tests[0] if len(tests) == 1 else _any_test(tuple(tests))

    def parse_and(self, depth: int) -> Test:
        tests = [self.parse_unary(depth)]
        while self.at("and"):
            self.advance()
            tests.append(self.parse_unary(depth))
        return tests[0] if len(tests) == 1 else _all_test(tuple(tests))

    def parse_unary(self, depth: int) -> Test:
        if depth > MAX_DEPTH:
            raise self.error(f"more than {MAX_DEPTH} nested '(' and 'not'", self.tok.pos)
        if self.at("not"):
            self.advance()
            return _not_test(self.parse_unary(depth + 1))
        if self.at("("):
            opening = self.advance()
            inner = self.parse_or(depth + 1)
            if self.at(")"):
                self.advance()
                return inner
            if self.tok.kind == "end":
                raise self.error("'(' is never closed", opening.pos)
            raise self.error(
                f"expected ')' to close the '(' at column {opening.pos + 1}, found {_describe(self.tok)}",
                self.tok.pos,
            )
        if self.tok.kind == "word":
            return self.parse_test(self.tok)
        after = f" after '{self.prev.text}'" if self.prev is not None else ""
        if self.tok.kind == "end":
            raise self.error(f"expected a field name{after}", self.tok.pos)
        raise self.error(f"expected a field name{after}, found {_describe(self.tok)}", self.tok.pos)

    def parse_test(self, word: _Token) -> Test:
        if self.is_foreign(word.text):
            # Another protocol's: no frame of this one has it, whatever it is compared with.
            self.advance()
            if self.tok.kind == "op" and self.tok.value in COMPARISONS:
                self.advance()
                if self.tok.kind not in ("word", "string"):
                    raise self.error(f"expected a value after '{self.prev.text}'", self.tok.pos)  # type: ignore[union-attr]
                self.advance()
            return _never
        name = self.field_name(word)
        self.advance()
        if not (self.tok.kind == "op" and self.tok.value in COMPARISONS):
            if self.tok.kind in ("word", "string"):
                raise self.error(
                    f"expected an operator after '{word.text}', found {_describe(self.tok)}", self.tok.pos
                )
            return _always if name is None else _exists_test(name)
        op = self.tok
        if name is None:
            raise self.error(f"'{word.text}' is the protocol, not a field, so it cannot be compared", op.pos)
        ftype = self.fields[name]
        if op.value not in OPS_BY_KIND[ftype.kind]:
            raise self.error(f"'{op.text}' does not apply to {ftype.kind} field '{name}'", op.pos)
        self.advance()
        value = self.tok
        if value.kind not in ("word", "string"):
            raise self.error(f"expected a value after '{op.text}'", value.pos)
        if op.value == "matches":
            pred = self.regex_predicate(ftype.kind, value)
        else:
            pred = _predicate(ftype.kind, op.value, self.literal(name, ftype, op.value, value))
        self.advance()
        return _none_equal_test(name, pred) if op.value == "!=" else _any_value_test(name, pred)

    def is_foreign(self, word: str) -> bool:
        """Whether word names another protocol, or a field only other protocols have."""
        if not self.foreign or self.canonical(word) is not None or word == self.prefix:
            return False
        if word in self.foreign:
            return True
        proto, _, bare = word.partition(".")
        if bare and proto in self.foreign:
            return bare in self.foreign[proto]
        return any(word in names for names in self.foreign.values())

    def canonical(self, word: str) -> str | None:
        if word in self.fields:
            return word
        if self.prefix and word.startswith(self.prefix + "."):
            bare = word[len(self.prefix) + 1 :]
            if bare in self.fields:
                return bare
        return None

    def field_name(self, word: _Token) -> str | None:
        """The canonical name, or None for the bare protocol name (which every frame has)."""
        name = self.canonical(word.text)
        if name is not None:
            self.names.add(name)
            self.native = True
            return name
        if self.prefix and word.text == self.prefix:
            self.native = True
            return None
        if not _NAME.fullmatch(word.text):
            raise self.error(f"expected a field name, found '{word.text}'", word.pos)
        bare = word.text
        if self.prefix and bare.startswith(self.prefix + "."):
            bare = bare[len(self.prefix) + 1 :]
        close = difflib.get_close_matches(bare, list(self.fields), n=3)
        hint = f" (did you mean: {', '.join(close)}?)" if close else ""
        raise FilterError(f"unknown field '{word.text}'{hint}", word.pos, self.text, tuple(close))

    def literal(self, name: str, ftype: FieldType, op: str, tok: _Token) -> Any:
        kind = ftype.kind
        if kind == "str":
            if tok.kind == "string":
                return tok.value
            if self.canonical(tok.text) is not None:
                raise self.error(
                    f"'{tok.text}' is a field and fields cannot be compared with each other;"
                    f' write "{tok.text}" for the text',
                    tok.pos,
                )
            raise self.error(f"str field '{name}' takes a quoted string: write \"{tok.text}\"", tok.pos)
        if kind == "int":
            number = self.int_literal(tok)
            if number is not None:
                return number
            if ftype.enum and (tok.kind == "string" or _NAME.fullmatch(tok.text)):
                return self.enum_value(name, ftype.enum, tok)
            also = " or a quoted name" if ftype.enum else ""
            raise self.error(f"int field '{name}' takes an integer{also}, found {_describe(tok)}", tok.pos)
        if kind == "float":
            number = self.int_literal(tok)
            if number is None and tok.kind == "word" and _FLOAT.fullmatch(tok.text):
                return float(tok.text)
            if number is not None:
                return number
            raise self.error(f"float field '{name}' takes a number, found {_describe(tok)}", tok.pos)
        if kind == "bytes":
            data = self.bytes_literal(tok, single=True)
            if data is not None:
                return data
            raise self.error(
                f"bytes field '{name}' takes hex bytes (de:ad:be:ef), a 0x number or a quoted string,"
                f" found {_describe(tok)}",
                tok.pos,
            )
        if kind == "bool":
            if tok.kind == "word" and tok.text.lower() in ("true", "false"):
                return tok.text.lower() == "true"
            number = self.int_literal(tok)
            if number in (0, 1):
                return bool(number)
            raise self.error(
                f"bool field '{name}' takes true, false, 0 or 1, found {_describe(tok)}", tok.pos
            )
        value = self.any_literal(tok)
        if op == "contains" and not isinstance(value, str | bytes):
            raise self.error("'contains' takes a quoted string or hex bytes", tok.pos)
        return value

    def any_literal(self, tok: _Token) -> Any:
        if tok.kind == "string":
            return tok.value
        if tok.text.lower() in ("true", "false"):
            return tok.text.lower() == "true"
        number = self.int_literal(tok)
        if number is not None:
            return number
        if _FLOAT.fullmatch(tok.text):
            return float(tok.text)
        data = self.bytes_literal(tok, single=False)
        if data is not None:
            return data
        raise self.error(f"cannot read '{tok.text}' as a value; write \"{tok.text}\" for the text", tok.pos)

    def int_literal(self, tok: _Token) -> int | None:
        if tok.kind != "word" or not _INT.fullmatch(tok.text):
            return None
        try:
            return int(tok.text, 0) if "x" in tok.text.lower() else int(tok.text, 10)
        except ValueError:  # over Python's limit on decimal digits
            raise self.error("number too long", tok.pos) from None

    def bytes_literal(self, tok: _Token, *, single: bool) -> bytes | None:
        if tok.kind == "string":
            try:
                return tok.value.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raise self.error("the string cannot be encoded as UTF-8", tok.pos) from None
        if _BYTE_STRING.fullmatch(tok.text) or (single and _ONE_BYTE.fullmatch(tok.text)):
            return bytes.fromhex(_BYTE_SEPARATORS.sub("", tok.text))
        hex_int = _HEX_INT.fullmatch(tok.text)
        if hex_int is None:
            return None
        digits = hex_int.group(1)
        if len(digits) % 2:
            raise self.error(f"'{tok.text}' has an odd number of hex digits; bytes need two each", tok.pos)
        return bytes.fromhex(digits)

    def enum_value(self, name: str, enum: Mapping[int, str], tok: _Token) -> int:
        written = tok.value if tok.kind == "string" else tok.text
        labels: dict[str, tuple[int, str]] = {}
        for number, label in enum.items():
            labels.setdefault(_enum_key(label), (number, label))
        found = labels.get(_enum_key(written))
        if found is not None:
            return found[0]
        close = difflib.get_close_matches(_enum_key(written), list(labels), n=5, cutoff=0)
        names = ", ".join(repr(labels[key][1]) for key in close)
        raise self.error(f"unknown {name} name {written!r} (closest: {names})", tok.pos)

    def regex_predicate(self, kind: str, tok: _Token) -> Pred:
        if tok.kind != "string":
            raise self.error("'matches' takes a quoted regular expression", tok.pos)
        try:
            text_rx = re.compile(tok.value) if kind != "bytes" else None
            # A bytes value is searched with the same pattern in UTF-8, as a string literal compares.
            bytes_rx = re.compile(tok.value.encode("utf-8", "surrogateescape")) if kind != "str" else None
        except (re.error, OverflowError, RecursionError, UnicodeEncodeError) as exc:
            raise self.error(f"bad regular expression: {exc}", tok.pos) from None
        return _inside(partial(_matches, text_rx, bytes_rx))


def _plain(value: Any) -> Any:
    # bytearray already compares, orders and contains like bytes; memoryview does not.
    return value.tobytes() if isinstance(value, memoryview) else value


def _predicate(kind: str, op: str, lit: Any) -> Pred:
    """One value against a literal that compile time already converted to the field's type."""
    if op in ("==", "!="):
        if kind in ("bytes", "any"):
            return _inside(lambda v: _plain(v) == lit)
        return partial(operator.eq, lit)
    if op == "contains":
        if isinstance(lit, str):
            return _inside(lambda v: isinstance(v, str) and lit in v)
        return _inside(lambda v: isinstance(v, _BYTES_LIKE) and lit in _plain(v))
    cmp = _ORDER[op]
    if kind in ("int", "float"):
        return lambda v: isinstance(v, _NUMBERS) and cmp(v, lit)
    if kind == "str":
        return lambda v: isinstance(v, str) and cmp(v, lit)
    if kind == "bytes":
        return lambda v: isinstance(v, _BYTES_LIKE) and cmp(_plain(v), lit)
    return partial(_ordered, cmp, lit)


# A value that holds others (a message body's map or list): ==, contains and matches test what
# it holds, the keys of maps too, as deep as it goes.
_CONTAINERS = (dict, list, tuple)


def _inside(pred: Pred) -> Pred:
    """pred, applied to a map's or a list's keys and values (at any depth) instead of to it."""

    def test(value: Any) -> bool:
        if not isinstance(value, _CONTAINERS):
            return pred(value)
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key, inner in item.items():
                    if isinstance(key, _CONTAINERS):
                        stack.append(key)
                    elif pred(key):
                        return True
                    if isinstance(inner, _CONTAINERS):
                        stack.append(inner)
                    elif pred(inner):
                        return True
            elif isinstance(item, _CONTAINERS):
                for inner in item:
                    if isinstance(inner, _CONTAINERS):
                        stack.append(inner)
                    elif pred(inner):
                        return True
            elif pred(item):
                return True
        return False

    return test


def _ordered(cmp: Callable[[Any, Any], bool], lit: Any, value: Any) -> bool:
    try:
        return bool(cmp(_plain(value), lit))
    except TypeError:  # "any" fields: ordering across types is simply false
        return False


def _matches(text_rx: re.Pattern[str] | None, bytes_rx: re.Pattern[bytes] | None, value: Any) -> bool:
    if isinstance(value, str):
        return text_rx is not None and text_rx.search(value) is not None
    if isinstance(value, _BYTES_LIKE):
        return bytes_rx is not None and bytes_rx.search(value) is not None
    return False


def _never(lookup: Lookup) -> bool:
    return False


def _always(lookup: Lookup) -> bool:
    return True


def _exists_test(name: str) -> Test:
    def test(lookup: Lookup) -> bool:
        return len(lookup(name)) > 0

    return test


def _any_value_test(name: str, pred: Pred) -> Test:
    def test(lookup: Lookup) -> bool:
        return any(map(pred, lookup(name)))

    return test


def _none_equal_test(name: str, pred: Pred) -> Test:
    # Wireshark 4's "!=": the field is present and no value equals, so an absent field is false.
    def test(lookup: Lookup) -> bool:
        values = lookup(name)
        return len(values) > 0 and not any(map(pred, values))

    return test


def _not_test(inner: Test) -> Test:
    return lambda lookup: not inner(lookup)


def _all_test(tests: tuple[Test, ...]) -> Test:
    # Flat, not nested: a long 'a and b and ...' chain must not deepen the call stack.
    if len(tests) == 2:
        first, second = tests
        return lambda lookup: first(lookup) and second(lookup)
    return lambda lookup: all(t(lookup) for t in tests)


def _any_test(tests: tuple[Test, ...]) -> Test:
    if len(tests) == 2:
        first, second = tests
        return lambda lookup: first(lookup) or second(lookup)
    return lambda lookup: any(t(lookup) for t in tests)
