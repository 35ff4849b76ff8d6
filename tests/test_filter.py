"""The --filter language: operators, any/all semantics, literals, errors with exact columns, and
property tests against a plain-Python reference evaluation."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdump.analysis.filter import FieldType, Filter, FilterError, compile_filter

PREFIX = "rabbitmq_stream"
RESPONSE_CODES = {1: "OK", 2: "Stream does not exist", 8: "Authentication failure"}
FIELDS: dict[str, FieldType] = {
    "command": FieldType("str"),
    "kind": FieldType("str"),
    "stream": FieldType("str"),
    "correlation_id": FieldType("int"),
    "response_code": FieldType("int", RESPONSE_CODES),
    "publishing_ids": FieldType("int"),
    "bytes": FieldType("bytes"),
    "crc_valid": FieldType("bool"),
    "response_time": FieldType("float"),
    "frame": FieldType("int"),
}
ANY_FIELDS = {"value": FieldType("any")}

Values = Mapping[str, Sequence[Any]]


def compiled(text: str, fields: Mapping[str, FieldType] = FIELDS) -> Filter:
    return compile_filter(text, fields, PREFIX)


def run(text: str, fields: Mapping[str, FieldType] = FIELDS, **values: Sequence[Any]) -> bool:
    result = compiled(text, fields)(lambda name: values.get(name, []))
    assert isinstance(result, bool)
    return result


def failure(text: str, fields: Mapping[str, FieldType] = FIELDS) -> FilterError:
    with pytest.raises(FilterError) as info:
        compiled(text, fields)
    err = info.value
    line = str(err)
    assert len(line.splitlines()) == 1
    assert f"column {err.position + 1}" in line
    assert err.text == text
    return err


# Equality and ordering, one field kind at a time.


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ('stream == "s1"', {"stream": ["s1"]}, True),
        ('stream == "s1"', {"stream": ["s2"]}, False),
        ('stream eq "s1"', {"stream": ["s1"]}, True),
        ('stream != "s1"', {"stream": ["s2"]}, True),
        ('stream ne "s1"', {"stream": ["s1"]}, False),
        ('stream < "b"', {"stream": ["a"]}, True),
        ('stream >= "b"', {"stream": ["a"]}, False),
        ('stream contains "ev"', {"stream": ["events"]}, True),
        ('stream contains "EV"', {"stream": ["events"]}, False),
        ('stream matches "^ev.*s$"', {"stream": ["events"]}, True),
        ('stream matches "^EV"', {"stream": ["events"]}, False),
        ("correlation_id == 7", {"correlation_id": [7]}, True),
        ("correlation_id == 0x7", {"correlation_id": [7]}, True),
        ("correlation_id == -3", {"correlation_id": [-3]}, True),
        ("correlation_id < 7", {"correlation_id": [6]}, True),
        ("correlation_id lt 7", {"correlation_id": [7]}, False),
        ("correlation_id <= 7", {"correlation_id": [7]}, True),
        ("correlation_id le 6", {"correlation_id": [7]}, False),
        ("correlation_id > 7", {"correlation_id": [8]}, True),
        ("correlation_id gt 8", {"correlation_id": [8]}, False),
        ("correlation_id >= 8", {"correlation_id": [8]}, True),
        ("correlation_id ge 9", {"correlation_id": [8]}, False),
        ("response_time > 1", {"response_time": [1.5]}, True),
        ("response_time < 1.5", {"response_time": [1.5]}, False),
        ("response_time == 2e-3", {"response_time": [0.002]}, True),
        ("response_time <= .5", {"response_time": [0.25]}, True),
        ("crc_valid == true", {"crc_valid": [True]}, True),
        ("crc_valid == FALSE", {"crc_valid": [True]}, False),
        ("crc_valid == 0", {"crc_valid": [False]}, True),
        ("crc_valid != 1", {"crc_valid": [False]}, True),
    ],
)
def test_operators(text: str, values: Values, expected: bool) -> None:
    assert run(text, **values) is expected


def test_any_value_equal_and_all_values_not_equal() -> None:
    ids = {"publishing_ids": [1, 5, 9]}
    assert run("publishing_ids == 5", **ids)
    assert not run("publishing_ids == 4", **ids)
    # Wireshark 4: '!=' means no value equals, so one equal value makes it false.
    assert not run("publishing_ids != 5", **ids)
    assert run("publishing_ids != 4", **ids)
    assert run("publishing_ids > 8", **ids)
    assert not run("publishing_ids > 9", **ids)
    assert run("not publishing_ids == 5", publishing_ids=[1, 9])


def test_absent_field_compares_false_but_its_negation_is_true() -> None:
    assert not run('stream == "s"')
    assert not run('stream != "s"')
    assert not run('stream < "s"')
    assert not run('stream contains "s"')
    assert run('not stream == "s"')
    assert run('!(stream != "s")')


def test_bare_field_tests_presence() -> None:
    assert run("stream", stream=["s"])
    assert run("stream", stream=[None])  # a null string is still a present field
    assert not run("stream")
    assert run("not stream")
    assert run("crc_valid", crc_valid=[False])


def test_null_values_on_the_wire() -> None:
    assert not run('stream == "x"', stream=[None])
    assert run('stream != "x"', stream=[None])
    assert not run('stream contains "x"', stream=[None])
    assert not run('stream matches "."', stream=[None])
    assert not run('stream < "x"', stream=[None])
    assert not run("bytes == 00:01", bytes=[None])


def test_enum_names() -> None:
    missing = {"response_code": [2]}
    assert run('response_code == "stream_does_not_exist"', **missing)
    assert run('response_code == "Stream does not exist"', **missing)
    assert run('response_code == "STREAM  does_Not exist"', **missing)
    assert run("response_code == 2", **missing)
    assert not run('response_code == "OK"', **missing)
    assert run('response_code != "ok"', response_code=[8])
    assert run('response_code > "ok"', **missing)
    # A bare name works too when it is a single word, as in Wireshark.
    assert run("response_code == ok", response_code=[1])
    assert run("response_code == stream_does_not_exist", **missing)


def test_unknown_enum_name_lists_the_closest() -> None:
    err = failure('response_code == "stream_doesnt_exist"')
    assert err.position == 17
    assert "closest: 'Stream does not exist'" in err.message


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("de:ad:be:ef", b"\xde\xad\xbe\xef"),
        ("DE-AD-BE-EF", b"\xde\xad\xbe\xef"),
        ("de.ad", b"\xde\xad"),
        ("0a", b"\n"),
        ("12", b"\x12"),
        ("0xdeadbeef", b"\xde\xad\xbe\xef"),
        ("0x00ff", b"\x00\xff"),
        ('"hi"', b"hi"),
        ('"\\xff"', "\xff".encode()),
    ],
)
def test_byte_literals(literal: str, value: bytes) -> None:
    assert run(f"bytes == {literal}", bytes=[value])
    assert run(f"bytes == {literal}", bytes=[bytearray(value)])
    assert run(f"bytes == {literal}", bytes=[memoryview(value)])
    assert not run(f"bytes == {literal}", bytes=[value + b"\x00"])


def test_bytes_contains_orders_and_matches() -> None:
    data = {"bytes": [memoryview(b"\x01\xde\xad\x02")]}
    assert run("bytes contains de:ad", **data)
    assert run("bytes contains 0xad02", **data)
    assert not run("bytes contains ad:de", **data)
    assert run('bytes contains "\\x01"', **data)
    assert run("bytes < 02:00", **data)
    assert not run("bytes > 02:00", **data)
    assert run('bytes matches "^\\x01.+\\x02$"', bytes=[b"\x01abc\x02"])


def test_string_escapes() -> None:
    assert run(r'stream == "a\"b\\c\n\t\x41"', stream=['a"b\\c\n\tA'])
    assert run('stream == "é ü"', stream=["é ü"])


def test_regex_is_search_and_case_sensitive() -> None:
    assert run('stream matches "vent"', stream=["events"])
    assert not run('stream matches "VENT"', stream=["events"])
    assert run('stream matches "(?i)VENT"', stream=["events"])
    # The filter text "\\d" is the regex \d; "\\\\" is the regex \\, one literal backslash.
    assert run(r'stream matches "\\d"', stream=["a1"])
    assert not run(r'stream matches "\\d"', stream=["a\\d"])
    assert run(r'stream matches "\\\\"', stream=["a\\d"])


def test_prefix() -> None:
    assert run('rabbitmq_stream.stream == "s"', stream=["s"])
    assert compiled("rabbitmq_stream.stream and frame").names == {"stream", "frame"}
    assert run(PREFIX)
    assert not run(f"not {PREFIX}")
    assert run(f"{PREFIX} and frame", frame=[1])
    assert compiled(PREFIX).names == frozenset()
    # Without a prefix the protocol name is not special.
    with pytest.raises(FilterError):
        compile_filter(PREFIX, FIELDS)
    assert compile_filter("stream", FIELDS)(lambda name: ["x"])


def test_names_are_canonical() -> None:
    f = compiled('command == "Deliver" or (not crc_valid and rabbitmq_stream.bytes contains 00:01)')
    assert f.names == {"command", "crc_valid", "bytes"}
    assert f.text.startswith("command")


def test_precedence_and_parentheses() -> None:
    # 'a or b and c' is 'a or (b and c)'.
    assert run("frame or stream and kind", frame=[1])
    assert not run("(frame or stream) and kind", frame=[1])
    assert run("stream and kind or frame", frame=[1])
    assert not run("stream and (kind or frame)", frame=[1])
    # 'not' binds tighter than 'and'.
    assert run("not stream and frame", frame=[1])
    assert not run("not (stream and frame) and stream", frame=[1])
    assert run("not not frame", frame=[1])
    assert run("!!frame && !stream || kind", frame=[1])
    assert run("((((frame))))", frame=[1])


def test_keywords_are_case_insensitive() -> None:
    values = {"frame": [3], "stream": ["events"]}
    assert run("NOT kind AND frame EQ 3 Or stream", **values)
    assert run('frame Ge 3 aNd stream CONTAINS "ven" and stream MATCHES "^e"', **values)
    assert run("frame == 0X3 and crc_valid == True", frame=[3], crc_valid=[True])


def test_whitespace_is_free() -> None:
    assert run('frame==3&&stream!="x"', frame=[3], stream=["y"])
    assert run("\n  frame\t==\n3  \n", frame=[3])
    assert run("!(frame<3)", frame=[3])
    assert run("frame==-3", frame=[-3])


def test_short_circuit() -> None:
    seen: list[str] = []

    def lookup(name: str) -> list[Any]:
        seen.append(name)
        return [1] if name == "frame" else []

    assert compiled("frame or stream")(lookup)
    assert seen == ["frame"]
    seen.clear()
    assert not compiled("stream and frame")(lookup)
    assert seen == ["stream"]


def test_any_field() -> None:
    assert run('value == "x"', ANY_FIELDS, value=["x"])
    assert run("value == 3", ANY_FIELDS, value=[3.0])
    assert run("value == de:ad", ANY_FIELDS, value=[memoryview(b"\xde\xad")])
    assert run("value == true", ANY_FIELDS, value=[True])
    assert run("value > 2", ANY_FIELDS, value=["text", None, b"\x05", 3])
    assert not run("value > 2", ANY_FIELDS, value=["text", None, b"\x05"])
    assert run('value contains "ex"', ANY_FIELDS, value=[1, "text"])
    assert run("value contains 01:02", ANY_FIELDS, value=[bytearray(b"\x00\x01\x02")])
    assert run('value matches "^t"', ANY_FIELDS, value=[b"tea"])
    assert run('value matches "^t"', ANY_FIELDS, value=["tea"])
    assert not run('value matches "^t"', ANY_FIELDS, value=[7])


def test_mismatched_values_do_not_raise() -> None:
    odd: list[Any] = [None, "7", b"\x07", 7.5, float("nan"), True]
    for text in [
        "correlation_id == 7",
        "correlation_id != 7",
        "correlation_id < 7",
        'stream < "a"',
        'stream contains "a"',
        'stream matches "a"',
        "bytes > 00:01",
        "bytes contains 00:01",
        'bytes matches "a"',
        "response_time >= 1.5",
        "crc_valid == true",
    ]:
        name = text.split()[0]
        assert isinstance(compiled(text)(lambda n, name=name: odd if n == name else []), bool)


def test_field_type_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown field kind"):
        FieldType("integer")


# Errors: each one points at the offending character.


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("", 0, "empty filter"),
        ("   ", 0, "empty filter"),
        ("stream == and x", 10, "expected a value after '=='"),
        ("stream ==", 9, "expected a value after '=='"),
        ('stream == "abc', 10, "unterminated string"),
        ('frame == 1 and stream == "a\\"', 25, "unterminated string"),
        ('stream == "a\\qb"', 12, "unknown escape"),
        ('stream == "\\x4"', 11, "two hex digits"),
        ("(stream", 0, "'(' is never closed"),
        ("((stream) or frame", 0, "'(' is never closed"),
        ("(stream frame", 8, "expected an operator after 'stream'"),
        ('(stream == "x" "y")', 15, "expected ')' to close the '(' at column 1"),
        ("stream)", 6, "unmatched ')'"),
        ("()", 1, "expected a field name after '(', found ')'"),
        ("frame and", 9, "expected a field name after 'and'"),
        ("frame or or stream", 9, "expected a field name after 'or', found 'or'"),
        ("not", 3, "expected a field name after 'not'"),
        # Errors come in reading order: the bad literal before the unterminated string after it.
        ('frame == "5" "abc', 9, "takes an integer"),
        ('stream == "x" frame', 14, "expected 'and', 'or' or the end of the filter"),
        ('"x" == stream', 0, "expected a field name, found a string"),
        ("5 == frame", 0, "expected a field name, found '5'"),
        ("frame = 5", 6, "use '=='"),
        ("frame & stream", 6, "use '&&'"),
        ("frame | stream", 6, "use '||'"),
        ("frame ~ 5", 6, "unexpected character '~'"),
        ("frame == == 5", 9, "expected a value after '=='"),
        ("frame == )", 9, "expected a value after '=='"),
        ("strem", 0, "unknown field 'strem' (did you mean: stream?)"),
        (
            "frame and rabbitmq_stream.strem",
            10,
            "unknown field 'rabbitmq_stream.strem' (did you mean: stream?)",
        ),
        ("zzz", 0, "unknown field 'zzz'"),
        ("rabbitmq_stream == 1", 16, "is the protocol"),
        ("command == Deliver", 11, 'write "Deliver"'),
        ("command == stream", 11, "fields cannot be compared"),
        ("command == 5", 11, "quoted string"),
        ('frame == "5"', 9, "takes an integer"),
        ("frame == 1.5", 9, "takes an integer"),
        ("frame == true", 9, "takes an integer"),
        ("frame contains 5", 6, "'contains' does not apply to int field 'frame'"),
        ('frame matches "5"', 6, "'matches' does not apply to int field 'frame'"),
        ("response_time contains 1", 14, "does not apply to float field"),
        ('response_time == "x"', 17, "takes a number"),
        ("crc_valid > 0", 10, "'>' does not apply to bool field"),
        ("crc_valid == 2", 13, "true, false, 0 or 1"),
        ('crc_valid == "true"', 13, "true, false, 0 or 1"),
        ("bytes == 0xabc", 9, "odd number of hex digits"),
        ("bytes == 123", 9, "takes hex bytes"),
        ("bytes == de:ad:b", 9, "takes hex bytes"),
        ("bytes == 5", 9, "takes hex bytes"),
        ("bytes matches de:ad", 14, "quoted regular expression"),
        ('stream matches "(a"', 15, "bad regular expression"),
        ('stream matches "a{2,1}"', 15, "bad regular expression"),
        ("response_code == 1e3", 17, "integer or a quoted name"),
        ('response_code == "nope"', 17, "unknown response_code name 'nope'"),
        ("frame == " + "9" * 5000, 9, "number too long"),
        ("(" * 200 + "frame" + ")" * 200, 101, "nested"),
        ("not " * 200 + "frame", 404, "nested"),
    ],
)
def test_errors(text: str, position: int, fragment: str) -> None:
    err = failure(text)
    assert err.position == position, str(err)
    assert fragment in str(err)


def test_any_field_errors() -> None:
    assert failure("value == foo", ANY_FIELDS).position == 9
    assert "'contains' takes a quoted string or hex bytes" in str(failure("value contains 5", ANY_FIELDS))


def test_error_message_is_one_line() -> None:
    text = 'frame == 1 and\nstream ==\r\n"x" "y"'
    err = failure(text)
    assert err.position == text.index('"y"')
    flat = 'frame == 1 and stream ==  "x" "y"'
    assert str(err) == f"column 31: expected 'and', 'or' or the end of the filter, found a string: {flat}"
    text = 'stream == "a\nb" and'
    err = failure(text)
    assert err.position == len(text)
    assert str(err) == "column 20 (end of filter): expected a field name after 'and': stream == \"a b\" and"


def test_error_example_from_the_spec() -> None:
    err = failure("stream == and x")
    assert str(err) == "column 11: expected a value after '==': stream == and x"
    assert isinstance(err, ValueError)
    assert err.message == "expected a value after '=='"


# Property tests.

GARBAGE_TOKENS = [
    "stream", "frame", "bytes", "response_code", "crc_valid", "rabbitmq_stream", "rabbitmq_stream.kind",
    "strem", "==", "!=", "<", ">=", "eq", "contains", "matches", "and", "or", "not", "&&", "||", "!",
    "(", ")", '"x"', '"(a"', '"\\x4"', '"ok"', '"', "\\", "5", "-0x1f", "0xabc", "1.5", "2e-3", "de:ad",
    "0a", "true", "=", "&", "~", "\n", "é",
]  # fmt: skip


@settings(max_examples=400)
@given(st.one_of(st.text(max_size=40), st.lists(st.sampled_from(GARBAGE_TOKENS), max_size=12).map(" ".join)))
def test_any_text_compiles_or_raises_filter_error(text: str) -> None:
    for fields in (FIELDS, ANY_FIELDS):
        try:
            f = compile_filter(text, fields, PREFIX)
        except FilterError as err:
            assert 0 <= err.position <= len(text)
            assert len(str(err).splitlines()) == 1
            assert f"column {err.position + 1}" in str(err)
        else:
            assert isinstance(f(lambda name: []), bool)
            assert isinstance(f(lambda name: [None, 1, "x", b"x"]), bool)


Reference = Callable[[Values], bool]
# (filter text, reference evaluation, precedence: 1 or, 2 and, 3 not and atoms)
Node = tuple[str, Reference, int]

STR_POOL = ["", "a", "ab", "Deliver", 'q"x', "back\\slash", "two\nlines", "tab\t", "é", "\x01"]
PATTERNS = ["^a", "b$", "", "[0-9]", "é", "^D.*r$", "\\\\", "\\d", "a|b", "\\x01"]
OP_SPELLINGS = {
    "==": ["==", "eq", "EQ"],
    "!=": ["!=", "ne", "Ne"],
    "<": ["<", "lt"],
    "<=": ["<=", "le"],
    ">": [">", "gt", "GT"],
    ">=": [">=", "ge"],
    "contains": ["contains", "CONTAINS"],
    "matches": ["matches", "Matches"],
}
ORDERING = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
SPACE = st.sampled_from([" ", " ", "  ", "\n", "\t"])


def quote(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render_int(draw: st.DrawFn, value: int) -> str:
    if draw(st.booleans()):
        return str(value)
    digits = f"{abs(value):x}"
    return (
        ("-" if value < 0 else "")
        + draw(st.sampled_from(["0x", "0X"]))
        + draw(st.sampled_from([digits, digits.upper()]))
    )


def render_bytes(draw: st.DrawFn, value: bytes) -> str:
    digits = [f"{b:02x}" for b in value]
    if draw(st.booleans()):
        digits = [d.upper() for d in digits]
    if len(value) == 1:
        return draw(st.sampled_from([digits[0], "0x" + digits[0]]))
    return draw(st.sampled_from([draw(st.sampled_from(":-.")).join(digits), "0x" + "".join(digits)]))


def enum_spelling(draw: st.DrawFn, code: int) -> str:
    words = RESPONSE_CODES[code].split()
    words = [draw(st.sampled_from([w, w.lower(), w.upper()])) for w in words]
    name = draw(st.sampled_from(["_", " "])).join(words)
    return name if " " not in name and draw(st.booleans()) else quote(name)


@st.composite
def literal(draw: st.DrawFn, name: str, op: str) -> tuple[str, Any]:
    """(text of the literal, the Python value it stands for) for a field and operator."""
    kind = FIELDS[name].kind
    if op == "matches":
        pattern = draw(st.sampled_from(PATTERNS))
        return quote(pattern), pattern.encode() if kind == "bytes" else pattern
    if kind == "str":
        value = draw(st.one_of(st.sampled_from(STR_POOL), st.text(max_size=3)))
        return quote(value), value
    if name == "response_code" and draw(st.booleans()):
        code = draw(st.sampled_from(sorted(RESPONSE_CODES)))
        return enum_spelling(draw, code), code
    if kind == "int":
        value = draw(st.integers(-4, 12))
        return render_int(draw, value), value
    if kind == "float":
        if draw(st.booleans()):
            number = draw(st.integers(-3, 3))
            return str(number), number
        value = draw(st.one_of(st.sampled_from([1.5, 0.002, -1.0, 0.0]), st.floats(-10, 10)))
        return repr(value), value
    if kind == "bool":
        value = draw(st.booleans())
        spelling = draw(
            st.sampled_from([str(value), str(value).lower(), str(value).upper(), str(int(value))])
        )
        return spelling, value
    if draw(st.booleans()):
        text = draw(st.one_of(st.sampled_from(STR_POOL), st.text(max_size=3)))
        return quote(text), text.encode()
    data = draw(st.binary(min_size=1, max_size=3))
    return render_bytes(draw, data), data


def reference_test(name: str, op: str, lit: Any) -> Reference:
    """The same comparison in plain Python; None (a null on the wire) only ever compares unequal."""

    def present(values: Values) -> list[Any]:
        return [bytes(v) if isinstance(v, memoryview | bytearray) else v for v in values.get(name, [])]

    if op == "==":
        return lambda values: any(v == lit for v in present(values))
    if op == "!=":
        return lambda values: bool(present(values)) and all(v != lit for v in present(values))
    if op == "contains":
        return lambda values: any(v is not None and lit in v for v in present(values))
    if op == "matches":
        return lambda values: any(v is not None and re.search(lit, v) for v in present(values))
    cmp = ORDERING[op]
    return lambda values: any(v is not None and cmp(v, lit) for v in present(values))


OPS_FOR = {
    "str": list(OP_SPELLINGS),
    "bytes": list(OP_SPELLINGS),
    "int": ["==", "!=", "<", "<=", ">", ">="],
    "float": ["==", "!=", "<", "<=", ">", ">="],
    "bool": ["==", "!="],
}


@st.composite
def leaves(draw: st.DrawFn) -> Node:
    if draw(st.integers(0, 20)) == 0:
        return PREFIX, lambda values: True, 3
    name = draw(st.sampled_from(sorted(FIELDS)))
    written = draw(st.sampled_from([name, f"{PREFIX}.{name}"]))
    if draw(st.integers(0, 4)) == 0:
        return written, lambda values: len(values.get(name, [])) > 0, 3
    op = draw(st.sampled_from(OPS_FOR[FIELDS[name].kind]))
    text, lit = draw(literal(name, op))
    spelling = draw(st.sampled_from(OP_SPELLINGS[op]))
    return f"{written}{draw(SPACE)}{spelling}{draw(SPACE)}{text}", reference_test(name, op, lit), 3


def wrap(node: Node, precedence: int, force: bool) -> str:
    text, _, own = node
    return f"({text})" if own < precedence or force else text


@st.composite
def combined(draw: st.DrawFn, children: st.SearchStrategy[Node]) -> Node:
    shape = draw(st.sampled_from(["and", "or", "not"]))
    left = draw(children)
    if shape == "not":
        word = draw(st.sampled_from(["not ", "NOT ", "!", "! "]))
        inner = left[1]
        return word + wrap(left, 3, draw(st.booleans())), lambda values: not inner(values), 3
    right = draw(children)
    precedence = 2 if shape == "and" else 1
    word = draw(st.sampled_from(["and", "AND", "&&"] if shape == "and" else ["or", "Or", "||"]))
    a, b = left[1], right[1]
    # Left-associative: a right operand of the same precedence needs parentheses to keep its grouping.
    text = f"{wrap(left, precedence, draw(st.booleans()))} {word} {wrap(right, precedence + 1, False)}"
    if shape == "and":
        return text, lambda values: a(values) and b(values), precedence
    return text, lambda values: a(values) or b(values), precedence


TREES = st.recursive(leaves(), lambda children: combined(children), max_leaves=8)


def byte_values(data: bytes) -> st.SearchStrategy[Any]:
    return st.sampled_from([data, bytearray(data), memoryview(data)])


WELL_TYPED: dict[str, st.SearchStrategy[Any]] = {
    "str": st.one_of(st.none(), st.sampled_from(STR_POOL), st.text(max_size=3)),
    "int": st.integers(-4, 12),
    "float": st.one_of(st.sampled_from([1.5, 0.002, -1.0, 0.0, 2.0]), st.floats(-10, 10)),
    "bool": st.booleans(),
    "bytes": st.one_of(
        st.none(),
        st.binary(max_size=4).flatmap(byte_values),
        st.sampled_from(STR_POOL).map(str.encode).flatmap(byte_values),
    ),
}


@st.composite
def frames(draw: st.DrawFn) -> dict[str, list[Any]]:
    frame: dict[str, list[Any]] = {}
    for name, ftype in FIELDS.items():
        first = (
            st.sampled_from([*RESPONSE_CODES, 0, 3]) if name == "response_code" else WELL_TYPED[ftype.kind]
        )
        if draw(st.integers(0, 3)):
            frame[name] = [draw(first), *draw(st.lists(WELL_TYPED[ftype.kind], max_size=2))]
    return frame


@settings(max_examples=400)
@given(TREES, st.lists(frames(), min_size=1, max_size=4))
def test_random_filters_agree_with_a_reference(tree: Node, samples: list[dict[str, list[Any]]]) -> None:
    text, reference, _ = tree
    f = compiled(text)
    for frame in samples:
        assert f(lambda name, frame=frame: frame.get(name, [])) is reference(frame), (text, frame)


ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.binary(max_size=4).map(bytearray),
    st.binary(max_size=4).map(memoryview),
)
FIXED_FILTERS = [
    f"{name} {op} {value}"
    for name, value in [
        ("stream", '"a"'),
        ("correlation_id", "3"),
        ("response_code", '"ok"'),
        ("bytes", "00:61"),
        ("response_time", "1.5"),
        ("crc_valid", "true"),
    ]
    for op in OPS_FOR[FIELDS[name].kind]
    if op != "matches"
] + ['stream matches "a"', 'bytes matches "a"', "frame", PREFIX]
ANY_FILTERS = [
    f"value {op} {value}" for op in ["==", "!=", "<", ">="] for value in ['"a"', "3", "1.5", "00:61", "true"]
] + [
    'value contains "a"',
    "value contains 00:61",
    'value matches "a"',
]


@settings(max_examples=300)
@given(
    st.one_of(TREES.map(lambda node: node[0]), st.sampled_from(FIXED_FILTERS)),
    st.sampled_from(ANY_FILTERS),
    st.dictionaries(st.sampled_from([*FIELDS, "value"]), st.lists(ANY_VALUE, max_size=4)),
)
def test_evaluation_never_raises(text: str, any_text: str, frame: dict[str, list[Any]]) -> None:
    def lookup(name: str) -> list[Any]:
        return frame.get(name, [])

    assert isinstance(compiled(text)(lookup), bool)
    assert isinstance(compiled(any_text, ANY_FIELDS)(lookup), bool)
