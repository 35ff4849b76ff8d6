"""The bounds decoding keeps, whatever a capture claims: their defaults, and how a user sets them.

A length field can claim gigabytes and a sub-batch can inflate a thousandfold, so every
amount that input decides is capped. One Limits value travels with the decoders (not a
global), so the CLI, the live sniffer, the proxy and Spark tasks each decode with theirs.
A cap that is hit becomes an expert note naming the limit and the option that raises it.
"""

from __future__ import annotations

import re

from msgspec import Struct
from msgspec.structs import fields, replace

from streamdump.wire.reassembly import DEFAULT_REORDER_CAP

# What each limit bounds, for --help, the README and the notes.
DOCS = {
    "frame": "bytes one frame may claim",
    "sub_batch": "bytes one compressed part (an Osiris sub-batch) may inflate to",
    "expanded": "decompressed bytes one frame may expand to, all its parts together",
    "records": "records (messages) decoded in one frame",
    "amqp_depth": "levels AMQP 1.0 values may nest",
    "reorder": "bytes held per direction of a connection while a missing segment may still come",
    "buffered": "bytes held across all connections (waiting for missing segments, or frames not yet whole)",
}
# Deep AMQP values are decoded recursively: past this, Python's own recursion limit is near.
MAX_AMQP_DEPTH = 200
# The AMQP codec's own nesting bound (codecs.amqp.MAX_DEPTH: this floor is below the codecs, so
# the number stands here too; tests/test_limits.py holds the two equal).
AMQP_DEPTH = 64
_SIZE = re.compile(r"^(\d+)\s*([kmg]i?b?)?$", re.IGNORECASE)
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class LimitError(ValueError):
    """A --limit that names no limit or gives no usable value; str() is one line."""


class Limits(Struct, frozen=True):
    frame: int | None = None
    sub_batch: int = 64 << 20
    expanded: int = 64 << 20
    records: int = 100_000
    amqp_depth: int = AMQP_DEPTH
    reorder: int = DEFAULT_REORDER_CAP
    buffered: int = 1 << 30

    def frame_for(self, spec_max: int) -> int:
        return spec_max if self.frame is None else self.frame

    def setting(self, text: str) -> Limits:
        """These limits with NAME=VALUE applied; sizes take K, M, G (binary) suffixes."""
        name, sep, value = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in DOCS:
            raise LimitError(f"--limit takes NAME=VALUE with NAME one of {', '.join(DOCS)}; got {text!r}")
        found = _SIZE.match(value.strip())
        if found is None or int(found.group(1)) <= 0:
            raise LimitError(
                f"--limit {name}: {value.strip()!r} is not a positive number (e.g. 100000, 256M)"
            )
        number = int(found.group(1)) * _UNITS.get((found.group(2) or " ")[0].lower(), 1)
        if name == "amqp_depth" and number > MAX_AMQP_DEPTH:
            raise LimitError(f"--limit amqp_depth: at most {MAX_AMQP_DEPTH} (values are decoded recursively)")
        return replace(self, **{name: number})


# The bounds of a decode whose caller set none: an immutable value, not state.
DEFAULT_LIMITS = Limits()


# The limits that count things rather than bytes.
COUNTS = frozenset({"records", "amqp_depth"})


def hint(name: str, value: int) -> str:
    """How a note names a limit that was hit: which one, its value, how to raise it."""
    return f"the {name} limit ({_shown(name, value)}); raise it with --limit {name}=N"


def _shown(name: str, value: int | None) -> str:
    if value is None:
        return "per protocol"
    if name in COUNTS:
        return str(value)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale} {unit}"
    return f"{value} bytes"


def described() -> list[tuple[str, str, str]]:
    """(name, default, what it bounds) for every limit, in order."""
    return [(f.name, _shown(f.name, getattr(DEFAULT_LIMITS, f.name)), DOCS[f.name]) for f in fields(Limits)]
