"""Bounded decompression of message bodies, for every codec and framing clients use.

Osiris sub-batches declare their uncompressed length: decompress() produces exactly that.
RocketMQ bodies declare none: inflate() produces at most a limit. Either way, what one
frame may expand to is bounded by a Budget, so a small hostile frame of many compressed
parts cannot exhaust memory.


The compression code in a sub-batch header is a client convention, not something the
broker checks, and clients of the same code frame their bytes differently: the Java and
Go clients write the snappy framing format and LZ4 frames, python-snappy writes raw
snappy blocks, python-lz4 writes LZ4 blocks behind a little-endian size. Each variant is
recognised by its own magic where it has one, tried in a fixed order where it has none,
and the one that matched is reported.

Decompression never produces more than the sub-batch header declares (the output
buffer has exactly that size), and a declared size over the cap is refused before any
work, so a hostile or broken capture cannot blow up memory.
"""

from __future__ import annotations

import io
import struct
import zlib

import cramjam
from msgspec import Struct

_SNAPPY_FRAMED = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_XERIAL = b"\x82SNAPPY\x00"
_LZ4_FRAME = b"\x04\x22\x4d\x18"
_ZSTD_FRAME = b"\x28\xb5\x2f\xfd"
_GZIP = b"\x1f\x8b"
_U32_LE = struct.Struct("<I")
_U32_BE = struct.Struct(">I")


class DecompressionError(Exception):
    """The body cannot be decompressed to the declared size; str() says why in plain words."""


class OverLimit(DecompressionError):
    """The body inflates to more than the frame's expansion budget has left."""


class TooLarge(DecompressionError):
    """A sub-batch declares more uncompressed bytes than the caller's cap allows: refused before any work."""

    def __init__(self, declared: int, cap: int) -> None:
        super().__init__(f"declared uncompressed length {declared} is over {cap} bytes")
        self.declared, self.cap = declared, cap


class Decompressed(Struct, frozen=True):
    data: bytes
    framing: str  # which variant matched, e.g. "snappy framed", "lz4 block, size-prefixed"


def decompress(code: int, body: bytes | memoryview, declared: int, cap: int) -> Decompressed:
    """The body of a sub-batch with compression `code`, decompressed to exactly `declared` bytes,
    at most cap (the sub_batch limit: no client batches anywhere near the default into one
    sub-entry, and the broker's own frame limit keeps real ones far below it)."""
    if declared > cap:
        raise TooLarge(declared, cap)
    body = bytes(body)
    if code == 0:
        if len(body) != declared:
            raise DecompressionError(f"uncompressed sub-batch is {len(body)} bytes but declares {declared}")
        return Decompressed(body, "none")
    codec = _CODECS.get(code)
    if codec is None:
        raise DecompressionError(f"unknown compression code {code}")
    return codec(body, declared)


def _exact(fn: object, body: bytes, declared: int, what: str) -> bytes:
    """Run a cramjam *_into decompressor into a buffer of exactly the declared size."""
    out = bytearray(declared)
    try:
        written = fn(body, out)  # type: ignore[operator]
    except cramjam.DecompressionError as exc:
        text = str(exc)
        if "whole buffer" in text or "smaller than required" in text or "isn't large enough" in text:
            raise DecompressionError(f"{what} output is longer than the declared {declared} bytes") from None
        raise DecompressionError(f"{what} data is corrupt: {text}") from None
    if written != declared:
        raise DecompressionError(f"{what} output is {written} bytes but the header declares {declared}")
    return bytes(out)


def _gzip(body: bytes, declared: int) -> Decompressed:
    # zlib's own streams and raw deflate also turn up under code 1 (e.g. .NET's DeflateStream).
    if body.startswith(_GZIP):
        wbits, framing = 31, "gzip"
    elif len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0:
        wbits, framing = 15, "zlib"
    else:
        wbits, framing = -15, "raw deflate"
    inflater = zlib.decompressobj(wbits)
    try:
        # A limit of 0 would mean none at all: ask for one byte and let the length check refuse it.
        data = inflater.decompress(body, declared or 1)
        if inflater.unconsumed_tail:
            raise DecompressionError(f"{framing} output is longer than the declared {declared} bytes")
        if not inflater.eof:
            raise DecompressionError(f"{framing} stream ends early after {len(data)} bytes")
    except zlib.error as exc:
        raise DecompressionError(f"{framing} data is corrupt: {exc}") from None
    if len(data) != declared:
        raise DecompressionError(f"{framing} output is {len(data)} bytes but the header declares {declared}")
    return Decompressed(data, framing)


def _snappy(body: bytes, declared: int) -> Decompressed:
    if body.startswith(_SNAPPY_FRAMED):
        return Decompressed(_exact(cramjam.snappy.decompress_into, body, declared, "snappy"), "snappy framed")
    if body.startswith(_SNAPPY_XERIAL):
        return Decompressed(_xerial(body, declared), "snappy xerial stream")
    try:
        stated = cramjam.snappy.decompress_raw_len(body)
    except cramjam.DecompressionError:
        raise DecompressionError("snappy data has no framing magic and no valid raw block header") from None
    if stated != declared:
        raise DecompressionError(f"raw snappy block states {stated} bytes but the header declares {declared}")
    return Decompressed(_exact(cramjam.snappy.decompress_raw_into, body, declared, "snappy"), "snappy raw")


def _xerial(body: bytes, declared: int) -> bytes:
    """xerial's SnappyOutputStream: a 16-byte header, then [u32 length][raw snappy block] runs."""
    pos = 16
    out = bytearray()
    while pos < len(body):
        if len(body) - pos < 4:
            raise DecompressionError("snappy xerial stream ends inside a block length")
        (length,) = _U32_BE.unpack_from(body, pos)
        pos += 4
        block = body[pos : pos + length]
        if len(block) != length:
            raise DecompressionError("snappy xerial stream ends inside a block")
        pos += length
        room = declared - len(out)
        try:
            stated = cramjam.snappy.decompress_raw_len(block)
        except cramjam.DecompressionError as exc:
            raise DecompressionError(f"snappy xerial block is corrupt: {exc}") from None
        if stated > room:
            raise DecompressionError(f"snappy xerial output is longer than the declared {declared} bytes")
        out += _exact(cramjam.snappy.decompress_raw_into, block, stated, "snappy xerial")
    if len(out) != declared:
        raise DecompressionError(
            f"snappy xerial output is {len(out)} bytes but the header declares {declared}"
        )
    return bytes(out)


def _lz4(body: bytes, declared: int) -> Decompressed:
    if body.startswith(_LZ4_FRAME):
        return Decompressed(_exact(cramjam.lz4.decompress_into, body, declared, "lz4 frame"), "lz4 frame")
    # python-lz4's lz4.block.compress stores the size in front by default; a bare block has none.
    if len(body) >= 4 and _U32_LE.unpack_from(body)[0] == declared:
        try:
            data = _exact(cramjam.lz4.decompress_block_into, body[4:], declared, "lz4 block")
            return Decompressed(data, "lz4 block, size-prefixed")
        except DecompressionError:
            pass  # a bare block whose first bytes happen to equal the size: try it as one
    return Decompressed(_exact(cramjam.lz4.decompress_block_into, body, declared, "lz4 block"), "lz4 block")


def _zstd(body: bytes, declared: int) -> Decompressed:
    if not body.startswith(_ZSTD_FRAME):
        raise DecompressionError("zstd data does not start with a zstd frame magic")
    return Decompressed(_exact(cramjam.zstd.decompress_into, body, declared, "zstd"), "zstd frame")


_CODECS = {1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}


# Every framing decompress() recognises, by compression code; compress() writes each of them.
FRAMINGS: dict[int, tuple[str, ...]] = {
    0: ("none",),
    1: ("gzip", "zlib", "raw deflate"),
    2: ("snappy framed", "snappy xerial stream", "snappy raw"),
    3: ("lz4 frame", "lz4 block, size-prefixed", "lz4 block"),
    4: ("zstd frame",),
}


def compress(framing: str, data: bytes) -> bytes:
    """data compressed in one of FRAMINGS, as the clients that use it write it (for tests and fixtures)."""
    if framing == "none":
        return data
    if framing == "gzip":
        return bytes(cramjam.gzip.compress(data))
    if framing in ("zlib", "raw deflate"):
        deflater = zlib.compressobj(wbits=15 if framing == "zlib" else -15)
        return deflater.compress(data) + deflater.flush()
    if framing == "snappy framed":
        return bytes(cramjam.snappy.compress(data))
    if framing == "snappy raw":
        return bytes(cramjam.snappy.compress_raw(data))
    if framing == "snappy xerial stream":
        block = bytes(cramjam.snappy.compress_raw(data))
        return _SNAPPY_XERIAL + _U32_BE.pack(1) + _U32_BE.pack(1) + _U32_BE.pack(len(block)) + block
    if framing == "lz4 frame":
        return bytes(cramjam.lz4.compress(data))
    if framing == "lz4 block, size-prefixed":
        return _U32_LE.pack(len(data)) + bytes(cramjam.lz4.compress_block(data, store_size=False))
    if framing == "lz4 block":
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if framing == "zstd frame":
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown framing {framing!r}")


# ---------------------------------------------------------------- bodies of no declared length


def inflate(codec: str, body: bytes | memoryview, limit: int) -> bytes:
    """A body compressed with codec ("zlib", "lz4", "zstd"), at most limit bytes of it.

    Raises DecompressionError for corrupt data, OverLimit for output over the limit.
    """
    data = bytes(body)
    if codec == "zlib":
        inflater = zlib.decompressobj()
        try:
            out = inflater.decompress(data, limit + 1)
        except zlib.error as exc:
            raise DecompressionError(f"zlib data is corrupt: {exc}") from None
        if len(out) > limit:
            raise OverLimit(f"zlib output is over the {limit} bytes left to expand")
        if not inflater.eof:
            raise DecompressionError("zlib data ends before its stream does")
        return out
    if codec == "zstd":
        import zstandard  # a RocketMQ zstd body's only: a start-up that needs none skips it

        try:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
            out = reader.read(limit + 1)
        except zstandard.ZstdError as exc:
            raise DecompressionError(f"zstd data is corrupt: {exc}") from None
        if len(out) > limit:
            raise OverLimit(f"zstd output is over the {limit} bytes left to expand")
        return out
    if codec == "lz4":
        if not data.startswith(_LZ4_FRAME):
            raise DecompressionError("lz4 data does not start with an lz4 frame magic")
        size = min(limit, max(64 << 10, 4 * len(data)))
        while True:  # a buffer that grows to the limit: most bodies are small
            out = bytearray(size)
            try:
                written = cramjam.lz4.decompress_into(data, out)
                return bytes(out[:written])
            except cramjam.DecompressionError as exc:
                text = str(exc)
                if not ("whole buffer" in text or "smaller than required" in text or "large enough" in text):
                    raise DecompressionError(f"lz4 data is corrupt: {text}") from None
            if size >= limit:
                raise OverLimit(f"lz4 output is over the {limit} bytes left to expand")
            size = min(limit, size * 4)
    raise DecompressionError(f"unknown codec {codec!r}")
