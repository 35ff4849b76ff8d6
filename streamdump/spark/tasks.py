"""What Spark's Python workers run: scan a byte range, extract its TCP segments, decode connections.

Each function takes and yields Arrow record batches (mapInArrow), so no row crosses
between the JVM and Python one at a time. Decoding is every front end's: an analysis
session per capture, fed one connection's segments after another, in packet order, with
the read's options; what a task finds about its connections leaves it as a picklable
Partial for the driver to merge, since one task never sees a whole capture. Nothing here
needs Spark: tests drive these functions directly too.
"""

from __future__ import annotations

import contextlib
import pickle
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from msgspec import Struct, field

from streamdump.analysis.pipeline import Notice, ReadStats, report_skips
from streamdump.analysis.session import Options
from streamdump.analysis.statistics import Partial
from streamdump.analysis.timeline import Timeline
from streamdump.spark.tables import Tables, batch
from streamdump.spec.dissector import dissector_of
from streamdump.wire.capture import CaptureError, Tally, read_segments, read_stream, segment_of
from streamdump.wire.frame import Frame
from streamdump.wire.lifecycle import Life
from streamdump.wire.packet import Segment, Skip
from streamdump.wire.pcapng import PcapngError, Section
from streamdump.wire.reassembly import TCP_ACK, TCP_SYN
from streamdump.wire.splits import Split, SplitError, find_first, head_section, records, scan

# Rows a task gathers before handing a batch on: large enough that Arrow's per-batch cost
# vanishes, small enough that a task's memory stays flat.
BATCH_ROWS = 8192

SEGMENTS = pa.schema(
    [
        (
            "part",
            pa.int64(),
        ),  # what Spark places the segment's partition by: its flow, or the driver's choice
        ("capture", pa.int32()),
        ("flow", pa.int64()),  # the connection's 4-tuple, hashed: what decoding is partitioned by
        ("number", pa.int64()),
        ("ts", pa.float64()),
        ("src", pa.string()),
        ("dst", pa.string()),
        ("sport", pa.int32()),
        ("dport", pa.int32()),
        ("seq", pa.int64()),
        ("ack", pa.int64()),
        ("flags", pa.int32()),
        ("payload", pa.binary()),
        ("wire_len", pa.int64()),
        ("skip", pa.string()),  # a packet with no segment: why (counted for the read's notes)
    ]
)
# Flow of the rows that only count skipped packets: they sort before a capture's segments.
SKIPPED_FLOW = -1
# What a task found about a capture, pickled: what decoding tasks hand back to the driver.
FOUND = pa.schema([("capture", pa.string()), ("blob", pa.binary())])


class Work(Struct, frozen=True):
    """One range to extract: where its first record is, how many packets come before it, and
    (pcapng) the section it starts in. whole: read the file from its start with the CLI's reader."""

    split: Split
    first: int | None
    base: int
    section: Section | None = None
    whole: bool = False


class Capture(Struct, frozen=True):
    """A capture file as decoding tasks need to know it: packets in all and the last segment's time
    (what the end of a capture gives the connections still open then)."""

    index: int
    name: str
    packets: int
    last_ts: float
    # The time of its first packet: the zero of every time a view shows (Wireshark's).
    first_ts: float | None = None


class Found(Struct):
    """What one task found about one capture, for the driver to merge with other tasks'."""

    counts: dict[str, int] = field(default_factory=dict)
    lossy: set[int] = field(default_factory=set)
    lives: dict[int, Life] = field(default_factory=dict)
    skipped: Counter[Skip] = field(default_factory=Counter)
    first_skipped: dict[Skip, int] = field(default_factory=dict)
    opened: list[int] = field(default_factory=list)  # the packets that opened its connections
    partials: dict[str, Partial] = field(default_factory=dict)
    # What its connections did over time (the report's series).
    timeline: Timeline | None = None
    # Connections opened where the scan foresaw none: their rows carry provisional numbers.
    unforeseen: bool = False


COUNTED = ("segments_matched", "frames", "incomplete", "gaps", "gap_bytes", "skipped_bytes")


# ---------------------------------------------------------------------- files


def opener(path: str) -> BinaryIO:
    """A seekable binary file for a local path or any URI pyarrow's filesystems read."""
    if "://" not in path:
        return open(path, "rb")  # the caller closes it
    fs, inner = pafs.FileSystem.from_uri(path)
    return fs.open_input_file(inner)  # type: ignore[return-value]


def whole_segments(path: str, tally: Tally) -> Iterator[Segment]:
    """A file's segments read from its start by the CLI's reader (compressed, or damaged somewhere)."""
    if "://" not in path:
        yield from read_segments(path, tally)
        return
    with opener(path) as fh:
        yield from read_stream(fh, path, tally)


# ---------------------------------------------------------------------- scanning


def scan_split(
    fh: BinaryIO | None, split: Split, size: int, whole: bool, ports: frozenset[int]
) -> dict[str, Any]:
    """Scan one range: where its records start and stop, and the packets that open connections
    in it (whole: the file, with the CLI's reader: its packets, last segment's time and the
    error that stops it)."""
    if not whole:
        assert fh is not None
        found = scan(fh, split, size, find_first(fh, split, size))
        if found.first is None or not found.packets or found.damaged:
            return {"scan": found, "openings": {}}
        # A pcapng range past the file's head is read with the head's interfaces; the driver
        # keeps what it foresees only if no section or interface block came between.
        section = head_section(fh) if split.layout.kind == "pcapng" else None
        return {"scan": found, "openings": range_openings(fh, split, found.first, section, ports)}
    tally = Tally()
    last_ts = 0.0
    error = None
    found_openings: Openings = {}

    def tracked() -> Iterator[Segment]:
        nonlocal last_ts
        for seg in whole_segments(split.path, tally):
            last_ts = seg.ts
            yield seg

    try:
        openings(tracked(), ports, found_openings)
    except CaptureError as exc:
        error = str(exc)
    return {
        "openings": found_openings,
        "packets": tally.packets,
        "first_ts": tally.first_ts,
        "last_ts": last_ts,
        "error": error,
    }


def range_openings(
    fh: BinaryIO, split: Split, first: int, section: Section | None, ports: frozenset[int]
) -> Openings | None:
    """The openings of a range's records from first (None: they cannot be read in that section)."""
    try:
        return openings(_Numbered(records(fh, split, first, section), 0), ports)
    except (SplitError, PcapngError):
        return None


# Per connection (client first): the packet that can first open it, its client's SYNs
# (packet, sequence number), and the bytes it carries (what balancing decoding weighs).
Openings = dict[tuple[str, int, str, int], tuple[int | None, list[tuple[int, int]], int]]


def openings(segments: Iterable[Segment], ports: frozenset[int], found: Openings | None = None) -> Openings:
    """Per connection on a known port (client first): its first segment that can open it (a SYN,
    or one that carries bytes), every SYN its client sent, by packet number within the range, and
    the bytes its segments carry.
    A reader opens a connection at the first, and again at a client SYN of a new sequence.
    found: gathered into (so what came before an error is kept)."""
    found = {} if found is None else found
    for seg in segments:
        if seg.dport in ports:
            key, from_client = (seg.src, seg.sport, seg.dst, seg.dport), True
        elif seg.sport in ports:
            key, from_client = (seg.dst, seg.dport, seg.src, seg.sport), False
        else:
            continue
        first, syns, size = found.get(key, (None, [], 0))
        size += len(seg.payload)
        syn = seg.flags & TCP_SYN
        if first is None and (syn or seg.payload or seg.wire_len):
            first = seg.number
        if syn and from_client and not seg.flags & TCP_ACK:
            syns.append((seg.number, seg.seq))
        found[key] = (first, syns, size)
    return found


# ---------------------------------------------------------------------- extraction


def flow_of(seg: Segment) -> int:
    """The connection's 4-tuple as one number, the same from either side."""
    return flow_key(seg.src, seg.sport, seg.dst, seg.dport)


def flow_key(src: str, sport: int, dst: str, dport: int) -> int:
    a, b = (src, sport), (dst, dport)
    low, high = (a, b) if a <= b else (b, a)
    return zlib.crc32(f"{low[0]}|{low[1]}|{high[0]}|{high[1]}".encode())


def extract(work: Work, opener: Any, placed: dict[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """The TCP segments (and counts of packets without one) of one range, numbered as in the file.
    placed: the partition key the driver chose for a connection (flow), to even out the tasks."""
    placed = placed or {}
    split = work.split
    if work.whole:
        packets: _Numbered = _WholeFile(split.path)
    elif work.first is None:
        return
    else:
        packets = _parsed(opener(split.path), work)
    capture = split.capture
    rows: list[tuple[Any, ...]] = []
    for seg in packets:
        flow = flow_of(seg)
        rows.append(
            (
                placed.get(flow, flow),
                capture,
                flow,
                seg.number,
                seg.ts,
                seg.src,
                seg.dst,
                seg.sport,
                seg.dport,
                seg.seq,
                seg.ack,
                seg.flags,
                bytes(seg.payload),
                seg.wire_len,
                None,
            )
        )
        if len(rows) >= BATCH_ROWS:
            yield batch(SEGMENTS, rows)
            rows = []
    for skip, count in packets.skipped.items():
        # One row per kind of packet with no segment: its count in flags, the first in number.
        first = packets.first_skipped[skip]
        rows.append(
            (
                0,
                capture,
                SKIPPED_FLOW,
                first,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                count,
                None,
                None,
                skip.name,
            )
        )
    if rows:
        yield batch(SEGMENTS, rows)


class _Numbered:
    """Packets of a range as segments, numbered from the range's base; counts what is skipped."""

    def __init__(self, source: Iterator[tuple[float, int, bytes]], base: int) -> None:
        self.source = source
        self.base = base
        self.tally = Tally()

    @property
    def skipped(self) -> Counter[Skip]:
        return self.tally.skipped

    @property
    def first_skipped(self) -> dict[Skip, int]:
        return self.tally.first_skipped

    def __iter__(self) -> Iterator[Segment]:
        number, tally = self.base, self.tally
        for ts, linktype, data in self.source:
            number += 1
            got = segment_of(linktype, data, number, ts, tally)
            if got is not None:
                yield got


class _WholeFile(_Numbered):
    """A file read from its start by the CLI's own reader (compressed, or damaged somewhere)."""

    def __init__(self, path: str) -> None:
        super().__init__(iter(()), 0)
        self.path = path

    def __iter__(self) -> Iterator[Segment]:
        with contextlib.suppress(CaptureError):  # the scan found the same error; the driver tells it
            yield from whole_segments(self.path, self.tally)


def _parsed(fh: BinaryIO, work: Work) -> _Numbered:
    assert work.first is not None
    try:
        source = records(fh, work.split, work.first, work.section)
    except SplitError:
        source = iter(())
    return _Numbered(source, work.base)


# ---------------------------------------------------------------------- decoding


class Decoding:
    """One task's decoding of the connections it was given, capture by capture, its rows
    written to the tables' folders as Parquet parts of its own."""

    def __init__(
        self,
        options: Options,
        captures: dict[int, Capture],
        numbers: dict[int, dict[int, int]],
        parts: Parts,
    ) -> None:
        self.setup = options.prepare()
        self.decoders = self.setup.decoders
        self.captures = captures
        self.numbers = numbers
        self.parts = parts
        self.tables = Tables(d.protocol for d in self.decoders.values())
        self.rules = {
            name: dissector_of(d.protocol).messages(d.protocol) for name, d in self.decoders.items()
        }
        self.out: dict[str, list[tuple[Any, ...]]] = {name: [] for name in self.tables.schemas}
        self.rows = 0

    def run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Decode; yields what was found about each capture (FOUND), once its rows are written."""
        current: _Current | None = None
        flow: int | None = None
        for segments in batches:
            columns = {name: segments.column(name).to_pylist() for name in SEGMENTS.names}
            for i in range(segments.num_rows):
                capture = columns["capture"][i]
                if current is None or current.capture.index != capture:
                    if current is not None:
                        yield self._finish(current)
                    current, flow = _Current(self, self.captures[capture]), None
                if columns["skip"][i] is not None:
                    skip = Skip[columns["skip"][i]]
                    current.found.skipped[skip] += columns["flags"][i]
                    first = current.found.first_skipped.get(skip, columns["number"][i])
                    current.found.first_skipped[skip] = min(first, columns["number"][i])
                    continue
                if flow is not None and columns["flow"][i] != flow:
                    # The previous connection has no more segments: end it now, as the capture's
                    # end would, so a task's memory holds one connection at a time.
                    self._frames(current, current.end())
                flow = columns["flow"][i]
                seg = Segment(
                    columns["number"][i],
                    columns["ts"][i],
                    columns["src"][i],
                    columns["dst"][i],
                    columns["sport"][i],
                    columns["dport"][i],
                    columns["seq"][i],
                    columns["ack"][i],
                    columns["flags"][i],
                    columns["payload"][i],
                    columns["wire_len"][i],
                )
                self._frames(current, current.session.feed(seg))
                if self.rows >= BATCH_ROWS:
                    self._flush()
        if current is not None:
            yield self._finish(current)
        self._flush()
        self.parts.close()

    def _frames(self, current: _Current, frames: Iterable[Frame]) -> None:
        tables, out, name = self.tables, self.out, current.capture.name
        for frame in frames:
            out["frames"].append(tables.frame_row(name, frame))
            if frame.expert:
                tables.expert_rows(out["expert"], name, frame)
            rules = self.rules[frame.protocol]
            if rules.carries(frame):
                self.decoders[frame.protocol].expand(frame)
                self.rows += tables.message_rows(out["messages"], name, frame, rules.rows(frame))
            self.rows += 1
        for notice in current.session.take_notices():
            out["gaps"].append(tables.gap_row(name, notice))

    def _finish(self, current: _Current) -> pa.RecordBatch:
        self._frames(current, current.end())
        found = current.found
        session = current.session
        stats = session.stats
        found.counts = {name: getattr(stats, name) for name in COUNTED}
        session.finish(whole=False)
        # The connections open at the end, and those retired that a client left abruptly: the
        # driver tells the hosts that ended several at once across tasks.
        found.lossy, found.lives = set(stats.lossy), dict(stats.lives) | session.tracker.abrupt
        found.partials = session.partials()
        found.timeline = session.timeline
        self._flush()
        return batch(FOUND, [(current.capture.name, pickle.dumps(found))])

    def _flush(self) -> None:
        for table, rows in self.out.items():
            if rows:
                self.parts.write(table, batch(self.tables.schemas[table], rows))
        self.out = {name: [] for name in self.tables.schemas}
        self.rows = 0


class Parts:
    """One task's Parquet part of each table, written under a temporary name and renamed once
    the task's rows are all written, so a failed attempt leaves no part and a retry replaces it."""

    def __init__(self, out: str, schemas: dict[str, pa.Schema], part: int, attempt: int) -> None:
        self.fs, self.base = output(out)
        self.schemas = schemas
        self.name = f"part-{part:05d}.parquet"
        self.temporary = f".part-{part:05d}-{attempt}.parquet.tmp"
        self.writers: dict[str, pq.ParquetWriter] = {}

    def write(self, table: str, rows: pa.RecordBatch) -> None:
        writer = self.writers.get(table)
        if writer is None:
            path = f"{self.base}/{table}/{self.temporary}"
            writer = self.writers[table] = pq.ParquetWriter(path, self.schemas[table], filesystem=self.fs)
        writer.write_batch(rows)

    def close(self) -> None:
        for table, writer in self.writers.items():
            writer.close()
            self.fs.move(f"{self.base}/{table}/{self.temporary}", f"{self.base}/{table}/{self.name}")
        self.writers = {}


def output(out: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of an output folder (a local path, or a URI pyarrow writes to)."""
    if "://" in out:
        fs, inner = pafs.FileSystem.from_uri(out)
        return fs, inner.rstrip("/")
    return pafs.LocalFileSystem(), str(Path(out).resolve())


class _Current:
    """The capture a task is decoding now: its analysis session."""

    def __init__(self, decoding: Decoding, capture: Capture) -> None:
        self.capture = capture
        self.foreseen = decoding.numbers.get(capture.index, {})
        self.found = Found()
        self.session = decoding.setup.session(statistics=True, timeline=True, numbering=self._opened)

    def _opened(self) -> int:
        """The connection's number as a whole read gives it: foreseen by the scan from the packet
        that opens it; otherwise (a protocol found by its magic, say) a provisional one, and the
        driver renumbers."""
        opened = self.session.stats.packets
        self.found.opened.append(opened)
        number = self.foreseen.get(opened)
        if number is None:
            self.found.unforeseen = True
            return -opened
        return number

    def end(self) -> list[Frame]:
        """End the connections still open as the capture's end does (its last packet and time)."""
        return list(self.session.end(self.capture.packets, self.capture.last_ts))


def notices_of(found: Found) -> list[Notice]:
    """The notes a whole read adds at its end, about packets with no segment."""
    stats = ReadStats()
    stats.skipped, stats.first_skipped = found.skipped, found.first_skipped
    report_skips(stats)
    return stats.notices
