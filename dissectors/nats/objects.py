"""An object store's chunks and its metadata: the spec's `conversation.objects`, a rule of the
tracker (Lua twin: objects.lua).

An object is written as chunks published to `$O.<bucket>.C.<nuid>`, then its metadata to
`$O.<bucket>.M.<name>`, naming the chunks' nuid, the object's size, its chunk count and its
SHA-256 digest; a reader gets the metadata, then the chunks. The metadata links to the chunks
its sender sent before it (`chunks_in`), a chunk that comes after the metadata naming it links to
it (`object_in`), and when the chunks the metadata counts are all in the capture their bytes are
checked against its size and digest: a mismatch is a warning. Only so many bytes of an object
are held for the check (MAX_HELD); a larger object is linked, not checked.
"""

from __future__ import annotations

import base64
from typing import Any

from msgspec import Struct, field

from streamdump.analysis.rules import Rule, SpecCheck
from streamdump.analysis.state import ConnState, SideState
from streamdump.spec.registry import Protocol
from streamdump.wire.frame import Frame

# The bytes of one object held for its digest; a larger object is not checked.
MAX_HELD = 64 << 10
# Objects whose chunks or metadata are remembered at once (per connection, and metadata in all).
MAX_OBJECTS = 1_000
# Chunk packets one object lists.
MAX_CHUNKS = 10_000
DIGEST_PREFIX = "SHA-256="


class ObjectsSpec(Struct, frozen=True):
    """The fields naming a chunk's nuid (chunk), an object's name (name), its digest, chunk count
    and size, and the field holding a chunk's bytes (data)."""

    chunk: str
    name: str
    digest: str
    chunks: str
    size: str
    data: str


def _sha256() -> Any:
    # hashlib loads OpenSSL (12 million instructions): at the first chunk, not at every start.
    import hashlib

    return hashlib.sha256()


class Chunks(Struct):
    """Chunks of one nuid from one side of a connection, as they come."""

    numbers: list[int] = field(default_factory=list)
    size: int = 0
    digest: Any = field(default_factory=_sha256)
    held: bool = True  # every byte went into the digest (none past MAX_HELD)


class Meta(Struct, frozen=True):
    number: int
    name: str
    digest: str
    chunks: int
    size: int


class Objects(Rule):
    """Chunks linked to their object's metadata, and checked against its digest."""

    key = "objects"
    links = ("chunks_in", "object_in")

    def __init__(self, tracker: Any, spec: Any) -> None:
        super().__init__(tracker, spec)
        self.metas: dict[str, Meta] = {}  # nuid -> the latest metadata naming it, any connection

    @classmethod
    def parse(cls, raw: Any, check: SpecCheck) -> ObjectsSpec:
        at = "conversation.objects"
        keys = ("chunk", "name", "digest", "chunks", "size", "data")
        if not isinstance(raw, dict) or set(raw) != set(keys):
            raise check.fail(at, "must be {" + ", ".join(f"{k}: FIELD" for k in keys) + "}")
        names = check.field_names()
        for key in keys:
            if raw[key] not in names:
                raise check.fail(f"{at}.{key}", f"no layout has a field {raw[key]!r} (its hooks' included)")
        return ObjectsSpec(*(str(raw[key]) for key in keys))

    @classmethod
    def lua(cls, spec: ObjectsSpec, protocol: Protocol) -> dict[str, Any]:
        return {
            "chunk": spec.chunk, "name": spec.name, "digest": spec.digest, "chunks": spec.chunks,
            "size": spec.size, "data": spec.data, "max_held": MAX_HELD, "max_objects": MAX_OBJECTS,
            "max_chunks": MAX_CHUNKS,
        }  # fmt: skip

    def before(self, conn: ConnState, side: SideState, frame: Frame) -> None:
        spec = self.spec
        fields = frame.fields
        nuid = fields.get(spec.chunk)
        if not isinstance(nuid, str) or frame.incomplete is not None:
            return
        waiting: dict[tuple[bool | None, str], Chunks] = self.state(conn, dict)
        if spec.name in fields:
            self._meta(conn, frame, nuid, waiting)
            return
        data = fields.get(spec.data)
        if not isinstance(data, bytes | bytearray | memoryview):
            return
        chunks = waiting.get((frame.from_client, nuid))
        if chunks is None:
            if len(waiting) >= MAX_OBJECTS:
                return
            chunks = waiting[frame.from_client, nuid] = Chunks()
        if len(chunks.numbers) < MAX_CHUNKS:
            chunks.numbers.append(frame.number)
        chunks.size += len(data)
        if chunks.held and chunks.size <= MAX_HELD:
            chunks.digest.update(data)
        else:
            chunks.held = False
        meta = self.metas.get(nuid)
        if meta is not None and meta.number < frame.number:
            frame.links = frame.links or {}
            frame.links["object_in"] = meta.number
            if len(chunks.numbers) == meta.chunks:
                self._check(conn, frame, meta, chunks)
                del waiting[frame.from_client, nuid]

    def _meta(self, conn: ConnState, frame: Frame, nuid: str, waiting: dict[Any, Chunks]) -> None:
        spec = self.spec
        fields = frame.fields
        digest, count, size = fields.get(spec.digest), fields.get(spec.chunks), fields.get(spec.size)
        if not isinstance(digest, str) or not isinstance(count, int) or not isinstance(size, int):
            return  # a deleted object's metadata names no chunks
        meta = Meta(frame.number, str(fields.get(spec.name)), digest, count, size)
        if nuid in self.metas or len(self.metas) < MAX_OBJECTS:
            self.metas[nuid] = meta
        chunks = waiting.get((frame.from_client, nuid))
        if chunks is None:
            return
        frame.links = frame.links or {}
        frame.links["chunks_in"] = list(chunks.numbers)
        if len(chunks.numbers) == count:
            self._check(conn, frame, meta, chunks)
            del waiting[frame.from_client, nuid]

    def _check(self, conn: ConnState, frame: Frame, meta: Meta, chunks: Chunks) -> None:
        """The chunks' bytes against the metadata's size and digest."""
        if chunks.size != meta.size:
            said = f"its {meta.chunks} chunks hold {chunks.size} bytes, its metadata says {meta.size}"
        elif not chunks.held:
            return  # too large to hold: linked, not checked
        else:
            actual = DIGEST_PREFIX + base64.urlsafe_b64encode(chunks.digest.digest()).decode("ascii")
            if _same_digest(actual, meta.digest):
                return
            said = f"its chunks' digest is {actual}, its metadata says {meta.digest}"
        self.tracker.note(
            conn,
            frame,
            "warn",
            "digest",
            "object does not match its metadata",
            f"object {meta.name!r} (metadata in packet {meta.number}): {said}",
        )


def _same_digest(actual: str, said: str) -> bool:
    """Whether two digests are the same, base64 padding or not."""
    return actual.rstrip("=") == said.rstrip("=")
