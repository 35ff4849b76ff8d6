"""Hostile text from the wire never reaches the terminal as it is: every view escapes it.

A capture is input written by whoever made the traffic. For every protocol, a committed capture
has one of its strings (a stream, a subject, a user name, a server's error text, a client name)
replaced by one as long that holds what a terminal acts on: ESC sequences that clear the screen,
OSC 52 (which writes the clipboard), U+202E (right-to-left override), U+2028, a C1 control,
DEL, BEL and bytes that are not UTF-8 (in JSON headers, as JSON escapes). Every text view (the
one-line list, the tree, messages, follow, stats, -T fields, -x, findings on stderr) must show
none of them raw, and must show them escaped (proof that the text reached it); JSON lines must
give the exact value back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import CAPTURE_ROOT, ROOT
from hypothesis import given
from hypothesis import strategies as st

from streamdump.views.safe import (
    _JSON_UNSAFE,
    _JSON_UNSAFE_BYTES,
    UNSAFE,
    escape,
    escape_lines,
    json_bytes,
    json_text,
    quoted,
)

# ESC [2J clears the screen; ESC ] 52 ; c ; ... BEL sets the clipboard; C1 CSI; bidi override;
# line separator; DEL; a byte that is not UTF-8.
OSC52 = b"\x1b]52;c;aGk=\x07"
CLEAR = b"\x1b[2J"
RLO, LSEP, CSI_C1 = "\u202e".encode(), "\u2028".encode(), "\u009b".encode()


def _fit(data: bytes, size: int) -> bytes:
    assert len(data) <= size, (data, size)
    return data + b"x" * (size - len(data))


# protocol: (capture, [(text in it, hostile bytes of the same length, the string JSON must give back)])
CASES: dict[str, tuple[str, list[tuple[bytes, bytes, str | None]]]] = {
    "rabbitmq_stream": (
        "rabbitmq_stream/session.pcap",
        [
            (b"streamdump-demo", CLEAR + RLO + b"\x1b]52;c;\x07", "\x1b[2J\u202e\x1b]52;c;\x07"),
            (b"streamdump-session", LSEP + CSI_C1 + b"\x7f" + OSC52, "\u2028\u009b\x7f\x1b]52;c;aGk=\x07"),
        ],
    ),
    "rabbitmq_stream findings": (
        "rabbitmq_stream/auth_failure.pcap",
        [(b"guest", b"\xff" + CLEAR, None)],  # the PLAIN user, named in the diagnosis
    ),
    "nats": (
        "nats/pubsub.pcap",
        [(b"orders.created", _fit(CLEAR + RLO + CSI_C1 + b"\x7f\xff\x07", 14), None)],
    ),
    "nats findings": (
        "nats/trouble.pcap",
        [
            (
                b"Unknown Protocol Operation",
                _fit(OSC52 + RLO + LSEP + CSI_C1 + b"\x7f" + CLEAR, 26),
                "\x1b]52;c;aGk=\x07\u202e\u2028\u009b\x7f\x1b[2Jx",
            )
        ],
    ),
    "rocketmq": (
        "rocketmq/send_refused.pcap",
        [(b"sending message", rb"\u001b[2J\u202e", "\x1b[2J\u202e")],  # JSON escapes in the header
    ),
    "eventmesh": (
        "eventmesh/trouble.pcap",
        [(b"PU4283", rb"\u202e", "\u202e")],
    ),
    "liftbridge": (
        "liftbridge/session.pcap",
        [(b"orders", CLEAR + CSI_C1, "\x1b[2J\u009b")],  # a Liftbridge stream, in protobuf
    ),
}

VIEWS = {
    "line": ["read"],
    "tree": ["read", "-V"],
    "messages": ["read", "--messages"],
    "hex": ["read", "-x"],
    "fields": [
        "read",
        "-T",
        "fields",
        "-e",
        "frame",
        "-e",
        "stream",
        "-e",
        "subject",
        "-e",
        "topic",
        "-e",
        "user",
        "-E",
        "separator=,",  # the one character of its own layout: tabs from the wire are escaped
    ],
    "follow": ["follow"],
    "stats": ["stats"],
}
_RAW = re.compile(f"[{UNSAFE}]")


def hostile_capture(case: str, tmp_path: Path) -> Path:
    capture, replacements = CASES[case]
    data = (CAPTURE_ROOT / capture).read_bytes()
    for text, hostile, _ in replacements:
        assert len(text) == len(hostile) and text in data, (case, text)
        data = data.replace(text, hostile)
    path = tmp_path / f"{case.split()[0]}.pcap"
    path.write_bytes(data)
    return path


def streamdump(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "streamdump", *args], capture_output=True, cwd=ROOT, check=False
    )


def raw_characters(data: bytes) -> list[str]:
    """What a terminal would act on in the output: anything unsafe but the newlines between lines."""
    text = data.decode("utf-8")  # strict: bytes that are not UTF-8 never reach the terminal
    return sorted({ch for ch in _RAW.findall(text) if ch != "\n"})


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("case", CASES)
def test_no_view_shows_hostile_text_raw(case: str, view: str, tmp_path: Path) -> None:
    path = hostile_capture(case, tmp_path)
    result = streamdump(*VIEWS[view][:1], str(path), *VIEWS[view][1:])
    assert result.returncode == 0, result.stderr
    assert raw_characters(result.stdout) == [], result.stdout[:3000]
    assert raw_characters(result.stderr) == [], result.stderr[:3000]


@pytest.mark.parametrize("case", CASES)
def test_the_text_reached_the_views_escaped(case: str, tmp_path: Path) -> None:
    """Proof the views had the hostile text to escape: its escaped form is in the tree, and the
    findings of the captures that have them carry it escaped on stderr."""
    path = hostile_capture(case, tmp_path)
    result = streamdump("read", str(path), "-V")
    shown = result.stdout.decode() + result.stderr.decode()
    assert any(mark in shown for mark in ("\\x1b", "\\u202e", "\\u2028", "\\u009b")), shown[:2000]
    if case.endswith("findings") or case in ("rocketmq", "eventmesh"):
        told = streamdump("read", str(path), "-q").stderr.decode()
        assert any(mark in told for mark in ("\\x1b", "\\u202e", "\\xff")), told


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("case", [c for c, (_, r) in CASES.items() if any(exact for _, _, exact in r)])
@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_json_gives_the_exact_value_back(case: str, fmt: str, tmp_path: Path) -> None:
    path = hostile_capture(case, tmp_path)
    result = streamdump("read", str(path), "-T", fmt)
    assert result.returncode == 0
    # JSON escapes what a terminal acts on itself: nothing raw on the screen either.
    assert raw_characters(result.stdout) == []
    text = result.stdout.decode()
    frames = json.loads(text) if fmt == "json" else [json.loads(line) for line in text.splitlines()]
    found = [s for frame in frames for s in _strings(frame["fields"]) + _strings(frame["expert"])]
    for _, _, exact in CASES[case][1]:
        if exact is not None:
            assert any(exact in s for s in found), (exact, found[:40])


def test_escape_writes_what_tshark_writes() -> None:
    assert escape("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert escape("\u202e\u2028\u2029\u009b\x7f\x00") == "\\u202e\\u2028\\u2029\\u009b\\x7f\\x00"
    assert escape("tab\there\nline\r") == "tab\\there\\nline\\r"
    assert escape("caf\u00e9 \u4e2d \U0001f600") == "caf\u00e9 \u4e2d \U0001f600"  # printable: as it is
    assert escape("\udcff", keep="") == "\\xff"  # a byte surrogateescape kept
    assert escape("a\nb", keep="\n") == "a\nb"
    assert quoted('say "hi"\\\x1b') == '"say \\"hi\\"\\\\\\x1b"'


# Text a line or a JSON value may hold: mostly printable, with what escapes change mixed in
# (controls, C1, bidi marks, separators, surrogates, newlines) and other characters past ASCII.
_MIXED = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0x20, max_codepoint=0x7E),
        st.sampled_from("\n\t\x1b\x7f\x85\x9b\u061c\u200e\u202e\u2028\u2029\u2066\u2026\u00e9\ud800\udcff"),
        st.characters(),
    ),
    max_size=40,
)


@given(st.lists(_MIXED, min_size=1, max_size=8))
def test_escape_lines_escapes_each_line(lines: list[str]) -> None:
    # One scan for the block is a shortcut: it must give what escaping each line gives.
    if any("\n" in line for line in lines):
        expected = "\n".join(map(escape, lines)) + "\n"
    else:
        expected = escape("\n".join(lines), keep="\n") + "\n"
    assert escape_lines(lines) == expected
    if not any("\n" in line for line in lines):
        assert escape_lines(lines) == "".join(escape(line) + "\n" for line in lines)


@given(st.lists(_MIXED, max_size=6))
def test_json_escapes_what_the_expression_finds(values: list[str]) -> None:
    # The shortcuts (ASCII told at once; the expression on the bytes past ASCII alone) change
    # nothing: what the expression alone gives, on text and on orjson's UTF-8 bytes.
    text = json.dumps(values, ensure_ascii=False)
    assert json_text(text) == _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    try:
        data = orjson.dumps(values)
    except TypeError:  # a lone surrogate, which orjson refuses (json.dumps writes that line)
        return
    expected = _JSON_UNSAFE_BYTES.sub(lambda m: f"\\u{ord(m.group().decode()):04x}".encode(), data)
    assert json_bytes(data) == expected
    assert json.loads(json_bytes(data)) == values
