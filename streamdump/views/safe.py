"""Text from the wire made safe for a terminal: the one place views escape what they print.

A capture is input written by whoever made the traffic, so any string in it (a stream name,
a header value, a payload preview, a server's error text) may hold characters a terminal
acts on: ESC sequences that clear the screen or set the clipboard (OSC 52), bidi controls
that reorder what is shown (U+202E), line and paragraph separators, C1 controls. Every text
view passes what it prints through `escape` as it leaves, whatever decoded it, and shows
those characters the way tshark's format_text does: `\\x1b`, `\\t`, `\\u202e`. A byte that
was not UTF-8 (kept as a lone surrogate by a decoder's surrogateescape) shows as `\\xNN`.

JSON stays exact: `json_text` and `json_bytes` write the same characters as JSON escapes
(`\\u202e`), which every JSON reader turns back into the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # rich loads with the first tree or table drawn
    from rich.text import Text

# What a terminal may act on: C0 controls, DEL and C1 controls, the Arabic letter mark and the
# other bidi controls (marks, embeddings, overrides, isolates), line and paragraph separators,
# and surrogates (bytes that were not UTF-8, or a lone JSON escape).
UNSAFE = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
_UNSAFE = re.compile(f"[{UNSAFE}]")
# The C escapes tshark writes; every other control character is \xNN or \uNNNN.
_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}
_QUOTED = re.compile(f'[{UNSAFE}"\\\\]')


def _escaped(char: str) -> str:
    known = _C_ESCAPES.get(char)
    if known is not None:
        return known
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape kept: the byte, as tshark shows bytes
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def _one(match: re.Match[str]) -> str:
    return _escaped(match.group())


def escape(text: str, keep: str = "") -> str:
    """text with every character a terminal would act on written as an escape.

    keep: characters the view's own layout uses and lets through (a newline between lines a
    view joined itself); a view never keeps what came from the wire.
    """
    if _UNSAFE.search(text) is None:
        return text
    if not keep:
        return _UNSAFE.sub(_one, text)
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escaped(m.group()), text)


def escape_lines(lines: list[str]) -> str:
    """Lines joined with newlines (and one after the last), each escaped: one scan for them all
    when no line holds a newline of its own, as the rows of a frame's messages almost never do."""
    block = "\n".join(lines)
    if _only_joins(block, len(lines) - 1):
        return block + "\n"
    if block.count("\n") == len(lines) - 1:  # no line brought a newline: escape all but the joins
        return escape(block, keep="\n") + "\n"
    return "\n".join(map(escape, lines)) + "\n"


# Printable ASCII and the newline: bytes that are never part of anything escape changes.
_SAFE_ASCII = bytes(range(0x20, 0x7F)) + b"\n"


def _only_joins(block: str, joins: int) -> bool:
    """Whether the only characters escape would change in block are the newlines joining its lines.

    A regular expression walks a block of hundreds of lines a character at a time (several
    microseconds a line, and every join matches it); this deletes the safe ASCII bytes of its
    UTF-8 form in one C pass and scans what is left, its few characters past ASCII."""
    if block.count("\n") != joins:
        return False
    try:
        data = block.encode()
    except UnicodeEncodeError:  # a lone surrogate, which escape writes as \xNN or \uNNNN
        return False
    rest = data.translate(None, _SAFE_ASCII)
    return not rest or _UNSAFE.search(rest.decode()) is None


def quoted(text: str) -> str:
    """text between double quotes, with quotes and backslashes escaped as well: a string value
    shown so that where it starts and ends is never in doubt."""
    inner = _QUOTED.sub(lambda m: "\\" + m.group() if m.group() in '"\\' else _escaped(m.group()), text)
    return f'"{inner}"'


def safe_text(text: str, style: str = "") -> Text:
    """A rich Text of text escaped: what a tree or a table shows of the wire, never markup."""
    from rich.text import Text

    return Text(escape(text), style=style)


def safe_cells(values: Iterable[object]) -> list[Text]:
    from rich.text import Text

    return [Text(escape(str(v))) for v in values]


# ---------------------------------------------------------------------- JSON

# The same characters past ASCII's controls, which JSON writers leave as they are: JSON escapes
# them instead (C0 controls JSON escapes itself).
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_JSON_UNSAFE_BYTES = re.compile(
    rb"\x7f|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]"
)

_ASCII_BUT_DEL = bytes(range(0x7F))


def json_text(text: str) -> str:
    """JSON text with the characters JSON writers leave raw written as \\uNNNN escapes."""
    if text.isascii() and "\x7f" not in text:  # told in C at once, not a character at a time
        return text
    if _JSON_UNSAFE.search(text) is None:
        return text
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_bytes(data: bytes) -> bytes:
    """json_text for JSON already encoded as UTF-8."""
    # A line of hundreds of messages is walked byte by byte by the expression (2.5 ms for 170 kB):
    # ASCII without DEL, the commonest, is told in C at once; otherwise the expression scans only
    # the bytes past ASCII and DELs, whose UTF-8 sequences stay whole and in order.
    if data.isascii() and b"\x7f" not in data:
        return data
    if _JSON_UNSAFE_BYTES.search(data.translate(None, _ASCII_BUT_DEL)) is None:
        return data
    return _JSON_UNSAFE_BYTES.sub(lambda m: f"\\u{ord(m.group().decode()):04x}".encode(), data)


def _streamed(value: Any) -> bool:
    """Whether a value is, or holds in its dicts, an iterator write_json writes as it goes."""
    if isinstance(value, Iterator):
        return True
    return isinstance(value, dict) and any(map(_streamed, value.values()))


def write_json(value: Any, out: TextIO, level: int = 0) -> None:
    """What json.dumps(value, indent=1, ensure_ascii=False) gives, through json_text, written as
    it goes: an iterator inside (a million connections' summaries) is written as a list, an
    item at a time, never held whole."""
    pad = " " * level
    # A dict is written key by key only where an iterator is somewhere inside it: one without
    # (each connection's summary) is one json.dumps, not one a key.
    if isinstance(value, dict) and any(map(_streamed, value.values())):
        if not value:
            out.write("{}")
            return
        out.write("{")
        for n, (key, item) in enumerate(value.items()):
            out.write(("," if n else "") + f"\n{pad} {json_text(json.dumps(key, ensure_ascii=False))}: ")
            write_json(item, out, level + 1)
        out.write(f"\n{pad}}}")
    elif isinstance(value, Iterator):
        first = True
        for item in value:
            out.write(("[" if first else ",") + f"\n{pad} ")
            write_json(item, out, level + 1)
            first = False
        out.write("[]" if first else f"\n{pad}]")
    else:
        text = json.dumps(value, ensure_ascii=False, indent=1)
        out.write(json_text(text.replace("\n", "\n" + pad) if pad else text))
