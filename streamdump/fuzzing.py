"""Fuzz targets: bytes in, decoded the way a read decodes them, an exception only for a bug.

Every protocol in the registry gets two targets, so a new protocol package is fuzzed as
soon as its spec is registered:

- `<protocol>.decode`: the bytes as one PDU, decoded whole and as the start of a longer
  one, expanded (records, messages), drawn as a tree and written as JSON;
- `<protocol>.stream`: the bytes as a connection's two byte streams on the protocol's port,
  cut into segments with some lost, through reassembly, framing, recovery behind gaps and
  decoding.

And one more, `capture`: the bytes as a pcap or pcapng file, read and decoded with every
protocol. A capture the reader rejects raises CaptureError, which is an answer, not a bug.

Seeds come from the committed captures (captures/<protocol>/*.pcap*): their frames, their
streams and the files. `damage` makes the kinds of bad input real captures and attackers
bring: absurd lengths and counts, deep nesting, truncation, compression bombs. bench/fuzz.py
runs the targets under a coverage-guided fuzzer; tests/test_fuzz.py runs them with
hypothesis in the normal test run.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from streamdump.analysis.session import CaptureFile, CaptureStream, Options, Segments, Setup
from streamdump.spec.decoder import Decoder, DecodeState
from streamdump.spec.registry import default_registry
from streamdump.views.render import Renderer
from streamdump.wire.capture import Segment
from streamdump.wire.frame import Frame
from streamdump.wire.reassembly import SEQ_MOD, TCP_ACK, TCP_SYN

# A stream target's input: a control word, then the bytes. Segments are at most this long.
SEGMENT_MAX = 4096
# How much of a connection one stream seed holds, and how many seeds a target takes at most
# (evenly from all): a fuzzer runs every seed before it mutates any.
STREAM_WINDOW = 4096
MAX_SEEDS = 300
CLIENT, SERVER = "10.9.0.1", "10.9.0.2"


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]


def targets(captures: Path | None = None) -> dict[str, Target]:
    """Every target, by name: each protocol's decode and stream targets, then capture."""
    captures = captures if captures is not None else _captures_folder()
    out: dict[str, Target] = {}
    decoders = [Decoder(p) for p in default_registry().protocols.values()]
    for decoder in decoders:
        name = decoder.protocol.name
        files = _files(captures, name)
        out[f"{name}.decode"] = Target(
            f"{name}.decode", _decode(decoder), lambda f=files, n=name: _frames(f, n)
        )
        if decoder.protocol.wiring.carried_by is None:  # a carried protocol has no stream of its own
            port = decoder.protocol.wiring.ports[0] if decoder.protocol.wiring.ports else 1
            out[f"{name}.stream"] = Target(
                f"{name}.stream", _stream(decoder, port), lambda f=files, n=name: _streams(f, n)
            )
    everything = [
        p for folder in sorted(captures.glob("*")) if folder.is_dir() for p in _files(captures, folder.name)
    ]
    out["capture"] = Target("capture", _capture(), lambda: [p.read_bytes() for p in everything])
    return out


# ---------------------------------------------------------------- targets


def _decode(decoder: Decoder) -> Callable[[bytes], None]:
    """The input's first byte says how: bit 0, as the start of a longer PDU (cut by a gap);
    bit 1, sent by the client; bit 2, also drawn as a tree. The rest is the PDU."""
    renderer = Renderer(decoder)

    def run(data: bytes) -> None:
        how, pdu = (data[0], data[1:]) if data else (0, b"")
        frame = decoder.decode(pdu, partial=bool(how & 1), state=DecodeState(), from_client=bool(how & 2))
        renderer.json_line(frame)  # expands it: records, messages, sections
        if how & 4:
            decoder.tree(frame)

    return run


def _stream(decoder: Decoder, port: int) -> Callable[[bytes], None]:
    """The bytes as one connection on the protocol's port, read by an analysis session: reassembly,
    framing, recovery behind gaps, decoding and the conversation tracker."""
    setup = Options(protocols=(decoder.protocol.name,), ports=(port,)).prepare()

    def run(data: bytes) -> None:
        for _ in setup.session().frames(Segments(segments_of(data, port))):
            pass

    return run


def _capture() -> Callable[[bytes], None]:
    """The bytes as a capture file, read by an analysis session of every protocol."""
    setup = Options().prepare()

    def run(data: bytes) -> None:
        session = setup.session()
        for frame in session.frames(CaptureStream(io.BytesIO(data), "fuzz")):
            if frame.incomplete is not None:
                continue

    return run


def segments_of(data: bytes, port: int) -> list[Segment]:
    """A connection made of data: its first 4 bytes seed how the rest is cut into segments,
    which direction each goes, and which are lost (about 1 in 16)."""
    rng = random.Random(data[:4])
    body = data[4:]
    out = [
        Segment(1, 0.0, CLIENT, SERVER, 40000, port, 100, 0, TCP_SYN, b""),
        Segment(2, 0.0, SERVER, CLIENT, port, 40000, 5000, 101, TCP_SYN | TCP_ACK, b""),
    ]
    seq = {True: 101, False: 5001}
    at = 0
    while at < len(body):
        n = rng.randint(1, SEGMENT_MAX)
        part = body[at : at + n]
        at += len(part)
        to_server = rng.random() < 0.5
        number = len(out) + 1
        if rng.random() >= 1 / 16:
            src, dst, sport, dport = (
                (CLIENT, SERVER, 40000, port) if to_server else (SERVER, CLIENT, port, 40000)
            )
            out.append(
                Segment(
                    number, number / 1000, src, dst, sport, dport, seq[to_server] % SEQ_MOD, 0, TCP_ACK, part
                )
            )
        seq[to_server] += len(part)
    return out


# ---------------------------------------------------------------- seeds


def _captures_folder() -> Path:
    return Path(__file__).resolve().parent.parent / "captures"


def _files(captures: Path, protocol: str) -> list[Path]:
    folder = captures / protocol
    return sorted(p for p in folder.rglob("*") if p.suffix in (".pcap", ".pcapng")) if folder.is_dir() else []


def _frames(files: Iterable[Path], protocol: str) -> list[bytes]:
    """Distinct PDUs of the protocol's captures (at most 400), each behind the decode target's
    first byte: whole, by its sender, drawn as a tree."""
    seen: dict[bytes, None] = {}
    for path in files:
        for frame in _read(path):
            if frame.protocol == protocol and frame.incomplete is None and len(seen) < 400:
                how = 4 | (2 if frame.from_client else 0)
                seen.setdefault(bytes((how,)) + bytes(frame.data[:65536]))
    return list(seen)


def _streams(files: Iterable[Path], protocol: str, window: int = STREAM_WINDOW) -> list[bytes]:
    """Runs of a connection's PDUs (both directions, in order) behind a control word: from each
    capture's first connection, starting at its first PDU and then every few, so that what comes
    late in a connection (messages, chunks) is in the seeds too; at most 60 a capture."""
    out = []
    for path in files:
        conn = None
        pdus: list[bytes] = []
        for frame in _read(path):
            if frame.protocol != protocol or frame.incomplete is not None:
                continue
            conn = frame.conn if conn is None else conn
            if frame.conn == conn:
                pdus.append(bytes(frame.data))
        for first in range(0, len(pdus), max(1, len(pdus) // 60)):
            data = bytearray(b"\x00\x00\x00\x01")
            for pdu in pdus[first:]:
                if len(data) >= window:
                    break
                data += pdu
            out.append(bytes(data[:window]))
    return out[:: max(1, len(out) // MAX_SEEDS)]


def _read(path: Path) -> Iterable[Frame]:
    return _everything().session().frames(CaptureFile(path))


@cache
def _everything() -> Setup:
    return Options().prepare()


# ---------------------------------------------------------------- damage

_U32 = struct.Struct(">I")
ABSURD = (0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x10000000, 0xFFFF, 0x10000, 0)


def damage(data: bytes, rng: random.Random) -> bytes:
    """data with one kind of damage real captures and attackers bring."""
    kind = rng.randrange(7)
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    if kind == 0:  # truncated anywhere
        return data[: rng.randrange(len(data) + 1)]
    if kind == 1 and len(data) >= 4:  # an absurd length or count where a word was
        at = rng.randrange(len(data) - 3)
        return data[:at] + _U32.pack(rng.choice(ABSURD)) + data[at + 4 :]
    if kind == 2:  # a 16-bit count or length at its extremes
        at = rng.randrange(len(data))
        return data[:at] + rng.choice((b"\xff\xff", b"\x80\x00", b"\x00\x00")) + data[at + 2 :]
    if kind == 3:  # an AMQP value section of lists nested 10,000 deep
        at = rng.randrange(len(data))
        return data[:at] + _deep() + data[at:]
    if kind == 4:  # a compression bomb: 64 MiB of zeros in 64 KB of zlib
        at = rng.randrange(len(data))
        return data[:at] + _bomb() + data[at:]
    if kind == 5:  # bytes flipped
        out = bytearray(data)
        for _ in range(rng.randrange(1, 9)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    # a run duplicated or cut out
    a, b = sorted(rng.randrange(len(data) + 1) for _ in range(2))
    return data[:a] + data[a:b] * rng.randrange(0, 3) + data[b:]


@cache
def _deep() -> bytes:
    value = b"\x40"
    for _ in range(10_000):
        value = b"\xd0" + struct.pack(">II", len(value) + 4, 1) + value
    return b"\x00\x53\x77" + value


@cache
def _bomb() -> bytes:
    return zlib.compress(bytes(64 << 20), 9)
