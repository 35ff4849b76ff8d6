"""The terminal UI's index of a capture: every frame's row, kept small, and its bytes on disk.

A background thread runs the one analysis session over the source (a file, standard input, a
live capture) and keeps, per frame, only what the packet list needs to find it again: its
packet number, time, connection and direction, protocol, command, worst severity, and where
its bytes lie in a spool file. The bytes, the command key, the tracker's links and notes and
the packets the frame came from go to the spool; a frame is decoded again from there when it
is shown (decoding is a pure function of the bytes and the key), so memory holds some tens of
bytes per frame whatever the frames carry.

The session's own state (its statistics, the connections' lives) is read by the UI under
`lock`, which the indexing thread lets go of whenever it waits for the next packet.
"""

from __future__ import annotations

import bisect
import os
import pickle
import tempfile
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from streamdump.analysis.fieldnames import FrameFilter
from streamdump.analysis.pipeline import Notice
from streamdump.analysis.session import CaptureFile, Session, Setup, Source
from streamdump.views.output import Views
from streamdump.wire.capture import CaptureError, Tally, read_records
from streamdump.wire.frame import SEVERITIES, Endpoint, Frame
from streamdump.wire.writer import PacketWriter, WriteError, WriteFormat

# Incomplete frames (what a gap left, elements recovered after it) cannot be decoded again from
# their bytes alone: up to this many, of at most so many bytes in all, are kept whole; past it
# they are decoded again from the bytes there are.
MAX_KEPT_WHOLE = 2_000
MAX_KEPT_BYTES = 32 << 20
# Rows whose decoded frame and info stay at hand (what a screen shows, and around it), and the
# bytes of their frames at most (a screen of large Deliver chunks).
CACHED_ROWS = 512
CACHED_BYTES = 64 << 20
# Spooled bytes written in one go.
SPOOL_BUFFER = 1 << 20


class Row(Struct, frozen=True):
    """One packet list row, as the list draws it (text as decoded: the list escapes it)."""

    index: int  # place in the index (rows are numbered from 0 in capture order)
    number: int  # the packet the frame completed in
    ts: float
    src: str
    dst: str
    protocol: str
    command: str
    info: str
    severity: str | None
    conn: int


class _Paced(Source):
    """A source read with the index's lock let go while it waits for each segment, so the UI can
    look at the session between frames even when a live capture is quiet."""

    def __init__(self, inner: Source, index: FrameIndex) -> None:
        self.inner, self.index = inner, index
        self.name, self.rereadable, self.size = inner.name, inner.rereadable, inner.size

    def segments(self, tally: Tally) -> Iterator[Any]:
        segments = self.inner.segments(tally)
        lock, index = self.index.lock, self.index
        while not index.stopping:
            lock.release()
            try:
                if index.waiting or time.monotonic() < index.quiet_until:
                    time.sleep(0.001)  # the UI wants the lock, or is answering a key: let it
                seg = next(segments, None)
            finally:
                lock.acquire()
            if seg is None:
                return
            yield seg


class _Spool:
    """Bytes appended to a temporary file and read back by offset, from any thread."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="streamdump-ui-")  # noqa: SIM115  (closed by close())
        self.fd = self.file.fileno()
        self.pending = bytearray()
        self.flushed = 0  # bytes written to the file; later ones are in pending
        self.guard = threading.Lock()

    def append(self, data: bytes) -> int:
        with self.guard:
            at = self.flushed + len(self.pending)
            self.pending += data
            if len(self.pending) >= SPOOL_BUFFER:
                os.write(self.fd, self.pending)
                self.flushed += len(self.pending)
                self.pending = bytearray()
            return at

    def read(self, at: int, size: int) -> bytes:
        with self.guard:
            if at >= self.flushed:
                return bytes(self.pending[at - self.flushed : at - self.flushed + size])
        return os.pread(self.fd, size, at)

    def close(self) -> None:
        self.file.close()


class FrameIndex:
    """Every frame a session read, as rows; any of them decoded again on demand.

    source: what to read; setup: the read's options (the display filter among them is the
    UI's first filter, applied to the rows, not to the read: every frame is indexed).
    """

    def __init__(self, setup: Setup, source: Source, views: Views | None = None) -> None:
        self.setup, self.source = setup, source
        self.views = views or Views(setup.decoders)
        self.lock = threading.Lock()
        self.waiting = 0
        self.quiet_until = 0.0  # indexing gives way to the UI until then (monotonic time)
        self.stopping = False
        self.done = threading.Event()
        # Per row: compact columns.
        self.numbers = array("I")
        self.times = array("d")
        self.conns = array("I")
        self.sides = array("b")  # 1: from the client, 0: from the server
        self.protocols = array("B")
        self.commands = array("I")
        self.severities = array("b")  # -1: none, else SEVERITIES' index
        self.offsets = array("Q")
        self.sizes = array("I")  # bytes of the frame
        self.extras = array("I")  # bytes of its pickled extras after them
        self.protocol_names = list(setup.decoders)
        self._protocol_ids = {name: i for i, name in enumerate(self.protocol_names)}
        self.command_names: list[str] = []
        self._command_ids: dict[str, int] = {}
        self.endpoints: dict[int, tuple[str, str]] = {}  # connection -> (client, server)
        self._endpoint_objects: dict[int, tuple[Endpoint | None, Endpoint | None]] = {}
        self.kept_whole: dict[int, Frame] = {}
        self._kept_bytes = 0
        self.notices: list[Notice] = []
        self.error: str | None = None
        self.spool = _Spool()
        self._cache: OrderedDict[int, tuple[Frame, str]] = OrderedDict()
        self._cache_guard = threading.Lock()
        self._cached_bytes = 0
        # Packets of a source that cannot be read again (a pipe, a live capture), kept aside for
        # writing them out: a pcapng in a temporary file.
        self.packets_kept: tempfile._TemporaryFileWrapper[bytes] | None = None
        self._packet_writer: PacketWriter | None = None
        # Every frame is indexed: the display filter is the UI's, applied to the rows. Ended
        # connections keep their lives: writing frames' packets adds their SYNs, FINs and resets.
        self.session: Session = replace(setup, selection=None).session(
            statistics=True, on_notice=self.notices.append, retire=False
        )
        if not source.rereadable:
            self.packets_kept = tempfile.NamedTemporaryFile(prefix="streamdump-ui-", suffix=".pcapng")  # noqa: SIM115
            self._packet_writer = PacketWriter(self.packets_kept.file, WriteFormat.pcapng)  # type: ignore[arg-type]
            self.session.stats.on_record = self._keep_packet
        self.thread: threading.Thread | None = None

    # ------------------------------------------------------------------ indexing

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="streamdump-ui-index", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with self.lock:
                for frame in self.session.frames(_Paced(self.source, self)):
                    self._add(frame)
                    if self.stopping:
                        break
                self.error = self.session.failure()
                self._mark_diagnoses()
        except (CaptureError, OSError, ValueError) as exc:
            self.error = str(exc)
        finally:
            if self._packet_writer is not None:
                self.packets_kept.file.flush()  # type: ignore[union-attr]
            self.done.set()

    def _keep_packet(self, number: int, ts: float, linktype: int, data: bytes | memoryview) -> None:
        assert self._packet_writer is not None
        self._packet_writer.write(ts, linktype, data)

    def _add(self, frame: Frame) -> None:
        conn = frame.conn
        if conn not in self.endpoints:
            client, server = (
                (frame.src, frame.dst) if frame.from_client is not False else (frame.dst, frame.src)
            )
            self.endpoints[conn] = (str(client) if client else "", str(server) if server else "")
            self._endpoint_objects[conn] = (client, server)
        said = self._said(frame)
        command = self._command_ids.get(said)
        if command is None:
            command = self._command_ids[said] = len(self.command_names)
            self.command_names.append(said)
        # The tracker's notes come after the decoder's; a decode gives the decoder's again.
        notes = [e for e in frame.expert if e.group != "malformed"] or None
        whole = frame.incomplete is not None and self._may_keep(frame)
        try:
            extra = pickle.dumps(
                (
                    frame.key,
                    frame.links or None,
                    notes,
                    array("L", frame.packets).tobytes(),
                    frame.incomplete,
                    _layers(frame),
                ),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
        except (pickle.PicklingError, TypeError, AttributeError):  # a link of a kind pickle refuses
            extra = pickle.dumps(
                (frame.key, None, None, array("L", frame.packets).tobytes(), frame.incomplete, {})
            )
            whole = self._may_keep(frame)
        data = bytes(frame.data)
        at = self.spool.append(data + extra)
        worst = frame.worst_severity
        if whole:
            self.kept_whole[len(self.numbers)] = frame
            self._kept_bytes += len(frame.data)
        self.offsets.append(at)
        self.sizes.append(len(data))
        self.extras.append(len(extra))
        self.times.append(frame.ts)
        self.conns.append(conn)
        self.sides.append(0 if frame.from_client is False else 1)
        self.protocols.append(self._protocol_ids[frame.protocol])
        self.commands.append(command)
        self.severities.append(-1 if worst is None else SEVERITIES.index(worst))
        self.numbers.append(frame.number)  # last: a row counts once all its columns are there

    def _may_keep(self, frame: Frame) -> bool:
        return len(self.kept_whole) < MAX_KEPT_WHOLE and self._kept_bytes + len(frame.data) <= MAX_KEPT_BYTES

    def _said(self, frame: Frame) -> str:
        wire = self.views[frame].decoder.wire_text(frame)
        name = frame.name
        return f"{name} {frame.kind}" if wire.lower() == name.lower() else f"{name} {frame.kind} {wire}"

    def _mark_diagnoses(self) -> None:
        """A finding the tracker told at a connection's end colours the frame it names."""
        for d in self.session.diagnoses:
            level = SEVERITIES.index(d.severity) if d.severity in SEVERITIES else -1
            for row in self.rows_of_packet(d.number):
                if self.conns[row] == d.conn and self.severities[row] < level:
                    self.severities[row] = level

    def give_way(self, seconds: float) -> None:
        """Let the UI have the interpreter for a while (it is answering a key or the mouse)."""
        self.quiet_until = time.monotonic() + seconds

    def stop(self) -> None:
        """End indexing (a live capture goes on until its source is stopped by the caller)."""
        self.stopping = True

    def close(self) -> None:
        self.stop()
        if self.thread is not None:
            # A pipe nobody closes (`tcpdump -w - | streamdump ui -`) keeps the thread waiting for
            # its next packet: it is a daemon, and its files go with the process.
            self.thread.join(timeout=1)
            if self.thread.is_alive():
                return
        self.spool.close()
        if self.packets_kept is not None:
            self.packets_kept.close()

    # ------------------------------------------------------------------ what the UI reads

    @property
    def count(self) -> int:
        return len(self.numbers)

    @property
    def finished(self) -> bool:
        return self.done.is_set()

    def progress(self) -> float | None:
        """How far into the source reading has come (0..1), when its size is known."""
        size, position = self.source.size, self.session.stats.position
        if not size or position is None:
            return None
        try:
            return min(1.0, position() / size)
        except (OSError, ValueError):
            return 1.0

    def held(self) -> Any:
        """The session's lock, taken for the UI (the indexing thread waits between frames)."""
        return _Held(self)

    def first_ts(self) -> float:
        first = self.session.first_ts
        return first if first is not None else (self.times[0] if self.times else 0.0)

    def rows_of_packet(self, number: int) -> list[int]:
        """The rows of the frames that completed in this packet."""
        count = self.count
        at = bisect.bisect_left(self.numbers, number, 0, count)
        found = []
        while at < count and self.numbers[at] == number:
            found.append(at)
            at += 1
        return found

    def row_at_or_after(self, number: int) -> int | None:
        at = bisect.bisect_left(self.numbers, number, 0, self.count)
        return at if at < self.count else None

    def frame(self, index: int, fresh: bool = False) -> Frame:
        """The frame of a row, decoded again from its bytes (or kept whole), with what the
        tracker linked and noted on it. fresh: decoded for the caller alone, not kept among the
        rows at hand (a tree expands its frame: thousands of messages held for one screen)."""
        return self._decoded(index, keep=not fresh)[0]

    def row(self, index: int) -> Row:
        info = self._decoded(index)[1]
        client, server = self.endpoints.get(self.conns[index], ("", ""))
        src, dst = (client, server) if self.sides[index] else (server, client)
        level = self.severities[index]
        return Row(
            index,
            self.numbers[index],
            self.times[index],
            src,
            dst,
            self.protocol_names[self.protocols[index]],
            self.command_names[self.commands[index]],
            info,
            SEVERITIES[level] if level >= 0 else None,
            self.conns[index],
        )

    def data(self, index: int) -> bytes:
        return self.spool.read(self.offsets[index], self.sizes[index])

    def packets(self, index: int) -> tuple[int, ...]:
        return tuple(array("L", self._extra(index)[3]))

    def _extra(self, index: int) -> tuple[Any, ...]:
        at = self.offsets[index] + self.sizes[index]
        return pickle.loads(self.spool.read(at, self.extras[index]))  # our own bytes, never the wire's

    def _decoded(self, index: int, keep: bool = True) -> tuple[Frame, str]:
        with self._cache_guard:
            cached = self._cache.get(index) if keep else None
            if cached is not None:
                self._cache.move_to_end(index)
                return cached
        kept = self.kept_whole.get(index)
        renderer = self.views.renderers[self.protocol_names[self.protocols[index]]]
        if kept is not None:
            frame = kept
        else:
            key, links, notes, packets, incomplete, layers = self._extra(index)
            frame = renderer.decoder.decode(self.data(index), key=key, partial=incomplete is not None)
            conn = self.conns[index]
            client, server = self._endpoint_objects.get(conn, (None, None))
            from_client = bool(self.sides[index])
            frame.number, frame.ts, frame.conn, frame.from_client = (
                self.numbers[index],
                self.times[index],
                conn,
                from_client,
            )
            frame.src, frame.dst = (client, server) if from_client else (server, client)
            frame.links = links
            frame.incomplete = incomplete
            frame.packets = tuple(array("L", packets))
            if notes:
                frame.expert = frame.expert + notes
            for name, value in layers.items():
                setattr(frame, name, value)
        got = (frame, renderer.info(frame))
        if not keep:
            return got
        with self._cache_guard:
            if index not in self._cache:
                self._cache[index] = got
                self._cached_bytes += len(frame.data)
            cache = self._cache
            while len(cache) > CACHED_ROWS or (self._cached_bytes > CACHED_BYTES and len(cache) > 1):
                _, (old, _) = cache.popitem(last=False)
                self._cached_bytes -= len(old.data)
        return got

    # ------------------------------------------------------------------ filters

    def compile(self, text: str) -> FrameFilter | None:
        """A display filter for the rows (FilterError when it does not compile); None: every row."""
        if not text.strip():
            return None
        return FrameFilter(self.setup.decoders.values(), text)

    # ------------------------------------------------------------------ writing packets

    def write(self, rows: list[int], path: Path, fmt: WriteFormat | None = None) -> int:
        """Write the packets of these rows' frames (with their connections' SYNs, FINs and resets,
        as `read -w` does) to a capture file; returns how many packets were written. OSError,
        WriteError and CaptureError say what went wrong."""
        wanted: set[int] = set()
        connections: set[int] = set()
        for index in rows:
            wanted.update(self.packets(index))
            connections.add(self.conns[index])
        with self.held():
            lives = dict(self.session.lives)
        for number in connections:
            life = lives.get(number)
            if life is not None:
                marks = [life.syn, life.syn_ack, life.reset, *life.fins.values()]
                wanted.update(mark.number for mark in marks if mark is not None)
        last = max(wanted, default=0)
        chosen = fmt or (WriteFormat.pcap if path.suffix == ".pcap" else WriteFormat.pcapng)
        written = 0
        with path.open("wb") as out:
            writer = PacketWriter(out, chosen)
            for number, ts, linktype, data in self._records(last):
                if number > last:
                    break
                if number in wanted:
                    writer.write(ts, linktype, data)
                    written += 1
            writer.close()
        return written

    def _records(self, last: int) -> Iterator[tuple[int, float, int, bytes | memoryview]]:
        if isinstance(self.source, CaptureFile) and self.source.rereadable:
            return read_records(self.source.path, Tally())
        assert self.packets_kept is not None
        with self.held():
            self.packets_kept.file.flush()
        tally = Tally()
        tally.stop_after = min(last, self.session.stats.packets)
        return read_records(self.packets_kept.name, tally)


# What the reader sets on a frame beside the decoder's fields (a layer below it, such as the TLS
# records it was decrypted from, where a read has one): kept with the frame's bytes.
_LAYERS = ("tls",)


def _layers(frame: Frame) -> dict[str, Any]:
    return {name: value for name in _LAYERS if (value := getattr(frame, name, None)) is not None}


class _Held:
    def __init__(self, index: FrameIndex) -> None:
        self.index = index

    def __enter__(self) -> None:
        self.index.waiting += 1
        self.index.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.index.waiting -= 1
        self.index.lock.release()


__all__ = ["FrameIndex", "Row", "WriteError"]
